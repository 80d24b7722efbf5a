"""Reads for leads and exports: final ratings, batch and labeler figures from the counter rows.

Dashboard reads never scan labels: they sum BatchLabelerStats / BatchHourStats rows (one per
labeler or hour), read Labeler counters, and look at the last 200 labelings for medians.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from labeling import prm800k
from labeling.agreement import alpha_from_coincidence, first_error
from labeling.models import (
    Adjudication,
    Batch,
    BatchAgreement,
    BatchHourStats,
    BatchLabelerStats,
    Completion,
    GoldResult,
    Guidelines,
    Labeler,
    Labeling,
    RatingEvent,
    Solution,
    SolutionAgreement,
    StepLabel,
    Tally,
)

# --- one labeling as a PRM800K record ------------------------------------------------------


def release_record(labeling_id: int) -> prm800k.LabelRecord:
    """One labeling as the release's record: what `prm800k.render_record` turns into its line.

    Four queries, plain ORM on any database; the bulk exporter renders the same line from
    its own range queries, and a test holds the two to the same bytes.
    """
    labeling = Labeling.objects.select_related("solution__problem", "labeler__labeler").get(
        pk=labeling_id
    )
    solution, problem = labeling.solution, labeling.solution.problem
    question = prm800k.question_record(
        is_phase2=solution.format != Solution.Format.PHASE1,
        problem=problem.text,
        ground_truth_answer=problem.ground_truth_answer,
        ground_truth_solution=problem.ground_truth_solution,
        steps=solution.steps,
        answer=solution.final_answer,
        verifier_score=solution.verifier_score,
        override=solution.question_override,
    )
    rated: dict[int, list[prm800k.CompletionRecord]] = {}
    human: dict[int, prm800k.HumanCompletionRecord] = {}
    completions = Completion.objects.filter(step__labeling_id=labeling_id).order_by(
        "step_id", "index"
    )
    for c in completions:
        if c.is_human:
            human[c.step_id] = prm800k.HumanCompletionRecord(
                c.text, c.rating, c.source or "human", c.flagged
            )
        else:
            rated.setdefault(c.step_id, []).append(
                prm800k.CompletionRecord(c.text, c.rating, c.flagged)
            )
    steps = [
        prm800k.StepRecord(
            completions=rated.get(step.pk, []) if step.has_completions else None,
            human_completion=human.get(step.pk),
            chosen_completion=step.chosen_completion,
        )
        for step in StepLabel.objects.filter(labeling_id=labeling_id).order_by("index")
    ]
    profile = getattr(labeling.labeler, "labeler", None)  # a user without a Labeler row
    return prm800k.LabelRecord(
        labeler=str(profile.public_id) if profile else str(labeling.labeler_id),
        timestamp=prm800k.export_timestamp(labeling.finished_at or labeling.started_at),
        generation=solution.generation,
        is_quality_control_question=solution.is_quality_control,
        is_initial_screening_question=solution.is_screening,
        question=question,
        steps=steps,
        total_time=labeling.total_time_ms or 0,
        finish_reason=labeling.finish_reason or "give_up",
    )


# --- final ratings (what exports use by default) --------------------------------------------


@dataclass(frozen=True)
class FinalRatings:
    ratings: list[int]  # one per step, stopping at the first -1 (or where labelers stopped)
    source: str  # "adjudication" | "single" | "majority" | "none"
    labeling_ids: list[int] = field(default_factory=list)


def labeling_step_ratings(labeling_ids: list[int]) -> dict[int, list[int]]:
    """Step ratings (completion 0) of each labeling, in step order; one query."""
    out: dict[int, list[int]] = {i: [] for i in labeling_ids}
    rows = (
        Completion.objects.filter(step__labeling_id__in=labeling_ids, index=0)
        .order_by("step__labeling_id", "step__index")
        .values_list("step__labeling_id", "rating")
    )
    for labeling_id, rating in rows:
        out[labeling_id].append(cast(int, rating))  # a rated step's first completion has one
    return out


def final_step_ratings(solution: Solution) -> FinalRatings:
    """The ratings to export for a solution.

    A lead's Adjudication if there is one; else the single completed, non-surplus labeling;
    else a per-step majority of those labelings (each step among the labelings that rated it;
    a tie takes the lower rating, so a disputed step is never called better than a labeler
    called it), cut at the first -1.
    """
    adjudication = Adjudication.objects.filter(solution=solution).first()
    if adjudication is not None:
        return FinalRatings(list(adjudication.ratings), "adjudication")
    ids = list(
        Labeling.objects.filter(
            solution=solution, status=Labeling.Status.COMPLETED, is_surplus=False
        )
        .order_by("id")
        .values_list("id", flat=True)
    )
    if not ids:
        return FinalRatings([], "none")
    per_labeling = labeling_step_ratings(ids)
    if len(ids) == 1:
        return FinalRatings(per_labeling[ids[0]], "single", ids)
    final: list[int] = []
    for step in range(max(len(r) for r in per_labeling.values())):
        votes = Counter(r[step] for r in per_labeling.values() if step < len(r))
        top = max(votes.values())
        choice = min(v for v, n in votes.items() if n == top)
        final.append(choice)
        if choice == -1:
            break
    return FinalRatings(final, "majority", ids)


# --- batch dashboard ------------------------------------------------------------------------


_COUNT_CACHE: dict[int, tuple[float, int]] = {}
SOLUTION_COUNT_SECONDS = 60.0


def solution_counts(batch_ids: list[int]) -> dict[int, int]:
    """Regular solutions per batch. They change only on import or a lead's move, so a count
    (a 100 ms scan at 100k solutions) is cached per process for a minute."""
    now = time.monotonic()
    missing = [
        b for b in batch_ids if now - _COUNT_CACHE.get(b, (-1e9, 0))[0] > SOLUTION_COUNT_SECONDS
    ]
    if missing:
        fresh = dict(
            Solution.objects.filter(batch_id__in=missing, is_quality_control=False)
            .values_list("batch_id")
            .annotate(n=Count("id"))
            .values_list("batch_id", "n")
        )
        for b in missing:
            _COUNT_CACHE[b] = (now, fresh.get(b, 0))
    return {b: _COUNT_CACHE[b][1] for b in batch_ids}


def clear_count_cache(*batch_ids: int) -> None:
    """Forget cached solution counts (of these batches, or all): after a move, and in tests."""
    if not batch_ids:
        _COUNT_CACHE.clear()
    for batch_id in batch_ids:
        _COUNT_CACHE.pop(batch_id, None)


def _sum_tally(rows) -> dict[str, int]:
    totals = rows.aggregate(**{name: Sum(name) for name in Tally.TALLY_FIELDS})
    return {k: v or 0 for k, v in totals.items()}


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
    # Labels per hour over the last three hours that had any work (the current one counts).
    recent_hours = [h["labelings"] for h in hours[-3:]]
    elapsed_h = 2 + (now - hours[-1]["hour"]).total_seconds() / 3600
    per_hour = sum(recent_hours) / elapsed_h if any(recent_hours) else 0.0
    wanted = solutions * batch.overlap
    done = totals["labelings"]
    waiting = max(0, wanted - done - in_progress)
    eta = timedelta(hours=(waiting + in_progress) / per_hour) if per_hour else None
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
    labeler: Labeler | None
    labelings: int
    steps: int
    time_ms: int
    last_finished_at: datetime | None

    @property
    def seconds_per_step(self) -> float | None:
        return self.time_ms / self.steps / 1000 if self.steps else None


def batch_labeler_rows(batch: Batch) -> list[LabelerRow]:
    """One row per labeler who finished work in this batch: one query."""
    rows = (
        BatchLabelerStats.objects.filter(batch=batch)
        .select_related("labeler__labeler")
        .order_by("-labelings", "labeler__username")
    )
    return [
        LabelerRow(
            user_id=row.labeler_id,
            username=row.labeler.username,
            labeler=getattr(row.labeler, "labeler", None),
            labelings=row.labelings + row.surplus,
            steps=row.steps,
            time_ms=row.time_ms,
            last_finished_at=row.last_finished_at,
        )
        for row in rows
    ]


def batches_overview() -> list[dict]:
    """Every batch with its label counters and adjudication backlog, for the lead home page."""
    batches = list(Batch.objects.order_by("-is_active", "-priority", "-created_at"))
    totals = {
        row["batch_id"]: row
        for row in BatchLabelerStats.objects.values("batch_id").annotate(
            labelings=Sum("labelings"), steps=Sum("steps")
        )
    }
    counts = solution_counts([b.pk for b in batches])
    pending = dict(
        SolutionAgreement.objects.filter(needs_adjudication=True)
        .values_list("batch_id")
        .annotate(n=Count("id"))
        .values_list("batch_id", "n")
    )
    out = []
    for batch in batches:
        solutions = counts.get(batch.pk, 0)
        done = (totals.get(batch.pk) or {}).get("labelings") or 0
        wanted = solutions * batch.overlap
        out.append(
            {
                "batch": batch,
                "solutions": solutions,
                "labels_done": done,
                "labels_wanted": wanted,
                "percent": 100 * done / wanted if wanted else 0,
                "pending": pending.get(batch.pk, 0),
            }
        )
    return out


def labelers_needing_attention() -> list[Labeler]:
    """Paused labelers and screened labelers waiting for a lead's decision."""
    waiting = Q(state=Labeler.State.PAUSED) | Q(
        state=Labeler.State.SCREENING, screening_passed=False
    )
    return list(Labeler.objects.filter(waiting).select_related("user").order_by("state_changed_at"))


