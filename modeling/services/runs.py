"""PRM training runs on the database: create, execute on a worker, evaluate, activate, score.

The training core (`modeling.training`) knows nothing of Django; this module feeds it the
labelings, records progress on the TrainingRun row and turns a finished run into a ModelVersion.

Invariants:
- A run is claimed by a conditional update (QUEUED -> RUNNING, or RUNNING whose heartbeat is
  stale because its worker died -> RUNNING again), so a redelivered task is a no-op while the
  first worker is alive, and two workers never train one run.
- The active model changes only at the very end of `execute_training_run`: after the model is
  saved, evaluated on held-out problems and has passed the gate (`evaluation_gate`). A worker
  killed earlier leaves a RUNNING row whose heartbeat goes stale; `fail_stale_runs` marks it
  failed and `resume_training_run` continues it from its last checkpoint.
- The training data is frozen into the run's folder (`data.jsonl`, its sha256 is the dataset
  version) before the first step, so a resumed run trains on exactly what it started with.
- A run that freezes its data with no current evaluation set makes one first when it can; it
  leaves the set's problems out and records the set; its gate then scores the new and the
  active model on that set. Without a set the gate compares no figures of different splits.
- With STEPWISE_TRAIN_PROCESSES > 1 the run trains as a torchrun process group that this worker
  launches and supervises (`_train_in_processes`): the same row, cancel and resume as in one
  process; a rank that dies fails the run, resumable; no rank outlives the task.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from labeling.models import Batch, FinishReason, Labeling, Snapshot, Solution
from labeling.services.exporting import ExportFilters, iter_prm800k_lines, select_labelings
from modeling import selectors
from modeling.models import EvaluationSet, ModelVersion, SolutionScore, TrainingRun
from modeling.services import evaluation_sets, torchrun
from modeling.training.backbones import NAMED_BACKBONES, check_available, folder_under, in_hf_cache
from modeling.training.config import TrainConfig
from stepwise.celery import (
    UNSENT,
    not_sent_since,
    resend_rows,
    run_in_thread,
    send_row,
    start_on_commit,
)

logger = logging.getLogger(__name__)

TRAIN_TASK = "modeling.tasks.gpu_train_run"

DATA_FILE = TrainingRun.DATA_FILE
SPLIT_FILE = "split.json"
MODEL_DIR = "model"
# A run trained by a torchrun process group (STEPWISE_TRAIN_PROCESSES > 1), in its folder:
PROGRESS_FILE = "progress.jsonl"  # rank 0's progress, one JSON line per report
STOP_FILE = "stop"  # the worker creates it to stop every rank at the same step (cancel)
LOG_FILE = "train.log"  # torchrun's and the ranks' output, every attempt appended
LOSS_CURVE_POINTS = 2000  # the stored curve keeps every step up to this, then thins out


Counter = Callable[[str], Callable[[int, int], None]]  # phase name -> (done, total) callback


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
) -> TrainingRun:
    """A QUEUED run with its effective config; nothing is trained until a worker executes it.

    `filters` are the exporter's (`ExportFilters` fields: batches, generations, ...): the run
    trains on the completed labelings they select. `labelings` narrows it to explicit ids.
    """
    try:
        effective = TrainConfig.from_dict(dict(config)).to_dict()
    except (TypeError, ValueError) as exc:
        raise RunError(f"invalid training config: {exc}") from exc
    try:
        check_available(effective["backbone"])
    except FileNotFoundError as exc:
        raise RunError(f"invalid training config: {exc}") from exc
    filters = dict(filters or {})
    check_run_filters(filters)
    if labelings is not None:
        filters["labeling_ids"] = sorted(labelings.values_list("pk", flat=True))
    for path in processbench:
        try:
            found = Path(path).is_file()
        except OSError as exc:  # a name past the file system's limits (ENAMETOOLONG)
            raise RunError(f"ProcessBench file name not usable: {exc.strerror}") from None
        if not found:
            raise RunError(f"ProcessBench file not found: {path}")
    if holdout_fraction is None:
        holdout_fraction = settings.STEPWISE_PRM_HOLDOUT_FRACTION
    if not 0 <= holdout_fraction < 1:
        raise RunError("holdout_fraction must be in [0, 1)")
    description = {
        "filters": filters,
        "holdout_fraction": holdout_fraction,
        "processbench": list(processbench),
        "activate": activate,
    }
    return TrainingRun.objects.create(
        name=name, config=effective, dataset_description=description, created_by=created_by
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


def check_run_filters(filters: dict[str, Any]) -> ExportFilters:
    """The run's data filters as the exporter reads them, checked before a row is written:
    value types, ids within their column's range, and batches, labelers and the snapshot that
    they name exist (leads and researchers, who start runs, may use every batch)."""

    def refuse(why: str) -> RunError:
        return RunError(f"invalid data filters: {why}")

    def ids(key: str, column: Any) -> list[int]:
        values = filters.get(key, [])
        low, high = BaseDatabaseOperations.integer_field_ranges[column.get_internal_type()]
        if not isinstance(values, list) or not all(
            type(v) is int and low <= v <= high for v in values
        ):
            raise refuse(f"{key} must be a list of whole numbers from {low} to {high}")
        return values

    def texts(key: str, allowed: Sequence[str] | None = None) -> None:
        values = filters.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise refuse(f"{key} must be a list of strings")
        if allowed is not None and not set(values) <= set(allowed):
            raise refuse(f"{key} must be among {', '.join(allowed)}")

    unknown = sorted(set(filters) - {f.name for f in dataclasses.fields(ExportFilters)})
    if unknown:
        raise refuse(f"unknown field(s) {', '.join(map(repr, unknown))}")
    batches = ids("batches", Batch._meta.pk)
    ids("generations", Batch._meta.get_field("generation"))
    labeler_ids = ids("labeler_ids", get_user_model()._meta.pk)
    texts("labelers")
    texts("finish_reasons", FinishReason.values)
    for key in ("quality_control", "screening"):
        if filters.get(key, "include") not in ("include", "exclude", "only"):
            raise refuse(f"{key} must be include, exclude or only")
    if not isinstance(filters.get("complete_only", True), bool):
        raise refuse("complete_only must be true or false")
    for key in ("finished_after", "finished_before", "since_cutoff"):
        if filters.get(key) is not None and not isinstance(filters[key], str):
            raise refuse(f"{key} must be an ISO 8601 date and time")
    snapshot = filters.get("since_snapshot")
    low, high = BaseDatabaseOperations.integer_field_ranges["BigAutoField"]
    if snapshot is not None and not (type(snapshot) is int and low <= snapshot <= high):
        raise refuse(f"since_snapshot must be a whole number from {low} to {high}")
    try:
        parsed = ExportFilters.from_json(filters)
    except (TypeError, ValueError) as exc:
        raise refuse(str(exc)) from exc
    missing = sorted(
        set(batches) - set(Batch.objects.filter(pk__in=batches).values_list("pk", flat=True))
    )
    if missing:
        raise refuse(f"no batch {', '.join(map(str, missing))}")
    users = get_user_model().objects.filter(pk__in=labeler_ids).values_list("pk", flat=True)
    missing = sorted(set(labeler_ids) - set(users))
    if missing:
        raise refuse(f"no user {', '.join(map(str, missing))}")
    if snapshot is not None and not Snapshot.objects.filter(pk=snapshot).exists():
        raise refuse(f"no snapshot {snapshot}")
    return parsed


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
    if settings.STEPWISE_TRAIN_IN_THREAD:
        transaction.on_commit(lambda: _train_in_thread(run.pk))
    else:
        _send(run.pk)


def _send(run_id: int) -> None:
    send_row(TrainingRun, run_id, TRAIN_TASK, waiting=TrainingRun.Status.QUEUED)


def runs_resend(now=None) -> int:
    """Send again the queued runs whose task will not come by itself; returns how many.

    - marked UNSENT: the broker was unreachable when it was queued;
    - sent more than STEPWISE_RESEND_AFTER_SECONDS ago: the message was lost (a broker without
      persistence restarted) or waits behind other runs on the gpu queue; a duplicate is
      harmless, the task claims the run with a conditional UPDATE.
    A running run whose worker died is not sent again: `fail_stale_runs` fails it, resumable."""
    now = now or timezone.now()
    resend_before = now - timedelta(seconds=settings.STEPWISE_RESEND_AFTER_SECONDS)
    due = Q(status=TrainingRun.Status.QUEUED) & (Q(error=UNSENT) | not_sent_since(resend_before))
    return resend_rows(TrainingRun, due, TRAIN_TASK, waiting=TrainingRun.Status.QUEUED, now=now)


def _train_in_thread(run_id: int) -> threading.Thread:
    return run_in_thread(f"training-run-{run_id}", lambda: execute_training_run(run_id))


def cancel_training_run(run: TrainingRun) -> TrainingRun:
    """A queued run is cancelled at once; a running one stops at its next step."""
    if TrainingRun.objects.filter(pk=run.pk, status=TrainingRun.Status.QUEUED).update(
        status=TrainingRun.Status.CANCELLED, finished_at=timezone.now()
    ):
        run.refresh_from_db()
        return run
    stale = timezone.now() - timedelta(seconds=settings.STEPWISE_RUN_STALE_SECONDS)
    if TrainingRun.objects.filter(
        pk=run.pk, status=TrainingRun.Status.RUNNING, heartbeat_at__lt=stale
    ).update(
        status=TrainingRun.Status.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    ):  # its worker is gone: nobody would act on the request
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
        if not TrainingRun.objects.filter(pk=run.pk, status__in=stopped, resumable=True).update(
            status=TrainingRun.Status.QUEUED, error="", cancel_requested=False, finished_at=None
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
    stale = now - timedelta(seconds=settings.STEPWISE_RUN_STALE_SECONDS)
    return TrainingRun.objects.filter(
        status=TrainingRun.Status.RUNNING, heartbeat_at__lt=stale
    ).update(
        status=TrainingRun.Status.FAILED,
        finished_at=now,
        error=(
            "The worker stopped reporting (killed or lost). Nothing was activated; "
            "resume the run to continue from its last checkpoint."
        ),
    )


def _claim(run_id: int) -> bool:
    """QUEUED -> RUNNING, or take over a RUNNING run whose worker is gone."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.STEPWISE_RUN_STALE_SECONDS)
    claimable = Q(status=TrainingRun.Status.QUEUED) | Q(
        status=TrainingRun.Status.RUNNING, heartbeat_at__lt=stale
    )
    return bool(
        TrainingRun.objects.filter(claimable, pk=run_id).update(
            status=TrainingRun.Status.RUNNING,
            started_at=Coalesce(F("started_at"), Value(now)),
            heartbeat_at=now,
            error="",
        )
    )


