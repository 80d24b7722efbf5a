"""The active-learning loop on the database: the candidate pool, selection into a batch, and the
generation pipeline (retrain -> score -> select -> enqueue) whose steps Celery runs one by one.

Each step is a plain function of a GenerationRun, safe to run twice; `run_step` claims a step
with a conditional update, runs it, records status, progress and timings on the row, and names
the next step. A failed step leaves the run FAILED at that step: the previous generation's batch
and the active model are untouched (training activates a model only when it passed its
evaluation; selection writes only this run's rows; the batch is created last, in one
transaction), and `retry_generation` re-queues the failed step.

Training and scoring are `modeling.services.runs`: `create_training_run`, `execute_training_run`
(which activates the new model only when it passed its evaluation gate) and
`score_solutions_with`, called through the module (tests swap them with monkeypatch).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, QuerySet
from django.utils import timezone

from labeling.models import Batch, Labeling, Solution
from labeling.roles import may_add_to_batch
from labeling.services import importing
from modeling.grading import grade_solution, is_equivalent
from modeling.models import (
    GenerationRun,
    ModelVersion,
    PoolEntry,
    SelectionReason,
    SolutionScore,
    TrainingRun,
)
from modeling.services import runs
from modeling.training.config import TrainConfig
from modeling.training.selection import (
    MIX_RULES,
    RULES,
    Candidate,
    check_shares,
    select_by_rule,
)
from stepwise.celery import UNSENT, resend_rows, run_in_thread, send_row, waiting_too_long

logger = logging.getLogger(__name__)

DEFAULT_PARAMS: dict[str, Any] = {
    "rule": "convincing_wrong",  # one of selection.RULES
    "shares": None,  # rule "mix": {rule: share}, summing to 1
    "ensemble_heads": None,  # rule "uncertainty" (or a mix with it): None is the setting's
    "k": 50,
    "convincing_wrong_fraction": 0.8,
    "per_problem_cap": 2,
    "scope": "pool",
    "per_problem_k": None,
    "seed": 0,
    "overlap": 1,
    "priority": 10,
    "retrain": True,
    "train_config": {},
}


class GenerationError(Exception):
    """A request the loop refuses (a run already open, bad parameters...)."""


class BadParameters(GenerationError):
    """Parameters no run could use (an unknown rule, shares that do not sum to 1...)."""


class StepFailed(Exception):
    """A step could not finish; the message is shown to leads."""


# --- the candidate pool ----------------------------------------------------------------------


def _grade(
    sample: importing.SampleLine, ground_truth: str | None
) -> tuple[str | None, bool | None]:
    """The line's own `answer` when given (the generator's final answer), else the steps'."""
    if sample.answer and sample.answer.strip():
        if not ground_truth or not ground_truth.strip():
            return sample.answer, None
        return sample.answer, is_equivalent(sample.answer, ground_truth)
    result = grade_solution(sample.steps, ground_truth)
    return result.answer, result.correct


def _grade_pool_solution(sample: importing.SampleLine, solution: Solution) -> PoolEntry:
    answer, correct = _grade(sample, solution.problem.ground_truth_answer)
    solution.answer_correct = correct
    return PoolEntry(extracted_answer=answer)


def _write_pool_entries(
    created: list[tuple[Solution, PoolEntry]], report: importing.ImportReport
) -> None:
    for solution, entry in created:
        entry.solution_id = solution.pk
        entry.source = Path(report.path).name
    PoolEntry.objects.bulk_create([entry for _, entry in created])
    report.created["graded correct"] += sum(s.answer_correct is True for s, _ in created)
    report.created["graded wrong"] += sum(s.answer_correct is False for s, _ in created)


def import_pool(path: str | Path, *, skip_invalid: bool = False) -> importing.ImportReport:
    """Import candidate solutions (JSONL, one per line: `unique_id` or `problem`, `steps`, and
    optionally `answer`, `generator`, `source_id`, `score`) into the pool, grading each against
    its problem's ground truth. Streamed in chunks; all-or-nothing unless skip_invalid;
    re-importing adds nothing twice (solutions by content hash)."""
    return importing.import_solutions(
        path,
        batch=None,
        create_problems=False,
        skip_invalid=skip_invalid,
        counted_as="pool solutions",
        prepare=_grade_pool_solution,
        after_create=_write_pool_entries,
    )


