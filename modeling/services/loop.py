"""The active-learning loop's generations on the web side: parameters, start, retry, cancel,
sending each step to a worker and sending it again, the automatic trigger, and reads.

A generation is a GenerationRun whose steps (retrain -> score -> select -> enqueue) Celery runs
one by one (`modeling.services.pipeline`, on a worker: it loads torch). A failed step leaves the
run FAILED at that step: the previous generation's batch and the active model are untouched,
and `retry_generation` re-queues the failed step. The pool it selects from and the selection
into a batch are `modeling.services.pool`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Max, QuerySet
from django.utils import timezone

from labeling.models import Batch, Project
from labeling.models.projects import default_project_id, in_project
from modeling.models import GenerationRun, ModelVersion, SelectionReason, TrainingRun
from modeling.training.config import TrainConfig
from modeling.training.selection import MIX_RULES, RULES, check_shares
from stepwise.celery import UNSENT, model_tasks_in_thread, resend_rows, start_on_commit

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


def next_generation_number(project_id: int | None = None) -> int:
    """The project's next generation (numbered per project)."""
    batches = Batch.objects.filter(**in_project(project_id)).aggregate(n=Max("generation"))["n"]
    generations = GenerationRun.objects.filter(**in_project(project_id)).aggregate(
        n=Max("generation")
    )["n"]
    batches, generations = batches or 0, generations or 0
    return max(batches, generations) + 1


# --- parameters ----------------------------------------------------------------------------


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


def with_defaults(params: dict[str, Any]) -> dict[str, Any]:
    """A generation's parameters with DEFAULT_PARAMS where they leave one out: a request's, or a
    run's stored before the parameter existed. A new dict: the caller's and the defaults stay."""
    return {**DEFAULT_PARAMS, **params}


def check_params(params: dict[str, Any], *, project_id: int | None = None) -> dict[str, Any]:
    """A run's parameters with the defaults filled in, or BadParameters naming what is wrong
    (the uncertainty rule's model: the project's active one)."""
    params = with_defaults(params)
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
        _check_ensemble_possible(params, project_id)
    return params


def _check_ensemble_possible(params: dict[str, Any], project_id: int | None) -> None:
    """The uncertainty rule fits heads on a head-mode model's features; refuse it up front for
    the model the run would score with when that is a lora/full or an imported model."""
    heads = ensemble_heads(params)
    if params["retrain"]:
        config = params["train_config"] or getattr(settings, "STEPWISE_GENERATION_TRAIN_CONFIG", {})
        mode = config.get("mode", TrainConfig.mode)
        where = "the retrain step's training config"
    else:
        active = ModelVersion.active(project_id)
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
    project_id: int | None = None,
) -> GenerationRun:
    """Create the next generation's run and queue its first step (after commit).

    Refused while another run is queued, running or failed (retry or cancel it first); the
    unique generation number settles a race between two starts. send=False queues nothing
    (the caller runs the steps itself: `run_generation_inline`)."""
    if project_id is None:
        project_id = default_project_id()
    params = check_params(params or {}, project_id=project_id)
    first = GenerationRun.Step.RETRAIN if params["retrain"] else GenerationRun.Step.SCORE
    try:
        with transaction.atomic():
            open_run = GenerationRun.objects.filter(
                status__in=GenerationRun.OPEN, project_id=project_id
            ).first()
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
                generation=next_generation_number(project_id),
                project_id=project_id,
                params=params,
                trigger=trigger,
                created_by=created_by,
                current_step=first,
                steps={GenerationRun.Step.RETRAIN: {"status": "skipped"}}
                if not params["retrain"]
                else {},
            )
            if send:
                send_step(run.pk, first)
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
        ).requeue()
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
            send_step(run.pk, step)
    run.refresh_from_db()
    return run


def generations_resend_one(run: GenerationRun) -> bool:
    """Send the run's step again now if it is queued and waiting too long (see
    `generations_resend`); False when it is not."""
    if model_tasks_in_thread():
        return False
    due = GenerationRun.objects.waiting_too_long().filter(pk=run.pk)
    return bool(resend_rows(due, _current_step_task))


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


def send_step(run_id: int, step: str) -> None:
    """Queue `step` of the run once the transaction commits: retrain and score on the gpu queue.
    In the embedded default (no worker; STEPWISE_MODEL_TASKS_IN_THREAD) a thread of this
    process runs each step instead, so the page that started the run answers at once and shows
    progress. A broker that cannot be reached leaves the run queued and marked UNSENT; the
    sweeper (`generations_resend`) sends it when the broker is back."""
    start_on_commit(_step_task(step), run_id, step, row=GenerationRun)


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
    if model_tasks_in_thread():
        return 0  # no broker: the steps run in threads of the process that queued them
    return resend_rows(GenerationRun.objects.waiting_too_long(now), _current_step_task, now=now)


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
    started = None
    for project_id in Project.objects.order_by("pk").values_list("pk", flat=True):
        started = _maybe_start_in(project_id, fraction) or started
    return started


def _maybe_start_in(project_id: int, fraction: float) -> GenerationRun | None:
    """The automatic trigger in one project: each project's loop runs on its own."""
    runs = GenerationRun.objects.filter(project_id=project_id)
    if runs.filter(status__in=GenerationRun.OPEN).exists():
        return None
    latest = (
        runs.filter(status=GenerationRun.Status.SUCCEEDED, batch__isnull=False)
        .select_related("batch")
        .first()
    )
    if latest is None or latest.batch is None or generation_progress(latest.batch) < fraction:
        return None
    if runs.filter(generation__gt=latest.generation).exists():
        return None  # this batch already led to a later run (cancelled or done)
    try:
        return start_generation(
            params=latest.params, trigger=GenerationRun.Trigger.AUTO, project_id=project_id
        )
    except GenerationError:
        return None


def recent_runs(project_id: int | None = None) -> QuerySet[GenerationRun]:
    """The project's generation runs (the Default project's where None is named)."""
    return GenerationRun.objects.filter(**in_project(project_id)).select_related(
        "batch", "model_version", "training_run", "created_by"
    )


def selections_of(run: GenerationRun) -> QuerySet[SelectionReason]:
    return run.selections.select_related("solution__problem", "solution__batch", "model_version")