def all_labelers() -> list[Labeler]:
    User = get_user_model()
    users = User.objects.filter(groups__name="labeler").values("pk")
    return list(
        Labeler.objects.filter(user__in=users).select_related("user").order_by("user__username")
    )


def screening_results(user_id: int) -> list[GoldResult]:
    return list(
        GoldResult.objects.filter(labeler_id=user_id)
        .select_related("solution__problem")
        .order_by("-created_at")[:60]
    )


def recent_labelings(user_id: int, limit: int = 30) -> list[Labeling]:
    return list(
        Labeling.objects.filter(labeler_id=user_id)
        .select_related("solution__problem", "solution__batch")
        .order_by("-updated_at")[:limit]
    )


def labeling_history(labeling: Labeling) -> list[RatingEvent]:
    return list(labeling.events.select_related("actor").order_by("created_at", "id"))


# --- adjudication ---------------------------------------------------------------------------


def adjudication_queue(batch: Batch | None = None, limit: int = 100) -> list[SolutionAgreement]:
    rows = SolutionAgreement.objects.filter(needs_adjudication=True).select_related(
        "solution__problem", "batch"
    )
    if batch is not None:
        rows = rows.filter(batch=batch)
    return list(rows.order_by("computed_at")[:limit])


@dataclass
class AdjudicationStep:
    index: int
    text: str
    ratings: list[int | None]  # one per labeling, None where that labeler had stopped
    final: int | None
    disagree: bool