def pool_solutions() -> QuerySet[Solution]:
    return Solution.objects.filter(pool_entry__isnull=False)


def selectable_pool() -> QuerySet[Solution]:
    """Pool solutions not yet queued (no batch) and never labeled (no labeling of any status)."""
    labeled = Labeling.objects.filter(solution_id=OuterRef("pk"))
    return pool_solutions().filter(batch__isnull=True).exclude(Exists(labeled))


def pool_stats() -> dict[str, int]:
    pool = pool_solutions()
    return {
        "total": pool.count(),
        "selectable": selectable_pool().count(),
        "wrong": pool.filter(answer_correct=False).count(),
        "correct": pool.filter(answer_correct=True).count(),
        "ungraded": pool.filter(answer_correct__isnull=True).count(),
    }


# --- selection into a batch ------------------------------------------------------------------


def next_generation_number() -> int:
    batches = Batch.objects.aggregate(n=Max("generation"))["n"] or 0
    generations = GenerationRun.objects.aggregate(n=Max("generation"))["n"] or 0
    return max(batches, generations) + 1


def select_for_run(run: GenerationRun) -> list[SelectionReason]:
    """Replace this run's selection with a fresh one from its model's scores (idempotent)."""
    if run.model_version_id is None:
        raise StepFailed("no model version is pinned: the score step has not run")
    params = {**DEFAULT_PARAMS, **run.params}
    heads = ensemble_heads(params) if needs_uncertainty(params) else None
    scored = SolutionScore.objects.filter(
        model_version_id=run.model_version_id, solution__in=selectable_pool()
    ).values_list(
        "solution_id",
        "solution__problem_id",
        "score",
        "solution__answer_correct",
        "uncertainty",
        "ensemble_heads",
    )
    # A NaN score (no step the model could read) cannot be ranked: such solutions wait. An
    # uncertainty counts only when this run's ensemble size measured it.
    candidates = [
        Candidate(sid, pid, score, correct, uncertainty if measured_by == heads else None)
        for sid, pid, score, correct, uncertainty, measured_by in scored
        if not math.isnan(score)
    ]
    if not candidates:
        raise StepFailed("the pool has no scored, unlabeled, unqueued solution to select")
    if params["rule"] == "uncertainty" and all(c.uncertainty is None for c in candidates):
        raise StepFailed("no pool solution has an uncertainty: the score step measures it")
    options: dict[str, Any] = {}
    if params["rule"] == "convincing_wrong":
        options = {
            "convincing_wrong_fraction": float(params["convincing_wrong_fraction"]),
            "scope": params["scope"],
            "per_problem_k": params["per_problem_k"],
        }
    elif params["rule"] == "mix":
        options = {"shares": check_rule("mix", params["shares"])}  # in MIX_RULES order
    picks = select_by_rule(
        params["rule"],
        candidates,
        k=int(params["k"]),
        per_problem_cap=params["per_problem_cap"],
        seed=int(params["seed"]),
        **options,
    )
    correct_of = {c.solution_id: c.correct for c in candidates}
    reasons = [
        SelectionReason(
            generation_run=run,
            solution_id=pick.solution_id,
            model_version_id=run.model_version_id,
            score=pick.score,
            rank=pick.rank,
            rule=pick.rule,
            correct=correct_of[pick.solution_id],
        )
        for pick in picks
    ]
    with transaction.atomic():
        run.selections.all().delete()
        SelectionReason.objects.bulk_create(reasons)
    return reasons


