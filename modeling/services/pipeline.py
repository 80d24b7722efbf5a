"""A generation's steps on a worker: retrain -> score -> select -> enqueue.

Each step is a plain function of a GenerationRun, safe to run twice; `run_step` claims a step
with a conditional update, runs it, records status, progress and timings on the row, and names
the next step, which `advance` sends (`loop.send_step`). A failed step leaves the run FAILED at
that step: the previous generation's batch and the active model are untouched (training
activates a model only when it passed its evaluation; selection writes only this run's rows;
the batch is created last, in one transaction).

Training and scoring are `runs.create_training_run`, `execution.execute_training_run` (which
activates the new model only when it passed its evaluation gate) and
`scoring.score_solutions_with`, called through their modules (tests swap them with
monkeypatch). Retrain and score import those modules when they run: they load torch,
transformers and scikit-learn, which the default worker (select, enqueue) and a web process
that registers the tasks need not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from modeling.models import GenerationRun, ModelVersion, SolutionScore, TrainingRun
from modeling.services import runs
from modeling.services.loop import (
    StepFailed,
    ensemble_heads,
    needs_uncertainty,
    send_step,
    with_defaults,
)
from modeling.services.pool import enqueue_selection, select_for_run, selectable_pool
from stepwise.queued import failure_text

logger = logging.getLogger(__name__)


def _set_step(run_id: int, step: str, **state: Any) -> None:
    """Merge `state` into steps[step] (read-modify-write under the row lock)."""
    with transaction.atomic():
        run = GenerationRun.objects.select_for_update().get(pk=run_id)
        run.steps = {**run.steps, step: {**run.steps.get(step, {}), **state}}
        run.save(update_fields=["steps"])


def _progress(run: GenerationRun, step: str) -> Callable[[int, int], None]:
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or done >= total:  # at most one write a second
            last[0] = now
            _set_step(run.pk, step, done=done, total=total)
            run.heartbeat()

    return report


def fail_stale_generations(now=None) -> int:
    """Mark failed (retryable) the RUNNING generations whose worker is gone.

    The retrain step is alive while its training run is (that run has its own heartbeat and
    `runs.fail_stale_runs`); the other steps while the run's heartbeat (its claim, then each
    progress report) is newer than STEPWISE_RUN_STALE_SECONDS.
    """
    now = now or timezone.now()
    failed = 0
    running = GenerationRun.objects.filter(status=GenerationRun.Status.RUNNING).select_related(
        "training_run"
    )
    for run in running:
        step = run.current_step
        if step == GenerationRun.Step.RETRAIN and run.training_run is not None:
            training = run.training_run
            dead = training.status in (TrainingRun.Status.FAILED, TrainingRun.Status.CANCELLED)
            why = f"training run {training.pk} {training.status}: {training.error or 'no detail'}"
        else:
            seen = run.heartbeat_at
            dead = seen is None or seen < GenerationRun.stale_before(now)
            why = f"no progress from the worker since {seen.isoformat() if seen else 'its claim'}"
        if dead and run.mark_failed(f"{step}: {why}", finished_at=now):
            _set_step(
                run.pk, step, status="failed", error=failure_text(why), finished_at=now.isoformat()
            )
            failed += 1
    return failed


def claim_step(run_id: int, step: str) -> GenerationRun | None:
    """QUEUED at `step` -> RUNNING, or None when someone else has it or it is done."""
    run = GenerationRun.claim(run_id, where=Q(current_step=step))
    if run is None:
        return None
    started = (run.heartbeat_at or timezone.now()).isoformat()
    _set_step(run_id, step, status="running", started_at=started, finished_at=None, error="")
    run.refresh_from_db(fields=["steps"])
    return run


def run_step(run_id: int, step: str) -> str | None:
    """Claim and run one step; returns the next step to queue (None: nothing to do)."""
    run = claim_step(run_id, step)
    if run is None:
        return None
    started = time.monotonic()
    try:
        detail = STEP_FUNCTIONS[step](run)
    except Exception as exc:
        logger.exception("%s: step %s failed", run, step)
        message = failure_text(exc if not isinstance(exc, StepFailed) else str(exc))
        _set_step(
            run_id,
            step,
            status="failed",
            error=message,
            finished_at=timezone.now().isoformat(),
            seconds=round(time.monotonic() - started, 3),
        )
        run.mark_failed(f"{step}: {message}")
        return None
    _set_step(
        run_id,
        step,
        status="done",
        detail=detail or {},
        finished_at=timezone.now().isoformat(),
        seconds=round(time.monotonic() - started, 3),
    )
    following = _next_step(step)
    if following == GenerationRun.Step.DONE:
        run.mark_succeeded(current_step=following)
        return None
    GenerationRun.objects.filter(pk=run_id, status=GenerationRun.Status.RUNNING).requeue(
        current_step=following
    )
    return following


def advance(run_id: int, step: str) -> None:
    """Run `step`, then queue the next one (what the tasks call)."""
    following = run_step(run_id, step)
    if following is not None:
        send_step(run_id, following)


def run_generation_inline(run: GenerationRun) -> GenerationRun:
    """Run every remaining step in this process (CLI --inline, tests)."""
    step: str | None = run.current_step
    while step is not None and step != GenerationRun.Step.DONE:
        step = run_step(run.pk, step)
    run.refresh_from_db()
    return run


def _next_step(step: str) -> str:
    order = [s.value for s in GenerationRun.STEPS] + [GenerationRun.Step.DONE.value]
    return order[order.index(step) + 1]


# --- the steps -------------------------------------------------------------------------------


def step_retrain(run: GenerationRun) -> dict[str, Any]:
    """Train on every completed labeling; the services activate the model only if it passed."""
    # Loads torch and transformers: only the gpu steps do (select and enqueue run elsewhere).
    from modeling.services import execution

    params = with_defaults(run.params)
    train_config = params["train_config"] or getattr(
        settings, "STEPWISE_GENERATION_TRAIN_CONFIG", {}
    )
    training = run.training_run
    if training is None:
        training = runs.create_training_run(
            config=dict(train_config),
            created_by=run.created_by,
            name=f"generation {run.generation}",
            project=run.project,
        )
        GenerationRun.objects.filter(pk=run.pk).update(training_run=training)
    elif training.status == TrainingRun.Status.SUCCEEDED:
        version = ModelVersion.objects.filter(run=training).first()
        return {**_retrain_detail(training, version), "reused": True}
    elif training.status in (TrainingRun.Status.FAILED, TrainingRun.Status.CANCELLED):
        # A retry trains afresh: a failed run is a record, not something to resume.
        training = runs.create_training_run(
            config=dict(training.config or train_config),
            created_by=run.created_by,
            name=f"generation {run.generation} (retry)",
            project=run.project,
        )
        GenerationRun.objects.filter(pk=run.pk).update(training_run=training)
    version = execution.execute_training_run(training.pk)
    training.refresh_from_db()
    if training.status != TrainingRun.Status.SUCCEEDED:
        raise StepFailed(
            f"training run {training.pk} {training.status}: {training.error or 'no detail'}"
        )
    return _retrain_detail(training, version)


def _retrain_detail(training: TrainingRun, version: ModelVersion | None) -> dict[str, Any]:
    """The retrained model and its gate, with both of the gate's figures: what the page says
    when the pool is scored by the model that was active before (the new one failed)."""
    active = ModelVersion.active(training.project_id)
    gate = (training.metrics or {}).get("gate") or {}
    return {
        "training_run": training.pk,
        "model_version": getattr(version, "pk", None),
        "model_name": getattr(version, "name", ""),
        "passed_evaluation": bool(version and version.passed_evaluation),
        "active_model": active.pk if active else None,
        # The gate is the run's (evaluation.evaluation_gate): on the evaluation set, or not at all.
        "evaluation_set": gate.get("evaluation_set"),
        "gate": gate.get("reason") or ("passed" if gate.get("passed") else ""),
        # The new model's AUROC (on the set; without one, on its own held-out problems) and
        # the active model's on the same set (None without a set or an active model).
        "new_auroc": gate.get("auroc"),
        "active_auroc": gate.get("active_auroc"),
    }


def step_score(run: GenerationRun) -> dict[str, Any]:
    """Score the selectable pool with the active model (pinned on the run, so a retry uses it)."""
    # Loads torch: only the gpu steps do (select and enqueue run on the default worker).
    from modeling.services import scoring

    version = run.model_version or ModelVersion.active(run.project_id)
    if version is None:
        raise StepFailed("no active model: train one that passes its evaluation first")
    if run.model_version_id is None:
        GenerationRun.objects.filter(pk=run.pk).update(model_version=version)
    scored = SolutionScore.objects.filter(model_version=version, solution_id=OuterRef("pk"))
    todo = selectable_pool(run.project_id).exclude(Exists(scored)).order_by("pk")
    total = todo.count()
    _set_step(run.pk, "score", done=0, total=total)
    written = 0
    if total:
        written = scoring.score_solutions_with(
            model_version=version, solutions=todo, progress=_progress(run, "score")
        )
    _set_step(run.pk, "score", done=total, total=total)
    detail: dict[str, Any] = {"model_version": version.pk, "to_score": total, "scored": written}
    params = with_defaults(run.params)
    if needs_uncertainty(params):
        detail.update(_measure_uncertainty(run, version, ensemble_heads(params), params))
    return detail


def _measure_uncertainty(
    run: GenerationRun, version: ModelVersion, heads: int, params: dict[str, Any]
) -> dict[str, Any]:
    """The ensemble's disagreement on the selectable pool, where this ensemble size has not
    measured it yet (a retry measures only what is missing)."""
    from modeling.services import scoring  # loads torch: as in step_score

    measured = SolutionScore.objects.filter(
        model_version=version, solution_id=OuterRef("pk"), ensemble_heads=heads
    )
    todo = selectable_pool(run.project_id).exclude(Exists(measured))
    if not todo.exists():
        return {"ensemble_heads": heads, "uncertainties": 0}
    try:
        count = scoring.measure_uncertainty_with(
            model_version=version,
            solutions=todo,
            heads=heads,
            seed=int(params["seed"]),
            progress=_progress(run, "score"),
        )
    except runs.RunError as exc:
        raise StepFailed(f"uncertainty: {exc}") from None
    return {"ensemble_heads": heads, "uncertainties": count}


def step_select(run: GenerationRun) -> dict[str, Any]:
    reasons = select_for_run(run)
    rules: dict[str, int] = {}
    for reason in reasons:
        rules[reason.rule] = rules.get(reason.rule, 0) + 1
    return {"selected": len(reasons), "rules": rules}


def step_enqueue(run: GenerationRun) -> dict[str, Any]:
    batch = enqueue_selection(run)
    return {"batch": batch.pk, "solutions": batch.solutions.count()}


STEP_FUNCTIONS: dict[str, Callable[[GenerationRun], dict[str, Any]]] = {
    "retrain": step_retrain,
    "score": step_score,
    "select": step_select,
    "enqueue": step_enqueue,
}