# --- the dataset ---------------------------------------------------------------------------


def run_dir(run: TrainingRun) -> Path:
    return run.folder


def run_labelings(run: TrainingRun) -> QuerySet[Labeling]:
    filters = dict(run.dataset_description.get("filters") or {})
    ids = filters.pop("labeling_ids", None)
    query = select_labelings(ExportFilters.from_json(filters))
    if ids is not None:
        query = query.filter(pk__in=ids)
    return query


def freeze_dataset(run: TrainingRun) -> tuple[Path, str, int]:
    """Write the run's labelings once as PRM800K lines; (path, sha256, lines).

    The current evaluation set (made first when there is none and it can be:
    `ensure_evaluation_set`) has its problems left out, and the set, or why there is none, is
    recorded in the run's dataset_description before the file exists. A resumed run finds the file and reuses it:
    it trains on what it started with.
    """
    folder = run_dir(run)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / DATA_FILE
    if not path.exists():
        labelings = run_labelings(run)
        evaluation_set, missing = evaluation_sets.ensure_evaluation_set()
        recorded = None
        if evaluation_set is not None:
            labelings = labelings.exclude(solution__problem_id__in=evaluation_set.problem_ids)
            recorded = evaluation_set.reference()
        run.dataset_description = {
            **run.dataset_description,
            "evaluation_set": recorded,
            "evaluation_set_missing": missing,
        }
        TrainingRun.objects.filter(pk=run.pk).update(dataset_description=run.dataset_description)
        partial = path.with_suffix(".partial")
        with partial.open("w", encoding="utf-8") as out:
            for line in iter_prm800k_lines(labelings):
                out.write(line + "\n")
        partial.replace(path)
    return (path, *sha256_and_lines(path))