def enqueue_selection(run: GenerationRun) -> Batch:
    """Put the run's selected solutions into a new active batch, generation = run.generation.

    One transaction; a second call finds the batch and moves nothing twice. Solutions queued or
    labeled since selection are skipped (never taken from another batch)."""
    params = {**DEFAULT_PARAMS, **run.params}
    with transaction.atomic():
        batch, _ = Batch.objects.get_or_create(
            name=f"Generation {run.generation}",
            defaults={
                "generation": run.generation,
                "origin": Batch.Origin.ACTIVE_LEARNING,
                "overlap": int(params["overlap"]),
                "priority": int(params["priority"]),
                "is_active": True,
                "created_by_id": run.created_by_id,
            },
        )
        if batch.origin != Batch.Origin.ACTIVE_LEARNING or batch.generation != run.generation:
            raise StepFailed(f"a batch named {batch.name!r} exists and is not this generation's")
        if run.created_by is not None and not may_add_to_batch(run.created_by, batch):
            raise StepFailed(f"{run.created_by} may not add to batch {batch.name!r}")
        selected = run.selections.values("solution_id")
        selectable_pool().filter(pk__in=selected).update(batch=batch, generation=run.generation)
        GenerationRun.objects.filter(pk=run.pk).update(batch=batch)
        run.batch = batch
    return batch


# --- the generation pipeline -----------------------------------------------------------------


def check_rule_name(rule: str) -> None:
    if rule not in RULES:
        raise BadParameters(f"unknown selection rule {rule!r}; choose one of {', '.join(RULES)}")


def check_rule(rule: str, shares: Any = None) -> dict[str, float] | None:
    """The rule's shares as a run stores them (None unless "mix"), in the order of MIX_RULES
    (convincing_wrong, uncertainty, uniform: the first present fills what the shares leave);
    BadParameters saying what is wrong with an unknown rule or bad shares. Forms and the API
    call it for their 400s."""
    check_rule_name(rule)
    if rule != "mix":
        if shares:
            raise BadParameters(f"shares are for the rule 'mix', not {rule!r}")
        return None
    if not isinstance(shares, dict) or not shares:
        raise BadParameters(
            "the rule 'mix' needs shares, e.g. {'convincing_wrong': 0.5, 'uncertainty': 0.5}"
        )
    try:
        clean = {str(name): float(share) for name, share in shares.items()}
        check_shares(clean)
    except (TypeError, ValueError) as exc:
        raise BadParameters(str(exc)) from None
    # One order whatever the request's: it decides which rule fills the rest, and PostgreSQL's
    # jsonb does not keep the order of keys.
    return {rule: clean[rule] for rule in MIX_RULES if rule in clean}


def needs_uncertainty(params: dict[str, Any]) -> bool:
    """Whether the run's rule ranks by the ensemble's disagreement (so scoring measures it)."""
    if params.get("rule") == "uncertainty":
        return True
    return params.get("rule") == "mix" and bool((params.get("shares") or {}).get("uncertainty"))


def ensemble_heads(params: dict[str, Any]) -> int:
    return int(params.get("ensemble_heads") or settings.STEPWISE_ENSEMBLE_HEADS)


def check_params(params: dict[str, Any]) -> dict[str, Any]:
    """A run's parameters with the defaults filled in, or BadParameters naming what is wrong."""
    params = {**DEFAULT_PARAMS, **params}
    unknown = set(params) - set(DEFAULT_PARAMS)
    if unknown:
        raise BadParameters(f"unknown parameters: {sorted(unknown)}")
    if int(params["k"]) < 1:
        raise BadParameters("k must be at least 1")
    if not 0 <= float(params["convincing_wrong_fraction"]) <= 1:
        raise BadParameters("convincing_wrong_fraction must be within [0, 1]")
    if params["scope"] not in ("pool", "per_problem"):
        raise BadParameters("scope must be 'pool' or 'per_problem'")
    if params["scope"] == "per_problem" and not params["per_problem_k"]:
        raise BadParameters("scope 'per_problem' needs per_problem_k")
    params["shares"] = check_rule(params["rule"], params["shares"])
    if params["scope"] == "per_problem" and params["rule"] != "convincing_wrong":
        raise BadParameters("scope 'per_problem' applies to the rule 'convincing_wrong' only")
    if params["ensemble_heads"] is not None and not 2 <= int(params["ensemble_heads"]) <= 32:
        raise BadParameters("ensemble_heads must be within [2, 32]")
    if needs_uncertainty(params):
        _check_ensemble_possible(params)
    return params


