"""Reads of the modeling app that span apps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db.models import Count, Exists, OuterRef, Q
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone

from labeling import selectors as labeling_selectors
from labeling.models import Batch, Labeling, Snapshot, Solution
from labeling.selectors import SHOWN, Alert, BatchProgress, LeadCockpit
from modeling.models import GenerationRun, ModelVersion, TrainingRun
from stepwise.celery import waiting_too_long

if TYPE_CHECKING:
    from modeling.training.data import LabeledSolution

FAILURES_SHOWN_FOR = timedelta(days=7)


def oracle_ratings(
    examples: Sequence[LabeledSolution], *, default: int = 1
) -> Callable[[int], list[int]]:
    """ratings_for(labeling_id) for the simulated labelers (`simulation.HttpLabeler`): the
    claimed solution's steps looked up in an oracle; unknown steps get `default`. Reads the
    database, so the client runs beside the server (benchmarks, tests)."""
    # torch loads only where a model trains or scores, never in the web process (home reads here)
    from modeling.training.simulation import oracle_lookup

    ratings = oracle_lookup(examples, default=default)

    def ratings_for(labeling_id: int) -> list[int]:
        solution = Labeling.objects.select_related("solution__problem").get(pk=labeling_id).solution
        return ratings(solution.problem.text, solution.steps)

    return ratings_for


# --- home pages: the lead's alerts from the loop, the researcher's cockpit ---------------------


def lead_cockpit(*, now: datetime | None = None) -> LeadCockpit:
    """The lead's home (`labeling.selectors.lead_cockpit`) with the loop's alerts added: failed
    training runs and generations, runs whose task has not reached a worker. Three queries more."""
    now = now or timezone.now()
    cockpit = labeling_selectors.lead_cockpit(now=now)
    cockpit.alerts.extend(loop_alerts(now=now))
    return cockpit


def loop_alerts(*, now: datetime) -> list[Alert]:
    alerts = []
    failed_runs = TrainingRun.objects.filter(
        status=TrainingRun.Status.FAILED, finished_at__gte=now - FAILURES_SHOWN_FOR
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
    for generation in GenerationRun.objects.filter(status=GenerationRun.Status.FAILED)[:SHOWN]:
        alerts.append(
            Alert(
                f"Generation {generation.generation} failed at "
                f"“{generation.get_current_step_display()}”: retry or cancel it.",
                reverse("modeling_loop:generation", args=[generation.generation]),
            )
        )
    unsent = TrainingRun.objects.filter(waiting_too_long(TrainingRun.Status.QUEUED, now)).count()
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


def research_cockpit(*, now: datetime | None = None) -> ResearchCockpit:
    """The researcher's home: latest snapshots, runs (AUROC in their metrics) and generations,
    the active model, and what is queued: the loop's batches still being labeled and the
    candidate pool. A fixed number of queries (the pool counts are one aggregate)."""
    now = now or timezone.now()
    loop_batches = list(
        Batch.objects.filter(is_active=True, generation_run__isnull=False).order_by("-generation")
    )
    labeled = Labeling.objects.filter(solution_id=OuterRef("pk"))
    pool = Solution.objects.filter(pool_entry__isnull=False).aggregate(
        total=Count("id"),
        selectable=Count("id", filter=Q(batch__isnull=True) & ~Exists(labeled)),
    )
    return ResearchCockpit(
        snapshots=list(Snapshot.objects.all()[:SHOWN]),
        runs=list(TrainingRun.objects.select_related("model_version")[:SHOWN]),
        active_model=ModelVersion.active(),
        generations=list(GenerationRun.objects.select_related("batch")[:SHOWN]),
        queued=[
            row
            for row in labeling_selectors.batches_overview(loop_batches, now=now)
            if row.labels_remaining
        ],
        pool_total=pool["total"],
        pool_selectable=pool["selectable"],
    )
