"""Reads of the modeling app that span apps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Coalesce
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone

from labeling import selectors as labeling_selectors
from labeling.models import Batch, Labeling, Snapshot, Solution
from labeling.selectors import SHOWN, Alert, BatchProgress, LeadCockpit
from modeling.models import (
    GenerationRun,
    ModelVersion,
    SelectionReason,
    SolutionScore,
    TrainingRun,
)
from stepwise.celery import model_tasks_in_thread

FAILURES_SHOWN_FOR = timedelta(days=7)


# --- training runs ------------------------------------------------------------------------------


def runs_ahead(run: TrainingRun) -> list[TrainingRun]:
    """The runs a queued run waits for, last the one just before it: the running ones, then
    those queued before it, in the order they were sent (the gpu worker, or the embedded
    default's gpu lane, trains one at a time). The run's project's only: another project's runs
    are never shown here (they take the gpu too)."""
    if run.status != TrainingRun.Status.QUEUED:
        return []
    others = (
        TrainingRun.objects.filter(project=run.project_id)
        .exclude(pk=run.pk)
        .annotate(sent=Coalesce("sent_at", "created_at"))
    )
    mine = run.sent_at or run.created_at
    queued = others.filter(
        Q(sent__lt=mine) | Q(sent=mine, pk__lt=run.pk), status=TrainingRun.Status.QUEUED
    ).order_by("sent", "pk")
    running = others.filter(status=TrainingRun.Status.RUNNING).order_by("started_at", "pk")
    return [*running, *queued]


# --- home pages: the lead's alerts from the loop, the researcher's cockpit ---------------------


def lead_cockpit(*, now: datetime | None = None, project: Any = None) -> LeadCockpit:
    """The lead's home (`labeling.selectors.lead_cockpit`) with the loop's alerts added: failed
    training runs and generations, runs whose task has not reached a worker. Three queries more."""
    now = now or timezone.now()
    cockpit = labeling_selectors.lead_cockpit(now=now, project=project)
    cockpit.alerts.extend(loop_alerts(now=now, project=project))
    return cockpit


def _in(project: Any) -> dict[str, int]:
    return {} if project is None else {"project_id": project.pk}


def loop_alerts(*, now: datetime, project: Any = None) -> list[Alert]:
    alerts = []
    failed_runs = TrainingRun.objects.filter(
        status=TrainingRun.Status.FAILED, finished_at__gte=now - FAILURES_SHOWN_FOR, **_in(project)
    ).order_by("-finished_at")[:SHOWN]
    for run in failed_runs:
        reason = run.error.strip().splitlines()[0][:160] if run.error.strip() else "no reason given"
        alerts.append(
            Alert(
                f"Training run {run} failed: {reason}",
                reverse("modeling_runs:detail", args=[run.pk]),
            )
        )
    # A failed generation stays open until it is retried or cancelled: every one is news.
    for generation in GenerationRun.objects.filter(
        status=GenerationRun.Status.FAILED, **_in(project)
    )[:SHOWN]:
        alerts.append(
            Alert(
                f"Generation {generation.generation} failed at "
                f"“{generation.get_current_step_display()}”: retry or cancel it.",
                reverse("modeling_loop:generation", args=[generation.generation]),
            )
        )
    unsent = TrainingRun.objects.waiting_too_long(now).count()
    # In the embedded default the queued runs wait their turn behind the one this process trains.
    training = TrainingRun.objects.filter(status=TrainingRun.Status.RUNNING)
    if unsent and model_tasks_in_thread() and training.exists():
        unsent = 0
    if unsent:
        alerts.append(
            Alert(
                f"{unsent} training run{pluralize(unsent)} queued but not taken by a "
                "worker: is the GPU worker running?",
                reverse("modeling_runs:list"),
            )
        )
    return alerts


@dataclass
class ResearchCockpit:
    snapshots: list[Snapshot]
    runs: list[TrainingRun]
    active_model: ModelVersion | None
    generations: list[GenerationRun]
    queued: list[BatchProgress]  # batches the loop made that still want labels
    pool_total: int
    pool_selectable: int

    @property
    def labels_queued(self) -> int:
        return sum(row.labels_remaining for row in self.queued)


def research_cockpit(*, now: datetime | None = None, project: Any = None) -> ResearchCockpit:
    """The researcher's home: latest snapshots, runs (AUROC in their metrics) and generations,
    the active model, and what is queued: the loop's batches still being labeled and the
    candidate pool. A fixed number of queries (the pool counts are one aggregate)."""
    now = now or timezone.now()
    loop_batches = list(
        Batch.objects.filter(is_active=True, generation_run__isnull=False, **_in(project)).order_by(
            "-generation"
        )
    )
    labeled = Labeling.objects.filter(solution_id=OuterRef("pk"))
    pool = Solution.objects.filter(pool_entry__isnull=False, **_in(project)).aggregate(
        total=Count("id"),
        selectable=Count("id", filter=Q(batch__isnull=True) & ~Exists(labeled)),
    )
    return ResearchCockpit(
        snapshots=list(Snapshot.objects.filter(**_in(project))[:SHOWN]),
        runs=list(
            TrainingRun.objects.filter(**_in(project)).select_related("model_version")[:SHOWN]
        ),
        active_model=ModelVersion.active(None if project is None else project.pk),
        generations=list(
            GenerationRun.objects.filter(**_in(project)).select_related("batch")[:SHOWN]
        ),
        queued=[
            row
            for row in labeling_selectors.batches_overview(loop_batches, now=now)
            if row.labels_remaining
        ],
        pool_total=pool["total"],
        pool_selectable=pool["selectable"],
    )


# --- model-assisted review: the active PRM beside the labelers -------------------------------
#
# A labeler's rating r at a step disagrees with the model by 1 - P(r): the probability the model
# gives to every other rating. 0 when the model is sure of the same rating, near 1 when it is
# sure of another. A solution's disagreement is its largest step disagreement over all labelers.

RATING_COLUMN = {-1: 0, 0: 1, 1: 2}  # SolutionScore.step_probs: [P(-1), P(0), P(+1)]


def step_disagreement(probs: Sequence[float], rating: int) -> float:
    return 1.0 - float(probs[RATING_COLUMN[rating]])


def model_rating(probs: Sequence[float]) -> int:
    """The rating the model finds likeliest at a step."""
    return max(RATING_COLUMN, key=lambda rating: probs[RATING_COLUMN[rating]])


@dataclass(frozen=True)
class ReviewedLabeling:
    labeling_id: int
    labeler: str
    ratings: list[int]  # per rated step
    disagreements: list[float | None]  # per step of the solution; None where not rated


@dataclass(frozen=True)
class ReviewedSolution:
    solution: Solution
    step_probs: list[list[float]]
    labelings: list[ReviewedLabeling]
    disagreement: float  # the largest over steps and labelings
    # The active-learning pick that queued it (its rule and score), if a generation did.
    picked_by: SelectionReason | None = None

    @property
    def steps(self) -> list[dict]:
        """Per step: text, the model's probabilities and likeliest rating, each labeling's rating
        and disagreement (for the solution page)."""
        rows = []
        for index, text in enumerate(self.solution.steps):
            probs = self.step_probs[index] if index < len(self.step_probs) else None
            rows.append(
                {
                    "index": index,
                    "text": text,
                    "probs": probs,
                    "model_rating": model_rating(probs) if probs else None,
                    "labels": [
                        {
                            "labeler": labeling.labeler,
                            "rating": labeling.ratings[index]
                            if index < len(labeling.ratings)
                            else None,
                            "disagreement": labeling.disagreements[index],
                        }
                        for labeling in self.labelings
                    ],
                    "disagreement": max(
                        (
                            d
                            for labeling in self.labelings
                            if (d := labeling.disagreements[index]) is not None
                        ),
                        default=None,
                    ),
                }
            )
        return rows


@dataclass(frozen=True)
class LabelerAgreement:
    labeler: str
    steps: int
    mean_disagreement: float
    argmax_differs: float  # share of steps where the model's likeliest rating is not theirs


@dataclass(frozen=True)
class ReviewQueue:
    model_version: ModelVersion | None
    solutions: list[ReviewedSolution]  # largest disagreement first
    labelers: list[LabelerAgreement]  # least agreeing first
    unscored: int  # labeled solutions the active model has not scored


def _review(
    solution: Solution,
    probs: list[list[float]],
    labelings: list[Labeling],
    ratings: dict[int, list[int]],
) -> ReviewedSolution:
    reviewed = []
    for labeling in labelings:
        given = ratings.get(labeling.pk, [])
        disagreements: list[float | None] = [
            step_disagreement(probs[i], given[i]) if i < len(given) and i < len(probs) else None
            for i in range(len(solution.steps))
        ]
        reviewed.append(
            ReviewedLabeling(labeling.pk, labeling.labeler.username, given, disagreements)
        )
    largest = max((d for r in reviewed for d in r.disagreements if d is not None), default=0.0)
    return ReviewedSolution(solution, probs, reviewed, largest)


def labeled_solutions(batch: Batch) -> QuerySet[Solution]:
    done = Labeling.objects.filter(solution_id=OuterRef("pk"), status=Labeling.Status.COMPLETED)
    return Solution.objects.filter(batch=batch).filter(Exists(done))


def unscored_labeled(batch: Batch, version: ModelVersion) -> QuerySet[Solution]:
    scored = SolutionScore.objects.filter(solution_id=OuterRef("pk"), model_version=version)
    return labeled_solutions(batch).exclude(Exists(scored))


def review_queue(batch: Batch, *, limit: int = 200) -> ReviewQueue:
    """The batch's labeled solutions that the active model scored, largest disagreement first,
    and each labeler's agreement with the model over those solutions."""
    version = ModelVersion.active(batch.project_id)
    labeled = labeled_solutions(batch)
    if version is None:
        return ReviewQueue(None, [], [], labeled.count())
    scores = {
        score.solution_id: score
        for score in SolutionScore.objects.filter(
            model_version=version, solution__in=labeled
        ).select_related("solution__problem")
    }
    labelings = list(
        Labeling.objects.filter(solution_id__in=scores, status=Labeling.Status.COMPLETED)
        .select_related("labeler")
        .order_by("pk")
    )
    ratings = labeling_selectors.labeling_step_ratings([labeling.pk for labeling in labelings])
    by_solution: dict[int, list[Labeling]] = {}
    for labeling in labelings:
        by_solution.setdefault(labeling.solution_id, []).append(labeling)
    picked_by = {
        reason.solution_id: reason
        for reason in SelectionReason.objects.filter(solution_id__in=scores).order_by(
            "generation_run__generation"
        )
    }  # the latest generation's pick wins
    reviewed = [
        replace(
            _review(score.solution, score.step_probs, by_solution.get(solution_id, []), ratings),
            picked_by=picked_by.get(solution_id),
        )
        for solution_id, score in scores.items()
    ]
    reviewed.sort(key=lambda r: (-r.disagreement, r.solution.pk))
    per_labeler: dict[str, list[tuple[float, bool]]] = {}
    for solution in reviewed:
        for passed in solution.labelings:
            for index, rating in enumerate(passed.ratings):
                if index < len(solution.step_probs):
                    probs = solution.step_probs[index]
                    per_labeler.setdefault(passed.labeler, []).append(
                        (step_disagreement(probs, rating), model_rating(probs) != rating)
                    )
    labelers = [
        LabelerAgreement(
            name,
            len(rows),
            sum(d for d, _ in rows) / len(rows),
            sum(differs for _, differs in rows) / len(rows),
        )
        for name, rows in per_labeler.items()
    ]
    labelers.sort(key=lambda row: (-row.mean_disagreement, row.labeler))
    return ReviewQueue(version, reviewed[:limit], labelers, labeled.count() - len(scores))


def disagreeing_solution_ids(batch: Batch, at_least: float) -> list[int] | None:
    """The batch's labeled solutions where the active model disagrees with some labeler's
    rating by `at_least` or more (the item browser's "model disagrees" filter); None without
    an active model. Reads the batch's scores once, as the review queue does."""
    if ModelVersion.active(batch.project_id) is None:
        return None
    return [
        reviewed.solution.pk
        for reviewed in review_queue(batch, limit=10**9).solutions
        if reviewed.disagreement >= at_least
    ]


def review_solution(solution: Solution) -> ReviewedSolution | None:
    """One solution's steps, the active model's probabilities and every completed labeling's
    ratings; None when the active model has not scored it (or there is none)."""
    version = ModelVersion.active(solution.project_id)
    score = (
        SolutionScore.objects.filter(model_version=version, solution=solution).first()
        if version
        else None
    )
    if score is None:
        return None
    labelings = list(
        Labeling.objects.filter(solution=solution, status=Labeling.Status.COMPLETED)
        .select_related("labeler")
        .order_by("pk")
    )
    ratings = labeling_selectors.labeling_step_ratings([labeling.pk for labeling in labelings])
    return _review(solution, score.step_probs, labelings, ratings)