def _check_ensemble_possible(params: dict[str, Any]) -> None:
    """The uncertainty rule fits heads on a head-mode model's features; refuse it up front for
    the model the run would score with when that is a lora/full or an imported model."""
    heads = ensemble_heads(params)
    if params["retrain"]:
        config = params["train_config"] or getattr(settings, "STEPWISE_GENERATION_TRAIN_CONFIG", {})
        mode = config.get("mode", TrainConfig.mode)
        where = "the retrain step's training config"
    else:
        active = ModelVersion.active()
        if active is None:
            return  # the score step says there is no model
        if active.kind != ModelVersion.Kind.TRAINED or active.run_id is None:
            raise BadParameters(
                f"the uncertainty rule needs a model trained here in head mode; the active "
                f"model {active} was imported"
            )
        mode = TrainingRun.objects.get(pk=active.run_id).config.get("mode", "head")
        where = f"the active model {active}"
    if mode != "head":
        raise BadParameters(
            f"the uncertainty rule fits {heads} heads on a head-mode model's frozen features; "
            f"{where} is {mode} mode, where it would cost {heads} trainings of the backbone "
            "(not offered): retrain in head mode, or choose convincing_wrong or uniform"
        )


def start_generation(
    *,
    params: dict[str, Any] | None = None,
    created_by=None,
    trigger: str = GenerationRun.Trigger.PAGE,
    send: bool = True,
) -> GenerationRun:
    """Create the next generation's run and queue its first step (after commit).

    Refused while another run is queued, running or failed (retry or cancel it first); the
    unique generation number settles a race between two starts. send=False queues nothing
    (the caller runs the steps itself: `run_generation_inline`)."""
    params = check_params(params or {})
    first = GenerationRun.Step.RETRAIN if params["retrain"] else GenerationRun.Step.SCORE
    try:
        with transaction.atomic():
            open_run = GenerationRun.objects.filter(status__in=GenerationRun.OPEN).first()
            if open_run is not None:
                if open_run.error == UNSENT:
                    raise GenerationError(
                        f"{open_run} is queued but the task queue (Redis) could not be "
                        "reached: it is sent again when it is back (or retry it then, or "
                        "cancel it)"
                    )
                raise GenerationError(
                    f"{open_run} is {open_run.status}; let it finish, or retry or cancel it"
                )
            run = GenerationRun.objects.create(
                generation=next_generation_number(),
                params=params,
                trigger=trigger,
                created_by=created_by,
                current_step=first,
                steps={GenerationRun.Step.RETRAIN: {"status": "skipped"}}
                if not params["retrain"]
                else {},
            )
            if send:
                _send(run.pk, first)
    except IntegrityError:
        raise GenerationError("another generation was started at the same moment") from None
    return run


def retry_generation(run: GenerationRun, *, send: bool = True) -> GenerationRun:
    """Re-queue a failed run at the step that failed, or send again now a queued one whose step
    will not come by itself (what the sweeper `generations_resend` would do: the broker was
    unreachable, or the message was sent long ago and never taken)."""
    if send and generations_resend_one(run):
        run.refresh_from_db()
        return run
    with transaction.atomic():
        updated = GenerationRun.objects.filter(
            pk=run.pk, status=GenerationRun.Status.FAILED
        ).update(status=GenerationRun.Status.QUEUED, error="", finished_at=None)
        if not updated:
            run.refresh_from_db()
            if run.status == GenerationRun.Status.QUEUED:
                raise GenerationError(
                    f"{run} is queued and its step was sent to the task queue; it starts when "
                    "a worker is free (it is sent again if none takes it)"
                )
            raise GenerationError(f"{run} is not failed; only a failed run can be retried")
        step = GenerationRun.objects.values_list("current_step", flat=True).get(pk=run.pk)
        if send:
            _send(run.pk, step)
    run.refresh_from_db()
    return run