def sha256_and_lines(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    lines = 0
    with path.open("rb") as f:
        for raw in f:
            digest.update(raw)
            lines += 1
    return digest.hexdigest(), lines


def load_split(run: TrainingRun) -> tuple[list, list]:
    """(train, held-out) examples of the run's frozen data, split by problem."""
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.data import examples_from_prm800k, read_jsonl, split_by_problem

    examples = examples_from_prm800k(read_jsonl(run_dir(run) / DATA_FILE))
    holdout = float(run.dataset_description.get("holdout_fraction", 0.0))
    return split_by_problem(examples, holdout, int(run.config.get("seed", 0)))


# --- progress reported by the training loop -----------------------------------------------------


class RunReporter:
    """Writes the loop's progress to the run row (at most every STEPWISE_RUN_PROGRESS_SECONDS)
    and reads back whether a user asked to cancel."""

    def __init__(self, run: TrainingRun):
        self.run_id = run.pk
        self.interval_s = settings.STEPWISE_RUN_PROGRESS_SECONDS
        self.loss_curve: list[list[float]] = [list(p) for p in run.loss_curve or []]
        self.last_write = 0.0
        self.cancelled = False

    def __call__(self, progress: Any) -> None:
        if progress.loss is not None:
            # A resumed run repeats the steps after its checkpoint: they replace the old points.
            while self.loss_curve and self.loss_curve[-1][0] >= progress.step:
                self.loss_curve.pop()
            self.loss_curve.append([progress.step, round(float(progress.loss), 6)])
        final = progress.step >= progress.total
        if final or time.monotonic() - self.last_write >= self.interval_s:
            self.write(phase=progress.phase, step=progress.step, total_steps=progress.total)

    def counter(self, phase: str) -> Callable[[int, int], None]:
        """For evaluation, which counts batches: shown in the phase, the training step stays."""

        def report(done: int, total: int) -> None:
            if done >= total or time.monotonic() - self.last_write >= self.interval_s:
                self.write(phase=f"{phase} {done}/{total}")

        return report

    def write(self, **fields: Any) -> None:
        self.last_write = time.monotonic()
        curve = thin_curve(self.loss_curve)
        TrainingRun.objects.filter(pk=self.run_id).update(
            heartbeat_at=timezone.now(), loss_curve=curve, **fields
        )
        self.cancelled = TrainingRun.objects.filter(pk=self.run_id, cancel_requested=True).exists()

    def should_stop(self) -> bool:
        return self.cancelled


def thin_curve(points: list[list[float]], limit: int = LOSS_CURVE_POINTS) -> list[list[float]]:
    """Every point up to `limit`, then every k-th (and always the last) so plots stay light."""
    if len(points) <= limit:
        return points
    stride = math.ceil(len(points) / limit)
    thinned = points[::stride]
    if thinned[-1] is not points[-1]:
        thinned.append(points[-1])
    return thinned


# --- executing a run (the Celery task calls this) -------------------------------------------


def execute_training_run(
    run_id: int,
    *,
    should_stop: Callable[[], bool] | None = None,
    progress: Callable[[Any], None] | None = None,
    counter: Counter | None = None,
) -> ModelVersion | None:
    """Train, evaluate, gate, and record a ModelVersion; safe to call twice for one run.

    Returns the run's model version (also when called again after success), or None when the
    run was not ours to execute, was cancelled, or failed (its row says why). `progress` and
    `counter` also receive the loop's and the evaluation's progress (the CLI's bars).
    """
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.train import train

    if not _claim(run_id):
        run = TrainingRun.objects.get(pk=run_id)
        return (
            getattr(run, "model_version", None)
            if run.status == TrainingRun.Status.SUCCEEDED
            else None
        )
    TrainingRun.objects.filter(pk=run_id).update(attempts=F("attempts") + 1)
    run = TrainingRun.objects.get(pk=run_id)
    reporter = RunReporter(run)
    try:
        data_path, dataset_version, lines = freeze_dataset(run)
        train_set, held_out = load_split(run)
        if not train_set:
            raise RunError(f"no completed labelings to train on ({lines} selected)")
        folder = run_dir(run)
        config = TrainConfig.from_dict(
            {
                **run.config,
                "output_dir": str(folder / MODEL_DIR),
                "dataset_version": dataset_version,
            }
        )
        check_available(config.backbone)  # this worker may lack what the web process has
    except (RunError, ValueError, TypeError, FileNotFoundError) as exc:
        # The same data and config would fail the same way: nothing to resume.
        logger.warning("training run %s cannot start: %s", run_id, exc)
        error = f"Cannot start: {exc}. Start a new run once the data or config is fixed."
        TrainingRun.objects.filter(pk=run_id).update(
            status=TrainingRun.Status.FAILED,
            resumable=False,
            error=error[:10_000],
            finished_at=timezone.now(),
        )
        return None
    except Exception as exc:
        _fail(run_id, exc)
        return None
    try:
        description = {
            **run.dataset_description,
            "labelings": lines,
            "train_solutions": len(train_set),
            "held_out_solutions": len(held_out),
            "data_file": str(data_path),
        }
        TrainingRun.objects.filter(pk=run.pk).update(
            config=config.to_dict(),
            dataset_version=dataset_version,
            dataset_description=description,
            output_dir=str(folder),
            phase="train",
        )
        stop = should_stop or (lambda: False)
        report = reporter if progress is None else _both(reporter, progress)
        count = reporter.counter if counter is None else _both_counters(reporter.counter, counter)
        processes = train_processes()
        train_here = train if processes == 1 else partial(_train_in_processes, run, processes)
        release_cached_models()
        result = train_here(
            config, train_set, progress=report, should_stop=lambda: reporter.should_stop() or stop()
        )
        if result.stopped:
            _stop(run, reporter)
            return None
        reporter.write(phase="evaluate", step=result.step, total_steps=result.total_steps)
        metrics = {**result.metrics, **evaluate_held_out(result.output_dir, held_out, count)}
        metrics.update(
            evaluate_processbench_files(result.output_dir, description["processbench"], count)
        )
        active = ModelVersion.active()
        recorded = description.get("evaluation_set")
        if recorded:
            metrics["evaluation_set"] = evaluate_on_evaluation_set(
                recorded, result.output_dir, active, count
            )
        missing = description.get("evaluation_set_missing") or NO_SET
        return _finish(run, config, result.output_dir, dataset_version, metrics, active, missing)
    except Exception as exc:
        _fail(run_id, exc)
        return None


def train_processes() -> int:
    """STEPWISE_TRAIN_PROCESSES for this machine: "auto" is its GPU count (or 1)."""
    value = str(settings.STEPWISE_TRAIN_PROCESSES).lower()
    if value == "auto":
        import torch

        return torch.cuda.device_count() or 1
    return int(value)


def release_cached_models() -> None:
    """Forget the models load_model_dir keeps, and CUDA's cached blocks: a scoring model must
    not hold GPU memory while a run trains."""
    load_model_dir.cache_clear()
    torch = sys.modules.get("torch")  # not loaded: nothing can be on a GPU
    if torch is not None and torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


class TrainingProcessesFailed(RuntimeError):
    """The torchrun process group exited with an error (a rank killed, out of memory)."""


def _train_in_processes(
    run: TrainingRun,
    processes: int,
    config: TrainConfig,
    examples: Sequence,
    *,
    progress: Callable[[Any], None],
    should_stop: Callable[[], bool],
) -> Any:
    """train() as `processes` ranks of a torchrun process group on this machine, launched and
    supervised from here: rank 0's progress lines go to `progress` (the row, cancel), the stop
    file stops every rank at one step with a checkpoint. Returns train()'s TrainResult; a
    failed group raises TrainingProcessesFailed, and if this function is interrupted (the
    task's time limit, any error) it tears the group down first: no rank outlives it."""
    from modeling.training.cli import config_flags
    from modeling.training.train import Progress, TrainResult, latest_checkpoint

    folder, out = run_dir(run), Path(config.output_dir)
    progress_file, stop_file, log = folder / PROGRESS_FILE, folder / STOP_FILE, folder / LOG_FILE
    # What an earlier attempt left must not speak for this one: its progress, its stop, and
    # the model of an attempt that failed after training (this one writes it again).
    for stale in (progress_file, stop_file, out / "prm.json"):
        stale.unlink(missing_ok=True)
    holdout = float(run.dataset_description.get("holdout_fraction", 0.0))  # as load_split
    argv = torchrun.command(
        processes,
        folder / DATA_FILE,
        holdout,
        config_flags(config),
        progress=progress_file,
        stop=stop_file,
    )
    poll_s = min(1.0, max(0.05, settings.STEPWISE_RUN_PROGRESS_SECONDS))
    lines = torchrun.ProgressFile(progress_file)
    last: Any = None
    proc = torchrun.launch(argv, cwd=folder, log=log)
    try:
        while True:
            try:
                code: int | None = proc.wait(timeout=poll_s)
            except subprocess.TimeoutExpired:
                code = None
            for line in lines.new():
                last = Progress(**line)
                progress(last)
            if code is not None:
                break
            if not stop_file.exists() and should_stop():
                stop_file.touch()
    except BaseException:
        torchrun.terminate(proc)
        raise
    if code != 0:
        how = f"killed by {signal_name(-code)}" if code < 0 else f"exited with code {code}"
        raise TrainingProcessesFailed(
            f"the {processes} training processes failed (torchrun {how}: a rank was killed or "
            f"failed); resume to continue from the last checkpoint. End of {log}:\n"
            + torchrun.log_tail(log)
        )
    checkpoint = latest_checkpoint(out)
    meta = json.loads((checkpoint / "meta.json").read_text()) if checkpoint else {}
    step, curve = meta.get("step", 0), [tuple(p) for p in meta.get("loss_curve", [])]
    if not (out / "prm.json").exists():  # stopped at the stop file, with a checkpoint
        return TrainResult(str(out), step, last.total if last else step, True, {}, curve)
    check_split(out, examples)
    metrics = json.loads((out / "metrics.json").read_text())
    return TrainResult(str(out), step, step, False, metrics, curve)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def check_split(model_dir: Path, train_set: Sequence) -> None:
    """The CLI split the frozen data itself; it must have trained on load_split's problems."""
    from modeling.training.data import problem_key

    split = json.loads((model_dir / SPLIT_FILE).read_text())
    trained = {problem_key(e.problem) for e in train_set}
    if split["train_problems"] != len(trained) or trained & set(split["test_problems"]):
        raise RuntimeError(f"{model_dir / SPLIT_FILE} differs from the run's split")


def _fail(run_id: int, exc: Exception) -> None:
    """Failed on the way (out of memory, a full disk, a bug): resumable from its checkpoint."""
    logger.exception("training run %s failed", run_id)
    TrainingRun.objects.filter(pk=run_id).update(
        status=TrainingRun.Status.FAILED,
        error=f"{exc.__class__.__name__}: {exc}"[:10_000],
        finished_at=timezone.now(),
    )


def _both(first: Callable[[Any], None], second: Callable[[Any], None]) -> Callable[[Any], None]:
    def call(value: Any) -> None:
        first(value)
        second(value)

    return call


def _both_counters(first: Counter, second: Counter) -> Counter:
    def for_phase(phase: str) -> Callable[[int, int], None]:
        a, b = first(phase), second(phase)

        def both(done: int, total: int) -> None:
            a(done, total)
            b(done, total)

        return both

    return for_phase


def _stop(run: TrainingRun, reporter: RunReporter) -> None:
    """Stopped mid-way: cancelled by a user, or the worker is shutting down (resumable)."""
    reporter.write()
    status = TrainingRun.Status.CANCELLED if reporter.cancelled else TrainingRun.Status.FAILED
    error = (
        ""
        if reporter.cancelled
        else "Stopped before the end (worker shutting down); resume to continue."
    )
    TrainingRun.objects.filter(pk=run.pk).update(
        status=status, error=error, finished_at=timezone.now()
    )
    return None


def _finish(
    run: TrainingRun,
    config: Any,
    model_dir: str,
    dataset_version: str,
    metrics: dict,
    active: ModelVersion | None,
    missing: str,
) -> ModelVersion:
    """Record the model and gate it against `active`, the model it was compared with."""
    gate = evaluation_gate(metrics, active, missing=missing)
    metrics = {**metrics, "gate": gate}
    with transaction.atomic():
        version = ModelVersion.objects.create(
            run=run,
            name=f"{run.name or 'run'} #{run.pk}",
            backbone=config.backbone,
            artifact_path=model_dir,
            dataset_version=dataset_version,
            metrics=metrics,
            passed_evaluation=gate["passed"],
        )
        if gate["passed"] and run.dataset_description.get("activate", True):
            version.activate()
        TrainingRun.objects.filter(pk=run.pk).update(
            status=TrainingRun.Status.SUCCEEDED,
            metrics=metrics,
            phase="done",
            finished_at=timezone.now(),
            heartbeat_at=timezone.now(),
        )
    return version


# --- evaluation ------------------------------------------------------------------------------


def evaluate_held_out(
    model_dir: str,
    held_out: Sequence,
    counter: Counter | None = None,
    max_length: int | None = None,
) -> dict[str, Any]:
    """Step metrics of the saved model on the held-out problems' rated steps (those within
    max_length tokens, default the model's; the rest are counted as dropped)."""
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.evaluate import evaluate_steps, finite

    if not held_out:
        return {"held_out": None}
    model = load_model_dir(model_dir)
    progress = counter("evaluate") if counter else None
    steps = evaluate_steps(model, held_out, max_length=max_length, progress=progress)
    return {"held_out": finite(steps), "auroc": finite(steps["auroc_negative"])}


def evaluate_processbench_files(
    model_dir: str, paths: Sequence[str], counter: Counter | None = None, threshold: float = 0.5
) -> dict[str, Any]:
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.evaluate import evaluate_processbench

    if not paths:
        return {}
    model = load_model_dir(model_dir)
    results = []
    for path in paths:
        progress = counter(f"processbench {Path(path).stem}") if counter else None
        try:
            results.append(evaluate_processbench(model, path, threshold, progress=progress))
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
        ) as exc:  # a bad file costs its row, not the run
            results.append({"subset": Path(path).stem, "error": f"{exc.__class__.__name__}: {exc}"})
    return {"processbench": results}


