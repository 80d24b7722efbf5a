"""Reads for leads and exports: final ratings, batch and labeler figures from the counter rows.

Dashboard reads never scan labels: they sum BatchLabelerStats / BatchHourStats rows (one per
labeler or hour), read Labeler counters, and look at the last 200 labelings for medians.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import (
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Coalesce
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone

from labeling import extensions, prm800k
from labeling.agreement import alpha_from_coincidence, first_error
from labeling.models import (
    Adjudication,
    ApiToken,
    Batch,
    BatchAgreement,
    BatchHourStats,
    BatchLabelerStats,
    Completion,
    GoldResult,
    Guidelines,
    Labeler,
    Labeling,
    Note,
    RatingEvent,
    Snapshot,
    Solution,
    SolutionAgreement,
    StepLabel,
    Tally,
)
from stepwise import caching
from stepwise.celery import waiting_too_long

# --- one labeling as a PRM800K record ------------------------------------------------------


def release_record(labeling_id: int) -> prm800k.LabelRecord:
    """One labeling as the release's record: what `prm800k.render_record` turns into its line.

    Four queries, plain ORM on any database (`exporting.render_release_lines` reads many
    labelings' records three queries at a time).
    """
    labeling = Labeling.objects.select_related("solution__problem", "labeler__labeler").get(
        pk=labeling_id
    )
    completions = Completion.objects.filter(step__labeling_id=labeling_id).order_by(
        "step_id", "index"
    )
    profile = getattr(labeling.labeler, "labeler", None)  # a user without a Labeler row
    return label_record(
        labeling,
        public_id=str(profile.public_id) if profile else str(labeling.labeler_id),
        steps=list(StepLabel.objects.filter(labeling_id=labeling_id).order_by("index")),
        completions=list(completions),
    )


def label_record(
    labeling: Labeling, *, public_id: str, steps: list[StepLabel], completions: list[Completion]
) -> prm800k.LabelRecord:
    """The release record of a labeling (its solution and problem loaded) from its steps in
    order and their completions in (step, index) order: what `release_record` reads, or what the
    finishing rating has read already."""
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
    for c in completions:
        if c.is_human:
            human[c.step_id] = prm800k.HumanCompletionRecord(
                c.text, c.rating, c.source or "human", c.flagged
            )
        else:
            rated.setdefault(c.step_id, []).append(
                prm800k.CompletionRecord(c.text, c.rating, c.flagged)
            )
    return prm800k.LabelRecord(
        labeler=public_id,
        timestamp=prm800k.export_timestamp(labeling.finished_at or labeling.started_at),
        generation=solution.generation,
        is_quality_control_question=solution.is_quality_control,
        is_initial_screening_question=solution.is_screening,
        question=question,
        steps=[
            prm800k.StepRecord(
                completions=rated.get(step.pk, []) if step.has_completions else None,
                human_completion=human.get(step.pk),
                chosen_completion=step.chosen_completion,
            )
            for step in steps
        ],
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


def _hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def labels_per_hour(recent: list[int], now: datetime) -> float:
    """Labels per hour from the counts of the last PACE_HOURS clock hours (oldest first, the
    current one last): the current hour weighs only the part of it that has passed."""
    if not any(recent):
        return 0.0
    into_this_hour = (now - _hour_start(now)).total_seconds() / 3600
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
    this_hour = _hour_start(now)
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
    notes: list[Note] = field(default_factory=list)  # the step's notes, oldest first


def adjudication_view(
    solution: Solution,
) -> tuple[list[Labeling], list[AdjudicationStep], FinalRatings]:
    labelings = list(
        Labeling.objects.filter(solution=solution, status=Labeling.Status.COMPLETED)
        .select_related("labeler")
        .order_by("id")
    )
    return labelings, side_by_side(solution, labelings), final_step_ratings(solution)


def side_by_side(solution: Solution, labelings: list[Labeling]) -> list[AdjudicationStep]:
    """Per step of the solution: each labeling's rating (in the given order), the final
    rating, whether they disagree, and the notes on the step. Three queries."""
    per = labeling_step_ratings([lab.pk for lab in labelings])
    final = final_step_ratings(solution)
    notes = notes_by_step(solution)
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
                notes=notes.get(index, []),
            )
        )
    return steps


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
    def rated_count(self) -> int:
        return len(self.rated)

    @property
    def step_number(self) -> int:
        """The step being rated (1-based); the last one rated once there is none to rate."""
        return self.current.index + 1 if self.current else len(self.rated)

    @property
    def hidden_count(self) -> int:
        return len(self.steps) - len(self.rated) - (1 if self.current else 0)


@dataclass(frozen=True)
class PanelProgress:
    """The panel's progress line after a rating, known without a query: steps 1..rated_count
    are rated and the next one is shown, or (`done`) the labeling ended at the last of them."""

    rated_count: int
    step_total: int
    done: bool = False

    @property
    def step_number(self) -> int:
        return self.rated_count if self.done else self.rated_count + 1


def labeling_panel(labeling: Labeling) -> LabelingPanel:
    """The panel of a labeling loaded through `labelings_for_page` (one query: the ratings)."""
    steps = step_views(labeling)
    rated = [s for s in steps if s.rating is not None]
    current = None
    still_open = labeling.status in (Labeling.Status.IN_PROGRESS, Labeling.Status.EXPIRED)
    if still_open and len(rated) < len(steps):
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


@dataclass(frozen=True)
class DiffLine:
    """One line of what changed between two texts: "add", "remove", "same" (context around a
    change) or "gap" (unchanged lines left out). Plain text: the template escapes it."""

    kind: str
    text: str


def text_diff(old: str, new: str, *, context: int = 2) -> list[DiffLine]:
    """Line by line, as `diff -u` shows it (difflib), without its headers."""
    kinds = {"+": "add", "-": "remove", " ": "same"}
    lines: list[DiffLine] = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=context):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            if lines:
                lines.append(DiffLine("gap", ""))
            continue
        lines.append(DiffLine(kinds[line[0]], line[1:]))
    return lines


@dataclass(frozen=True)
class GuidelinesChange:
    version: Guidelines
    previous_version: int | None  # None: the first version, compared with the default text
    diff: list[DiffLine]


def guidelines_change(version: int) -> GuidelinesChange | None:
    """One version of the guidelines and what it changed from the one before."""
    rows = list(
        Guidelines.objects.select_related("created_by")
        .filter(version__lte=version)
        .order_by("-version")[:2]
    )
    if not rows or rows[0].version != version:
        return None
    if len(rows) == 2:
        previous, previous_text = rows[1].version, rows[1].text
    else:
        previous, previous_text = None, DEFAULT_GUIDELINES.read_text(encoding="utf-8")
    return GuidelinesChange(rows[0], previous, text_diff(previous_text, rows[0].text))


@dataclass(frozen=True)
class ExpiredClaim:
    labeling: Labeling
    steps_rated: int
    batch_paused: bool
    has_room: bool  # for the labeler to take it back (gold always has)


def expired_claims(user, *, within=timedelta(days=1)) -> list[ExpiredClaim]:
    """The labeler's claims that expired with steps rated in the last day, newest first: what
    their home explains (taken back where they stopped, or kept in the history and not
    counted, and why). `has_room` reads the rule of queue.reactivate_expired, taking nothing."""
    since = timezone.now() - within
    rows = (
        Labeling.objects.filter(
            labeler=user, status=Labeling.Status.EXPIRED, lease_expires_at__gte=since
        )
        .annotate(steps_rated=Count("step_labels"))
        .filter(steps_rated__gt=0)
        .select_related("solution__problem", "solution__batch")
        .order_by("-lease_expires_at")[:5]
    )
    claims = []
    for labeling in rows:
        solution, batch = labeling.solution, labeling.solution.batch
        overlap = batch.overlap if batch is not None else 1
        claims.append(
            ExpiredClaim(
                labeling=labeling,
                steps_rated=labeling.steps_rated,
                batch_paused=batch is not None and not batch.is_active,
                has_room=solution.is_quality_control
                or solution.completed_count + solution.active_count < overlap,
            )
        )
    return claims


def batches_for(user) -> QuerySet[Batch]:
    """Active batches this user may label: assigned to them, or open to every labeler."""
    assigned = Batch.labelers.through.objects.filter(batch_id=OuterRef("pk"))
    # Two EXISTS rather than a join: no DISTINCT over every active batch on each claim.
    return Batch.objects.filter(is_active=True).filter(
        Exists(assigned.filter(user_id=user.pk)) | ~Exists(assigned)
    )


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
    )


# --- home pages: one cockpit per role -----------------------------------------------------------


@dataclass
class WaitingBatch:
    batch: Batch
    labels_remaining: int  # labels the batch still wants
    yours: int  # of those, how many this labeler may take (one per solution they never had)


@dataclass
class LabelerCockpit:
    """What a labeler's home shows: the work waiting, their pace, and what the big button does.

    `action` is what the primary button does: "continue" (open the labeling in progress),
    "resume" (take back the claim that expired), "screening", "start", or "" when it cannot
    hand out work; `blocked` then says why: "paused", "rejected", "screening_failed",
    "no_batch", "nothing_waiting".
    """

    labeler: Labeler
    open_labeling: Labeling | None
    expired: list[ExpiredClaim]
    waiting: list[WaitingBatch]
    in_screening: bool  # screening work is what a claim hands out
    action: str
    blocked: str
    today_solutions: int
    today_steps: int
    total_solutions: int
    total_steps: int
    total_time_ms: int
    chosen_batch_id: int | None = None  # the batch they chose to label in ("Continue in …")

    @property
    def chosen(self) -> WaitingBatch | None:
        """The chosen batch, while it has work for this labeler."""
        return next(
            (w for w in self.waiting if w.batch.pk == self.chosen_batch_id and w.yours), None
        )

    @property
    def waiting_total(self) -> int:
        return sum(w.yours for w in self.waiting)

    @property
    def seconds_per_step(self) -> float | None:
        return self.total_time_ms / self.total_steps / 1000 if self.total_steps else None


def labeler_cockpit(
    user, labeler: Labeler, *, now: datetime | None = None, chosen_batch_id: int | None = None
) -> LabelerCockpit:
    """The labeler's home, in at most nine queries whatever their history: counters for the
    totals and the work waiting, today's finished labelings, counted as the counters count
    them, for today's progress."""
    now = now or timezone.now()
    open_labeling = (
        Labeling.objects.filter(labeler=user, status=Labeling.Status.IN_PROGRESS)
        .select_related("solution__problem", "solution__batch")
        .annotate(steps_rated=Count("step_labels"))
        .order_by("started_at")
        .first()
    )
    expired = [] if open_labeling else expired_claims(user)
    batches = list(batches_for(user).order_by("-priority", "id"))
    ids = [b.pk for b in batches]
    counts = solution_counts(ids)
    done = dict(
        BatchLabelerStats.objects.filter(batch_id__in=ids)
        .values_list("batch_id")
        .annotate(n=Sum("labelings"))
        .values_list("batch_id", "n")
    )
    mine = list(
        BatchLabelerStats.objects.filter(labeler=user).values_list(
            "batch_id", "labelings", "surplus", "steps", "time_ms"
        )
    )
    mine_per_batch = {batch_id: n + surplus for batch_id, n, surplus, _, _ in mine}
    waiting = []
    for batch in batches:
        remaining, yours = _waiting_in(
            batch, counts.get(batch.pk, 0), done.get(batch.pk) or 0, mine_per_batch.get(batch.pk, 0)
        )
        waiting.append(WaitingBatch(batch, remaining, yours))
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    # Counted as the counters count (`tallied_labelings`): gold and screening labelings, and
    # steps without a rating, were once in today's figure but never in "all time".
    today = (
        tallied_labelings()
        .filter(labeler=user, finished_at__gte=midnight)
        .aggregate(
            solutions=Count("id", distinct=True),
            steps=Count("step_labels__completions", filter=TALLIED_STEP),
        )
    )
    cockpit = LabelerCockpit(
        labeler=labeler,
        open_labeling=open_labeling,
        expired=expired,
        waiting=waiting,
        # With no screening set, the first claim makes a screening labeler active.
        in_screening=labeler.state == Labeler.State.SCREENING
        and labeler.screening_passed is not False
        and screening_size() > 0,
        action="",
        blocked="",
        today_solutions=today["solutions"] or 0,
        today_steps=today["steps"] or 0,
        total_solutions=sum(n + surplus for _, n, surplus, _, _ in mine),
        total_steps=sum(steps for *_, steps, _ in mine),
        total_time_ms=sum(time_ms for *_, time_ms in mine),
        chosen_batch_id=chosen_batch_id,
    )
    cockpit.action, cockpit.blocked = _next_action(cockpit)
    return cockpit


def _waiting_in(batch: Batch, solutions: int, done: int, mine: int) -> tuple[int, int]:
    """(labels the batch still wants, how many of them this labeler may take: one per solution
    they never had), from its regular solutions, its finished labelings and this labeler's."""
    remaining = max(0, solutions * batch.overlap - done)
    return remaining, max(0, min(remaining, solutions - mine))


def waiting_for(user, *, after: Labeling | None = None) -> int:
    """The cockpit's "waiting for you" total for the labeling page's header, in one query beside
    the cached solution counts (`solution_counts`). `after`: a labeling in progress that is one
    of them is not counted ("N more after this one"); a finished one is counted as done already."""
    stats = BatchLabelerStats.objects.filter(batch_id=OuterRef("pk")).order_by()
    batches = list(
        batches_for(user)
        .annotate(
            done=Coalesce(
                Subquery(stats.values("batch_id").annotate(n=Sum("labelings")).values("n")), 0
            ),
            mine=Coalesce(
                Subquery(stats.filter(labeler=user).values(n=F("labelings") + F("surplus"))), 0
            ),
        )
        .only("pk", "overlap")
    )
    counts = solution_counts([b.pk for b in batches])
    current = None
    if after is not None and after.status == Labeling.Status.IN_PROGRESS:
        solution = after.solution
        current = None if solution.is_quality_control else solution.batch_id
    total = 0
    for batch in batches:
        taken = 1 if batch.pk == current else 0  # claimed: as if done, and had by this labeler
        annotated = cast(Any, batch)
        total += _waiting_in(
            batch, counts.get(batch.pk, 0), annotated.done + taken, annotated.mine + taken
        )[1]
    return total


def _next_action(cockpit: LabelerCockpit) -> tuple[str, str]:
    """What the labeler's primary button does, or why there is none: the order of claim_next."""
    state, State = cockpit.labeler.state, Labeler.State
    # A pause stops work in progress too: no Continue for the open labeling.
    if state == State.PAUSED:
        return "", "paused"
    if state == State.REJECTED:
        return "", "rejected"
    if cockpit.open_labeling is not None:
        return "continue", ""
    if state == State.SCREENING and cockpit.labeler.screening_passed is False:
        return "", "screening_failed"
    latest = cockpit.expired[0] if cockpit.expired else None
    if latest is not None and latest.has_room and not latest.batch_paused:
        return "resume", ""
    if cockpit.in_screening:
        return "screening", ""
    if not cockpit.waiting:
        return "", "no_batch"
    if not cockpit.waiting_total:
        return "", "nothing_waiting"
    return "start", ""


@dataclass(frozen=True)
class Alert:
    """Something a lead should look at, and where to act on it."""

    text: str
    url: str = ""


@dataclass
class LeadCockpit:
    batches: list[BatchProgress]  # the active ones
    attention: list[Labeler]
    adjudication_count: int
    adjudication_top: list[SolutionAgreement]
    alerts: list[Alert]

    @property
    def paused_by_gold(self) -> list[Labeler]:
        return [lab for lab in self.attention if lab.state == Labeler.State.PAUSED]

    @property
    def failed_screening(self) -> list[Labeler]:
        return [lab for lab in self.attention if lab.state == Labeler.State.SCREENING]


STALL_AFTER = timedelta(hours=1)
SHOWN = 5  # items of a list a home page shows


def lead_cockpit(*, now: datetime | None = None) -> LeadCockpit:
    """The lead's home: each active batch's depth, pace and ETA, the labelers and solutions
    waiting for a lead, and alerts; a fixed number of queries (batches_overview's, plus six)."""
    now = now or timezone.now()
    active = list(Batch.objects.filter(is_active=True).order_by("-priority", "-created_at"))
    batches = batches_overview(active, now=now)
    alerts = [
        Alert(
            f"{row.batch.name}: {row.labels_remaining} label{pluralize(row.labels_remaining)} "
            f"still wanted and none finished since "
            f"{timezone.localtime(_hour_start(now) - timedelta(hours=1)):%H:%M}.",
            reverse("labeling:batch_dashboard", args=[row.batch.pk]),
        )
        for row in batches
        if row.labels_remaining
        and not row.labels_this_and_last_hour
        and row.batch.created_at < now - STALL_AFTER
    ]
    threshold = settings.STEPWISE_PAUSE_BELOW
    for labeler in Labeler.objects.filter(
        state=Labeler.State.ACTIVE,
        gold_labelings__gte=settings.STEPWISE_GOLD_MIN_RESULTS,
        gold_steps__gt=0,
        gold_steps_exact__lt=F("gold_steps") * threshold,
    ).select_related("user")[:SHOWN]:
        alerts.append(
            Alert(
                f"{labeler.user.username}'s gold accuracy is {labeler.gold_accuracy:.0%}, "
                f"under the pause threshold ({threshold:.0%}).",
                reverse("labeling:labeler_detail", args=[labeler.user_id]),
            )
        )
    unsent = Snapshot.objects.filter(waiting_too_long(Snapshot.Status.PENDING, now)).count()
    if unsent:
        alerts.append(
            Alert(
                f"{unsent} snapshot{pluralize(unsent)} waiting for a worker: the task queue "
                "may be down.",
                reverse("research:index"),
            )
        )
    return LeadCockpit(
        batches=batches,
        attention=labelers_needing_attention(),
        adjudication_count=SolutionAgreement.objects.filter(needs_adjudication=True).count(),
        adjudication_top=adjudication_queue(limit=SHOWN),
        alerts=alerts,
    )


def api_tokens(user: Any) -> list[ApiToken]:
    """The user's own API tokens, newest first (never another user's)."""
    return list(ApiToken.objects.filter(user=user).order_by("-created"))


# --- notes and the item browser ---------------------------------------------------------------


def solution_notes(solution: Solution) -> list[Note]:
    """Every note on a solution, oldest first, with its author and labeling's labeler."""
    return list(
        Note.objects.filter(solution=solution)
        .select_related("author", "labeling")
        .order_by("created_at", "id")
    )


def notes_by_step(solution: Solution) -> dict[int | None, list[Note]]:
    """The solution's notes keyed by step index (None: about the whole solution)."""
    grouped: dict[int | None, list[Note]] = {}
    for note in solution_notes(solution):
        grouped.setdefault(note.step_index, []).append(note)
    return grouped


def labeling_notes(labeling: Labeling) -> list[Note]:
    """A labeling's own notes and the leads' replies on its solution, oldest first (what its
    labeler sees on the labeling page)."""
    return list(
        Note.objects.filter(
            Q(labeling=labeling) | Q(solution_id=labeling.solution_id, labeling__isnull=True)
        )
        .select_related("author")
        .order_by("created_at", "id")
    )


class ItemState:
    """Where a solution stands, as the item browser filters it."""

    WAITING = "waiting"
    IN_PROGRESS = "in_progress"
    PARTIAL = "partial"
    COMPLETE = "complete"
    NEEDS_ADJUDICATION = "needs_adjudication"
    ADJUDICATED = "adjudicated"
    CHOICES = (
        (WAITING, "waiting for a labeler"),
        (IN_PROGRESS, "being labeled now"),
        (PARTIAL, "fewer labels than wanted"),
        (COMPLETE, "all labels in"),
        (NEEDS_ADJUDICATION, "waiting for adjudication"),
        (ADJUDICATED, "adjudicated"),
    )


@dataclass(frozen=True)
class ItemFilters:
    """The item browser's filters (parsed by `forms.ItemFilterForm`); empty means any."""

    q: str = ""  # words of the problem text
    state: str = ""
    finish_reason: str = ""
    labeler_id: int | None = None
    agreement: str = ""  # "disagree" | "agree" | "none"
    flagged: str = ""  # "yes" | "no"
    gold: str = ""  # "yes" | "no"
    notes: str = ""  # "yes" | "no"
    model: str = ""  # "disagree": the active PRM disagrees with a labeler (modeling's hook)


MODEL_DISAGREES_AT = 0.8  # as the model-assisted review marks a step


def model_disagreement_ids(batch: Batch) -> list[int] | None:
    """Solutions of the batch where the active PRM disagrees with a labeler by at least
    MODEL_DISAGREES_AT (modeling provides it through labeling.extensions); None when no app
    provides it or no model is active."""
    return extensions.model_disagreement(batch, MODEL_DISAGREES_AT)


def _yes_no(query: QuerySet[Solution], value: str, condition: Q | Exists) -> QuerySet[Solution]:
    if value == "yes":
        return query.filter(condition)
    if value == "no":
        return query.exclude(condition)
    return query


def batch_items(batch: Batch, filters: ItemFilters) -> QuerySet[Solution]:
    """The batch's solutions that pass the filters, in id order: one query the page slices
    (a paginator's count and one page), never all rows in memory. `has_flag` and `note_count`
    are annotated for the rows; the agreement and adjudication come with a join."""
    done = Labeling.objects.filter(solution_id=OuterRef("pk"), status=Labeling.Status.COMPLETED)
    flagged = Exists(
        Completion.objects.filter(step__labeling__solution_id=OuterRef("pk"), flagged=True)
    )
    noted = Exists(Note.objects.filter(solution_id=OuterRef("pk")))
    query: QuerySet[Solution] = (
        Solution.objects.filter(batch=batch)
        .select_related("problem", "batch", "agreement", "adjudication")
        .annotate(has_flag=flagged, has_notes=noted)
        .order_by("pk")
    )
    if filters.q:
        for word in filters.q.split()[:8]:
            query = query.filter(problem__text__icontains=word)
    state = filters.state
    if state == ItemState.WAITING:
        query = query.filter(completed_count=0, active_count=0)
    elif state == ItemState.IN_PROGRESS:
        query = query.filter(active_count__gt=0)
    elif state == ItemState.PARTIAL:
        query = query.filter(completed_count__gt=0, completed_count__lt=batch.overlap)
    elif state == ItemState.COMPLETE:
        query = query.filter(completed_count__gte=batch.overlap)
    elif state == ItemState.NEEDS_ADJUDICATION:
        query = query.filter(agreement__needs_adjudication=True, adjudication__isnull=True)
    elif state == ItemState.ADJUDICATED:
        query = query.filter(adjudication__isnull=False)
    if filters.finish_reason:
        query = query.filter(Exists(done.filter(finish_reason=filters.finish_reason)))
    if filters.labeler_id is not None:
        by_labeler = Labeling.objects.filter(
            solution_id=OuterRef("pk"), labeler_id=filters.labeler_id
        )
        query = query.filter(Exists(by_labeler))
    # Disagreement as the adjudication queue judges it, whether a lead has decided it since.
    disagree = Q(agreement__first_error_agree=False) | Q(
        agreement__raw__lt=settings.STEPWISE_ADJUDICATE_BELOW
    )
    if filters.agreement == "disagree":
        query = query.filter(disagree)
    elif filters.agreement == "agree":
        query = query.filter(agreement__isnull=False).exclude(disagree)
    elif filters.agreement == "none":
        query = query.filter(agreement__isnull=True)
    query = _yes_no(query, filters.flagged, flagged)
    query = _yes_no(query, filters.notes, noted)
    query = _yes_no(query, filters.gold, Q(is_quality_control=True))
    if filters.model == "disagree":
        query = query.filter(pk__in=model_disagreement_ids(batch) or [])
    return query


@dataclass(frozen=True)
class ItemLabeling:
    labeling: Labeling
    ratings: list[int]  # per rated step, in order


@dataclass(frozen=True)
class ItemRow:
    solution: Solution
    labelings: list[ItemLabeling]  # completed and in progress, oldest first

    @property
    def state(self) -> str:
        solution = self.solution
        adjudication = getattr(solution, "adjudication", None)
        agreement = getattr(solution, "agreement", None)
        overlap = solution.batch.overlap if solution.batch else 1
        if adjudication is not None:
            return "adjudicated"
        if agreement is not None and agreement.needs_adjudication:
            return "needs adjudication"
        if solution.completed_count >= overlap:
            return "complete"
        if solution.active_count:
            return "in progress"
        if solution.completed_count:
            return "partial"
        return "waiting"


def item_rows(solutions: list[Solution]) -> list[ItemRow]:
    """A page of the browser: each solution with its labelings (completed and in progress)
    and their ratings. Two queries for the page, whatever its length."""
    labelings = list(
        Labeling.objects.filter(
            solution_id__in=[s.pk for s in solutions],
            status__in=[Labeling.Status.COMPLETED, Labeling.Status.IN_PROGRESS],
        )
        .select_related("labeler")
        .order_by("pk")
    )
    ratings = labeling_step_ratings([lab.pk for lab in labelings])
    by_solution: dict[int, list[ItemLabeling]] = {}
    for labeling in labelings:
        by_solution.setdefault(labeling.solution_id, []).append(
            ItemLabeling(labeling, ratings[labeling.pk])
        )
    return [ItemRow(s, by_solution.get(s.pk, [])) for s in solutions]


@dataclass(frozen=True)
class HistoryEntry:
    at: datetime
    actor: str
    what: str  # "rated", "undone", … , "note"
    step_index: int | None
    old_rating: int | None
    new_rating: int | None
    detail: str
    labeler: str  # whose labeling it is about ("" for a lead's note on the item)


def item_history(solution: Solution) -> list[HistoryEntry]:
    """Everything that happened to a solution, oldest first: every rating event of each of its
    labelings (rate, undo, edit, adjudication, finish) and every note."""
    entries = [
        HistoryEntry(
            e.created_at,
            e.actor.username if e.actor else "—",
            e.get_reason_display(),
            e.step_index,
            e.old_rating,
            e.new_rating,
            e.detail,
            e.labeling.labeler.username,
        )
        for e in RatingEvent.objects.filter(labeling__solution=solution).select_related(
            "actor", "labeling__labeler"
        )
    ]
    entries += [
        HistoryEntry(
            n.created_at,
            n.author.username if n.author else "—",
            "note",
            n.step_index,
            None,
            None,
            n.text,
            n.labeling.labeler.username if n.labeling else "",
        )
        for n in Note.objects.filter(solution=solution).select_related(
            "author", "labeling__labeler"
        )
    ]
    entries.sort(key=lambda entry: entry.at)
    return entries