def generations_resend_one(run: GenerationRun) -> bool:
    """Send the run's step again now if it is queued and waiting too long (see
    `generations_resend`); False when it is not."""
    if settings.STEPWISE_TRAIN_IN_THREAD:
        return False
    due = waiting_too_long(GenerationRun.Status.QUEUED) & Q(pk=run.pk)
    return bool(
        resend_rows(GenerationRun, due, _current_step_task, waiting=GenerationRun.Status.QUEUED)
    )


def cancel_generation(run: GenerationRun) -> GenerationRun:
    """Give up on a queued or failed run (a running step finishes first). Nothing is undone."""
    updated = GenerationRun.objects.filter(
        pk=run.pk, status__in=(GenerationRun.Status.QUEUED, GenerationRun.Status.FAILED)
    ).update(status=GenerationRun.Status.CANCELLED, finished_at=timezone.now())
    if not updated:
        raise GenerationError(
            f"{run} is {run.status}; only a queued or failed run can be cancelled"
        )
    run.refresh_from_db()
    return run


def _send(run_id: int, step: str) -> None:
    """Queue `step` of the run once the transaction commits: retrain and score on the gpu queue.
    In the embedded default (no worker; STEPWISE_TRAIN_IN_THREAD) a thread of this process runs
    the steps instead, so the page that started the run answers at once and shows progress.
    A broker that cannot be reached leaves the run queued and marked UNSENT; the sweeper
    (`generations_resend`) sends it when the broker is back."""
    if settings.STEPWISE_TRAIN_IN_THREAD:
        transaction.on_commit(lambda: _run_in_thread(run_id, step))
        return
    send_row(
        GenerationRun,
        run_id,
        _step_task(step),
        waiting=GenerationRun.Status.QUEUED,
        args=(run_id, step),
    )


def _step_task(step: str) -> str:
    task = "gpu_generation_step" if step in ("retrain", "score") else "generation_step"
    return f"modeling.tasks.{task}"


def _current_step_task(run_id: int) -> tuple[str, tuple[Any, ...]]:
    step = GenerationRun.objects.values_list("current_step", flat=True).get(pk=run_id)
    return _step_task(step), (run_id, step)


def generations_resend(now: datetime | None = None) -> int:
    """Send again the queued generations whose step will not come by itself (UNSENT: the broker
    was unreachable; or sent more than STEPWISE_RESEND_AFTER_SECONDS ago: the message was lost
    or waits behind others); returns how many. A duplicate is harmless: `claim_step` takes a
    step with a conditional update."""
    if settings.STEPWISE_TRAIN_IN_THREAD:
        return 0  # no broker: the steps run in threads of the process that queued them
    due = waiting_too_long(GenerationRun.Status.QUEUED, now)
    return resend_rows(
        GenerationRun, due, _current_step_task, waiting=GenerationRun.Status.QUEUED, now=now
    )


def _run_in_thread(run_id: int, step: str) -> threading.Thread:
    def work() -> None:
        following: str | None = step
        while following is not None:
            following = run_step(run_id, following)

    return run_in_thread(f"generation-run-{run_id}", work)


def _set_step(run_id: int, step: str, **state: Any) -> None:
    """Merge `state` into steps[step] (read-modify-write under the row lock)."""
    with transaction.atomic():
        run = GenerationRun.objects.select_for_update().get(pk=run_id)
        run.steps = {**run.steps, step: {**run.steps.get(step, {}), **state}}
        run.save(update_fields=["steps"])


def _progress(run_id: int, step: str) -> Callable[[int, int], None]:
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or done >= total:  # at most one write a second
            last[0] = now
            _set_step(run_id, step, done=done, total=total, heartbeat=timezone.now().isoformat())

    return report