def evaluate_best_of_n_file(
    model_dir: str,
    path: str,
    counter: Counter | None = None,
    ns: Sequence[int] | None = None,
    repeats: int = 100,
) -> dict[str, Any]:
    """Best-of-N accuracy on a samples file (format: training.evaluate.read_best_of_n), each
    answer judged by modeling.grading, the one answer checker."""
    # torch loads only where a model trains or scores, never in the web process
    from modeling import grading
    from modeling.training.evaluate import evaluate_best_of_n, finite, read_best_of_n

    problems = [
        p._replace(
            samples=[
                (steps, answer or grading.extract_answer(steps)) for steps, answer in p.samples
            ]
        )
        for p in read_best_of_n(path)
    ]
    if not problems:
        raise ValueError(f"{path} has no problems")
    report = evaluate_best_of_n(
        load_model_dir(model_dir),
        problems,
        equivalent=grading.is_equivalent,
        key=grading.normalise_answer,
        ns=ns,
        repeats=repeats,
        progress=counter("best of N") if counter else None,
    )
    return {"best_of_n": finite({"file": Path(path).name, **report})}


def evaluate_on_evaluation_set(
    recorded: dict[str, Any],
    model_dir: str,
    active: ModelVersion | None,
    counter: Counter | None = None,
) -> dict[str, Any]:
    """Step AUROC of the new and the active model on the run's evaluation set, in this run.

    A missing or changed set file, or an active model that cannot be loaded, is written as an
    `error` / `active_error` that fails the gate; the run still records its model."""
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.data import examples_from_prm800k, read_jsonl

    # Runs frozen before sets were named by id recorded only the version.
    evaluation_set = EvaluationSet.objects.filter(
        **({"pk": recorded["id"]} if "id" in recorded else {"version": recorded["version"]})
    ).first()
    report: dict[str, Any] = {
        **(evaluation_set.reference() if evaluation_set else {}),
        **recorded,
        "new_auroc": None,
        "active_auroc": None,
        "active_model": active.pk if active else None,
    }
    path = evaluation_set.path if evaluation_set else None
    if path is None or not path.exists():
        return {**report, "error": f"the file of evaluation set v{recorded['version']} is missing"}
    if sha256_and_lines(path)[0] != recorded["sha256"]:
        return {**report, "error": f"the file of evaluation set v{recorded['version']} changed"}
    examples = examples_from_prm800k(read_jsonl(path))
    report["new_auroc"] = evaluate_held_out(model_dir, examples, counter).get("auroc")
    if active is not None:
        try:
            report["active_auroc"] = evaluate_held_out(active.artifact_path, examples).get("auroc")
        except Exception as exc:  # a missing or unreadable artifact costs the gate, not the run
            report["active_error"] = f"{exc.__class__.__name__}: {exc}"[:1000]
    return report