def adjudication_view(
    solution: Solution,
) -> tuple[list[Labeling], list[AdjudicationStep], FinalRatings]:
    labelings = list(
        Labeling.objects.filter(solution=solution, status=Labeling.Status.COMPLETED)
        .select_related("labeler")
        .order_by("id")
    )
    per = labeling_step_ratings([lab.pk for lab in labelings])
    final = final_step_ratings(solution)
    steps = []
    for index, text in enumerate(solution.steps):
        ratings = [per[lab.pk][index] if index < len(per[lab.pk]) else None for lab in labelings]
        given = {r for r in ratings if r is not None}
        steps.append(
            AdjudicationStep(
                index=index,
                text=text,
                ratings=ratings,
                final=final.ratings[index] if index < len(final.ratings) else None,
                disagree=len(given) > 1 or (len(given) == 1 and None in ratings),
            )
        )
    return labelings, steps, final


__all__ = ["FinalRatings", "final_step_ratings", "first_error"]


# --- one labeling's steps, screening size -----------------------------------------------------


def screening_size() -> int:
    """Solutions in a screening: the setting, or fewer when fewer screening solutions exist."""
    available = Solution.objects.filter(
        is_screening=True, is_quality_control=True, gold__isnull=False
    )
    return min(settings.STEPWISE_SCREENING_SIZE, available.count())