def fail_stale_generations(now=None) -> int:
    """Mark failed (retryable) the RUNNING generations whose worker is gone.

    The retrain step is alive while its training run is (that run has its own heartbeat and
    `runs.fail_stale_runs`); the other steps while their last progress or start is newer
    than STEPWISE_RUN_STALE_SECONDS.
    """
    now = now or timezone.now()
    stale_before = now - timedelta(seconds=settings.STEPWISE_RUN_STALE_SECONDS)
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
            state = run.steps.get(step, {})
            seen = state.get("heartbeat") or state.get("started_at")
            dead = seen is None or datetime.fromisoformat(seen) < stale_before
            why = f"no progress from the worker since {seen or 'the step was claimed'}"
        if dead and GenerationRun.objects.filter(
            pk=run.pk, status=GenerationRun.Status.RUNNING
        ).update(
            status=GenerationRun.Status.FAILED, error=f"{step}: {why}"[:10_000], finished_at=now
        ):
            _set_step(run.pk, step, status="failed", error=why[:2000], finished_at=now.isoformat())
            failed += 1
    return failed


def claim_step(run_id: int, step: str) -> GenerationRun | None:
    """QUEUED at `step` -> RUNNING, or None when someone else has it or it is done."""
    now = timezone.now()
    with transaction.atomic():
        claimed = GenerationRun.objects.filter(
            pk=run_id, status=GenerationRun.Status.QUEUED, current_step=step
        ).update(status=GenerationRun.Status.RUNNING, attempts=F("attempts") + 1)
        if not claimed:
            return None
        GenerationRun.objects.filter(pk=run_id, started_at__isnull=True).update(started_at=now)
    _set_step(
        run_id, step, status="running", started_at=now.isoformat(), finished_at=None, error=""
    )
    return GenerationRun.objects.get(pk=run_id)


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
        message = (
            f"{exc.__class__.__name__}: {exc}" if not isinstance(exc, StepFailed) else str(exc)
        )
        _set_step(
            run_id,
            step,
            status="failed",
            error=message[:2000],
            finished_at=timezone.now().isoformat(),
            seconds=round(time.monotonic() - started, 3),
        )
        GenerationRun.objects.filter(pk=run_id).update(
            status=GenerationRun.Status.FAILED,
            error=f"{step}: {message}"[:10_000],
            finished_at=timezone.now(),
        )
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
        GenerationRun.objects.filter(pk=run_id, status=GenerationRun.Status.RUNNING).update(
            status=GenerationRun.Status.SUCCEEDED,
            current_step=following,
            finished_at=timezone.now(),
        )
        return None
    GenerationRun.objects.filter(pk=run_id, status=GenerationRun.Status.RUNNING).update(
        status=GenerationRun.Status.QUEUED, current_step=following
    )
    return following


def advance(run_id: int, step: str) -> None:
    """Run `step`, then queue the next one (what the tasks call)."""
    following = run_step(run_id, step)
    if following is not None:
        _send(run_id, following)


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
    params = {**DEFAULT_PARAMS, **run.params}
    train_config = params["train_config"] or getattr(
        settings, "STEPWISE_GENERATION_TRAIN_CONFIG", {}
    )
    training = run.training_run
    if training is None:
        training = runs.create_training_run(
            config=dict(train_config),
            created_by=run.created_by,
            name=f"generation {run.generation}",
        )
        GenerationRun.objects.filter(pk=run.pk).update(training_run=training)
    elif training.status == TrainingRun.Status.SUCCEEDED:
        return {"training_run": training.pk, "reused": True}
    elif training.status in (TrainingRun.Status.FAILED, TrainingRun.Status.CANCELLED):
        # A retry trains afresh: a failed run is a record, not something to resume.
        training = runs.create_training_run(
            config=dict(training.config or train_config),
            created_by=run.created_by,
            name=f"generation {run.generation} (retry)",
        )
        GenerationRun.objects.filter(pk=run.pk).update(training_run=training)
    version = runs.execute_training_run(training.pk)
    training.refresh_from_db()
    if training.status != TrainingRun.Status.SUCCEEDED:
        raise StepFailed(
            f"training run {training.pk} {training.status}: {training.error or 'no detail'}"
        )
    active = ModelVersion.active()
    gate = (training.metrics or {}).get("gate") or {}
    return {
        "training_run": training.pk,
        "model_version": getattr(version, "pk", None),
        "passed_evaluation": bool(version and version.passed_evaluation),
        "active_model": active.pk if active else None,
        # The gate is the run's (runs.evaluation_gate): on the evaluation set, or not at all.
        "evaluation_set": gate.get("evaluation_set"),
        "gate": gate.get("reason") or ("passed" if gate.get("passed") else ""),
    }