NO_SET = "no evaluation set was current when the run froze its data"
_SET_REASONS = {
    "unmeasured": "not measured (no -1 and non -1 steps in {name})",
    "unmeasurable": "{name} has no -1 and non -1 steps to measure AUROC on",
    "under": "AUROC {auroc:.3f} on {name} is under {floor:.3f}",
    "regresses": "AUROC {auroc:.3f} on {name} regresses more than {max_regression} from the "
    "active model's {previous:.3f} on the same set",
}


def evaluation_gate(
    metrics: dict[str, Any], active: ModelVersion | None, *, missing: str = NO_SET
) -> dict[str, Any]:
    """Whether a new model may become active: step AUROC at least the floor, and not more
    than the allowed regression under the active model's, both measured on the evaluation set
    (metrics["evaluation_set"]) in this run.

    Figures from different splits are never compared. Without a set (`missing` says why) a
    new model passes only where nothing is compared: the gate is off (a floor of 0), or there is
    no active model and its own held-out AUROC reaches the floor. Beside an active model it is
    not activated: "not gated"."""
    floor = settings.STEPWISE_PRM_EVAL_MIN_AUROC
    max_regression = settings.STEPWISE_PRM_EVAL_MAX_REGRESSION
    on_set = metrics.get("evaluation_set")
    gate: dict[str, Any] = {"min_auroc": floor, "max_regression": max_regression}

    def verdict(passed: bool, reason: str = "") -> dict[str, Any]:
        return {**gate, "passed": passed, "reason": reason}

    if on_set is None:
        auroc = metrics.get("auroc")  # on this run's own held-out problems, if any
        gate.update(evaluation_set=None, auroc=auroc, active_auroc=None, missing=missing)
        if floor <= 0:
            gate["comparison"] = "none: the gate is off and there is no evaluation set"
            return verdict(True, f"not gated: the gate is off (the AUROC floor is 0); {missing}")
        if active is not None:
            gate["comparison"] = "none: no evaluation set to score both models on"
            return verdict(
                False,
                f"not gated: {missing}; a new model is compared with the active one only on "
                "the same frozen problems, so it was not activated",
            )
        gate["comparison"] = "none: no active model; the floor on this run's held-out problems"
        if auroc is None:
            return verdict(False, f"{missing}, and no held-out -1 and non -1 steps to measure on")
        if auroc < floor:
            return verdict(False, f"held-out AUROC {auroc:.3f} is under {floor:.3f} ({missing})")
        return verdict(True, f"no active model to compare with; {missing}")

    name = f"evaluation set v{on_set['version']}"
    auroc, previous = on_set.get("new_auroc"), on_set.get("active_auroc")
    gate.update(
        evaluation_set=on_set["version"],
        evaluation_set_id=on_set.get("id"),
        comparison=f"new and active model scored on {name} in this run",
        auroc=auroc,
        active_auroc=previous,
    )
    words = {"name": name, "auroc": auroc, "previous": previous, "floor": floor}

    def said(key: str) -> str:
        return _SET_REASONS[key].format(**words, max_regression=max_regression)

    if on_set.get("error"):
        return verdict(False, on_set["error"])
    if auroc is None:  # a floor of 0 turns the gate off: then nothing measured is no refusal
        return (
            verdict(True, said("unmeasured"))
            if floor <= 0
            else verdict(False, said("unmeasurable"))
        )
    if auroc < floor:
        return verdict(False, said("under"))
    if active is not None and on_set.get("active_error"):
        return verdict(
            False,
            f"the active model {active} could not be scored on {name} ({on_set['active_error']})",
        )
    if previous is not None and auroc < previous - max_regression:
        return verdict(False, said("regresses"))
    return verdict(True)


