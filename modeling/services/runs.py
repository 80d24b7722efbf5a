"""PRM training runs on the web side: create, send, cancel, resume, sweep, activate.

Nothing here loads torch: pages, the API and commands create and control rows, and a `gpu`
worker trains them (`modeling.services.execution`). A run is created QUEUED with its effective
config and data filters, checked up front; `enqueue` sends it once the transaction commits (to
a thread of this process in the embedded default). A running run is cancelled by a flag its
worker reads at the next step; a failed or cancelled one resumes from its last checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from labeling.models import Batch, Labeling, Project
from labeling.models.projects import default_project_id
from labeling.serializers import ExportRequestSerializer
from labeling.services.exporting import ExportFilters
from modeling import selectors
from modeling.models import ModelVersion, Objective, SamplingRun, TrainingRun
from modeling.training.backbones import NAMED_BACKBONES, check_available, folder_under, in_hf_cache
from modeling.training.config import TrainConfig
from stepwise.celery import model_tasks_in_thread, resend_rows, start_on_commit

TRAIN_TASK = "modeling.tasks.gpu_train_run"


class RunError(Exception):
    """A request about a run that cannot be carried out (wrong state, bad config)."""


MAX_BACKBONE_CHARS = 300  # ModelVersion.backbone's column


# --- creating and controlling runs -------------------------------------------------------------


def allowed_backbone(name: str) -> str:
    """The backbone a request (page, API, command) may name, as the run stores it: a named
    offline backbone, a folder under STEPWISE_MODELS_ROOT (its resolved path; no `..` or
    symlink out of it), or a hub name already in the local Hugging Face cache. Anything else is
    refused with one message, whether or not such a path exists, so a request cannot probe
    which folders the server has."""
    if name in NAMED_BACKBONES:
        return name
    root = Path(settings.STEPWISE_MODELS_ROOT)
    if 0 < len(name) <= MAX_BACKBONE_CHARS and "\x00" not in name:
        folder = folder_under(name, root)
        if folder is not None and len(str(folder)) <= MAX_BACKBONE_CHARS:
            return str(folder)
        if in_hf_cache(name):
            return name
    shown = name if len(name) <= 80 else f"{name[:80]}…"
    raise RunError(
        f"backbone {shown!r} is not a named offline backbone ({', '.join(NAMED_BACKBONES)}), "
        f"a folder under the models root (STEPWISE_MODELS_ROOT), or a model in the local "
        "Hugging Face cache"
    )


MAX_DATA_PATH_CHARS = 200  # of a name quoted back in a message


def data_root_path(path: str, *, what: str, folders: bool = False) -> str:
    """A file (or, with `folders`, a folder) a request names under STEPWISE_DATA_ROOT, as its
    resolved path: a relative name is taken under the root; `..`, a link or an absolute path
    out of it is refused, as is a missing one. Messages quote the name as sent and call the
    root by its setting, never by where it is. The one check of ProcessBench and data files
    the page and the API take."""
    root = Path(settings.STEPWISE_DATA_ROOT).resolve()
    shown = path if len(path) <= MAX_DATA_PATH_CHARS else f"{path[:MAX_DATA_PATH_CHARS]}…"
    try:
        resolved = (root / path).resolve()
        if not resolved.is_relative_to(root):
            raise RunError(
                f"{shown}: {what} are named under the data root (STEPWISE_DATA_ROOT), not "
                "elsewhere on the server"
            )
        found = resolved.is_file() or (folders and resolved.is_dir() and resolved != root)
    except (OSError, ValueError) as exc:  # past the file system's limits (ENAMETOOLONG), NUL
        reason = getattr(exc, "strerror", None) or "not a path"
        raise RunError(f"{shown}: not a usable file name ({reason})") from None
    if not found:
        kind = "file or folder" if folders else "file"
        raise RunError(f"{shown}: no such {kind} under the data root (STEPWISE_DATA_ROOT)")
    return str(resolved)


def create_training_run(
    *,
    config: dict[str, Any],
    created_by=None,
    name: str = "",
    filters: dict[str, Any] | None = None,
    holdout_fraction: float | None = None,
    processbench: Sequence[str] = (),
    activate: bool = True,
    labelings: QuerySet[Labeling] | None = None,
    data_files: Sequence[str] = (),
    use_labelings: bool = True,
    sampling_run: SamplingRun | None = None,
    problems_of: TrainingRun | None = None,
    project: Project | None = None,
) -> TrainingRun:
    """A QUEUED run with its effective config in `project` (the Default one where None is
    named); nothing is trained until a worker executes it. It trains on its project's labels
    and graded solutions only (`run_data`).

    `filters` are the exporter's (`ExportFilters` fields: batches, generations, ...), checked
    as an export request's: the run trains on the completed labelings they select.
    `labelings` narrows it to explicit ids. `data_files` (server paths: the page and the API
    take them under the data root, `data_root_path`) add every solution they hold, in any
    shape `modeling.training.inputs` reads, read when the run freezes its data;
    `use_labelings=False` trains on the files alone. A run with neither is refused.

    An outcome run (config objective "outcome": an ORM) trains on the graded solutions Stepwise
    holds (`run_data.graded_solutions`: the pool with its sampling runs' solutions, and imported
    samples), or on one `sampling_run`'s; labelings, their filters and data files are a PRM's.
    `problems_of` (a process run) keeps only the graded solutions of that run's problems.
    """
    project_id = project.pk if project is not None else default_project_id()
    for other in (sampling_run, problems_of):
        if other is not None and other.project_id != project_id:
            raise RunError(f"there is no {other} in this project")
    try:
        effective = TrainConfig.from_dict(dict(config)).to_dict()
    except (TypeError, ValueError) as exc:
        raise RunError(f"invalid training config: {exc}") from exc
    outcome = effective["objective"] == Objective.OUTCOME
    if outcome:
        if filters or labelings is not None or data_files:
            raise RunError(
                "an outcome run trains on the graded solutions Stepwise holds (all, or one "
                "sampling run's): labelings, data filters and data files are for process runs"
            )
        use_labelings = False
    elif sampling_run is not None or problems_of is not None:
        raise RunError("a process run trains on labelings: a sampling run is for outcome runs")
    if not use_labelings and not outcome:
        if not data_files:
            raise RunError("a run trains on labelings, data files or both: it was given neither")
        if filters or labelings is not None:
            raise RunError("data filters select labelings: this run trains on data files only")
    try:
        check_available(effective["backbone"])
    except FileNotFoundError as exc:
        raise RunError(f"invalid training config: {exc}") from exc
    filters = _stored(check_run_filters(dict(filters or {})))
    if labelings is not None:
        filters["labeling_ids"] = sorted(labelings.values_list("pk", flat=True))
    for path in processbench:
        try:
            found = Path(path).is_file()
        except OSError as exc:  # a name past the file system's limits (ENAMETOOLONG)
            raise RunError(f"ProcessBench file name not usable: {exc.strerror}") from None
        if not found:
            raise RunError(f"ProcessBench file not found: {path}")
    for path in data_files:
        try:
            found = Path(path).exists()
        except OSError as exc:
            raise RunError(f"data file name not usable: {exc.strerror}") from None
        if not found:
            raise RunError(f"data file not found: {path}")
    if holdout_fraction is None:
        holdout_fraction = settings.STEPWISE_PRM_HOLDOUT_FRACTION
    if not 0 <= holdout_fraction < 1:
        raise RunError("holdout_fraction must be in [0, 1)")
    description = {
        "filters": filters,
        # Whether the run trains on the judges' machine labelings too (issue 47; default no).
        "machine_labels": bool(filters.get("machine_labels", False)),
        "holdout_fraction": holdout_fraction,
        "processbench": list(processbench),
        "activate": activate,
    }
    if outcome:
        description["use_labelings"] = False
        graded: dict[str, Any] = {"sampling_run": sampling_run.pk if sampling_run else None}
        if problems_of is not None:
            graded["problems_of_run"] = problems_of.pk
        description["graded"] = graded
    elif data_files or not use_labelings:  # a labelings-only run's description stays as it was
        description["data_files"] = list(data_files)
        description["use_labelings"] = use_labelings
    return TrainingRun.objects.create(
        name=name,
        config=effective,
        dataset_description=description,
        created_by=created_by,
        project_id=project_id,
    )


def allowed_config(config: Any) -> dict[str, Any]:
    """A TrainConfig override a request sent (API), checked up front: known fields, values in
    range, and a backbone the request may name (`allowed_backbone`, which it is replaced by)."""
    if not isinstance(config, dict):
        raise RunError("invalid training config: a JSON object of TrainConfig fields")
    config = dict(config)
    if "backbone" in config:
        if not isinstance(config["backbone"], str):
            raise RunError("invalid training config: backbone must be a string")
        config["backbone"] = allowed_backbone(config["backbone"])
    try:
        TrainConfig.from_dict(dict(config))
    except (TypeError, ValueError) as exc:
        raise RunError(f"invalid training config: {exc}") from exc
    return config


# A run's filters are named as ExportFilters' fields (and stored so); an export request, whose
# serializer checks them, names four of them in the singular. The labelers' user ids and a
# snapshot's cutoff are what the check finds, not what a request gives.
REQUEST_NAMES = {
    "batches": "batch",
    "generations": "generation",
    "finished_after": "finished_after",
    "finished_before": "finished_before",
    "labelers": "labeler",
    "finish_reasons": "finish_reason",
    "quality_control": "quality_control",
    "screening": "screening",
    "complete_only": "complete_only",
    "since_snapshot": "since_snapshot",
    "machine_labels": "machine_labels",
}
_RUN_NAMES = {request: name for name, request in REQUEST_NAMES.items()}


def check_run_filters(filters: dict[str, Any]) -> ExportFilters:
    """The run's data filters, checked before a row is written by the one validator of which
    labelings an export holds (`ExportRequestSerializer`): value types, ids within their
    column's range, batches, labelers (usernames or public ids) and a done snapshot that exist.
    A run trains on what an export with the same filters would hold."""
    unknown = sorted(set(filters) - set(REQUEST_NAMES))
    if unknown:
        raise RunError(
            f"invalid data filters: unknown field(s) {', '.join(map(repr, unknown))}; "
            f"the filters are {', '.join(REQUEST_NAMES)}"
        )
    request = ExportRequestSerializer(data={REQUEST_NAMES[k]: v for k, v in filters.items()})
    if not request.is_valid():
        problems = "; ".join(
            f"{_RUN_NAMES.get(name, name)}: {' '.join(_messages(errors))}"
            for name, errors in request.errors.items()
        )
        raise RunError(f"invalid data filters: {problems}")
    return request.export_filters()


def _messages(detail: Any) -> list[str]:
    """A serializer's errors for one field, flat (a list's are by index)."""
    if isinstance(detail, dict):
        return [message for value in detail.values() for message in _messages(value)]
    if isinstance(detail, list):
        return [message for value in detail for message in _messages(value)]
    return [str(detail)]


def _stored(filters: ExportFilters) -> dict[str, Any]:
    """The filters as the run keeps them (and its page shows them): those that select."""
    defaults = ExportFilters().as_json()
    return {k: v for k, v in filters.as_json().items() if v != defaults[k]}


def start_training_run(**kwargs: Any) -> TrainingRun:
    """Create a run and send it to the `gpu` worker once the transaction commits."""
    run = create_training_run(**kwargs)
    enqueue(run)
    run.refresh_from_db(fields=["error"])  # outside a transaction the send already happened
    return run


def enqueue(run: TrainingRun) -> None:
    """Send the run to the gpu worker once the transaction commits. In the embedded default
    (no broker) a thread of this process trains it instead, so the page that started it
    answers at once and shows live progress."""
    start_on_commit(TRAIN_TASK, run.pk, row=TrainingRun)


def runs_resend(now=None) -> int:
    """Send again the queued runs whose task will not come by itself; returns how many.

    - marked UNSENT: the broker was unreachable when it was queued;
    - sent more than STEPWISE_RESEND_AFTER_SECONDS ago: the message was lost (a broker without
      persistence restarted) or waits behind other runs on the gpu queue; a duplicate is
      harmless, the task claims the run with a conditional UPDATE.
    A running run whose worker died is not sent again: `fail_stale_runs` fails it, resumable."""
    if model_tasks_in_thread():
        return 0  # no broker: runs go to threads of the process that started them
    now = now or timezone.now()
    return resend_rows(TrainingRun.objects.waiting_too_long(now), TRAIN_TASK, now=now)


def cancel_training_run(run: TrainingRun) -> TrainingRun:
    """A queued run is cancelled at once; a running one stops at its next step."""
    if TrainingRun.objects.filter(pk=run.pk, status=TrainingRun.Status.QUEUED).update(
        status=TrainingRun.Status.CANCELLED, finished_at=timezone.now()
    ):
        run.refresh_from_db()
        return run
    gone = TrainingRun.objects.filter(pk=run.pk).stale()  # nobody would act on the request
    if gone.update(
        status=TrainingRun.Status.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    ):
        run.refresh_from_db()
        return run
    if not TrainingRun.objects.filter(pk=run.pk, status=TrainingRun.Status.RUNNING).update(
        cancel_requested=True
    ):
        raise RunError(f"run {run.pk} is {run.status}: nothing to cancel")
    run.refresh_from_db()
    return run


def resume_training_run(run: TrainingRun, *, send: bool = True) -> TrainingRun:
    """Queue a failed or cancelled run again; it continues from its last checkpoint.
    `send=False` leaves it queued for the caller to execute (the CLI's inline resume)."""
    stopped = (TrainingRun.Status.FAILED, TrainingRun.Status.CANCELLED)
    with transaction.atomic():
        if not TrainingRun.objects.filter(pk=run.pk, status__in=stopped, resumable=True).requeue(
            cancel_requested=False
        ):
            run.refresh_from_db()
            if not run.resumable:
                raise RunError(f"run {run.pk} cannot start ({run.error}); start a new run")
            raise RunError(f"run {run.pk} is {run.status}: only failed or cancelled runs resume")
        run.refresh_from_db()
        if send:
            enqueue(run)
    return run


def fail_stale_runs(now=None) -> int:
    """Mark failed the RUNNING runs whose worker stopped sending heartbeats (killed, lost)."""
    now = now or timezone.now()
    return TrainingRun.objects.stale(now).mark_failed(
        "The worker stopped reporting (killed or lost). Nothing was activated; "
        "resume the run to continue from its last checkpoint.",
        finished_at=now,
    )


# --- the researcher's "Train the ORM" ---------------------------------------------------------

# What an ORM does not take over from the PRM's run: its own, or a PRM's head.
NOT_SHARED_WITH_ORM = {"output_dir", "dataset_version", "objective", "num_labels"}
NOT_SHARED_WITH_ORM |= {"neutral_as", "neutral_weight", "train_on_last_step_only"}


def outcome_config_like(prm: ModelVersion | None) -> dict[str, Any]:
    """An ORM's config on equal footing with the active PRM: its run's backbone and settings,
    and as many optimizer steps as it took (max_steps). Without a PRM run: the defaults."""
    config: dict[str, Any] = {"objective": Objective.OUTCOME}
    run = prm.run if prm is not None else None
    if run is None:
        return config
    shared = {k: v for k, v in (run.config or {}).items() if k not in NOT_SHARED_WITH_ORM}
    steps = run.step or run.total_steps
    return {**shared, **config, **({"max_steps": steps} if steps else {})}


def start_orm_training(
    *, sampling_run: SamplingRun | None = None, created_by=None, project: Project | None = None
) -> TrainingRun:
    """The researcher's button: an outcome run on the project's graded solutions (all, or a
    sampling run's) of its active PRM's problems, with its backbone and steps: the two on equal
    footing where every problem of the PRM has a graded solution. Never activated (an ORM is
    compared)."""
    where = f"sampling run {sampling_run.pk}" if sampling_run else "the pool"
    prm = ModelVersion.active(project.pk if project is not None else None)
    return start_training_run(
        project=project,
        config=outcome_config_like(prm),
        created_by=created_by,
        name=f"ORM on {where}" + (f", the problems of run {prm.run_id}" if prm and prm.run else ""),
        sampling_run=sampling_run,
        problems_of=prm.run if prm is not None else None,
        activate=False,
    )


# --- model versions ------------------------------------------------------------------------


def activate_model_version(version: ModelVersion) -> ModelVersion:
    try:
        version.activate()
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    return version


# --- the review page's scores (computed on the gpu worker) ----------------------------------


def score_for_review(batch: Batch) -> int:
    """Score the batch's labeled solutions that the active model has not scored, for the review
    page: on the gpu queue (a thread of this process in the embedded default). Returns how many
    are to be scored; 0 (nothing sent) when there is no active model or nothing is missing."""
    version = ModelVersion.active(batch.project_id)
    if version is None:
        return 0
    missing = selectors.unscored_labeled(batch, version).count()
    if missing:
        start_on_commit("modeling.tasks.gpu_score_for_review", batch.pk, version.pk)
    return missing