def step_score(run: GenerationRun) -> dict[str, Any]:
    """Score the selectable pool with the active model (pinned on the run, so a retry uses it)."""
    version = run.model_version or ModelVersion.active()
    if version is None:
        raise StepFailed("no active model: train one that passes its evaluation first")
    if run.model_version_id is None:
        GenerationRun.objects.filter(pk=run.pk).update(model_version=version)
    scored = SolutionScore.objects.filter(model_version=version, solution_id=OuterRef("pk"))
    todo = selectable_pool().exclude(Exists(scored)).order_by("pk")
    total = todo.count()
    _set_step(run.pk, "score", done=0, total=total)
    written = 0
    if total:
        written = runs.score_solutions_with(
            model_version=version, solutions=todo, progress=_progress(run.pk, "score")
        )
    _set_step(run.pk, "score", done=total, total=total)
    detail: dict[str, Any] = {"model_version": version.pk, "to_score": total, "scored": written}
    params = {**DEFAULT_PARAMS, **run.params}
    if needs_uncertainty(params):
        detail.update(_measure_uncertainty(run, version, ensemble_heads(params), params))
    return detail


def _measure_uncertainty(
    run: GenerationRun, version: ModelVersion, heads: int, params: dict[str, Any]
) -> dict[str, Any]:
    """The ensemble's disagreement on the selectable pool, where this ensemble size has not
    measured it yet (a retry measures only what is missing)."""
    measured = SolutionScore.objects.filter(
        model_version=version, solution_id=OuterRef("pk"), ensemble_heads=heads
    )
    todo = selectable_pool().exclude(Exists(measured))
    if not todo.exists():
        return {"ensemble_heads": heads, "uncertainties": 0}
    try:
        count = runs.measure_uncertainty_with(
            model_version=version,
            solutions=todo,
            heads=heads,
            seed=int(params["seed"]),
            progress=_progress(run.pk, "score"),
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


# --- the automatic trigger -------------------------------------------------------------------


def generation_progress(batch: Batch) -> float:
    """Share of the batch's solutions that have all the labelings they need."""
    solutions = batch.solutions.all()
    total = solutions.count()
    if not total:
        return 0.0
    return solutions.filter(completed_count__gte=F("batch__overlap")).count() / total


def maybe_start_next_generation(*, fraction: float | None = None) -> GenerationRun | None:
    """Start the next generation when the newest active-learning batch is labeled to `fraction`
    (default settings.STEPWISE_AUTO_GENERATION_FRACTION; None or 0 turns it off). Checked by
    the periodic task `check_generation_progress`; a no-op while a run is open."""
    if fraction is None:
        fraction = getattr(settings, "STEPWISE_AUTO_GENERATION_FRACTION", None)
    if not fraction:
        return None
    if GenerationRun.objects.filter(status__in=GenerationRun.OPEN).exists():
        return None
    latest = (
        GenerationRun.objects.filter(status=GenerationRun.Status.SUCCEEDED, batch__isnull=False)
        .select_related("batch")
        .first()
    )
    if latest is None or latest.batch is None or generation_progress(latest.batch) < fraction:
        return None
    if GenerationRun.objects.filter(generation__gt=latest.generation).exists():
        return None  # this batch already led to a later run (cancelled or done)
    try:
        return start_generation(params=latest.params, trigger=GenerationRun.Trigger.AUTO)
    except GenerationError:
        return None


def recent_runs() -> QuerySet[GenerationRun]:
    return GenerationRun.objects.select_related(
        "batch", "model_version", "training_run", "created_by"
    )


def selections_of(run: GenerationRun) -> QuerySet[SelectionReason]:
    return run.selections.select_related("solution__problem", "solution__batch", "model_version")