def evaluate_model_version(
    version: ModelVersion,
    *,
    processbench: Sequence[str] = (),
    threshold: float = 0.5,
    save: bool = True,
    counter: Counter | None = None,
    max_length: int | None = None,
    best_of_n: str | None = None,
    best_of_n_sizes: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Re-measure a model: its run's held-out problems (when it has a run), ProcessBench,
    and best-of-N on a samples file."""
    report: dict[str, Any] = {"model_version": version.pk}
    if version.run is not None and (run_dir(version.run) / DATA_FILE).exists():
        _, held_out = load_split(version.run)
        report.update(evaluate_held_out(version.artifact_path, held_out, counter, max_length))
    report.update(
        evaluate_processbench_files(version.artifact_path, processbench, counter, threshold)
    )
    if best_of_n:
        report.update(
            evaluate_best_of_n_file(version.artifact_path, best_of_n, counter, best_of_n_sizes)
        )
        # Stored per evaluation set: reports are compared only among models of the same set.
        current = EvaluationSet.current()
        report["best_of_n"]["evaluation_set"] = current.reference() if current else None
    if save:
        version.metrics = {**(version.metrics or {}), "evaluation": report}
        version.save(update_fields=["metrics"])
    return report


# --- models and scoring ----------------------------------------------------------------------


def activate_model_version(version: ModelVersion) -> ModelVersion:
    try:
        version.activate()
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    return version


@lru_cache(maxsize=2)
def load_model_dir(path: str) -> Any:
    """A saved model, cached per path: a generation scores many chunks with one model. One
    trained here (prm.json) or imported (external.json: `services.importing`)."""
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.external import load_prm

    return load_prm(path, device="auto")


def load_model(model_version: ModelVersion) -> Any:
    return load_model_dir(model_version.artifact_path)


def score_solutions_with(
    *,
    model_version: ModelVersion,
    solutions: QuerySet[Solution],
    batch_size: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Score solutions with a model version and store a SolutionScore each; returns rows written.

    Already scored (solution, model) pairs are left as they are, so a re-run only fills gaps.
    """
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.data import Solution as CoreSolution
    from modeling.training.evaluate import finite
    from modeling.training.score import score_solutions, solution_score

    model = load_model(model_version)
    total = solutions.count()
    done = written = 0
    chunk: list[Solution] = []

    def flush() -> int:
        probs = score_solutions(model, [CoreSolution(s.problem.text, list(s.steps)) for s in chunk])
        rows = [
            SolutionScore(
                solution=s,
                model_version=model_version,
                score=_nan_to(solution_score(p, "product"), 0.0),
                min_step_score=finite(solution_score(p, "min")),
                step_probs=finite(p.tolist()),
            )
            for s, p in zip(chunk, probs, strict=True)
        ]
        return len(SolutionScore.objects.bulk_create(rows, ignore_conflicts=True))

    for solution in (
        solutions.select_related("problem").order_by("pk").iterator(chunk_size=batch_size)
    ):
        chunk.append(solution)
        if len(chunk) >= batch_size:
            written += flush()
            done += len(chunk)
            chunk = []
            if progress:
                progress(done, total)
    if chunk:
        written += flush()
        done += len(chunk)
    if progress:
        progress(done, total)
    return written


def measure_uncertainty_with(
    *,
    model_version: ModelVersion,
    solutions: QuerySet[Solution],
    heads: int,
    seed: int = 0,
    batch_size: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Fit an ensemble of `heads` heads on the model's training data (its frozen features, head
    mode only) and store its disagreement on each of `solutions` in their SolutionScore rows
    (which must exist: score first). Returns rows written. Refuses, with a RunError that says
    why, an imported model, one without its training data, or a lora/full model."""
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.data import Solution as CoreSolution
    from modeling.training.ensemble import check_ensemble_model, ensemble_uncertainties, train_heads

    training = model_version.run
    if model_version.kind != ModelVersion.Kind.TRAINED or training is None:
        raise RunError(
            f"{model_version} was not trained here: the uncertainty rule fits its ensemble on "
            "the model's training data"
        )
    model = load_model(model_version)
    try:
        check_ensemble_model(model, heads)
        if not (run_dir(training) / DATA_FILE).exists():
            raise ValueError(f"the training data of run {training.pk} is gone")
        train_set, _ = load_split(training)
        ensemble = train_heads(model, train_set, heads=heads, seed=seed)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    scores = SolutionScore.objects.filter(model_version=model_version, solution__in=solutions)
    total = scores.count()
    done = 0
    chunk: list[SolutionScore] = []

    def flush() -> None:
        spread = ensemble_uncertainties(
            model,
            ensemble,
            [CoreSolution(s.solution.problem.text, list(s.solution.steps)) for s in chunk],
        )
        for row, value in zip(chunk, spread, strict=True):
            row.uncertainty, row.ensemble_heads = value, heads
        SolutionScore.objects.bulk_update(chunk, ["uncertainty", "ensemble_heads"])

    for row in (
        scores.select_related("solution__problem").order_by("pk").iterator(chunk_size=batch_size)
    ):
        chunk.append(row)
        if len(chunk) >= batch_size:
            flush()
            done += len(chunk)
            chunk = []
            if progress:
                progress(done, total)
    if chunk:
        flush()
        done += len(chunk)
    if progress:
        progress(done, total)
    return done


def _nan_to(value: float, default: float) -> float:
    return value if math.isfinite(value) else default


def score_for_review(batch: Batch) -> int:
    """Score the batch's labeled solutions that the active model has not scored, for the review
    page: on the gpu queue (a thread of this process in the embedded default). Returns how many
    are to be scored; 0 (nothing sent) when there is no active model or nothing is missing."""
    version = ModelVersion.active()
    if version is None:
        return 0
    missing = selectors.unscored_labeled(batch, version).count()
    if missing:
        start_on_commit(
            "modeling.tasks.gpu_score_for_review",
            batch.pk,
            version.pk,
            name=f"review-scores-{batch.pk}",
            work=lambda: score_batch_for_review(batch.pk, version.pk),
        )
    return missing


def score_batch_for_review(batch_id: int, version_id: int) -> int:
    """The task's work: score what is still missing (a redelivery fills only gaps)."""
    batch = Batch.objects.get(pk=batch_id)
    version = ModelVersion.objects.get(pk=version_id)
    return score_solutions_with(
        model_version=version, solutions=selectors.unscored_labeled(batch, version)
    )
