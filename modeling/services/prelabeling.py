"""Pre-label runs: a judge (modeling/judges.py) over a batch's solutions, written as
labeling.PreLabel rows (issue 46).

`start_prelabel_run` (the page, the API, `manage.py prelabel`) checks the options, fixes the
solutions and the estimate, and sends the run once the transaction commits: prm to the `gpu`
queue, llm and mc to the `generate` queue (a thread of the web process in the embedded
default), so a judge never blocks a labeler's request. `execute_prelabel_run` (the task)
claims the row, builds the judge and writes one PreLabel per solution in its own transaction,
moving `done` with it: a killed worker loses at most one solution's work, and a resumed or
redelivered run skips the solutions this run has judged. A judge that cannot say (a timeout,
garbage, a step that does not exist) writes a row with no label and counts it; a generator that
refuses fails the run with the reason, resumable. `prelabel_solutions_now` does all of it in
this process (setup_demo, tests).

prm's thresholds are chosen when the run starts on the worker, on the current evaluation set's
human labels (`judges.choose_thresholds`: Cohen's kappa over a small grid), unless the options
give them; what was used is stored in the run's options.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from labeling.models import Batch, PreLabel, Project, Solution
from labeling.models.projects import default_project_id, in_project
from labeling.services import machine_labels
from modeling import judges
from modeling.models import EvaluationSet, ModelVersion, PreLabelRun
from stepwise.celery import model_tasks_in_thread, resend_rows, start_on_commit

logger = logging.getLogger(__name__)

TASKS = {
    "prm": "modeling.tasks.gpu_prelabel_run",
    "llm": "modeling.tasks.prelabel_run",
    "mc": "modeling.tasks.prelabel_run",
}
# The bounds of every option a request may carry: (smallest, largest).
LIMITS = {
    "k": (1, 64),
    "max_steps": (1, 200),
    "max_solutions": (1, 100_000),
    "max_tokens": (1, 4096),
    "model_version": (1, 2**31 - 1),
}
OPTIONS = {
    "prm": {"model_version", "thresholds", "max_solutions"},
    "llm": {"template", "max_tokens", "max_solutions"},
    "mc": {"k", "max_steps", "max_tokens", "max_solutions"},
}
MC_DEFAULTS = {"k": 8, "max_steps": 20, "max_tokens": 256}
LLM_MAX_TOKENS = 512
PRM_CHUNK = 16  # solutions scored at once; each is still written in its own transaction


class PrelabelError(Exception):
    """A request a pre-label run refuses (bad options, nothing to judge); one line saying why."""


# --- the web side: check, start, follow, cancel, resume --------------------------------------


def check_options(
    judge: str, options: dict[str, Any], *, project_id: int | None = None
) -> dict[str, Any]:
    """The options as the run stores them, or PrelabelError naming the first bad one. Integers
    within LIMITS (booleans refused), thresholds finite in (0, 1], a template with both
    placeholders, the model version one of the project's (default its active one; the Default
    project where None is named)."""
    if judge not in judges.KINDS:
        raise PrelabelError(f"The judge must be one of {', '.join(judges.KINDS)}, not {judge!r}.")
    if not isinstance(options, dict):
        raise PrelabelError("The options must be an object.")
    unknown = sorted(set(options) - OPTIONS[judge])
    if unknown:
        raise PrelabelError(f"The {judge} judge takes no option {', '.join(unknown)}.")
    clean: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name in LIMITS:
            low, high = LIMITS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise PrelabelError(f"{name} must be a whole number from {low} to {high}.")
            clean[name] = value
        elif name == "thresholds":
            clean[name] = _checked_thresholds(value)
        elif name == "template":
            try:
                clean[name] = judges.check_template(value)
            except judges.TemplateError as exc:
                raise PrelabelError(str(exc)) from None
    if judge == "mc":
        clean = {**MC_DEFAULTS, **clean}
    if judge == "llm":
        clean.setdefault("max_tokens", LLM_MAX_TOKENS)
    if judge == "prm":
        clean["model_version"] = _model_version(clean.get("model_version"), project_id).pk
    return clean


def _checked_thresholds(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or set(value) != {"neg", "pos"}:
        raise PrelabelError('thresholds must be {"neg": x, "pos": y}.')
    for number in value.values():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise PrelabelError("A threshold must be a number in (0, 1].")
        if not (math.isfinite(number) and 0 < number <= 1):
            raise PrelabelError("A threshold must be a number in (0, 1].")
    return {"neg": float(value["neg"]), "pos": float(value["pos"])}


def _model_version(version_id: int | None, project_id: int | None) -> ModelVersion:
    if version_id is None:
        active = ModelVersion.active(project_id)
        if active is None:
            raise PrelabelError("No model version is active: name one for the prm judge.")
        return active
    found = ModelVersion.objects.filter(pk=version_id, **in_project(project_id)).first()
    if found is None:
        raise PrelabelError(f"There is no model version {version_id}.")
    return found


def batch_solutions(
    batch: Batch | None, max_solutions: int | None = None, project_id: int | None = None
) -> list[int]:
    """The solutions a run judges, in id order: the batch's, gold and screening items left out
    (they never show a suggestion); with no batch, the project's candidate pool's selectable
    solutions (what the routing rule ranks; the Default project's where None is named)."""
    if batch is None:
        from modeling.services.pool import selectable_pool

        chosen = selectable_pool(project_id)
    else:
        chosen = Solution.objects.filter(batch=batch)
    ids = (
        chosen.filter(is_quality_control=False, is_screening=False)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return list(ids[:max_solutions] if max_solutions else ids)


def run_estimate(judge: str, solution_ids: list[int], options: dict[str, Any]) -> dict[str, int]:
    """What the run will cost, shown before it starts: its solutions and steps; mc's
    completions and tokens at most (`judges.estimate_mc`)."""
    step_counts = [
        len(steps)
        for steps in Solution.objects.filter(pk__in=solution_ids).values_list("steps", flat=True)
    ]
    estimate = {"solutions": len(solution_ids), "steps": sum(step_counts)}
    if judge == "mc":
        items = [judges.JudgeItem("", [""] * n) for n in step_counts]
        estimate.update(
            judges.estimate_mc(
                items, options["k"], options["max_steps"], max_tokens=options["max_tokens"]
            )
        )
    return estimate


def start_prelabel_run(
    *,
    batch: Batch | None,
    judge: str,
    created_by: User | AnonymousUser | None,
    options: dict,
    send: bool = True,
    project: Project | None = None,
) -> PreLabelRun:
    """A pre-label run of `judge` over the batch's solutions (batch None: the project's
    candidate pool's selectable ones, for the routing rule), in the batch's project (or
    `project`'s; the Default one where neither is named), sent to its queue once the
    transaction commits (unless `send` is False: the caller runs it). Raises PrelabelError,
    writing nothing, for bad options, a batch of another project or nothing to judge."""
    if batch is not None:
        if project is not None and batch.project_id != project.pk:
            raise PrelabelError("There is no such batch.")
        project_id = batch.project_id
    else:
        project_id = project.pk if project is not None else default_project_id()
    clean = check_options(judge, options, project_id=project_id)
    solution_ids = batch_solutions(batch, clean.get("max_solutions"), project_id)
    if not solution_ids:
        where = "The candidate pool" if batch is None else f"Batch {batch.name}"
        raise PrelabelError(f"{where} has no solution to judge.")
    user = created_by if created_by is not None and created_by.is_authenticated else None
    with transaction.atomic():
        run = PreLabelRun.objects.create(
            batch=batch,
            project_id=project_id,
            kind=judge,
            options=clean,
            solution_ids=solution_ids,
            total=len(solution_ids),
            estimate=run_estimate(judge, solution_ids, clean),
            created_by=user,
        )
        if send:
            start_on_commit(TASKS[judge], run.pk, row=PreLabelRun)
    return run


def prelabel_solutions_now(
    *, batch: Batch | None, judge: str, options: dict, project: Project | None = None
) -> int:
    """Judge every solution of the batch in this process and write its PreLabel rows (the demo,
    tests); returns how many were written. Raises PrelabelError as start_prelabel_run does."""
    run = start_prelabel_run(
        batch=batch, judge=judge, created_by=None, options=options, send=False, project=project
    )
    done = execute_prelabel_run(run.pk)
    if done is None or done.status != PreLabelRun.Status.SUCCEEDED:
        raise PrelabelError(f"Pre-label run {run.pk} failed: {done.error if done else 'lost'}")
    return PreLabel.objects.filter(run_id=run.pk).count()


def cancel_prelabel_run(run: PreLabelRun) -> PreLabelRun:
    """Stop after the solution being judged; what was written stays."""
    PreLabelRun.objects.filter(pk=run.pk, status__in=PreLabelRun.OPEN).update(
        status=PreLabelRun.Status.CANCELLED, finished_at=timezone.now()
    )
    run.refresh_from_db()
    return run


def resume_prelabel_run(run: PreLabelRun) -> PreLabelRun:
    """Send a failed or cancelled run again, or one whose worker died: it skips the solutions
    it has judged."""
    stopped = PreLabelRun.objects.filter(
        status__in=[PreLabelRun.Status.FAILED, PreLabelRun.Status.CANCELLED]
    )
    with transaction.atomic():
        if not (stopped | PreLabelRun.objects.claimable()).filter(pk=run.pk).requeue():
            raise PrelabelError(f"Pre-label run {run.pk} is {run.status}: nothing to resume.")
        start_on_commit(TASKS[run.kind], run.pk, row=PreLabelRun)
    run.refresh_from_db()
    return run


def prelabel_runs_resend(now=None) -> int:
    """The sweeper: send again the runs whose task will not come by itself (UNSENT, or sent
    long ago and never taken) and the running ones whose worker died (no heartbeat for
    `stale_after`, not sent again since): their claim takes them over and skips what was
    judged. A duplicate is harmless (the claim)."""
    if model_tasks_in_thread():
        return 0
    now = now or timezone.now()
    rows = PreLabelRun.objects.all()
    due = rows.waiting_too_long(now) | rows.stale(now).filter(
        sent_at__lt=PreLabelRun.stale_before(now)
    )
    return resend_rows(due, _task_of, now=now)


def _task_of(run_id: int) -> tuple[str, tuple[Any, ...]]:
    kind = PreLabelRun.objects.values_list("kind", flat=True).get(pk=run_id)
    return TASKS[kind], (run_id,)


# --- the worker ------------------------------------------------------------------------------


def execute_prelabel_run(
    run_id: int, *, progress: Callable[[PreLabelRun], None] | None = None
) -> PreLabelRun | None:
    """Run (or go on with) a pre-label run; None when another worker has it or it is finished.
    A judge that fails (a generator that refuses, a model that cannot be loaded) fails the
    run with the reason; it resumes where it stopped."""
    run = PreLabelRun.claim(run_id)
    if run is None:
        return None
    try:
        judge = build_judge(run)
        PreLabelRun.objects.filter(pk=run.pk).update(judge=judge.name[:200], options=run.options)
        judged = set(PreLabel.objects.filter(run_id=run.pk).values_list("solution_id", flat=True))
        todo = [pk for pk in run.solution_ids if pk not in judged]
        chunk = PRM_CHUNK if run.kind == "prm" else 1
        for start in range(0, len(todo), chunk):
            solutions = Solution.objects.select_related("problem").in_bulk(
                todo[start : start + chunk]
            )
            present = [solutions[pk] for pk in todo[start : start + chunk] if pk in solutions]
            verdicts = judge.judge([_item(solution) for solution in present])
            for solution, verdict in zip(present, verdicts, strict=True):
                if not _write(run, judge.name, solution, verdict):
                    run.refresh_from_db()
                    return run  # cancelled or taken over meanwhile
                if progress is not None:
                    progress(run)
        run.mark_succeeded()
    except Exception as exc:
        logger.exception("pre-label run %s failed", run_id)
        run.mark_failed(exc)
    run.refresh_from_db()
    _accept_machine_labels(run)
    return run


def _accept_machine_labels(run: PreLabelRun) -> None:
    """A finished run on a batch with machine labels on: accept what every judge now agrees on
    (issue 47), so the lead's page is current without a click. A failure here is logged; the
    run's own outcome stands."""
    if run.status != PreLabelRun.Status.SUCCEEDED or run.batch_id is None:
        return
    batch = Batch.objects.filter(pk=run.batch_id, machine_labels=True).first()
    if batch is None:
        return
    try:
        machine_labels.accept_machine_labels(batch=batch)
    except Exception:
        logger.exception("machine labels after pre-label run %s failed", run.pk)


def _item(solution: Solution) -> judges.JudgeItem:
    return judges.JudgeItem(
        solution.problem.text, list(solution.steps), solution.problem.ground_truth_answer
    )


def _write(run: PreLabelRun, name: str, solution: Solution, verdict: judges.Judgement) -> bool:
    """One solution's PreLabel and the run's progress, in one transaction; False (nothing
    written) when the run is no longer this worker's."""
    with transaction.atomic():
        locked = PreLabelRun.objects.select_for_update().filter(pk=run.pk).first()
        if locked is None or locked.status != PreLabelRun.RUNNING:
            return False
        if locked.attempts != run.attempts:
            return False
        _, created = PreLabel.objects.get_or_create(
            solution=solution,
            run_id=run.pk,
            defaults={
                "kind": run.kind,
                "judge": name[:200],
                "labels": verdict.labels,
                "scores": verdict.scores,
                "soft_scores": verdict.soft_scores,
                "first_error": verdict.first_error,
                "raw": verdict.raw[:20_000],
            },
        )
        if created:
            fields = {"done": F("done") + 1}
            if verdict.no_label:
                fields["no_label"] = F("no_label") + 1
            run.heartbeat(**fields)
    return True


def build_judge(run: PreLabelRun) -> judges.Judge:
    """The run's judge; prm's thresholds are chosen now unless given, and kept in run.options."""
    options = run.options
    if run.kind == "prm":
        return _prm_judge(run)
    from modeling.services.sampling import generator_from_settings

    generator = generator_from_settings()
    if run.kind == "llm":
        return judges.LLMJudge(
            generator,
            options.get("template") or judges.CRITIC_TEMPLATE,
            max_tokens=options.get("max_tokens", LLM_MAX_TOKENS),
        )
    from modeling.generator import Sampling

    return judges.MCJudge(
        generator,
        k=options["k"],
        max_steps=options["max_steps"],
        sampling=Sampling(max_tokens=options["max_tokens"], seed=run.pk),
    )


def _prm_judge(run: PreLabelRun) -> judges.Judge:
    # Loads torch: only a gpu worker (or the embedded default's thread) gets here.
    from modeling.services.scoring import load_model

    version = ModelVersion.objects.get(pk=run.options["model_version"])
    model = load_model(version)
    if "thresholds" not in run.options:
        run.options["thresholds"] = thresholds_on_evaluation_set(model, run.project_id)
    chosen = run.options["thresholds"]
    thresholds = judges.Thresholds(chosen["neg"], chosen["pos"])
    return judges.PRMJudge(model, thresholds, name=f"prm: {version.name}")


def thresholds_on_evaluation_set(model: Any, project_id: int | None = None) -> dict[str, Any]:
    """The thresholds that best agree with the project's current evaluation set's human labels
    (kappa; the Default project's where None is named),
    named with the set; the defaults where there is no set or nothing rated in it."""
    from modeling.training.data import examples_from_prm800k, read_jsonl
    from modeling.training.score import predict_labelled

    evaluation_set = EvaluationSet.current(project_id)
    if evaluation_set is None or not evaluation_set.path.exists():
        return {**judges.Thresholds().as_dict(), "kappa": None, "source": "defaults (no set)"}
    examples = examples_from_prm800k(read_jsonl(evaluation_set.path))
    probs, ratings = predict_labelled(model, examples)
    chosen = judges.choose_thresholds(probs, ratings.tolist())
    return {**chosen, "source": f"evaluation set v{evaluation_set.version}"}
