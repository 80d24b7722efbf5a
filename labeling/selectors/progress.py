"""Batch progress for leads: the batch dashboard, every batch's depth, pace and ETA, the
cached solution counts, and what the lead counters count.

Dashboard reads never scan labels: they sum BatchLabelerStats / BatchHourStats rows (one per
labeler or hour), read Labeler counters, and look at the last 200 labelings for medians.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median
from typing import Any

from django.db.models import Count, FilteredRelation, Q, QuerySet, Sum
from django.utils import timezone

from labeling.agreement import alpha_from_coincidence
from labeling.models import (
    Batch,
    BatchAgreement,
    BatchHourStats,
    BatchLabelerStats,
    LabelerRecord,
    Labeling,
    Solution,
    SolutionAgreement,
    StepLabel,
    Tally,
)
from stepwise import caching

# --- batch dashboard ------------------------------------------------------------------------


SOLUTION_COUNT_SECONDS = 60


def _count_key(batch_id: int) -> str:
    return f"labeling:solution-count:{batch_id}"


def solution_counts(batch_ids: list[int]) -> dict[int, int]:
    """Regular solutions per batch. They change only on import or a lead's move, so a count
    (a 100 ms scan at 100k solutions) is cached for a minute, in the cache every process
    shares: a move clears it for all of them (`clear_count_cache`)."""
    cached = caching.get_many(_count_key(b) for b in batch_ids)
    counts = {b: cached[_count_key(b)] for b in batch_ids if _count_key(b) in cached}
    missing = [b for b in batch_ids if b not in counts]
    if missing:
        fresh = dict(
            Solution.objects.filter(batch_id__in=missing, is_quality_control=False)
            .values_list("batch_id")
            .annotate(n=Count("id"))
            .values_list("batch_id", "n")
        )
        counts.update({b: fresh.get(b, 0) for b in missing})
        caching.set_many({_count_key(b): counts[b] for b in missing}, SOLUTION_COUNT_SECONDS)
    return counts


def clear_count_cache(*batch_ids: int) -> None:
    """Forget the cached solution counts of these batches, in every process (after solutions
    move in or out of them)."""
    caching.forget(*(_count_key(b) for b in batch_ids))


def _sum_tally(rows) -> dict[str, int]:
    totals = rows.aggregate(**{name: Sum(name) for name in Tally.TALLY_FIELDS})
    return {k: v or 0 for k, v in totals.items()}


PACE_HOURS = 3  # the pace (labels per hour) is measured over this many clock hours


def hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def labels_per_hour(recent: list[int], now: datetime) -> float:
    """Labels per hour from the counts of the last PACE_HOURS clock hours (oldest first, the
    current one last): the current hour weighs only the part of it that has passed."""
    if not any(recent):
        return 0.0
    into_this_hour = (now - hour_start(now)).total_seconds() / 3600
    return sum(recent) / (len(recent) - 1 + into_this_hour)


def time_left(remaining: int, per_hour: float) -> timedelta | None:
    """How long `remaining` labels take at `per_hour`; None without a pace."""
    return timedelta(hours=remaining / per_hour) if per_hour else None


@dataclass
class BatchSummary:
    batch: Batch
    solutions: int
    solutions_done: int
    labels_wanted: int
    labels_done: int
    labels_in_progress: int
    labels_waiting: int
    totals: dict[str, int]
    labels_per_hour: float
    median_solution_s: float | None
    median_step_s: float | None
    eta: timedelta | None
    hours: list[dict]
    alpha: float | None
    raw_agreement: float | None
    first_error_agreement: float | None
    adjudication_pending: int

    @property
    def percent_done(self) -> float:
        return 100 * self.labels_done / self.labels_wanted if self.labels_wanted else 0.0

    @property
    def ratings(self) -> dict[str, int]:
        return {"+1": self.totals["pos"], "0": self.totals["neu"], "−1": self.totals["neg"]}

    @property
    def chart_data(self) -> dict:
        t = self.totals
        return {
            "hours": [
                {
                    "t": timezone.localtime(h["hour"]).strftime("%H:%M"),
                    "labelings": h["labelings"],
                    "steps": h["steps"],
                }
                for h in self.hours
            ],
            "ratings": [t["pos"], t["neu"], t["neg"]],
            "finish": [
                t["fin_solution"],
                t["fin_found_error"],
                t["fin_give_up"],
                t["fin_bad_problem"],
            ],
        }

    @property
    def finish_reasons(self) -> dict[str, int]:
        t = self.totals
        return {
            "reached the end": t["fin_solution"],
            "found an error": t["fin_found_error"],
            "gave up": t["fin_give_up"],
            "bad problem": t["fin_bad_problem"],
        }


def batch_summary(
    batch: Batch, *, now: datetime | None = None, hours_shown: int = 24
) -> BatchSummary:
    """Everything the batch dashboard shows, in a fixed number of small queries."""
    now = now or timezone.now()
    totals = _sum_tally(BatchLabelerStats.objects.filter(batch=batch))
    since = (now - timedelta(hours=hours_shown - 1)).replace(minute=0, second=0, microsecond=0)
    hour_rows = {
        row["hour"]: row
        for row in BatchHourStats.objects.filter(batch=batch, hour__gte=since).values(
            "hour", "labelings", "steps", "pos", "neu", "neg"
        )
    }
    hours: list[dict[str, Any]] = []
    for i in range(hours_shown):
        hour = since + timedelta(hours=i)
        row: Mapping[str, Any] = hour_rows.get(hour, {})
        hours.append(
            {"hour": hour, "labelings": row.get("labelings", 0), "steps": row.get("steps", 0)}
        )
    solutions = solution_counts([batch.pk])[batch.pk]
    in_progress = Labeling.objects.filter(
        status=Labeling.Status.IN_PROGRESS,
        solution__batch=batch,
        solution__is_quality_control=False,
    ).count()
    # The last 200 finished labelings of the batch, then their step counts: both bounded.
    recent_rows = list(
        Labeling.objects.filter(
            solution__batch=batch, status=Labeling.Status.COMPLETED, total_time_ms__isnull=False
        )
        .order_by("-finished_at")
        .values_list("id", "total_time_ms")[:200]
    )
    step_counts = dict(
        StepLabel.objects.filter(labeling_id__in=[i for i, _ in recent_rows])
        .values_list("labeling_id")
        .annotate(n=Count("id"))
        .values_list("labeling_id", "n")
    )
    recent = [(t, step_counts.get(i, 0)) for i, t in recent_rows if t is not None]
    median_solution = median(t for t, _ in recent) / 1000 if recent else None
    per_step = [t / n for t, n in recent if n]
    median_step = median(per_step) / 1000 if per_step else None
    per_hour = labels_per_hour([h["labelings"] for h in hours[-PACE_HOURS:]], now)
    wanted = solutions * batch.overlap
    done = totals["labelings"]
    waiting = max(0, wanted - done - in_progress)
    eta = time_left(waiting + in_progress, per_hour)
    agreement = BatchAgreement.objects.filter(batch=batch).first()
    pending = SolutionAgreement.objects.filter(batch=batch, needs_adjudication=True).count()
    return BatchSummary(
        batch=batch,
        solutions=solutions,
        solutions_done=totals["solutions_done"] if batch.overlap > 0 else 0,
        labels_wanted=wanted,
        labels_done=done,
        labels_in_progress=in_progress,
        labels_waiting=waiting,
        totals=totals,
        labels_per_hour=per_hour,
        median_solution_s=median_solution,
        median_step_s=median_step,
        eta=eta,
        hours=hours,
        alpha=alpha_from_coincidence(agreement.coincidence) if agreement else None,
        raw_agreement=(agreement.pairs_same / agreement.pairs)
        if agreement and agreement.pairs
        else None,
        first_error_agreement=(
            agreement.first_error_same / agreement.first_error_pairs
            if agreement and agreement.first_error_pairs
            else None
        ),
        adjudication_pending=pending,
    )


@dataclass
class LabelerRow:
    user_id: int
    username: str
    record: LabelerRecord | None  # theirs in the batch's project
    labelings: int
    steps: int
    time_ms: int
    last_finished_at: datetime | None

    @property
    def seconds_per_step(self) -> float | None:
        return self.time_ms / self.steps / 1000 if self.steps else None


def batch_labeler_rows(batch: Batch) -> list[LabelerRow]:
    """One row per labeler who finished work in this batch, with their record in its project:
    one query."""
    record_here = FilteredRelation(
        "labeler__labeler_records",
        condition=Q(labeler__labeler_records__project_id=batch.project_id),
    )
    rows = (
        BatchLabelerStats.objects.filter(batch=batch)
        .annotate(record=record_here)
        .select_related("labeler", "record")  # type: ignore[misc]  # the FilteredRelation
        .order_by("-labelings", "labeler__username")
    )
    return [
        LabelerRow(
            user_id=row.labeler_id,
            username=row.labeler.username,
            # No record there (labelings imported for someone who is no member): no attribute.
            record=getattr(row, "record", None),
            labelings=row.labelings + row.surplus,
            steps=row.steps,
            time_ms=row.time_ms,
            last_finished_at=row.last_finished_at,
        )
        for row in rows
    ]


@dataclass
class BatchProgress:
    """One batch's depth, pace and ETA, from the counters: a row of the lead's tables."""

    batch: Batch
    solutions: int
    labels_wanted: int
    labels_done: int
    labels_in_progress: int
    labels_per_hour: float  # over the last PACE_HOURS clock hours
    labels_this_and_last_hour: int  # finished in this clock hour and the one before
    adjudication_pending: int

    @property
    def labels_remaining(self) -> int:
        """Labels still wanted, those in progress included."""
        return max(0, self.labels_wanted - self.labels_done)

    @property
    def percent(self) -> float:
        return 100 * self.labels_done / self.labels_wanted if self.labels_wanted else 0.0

    @property
    def eta(self) -> timedelta | None:
        return time_left(self.labels_remaining, self.labels_per_hour)


def batches_overview(
    batches: list[Batch] | None = None, *, now: datetime | None = None
) -> list[BatchProgress]:
    """Every batch (or these) with its depth, pace, ETA and adjudication backlog, in six
    queries whatever the number of batches and labels: counters, never labels."""
    now = now or timezone.now()
    if batches is None:
        batches = list(Batch.objects.order_by("-is_active", "-priority", "-created_at"))
    ids = [b.pk for b in batches]
    if not ids:
        return []
    done = dict(
        BatchLabelerStats.objects.filter(batch_id__in=ids)
        .values_list("batch_id")
        .annotate(n=Sum("labelings"))
        .values_list("batch_id", "n")
    )
    counts = solution_counts(ids)
    pending = dict(
        SolutionAgreement.objects.filter(needs_adjudication=True, batch_id__in=ids)
        .values_list("batch_id")
        .annotate(n=Count("id"))
        .values_list("batch_id", "n")
    )
    in_progress = dict(
        Labeling.objects.filter(
            status=Labeling.Status.IN_PROGRESS,
            solution__batch_id__in=ids,
            solution__is_quality_control=False,
        )
        .values_list("solution__batch_id")
        .annotate(n=Count("id"))
        .values_list("solution__batch_id", "n")
    )
    this_hour = hour_start(now)
    pace_hours = [this_hour - timedelta(hours=i) for i in reversed(range(PACE_HOURS))]
    per_hour: dict[int, dict[datetime, int]] = {}
    for batch_id, hour, labelings in BatchHourStats.objects.filter(
        batch_id__in=ids, hour__gte=pace_hours[0]
    ).values_list("batch_id", "hour", "labelings"):
        per_hour.setdefault(batch_id, {})[hour] = labelings
    rows = []
    for batch in batches:
        hours = per_hour.get(batch.pk, {})
        recent = [hours.get(hour, 0) for hour in pace_hours]
        rows.append(
            BatchProgress(
                batch=batch,
                solutions=counts.get(batch.pk, 0),
                labels_wanted=counts.get(batch.pk, 0) * batch.overlap,
                labels_done=done.get(batch.pk) or 0,
                labels_in_progress=in_progress.get(batch.pk, 0),
                labels_per_hour=labels_per_hour(recent, now),
                labels_this_and_last_hour=sum(recent[-2:]),
                adjudication_pending=pending.get(batch.pk, 0),
            )
        )
    return rows


# --- what the lead counters count ------------------------------------------------------------

# One definition of the work the lead counters (BatchLabelerStats, BatchHourStats) hold, read by
# their rebuild and by the labeler's "today" (a scan of today's labelings beside the counters'
# "all time"), so the two figures cannot disagree: a completed labeling of a regular solution in
# a batch (`_finish` tallies no quality-control or batchless labeling), and each of its rated
# steps once, by its completion 0 (what `labeling_ratings` gives the tally).
TALLIED_STEP = Q(step_labels__completions__index=0)


def tallied_labelings() -> QuerySet[Labeling]:
    return Labeling.objects.filter(
        status=Labeling.Status.COMPLETED,
        solution__is_quality_control=False,
        solution__batch__isnull=False,
        source=Labeling.Source.HUMAN,  # machine labelings are no human's work (issue 47)
    )