@dataclass(frozen=True)
class StepView:
    index: int
    text: str
    rating: int | None
    flagged: bool | None
    # Ratings that "rate again from here" at this step takes back (this one and later ones).
    taken_back: int = 0


def step_views(labeling: Labeling) -> list[StepView]:
    """Each solution step with this labeling's rating so far (None where not rated yet)."""
    ratings = {
        c.step.index: c
        for c in Completion.objects.filter(step__labeling=labeling, index=0).select_related("step")
    }
    return [
        StepView(
            index=i,
            text=text,
            rating=ratings[i].rating if i in ratings else None,
            flagged=ratings[i].flagged if i in ratings else None,
            taken_back=sum(1 for j in ratings if j >= i) if i in ratings else 0,
        )
        for i, text in enumerate(labeling.solution.steps)
    ]


def labelings_for_page() -> QuerySet[Labeling]:
    """Labelings with what the labeling page shows beside them, in the query that loads them:
    the solution, its problem and batch, and `earlier_today`, the labeler's labelings started
    since midnight (server time) before this one, for the page's "solution k today"."""
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    earlier_today = (
        Labeling.objects.filter(
            labeler=OuterRef("labeler"), started_at__gte=midnight, pk__lt=OuterRef("pk")
        )
        .order_by()
        .values("labeler")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Labeling.objects.select_related("solution__problem", "solution__batch").annotate(
        earlier_today=Coalesce(Subquery(earlier_today, output_field=IntegerField()), 0)
    )


@dataclass(frozen=True)
class LabelingPanel:
    """What the labeling page's panel shows: the steps revealed so far and the progress."""

    steps: list[StepView]
    rated: list[StepView]
    current: StepView | None  # the step to rate now; None once the labeling is submitted
    number_today: int  # "solution k today", this one included

    @property
    def step_total(self) -> int:
        return len(self.steps)

    @property
    def step_number(self) -> int:
        """The step being rated (1-based); the last one rated once there is none to rate."""
        return self.current.index + 1 if self.current else len(self.rated)

    @property
    def hidden_count(self) -> int:
        return len(self.steps) - len(self.rated) - (1 if self.current else 0)


def labeling_panel(labeling: Labeling) -> LabelingPanel:
    """The panel of a labeling loaded through `labelings_for_page` (one query: the ratings)."""
    steps = step_views(labeling)
    rated = [s for s in steps if s.rating is not None]
    current = None
    if labeling.status != Labeling.Status.COMPLETED and len(rated) < len(steps):
        current = steps[len(rated)]
    earlier = getattr(labeling, "earlier_today", None)
    if earlier is None:  # loaded some other way: one more query
        earlier = cast(Any, labelings_for_page().get(pk=labeling.pk)).earlier_today
    return LabelingPanel(steps=steps, rated=rated, current=current, number_today=earlier + 1)


def labeling_ratings(labeling: Labeling) -> list[tuple[int, bool]]:
    """(rating, flagged) per rated step, in step order."""
    rows = (
        Completion.objects.filter(step__labeling=labeling, index=0)
        .order_by("step__index")
        .values_list("rating", "flagged")
    )
    return [(cast(int, r), bool(f)) for r, f in rows]  # a rated step's first completion has one


# --- guidelines -------------------------------------------------------------------------------

DEFAULT_GUIDELINES = Path(__file__).resolve().parent / "guidelines_default.txt"


def current_guidelines() -> tuple[str, Guidelines | None]:
    latest = Guidelines.objects.order_by("-version").first()
    if latest is not None:
        return latest.text, latest
    return DEFAULT_GUIDELINES.read_text(encoding="utf-8"), None


def expired_claims(user, *, within=timedelta(days=1)) -> list[Labeling]:
    """The labeler's claims that expired with steps rated in the last day, newest first, each
    with `steps_rated`: what the queue page explains (kept, not counted, or taken back)."""
    since = timezone.now() - within
    return list(
        Labeling.objects.filter(
            labeler=user, status=Labeling.Status.EXPIRED, lease_expires_at__gte=since
        )
        .annotate(steps_rated=Count("step_labels"))
        .filter(steps_rated__gt=0)
        .select_related("solution__problem")
        .order_by("-lease_expires_at")[:5]
    )
