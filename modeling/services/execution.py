"""Executing a PRM training run on a `gpu` worker: claim, train, evaluate, gate, and record a
ModelVersion. The training core (`modeling.training`) knows nothing of Django; this module feeds
it the run's frozen data (`run_data`), records progress on the TrainingRun row and turns a
finished run into a ModelVersion.

Invariants:
- A run is claimed by a conditional update (QUEUED -> RUNNING, or RUNNING whose heartbeat is
  stale because its worker died -> RUNNING again), so a redelivered task is a no-op while the
  first worker is alive, and two workers never train one run.
- The active model changes only at the very end of `execute_training_run`: after the model is
  saved, evaluated on held-out problems and has passed the gate (`evaluation.evaluation_gate`).
  A worker killed earlier leaves a RUNNING row whose heartbeat goes stale;
  `runs.fail_stale_runs` marks it failed and `runs.resume_training_run` continues it from its
  last checkpoint.
- The training data is frozen before the first step (`run_data.freeze_dataset`), so a resumed
  run trains on exactly what it started with; the gate scores the new and the active model on
  the evaluation set recorded then. Without a set the gate compares no figures of different
  splits.
- With STEPWISE_TRAIN_PROCESSES > 1 the run trains as a torchrun process group that this worker
  launches and supervises (`_train_in_processes`): the same row, cancel and resume as in one
  process; a rank that dies fails the run, resumable; no rank outlives the task.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from modeling.models import ModelVersion, Objective, TrainingRun
from modeling.services import torchrun
from modeling.services.evaluation import (
    NO_SET,
    PhaseProgress,
    evaluate_held_out,
    evaluate_on_evaluation_set,
    evaluate_outcome_held_out,
    evaluate_outcome_on_evaluation_set,
    evaluate_processbench_files,
    evaluation_gate,
    outcome_gate,
)
from modeling.services.run_data import DATA_FILE, freeze_dataset, load_split, run_dir
from modeling.services.runs import RunError
from modeling.services.scoring import release_cached_models
from modeling.training.backbones import check_available
from modeling.training.cli import config_flags
from modeling.training.config import TrainConfig
from modeling.training.data import problem_key
from modeling.training.train import Progress, TrainResult, latest_checkpoint, train

logger = logging.getLogger(__name__)

SPLIT_FILE = "split.json"
MODEL_DIR = "model"
# A run trained by a torchrun process group (STEPWISE_TRAIN_PROCESSES > 1), in its folder:
PROGRESS_FILE = "progress.jsonl"  # rank 0's progress, one JSON line per report
STOP_FILE = "stop"  # the worker creates it to stop every rank at the same step (cancel)
LOG_FILE = "train.log"  # torchrun's and the ranks' output, every attempt appended
LOSS_CURVE_POINTS = 2000  # the stored curve keeps every step up to this, then thins out


# --- progress reported by the training loop -----------------------------------------------------


class Cancelled(Exception):
    """A user asked to cancel while the run was evaluating."""


class RunReporter:
    """Writes the loop's progress to the run row: its phase and how far the phase is, the
    training step and the loss curve, at most every STEPWISE_RUN_PROGRESS_SECONDS and at each
    new phase. The loop asks `should_stop` between steps, and between blocks of the backbone
    while it extracts features: at most as often, that writes the heartbeat and reads back
    whether a user asked to cancel, so both keep up when a report is a minute away."""

    def __init__(self, run: TrainingRun):
        self.run = run
        self.interval_s = settings.STEPWISE_RUN_PROGRESS_SECONDS
        self.loss_curve: list[list[float]] = [list(p) for p in run.loss_curve or []]
        self.phase = ""
        # The first report and the first question always reach the row.
        self.last_write = -math.inf  # progress written, cancel read
        self.last_check = -math.inf  # heartbeat written, cancel read
        self.cancelled = False

    def __call__(self, progress: Any) -> None:
        if progress.loss is not None:
            # A resumed run repeats the steps after its checkpoint: they replace the old points.
            while self.loss_curve and self.loss_curve[-1][0] >= progress.step:
                self.loss_curve.pop()
            self.loss_curve.append([progress.step, round(float(progress.loss), 6)])
        if self._due(progress.phase, progress.step, progress.total):
            fields = {"phase_done": progress.step, "phase_total": progress.total}
            if progress.phase == "train":
                fields.update(step=progress.step, total_steps=progress.total)
            self.write(phase=progress.phase, **fields)

    def counter(self, phase: str) -> Callable[[int, int], None]:
        """For evaluation, which counts batches (the training step stays); raises Cancelled
        when a user asked to cancel."""
        name = phase[: TrainingRun._meta.get_field("phase").max_length]

        def report(done: int, total: int) -> None:
            if self._due(name, done, total):
                self.write(phase=name, phase_done=done, phase_total=total)
            if self.should_stop():
                raise Cancelled

        return report

    def _due(self, phase: str, done: int, total: int) -> bool:
        due = phase != self.phase or done >= total
        return due or time.monotonic() - self.last_write >= self.interval_s

    def write(self, **fields: Any) -> None:
        self.phase = fields.get("phase", self.phase)
        self.last_write = self.last_check = time.monotonic()
        self.run.heartbeat(loss_curve=thin_curve(self.loss_curve), **fields)
        self._read_cancel()

    def should_stop(self) -> bool:
        if not self.cancelled and time.monotonic() - self.last_check >= self.interval_s:
            self.last_check = time.monotonic()
            self.run.heartbeat()
            self._read_cancel()
        return self.cancelled

    def _read_cancel(self) -> None:
        self.cancelled = TrainingRun.objects.filter(pk=self.run.pk, cancel_requested=True).exists()


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
    counter: PhaseProgress | None = None,
) -> ModelVersion | None:
    """Train, evaluate, gate, and record a ModelVersion; safe to call twice for one run.

    Returns the run's model version (also when called again after success), or None when the
    run was not ours to execute, was cancelled, or failed (its row says why). `progress` and
    `counter` also receive the loop's and the evaluation's progress (the CLI's bars).
    """
    # Queued, or running on a worker whose heartbeat went stale (it died: its task came back).
    claimed = TrainingRun.claim(run_id)
    if claimed is None:
        run = TrainingRun.objects.get(pk=run_id)
        return (
            getattr(run, "model_version", None)
            if run.status == TrainingRun.Status.SUCCEEDED
            else None
        )
    run = claimed
    reporter = RunReporter(run)
    try:
        data_path, dataset_version, lines = freeze_dataset(run)
        train_set, held_out = load_split(run)
        if not train_set:
            what = (
                "graded solutions" if run.objective == Objective.OUTCOME else "completed labelings"
            )
            raise RunError(f"no {what} to train on ({lines} selected)")
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
        run.mark_failed(
            f"Cannot start: {exc}. Start a new run once the data or config is fixed.",
            resumable=False,
        )
        return None
    except Exception as exc:
        _fail(run, exc)
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
            phase="load",
            phase_done=0,
            phase_total=0,
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
        reporter.write(
            phase="evaluate",
            phase_done=0,
            phase_total=0,
            step=result.step,
            total_steps=result.total_steps,
        )
        if run.objective == Objective.OUTCOME:
            return _finish_outcome(run, config, result, dataset_version, held_out, description)
        metrics = {**result.metrics, **evaluate_held_out(result.output_dir, held_out, count)}
        metrics.update(
            evaluate_processbench_files(result.output_dir, description["processbench"], count)
        )
        active = ModelVersion.active(run.project_id)
        recorded = description.get("evaluation_set")
        if recorded:
            metrics["evaluation_set"] = evaluate_on_evaluation_set(
                recorded, result.output_dir, active, count
            )
        missing = description.get("evaluation_set_missing") or NO_SET
        if reporter.should_stop():  # asked during an evaluation too short to report twice
            raise Cancelled
        return _finish(run, config, result.output_dir, dataset_version, metrics, active, missing)
    except Cancelled:
        _stop(run, reporter)
        return None
    except Exception as exc:
        _fail(run, exc)
        return None


def train_processes() -> int:
    """STEPWISE_TRAIN_PROCESSES for this machine: "auto" is its GPU count (or 1)."""
    value = str(settings.STEPWISE_TRAIN_PROCESSES).lower()
    if value == "auto":
        return torch.cuda.device_count() or 1
    return int(value)


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
    split = json.loads((model_dir / SPLIT_FILE).read_text())
    trained = {problem_key(e.problem) for e in train_set}
    if split["train_problems"] != len(trained) or trained & set(split["test_problems"]):
        raise RuntimeError(f"{model_dir / SPLIT_FILE} differs from the run's split")


def _fail(run: TrainingRun, exc: Exception) -> None:
    """Failed on the way (out of memory, a full disk, a bug): resumable from its checkpoint."""
    logger.exception("training run %s failed", run.pk)
    run.mark_failed(exc)


def _both(first: Callable[[Any], None], second: Callable[[Any], None]) -> Callable[[Any], None]:
    def call(value: Any) -> None:
        first(value)
        second(value)

    return call


def _both_counters(first: PhaseProgress, second: PhaseProgress) -> PhaseProgress:
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
    if reporter.cancelled:
        run.mark_cancelled()
    else:
        run.mark_failed("Stopped before the end (worker shutting down); resume to continue.")


def _finish_outcome(
    run: TrainingRun,
    config: Any,
    result: TrainResult,
    dataset_version: str,
    held_out: Sequence,
    description: dict[str, Any],
) -> ModelVersion:
    """An ORM's end: solution AUROC of correctness on held-out problems and on the evaluation
    set's graded solutions, its own gate (`outcome_gate`); recorded, never activated."""
    metrics = {**result.metrics, **evaluate_outcome_held_out(result.output_dir, held_out)}
    recorded = description.get("evaluation_set")
    if recorded:
        metrics["evaluation_set"] = evaluate_outcome_on_evaluation_set(recorded, result.output_dir)
    gate = outcome_gate(metrics, missing=description.get("evaluation_set_missing") or NO_SET)
    metrics = {**metrics, "gate": gate}
    with transaction.atomic():
        version = ModelVersion.objects.create(
            run=run,
            project_id=run.project_id,
            name=f"{run.name or 'ORM'} #{run.pk}",
            backbone=config.backbone,
            artifact_path=result.output_dir,
            objective=Objective.OUTCOME,
            dataset_version=dataset_version,
            metrics=metrics,
            passed_evaluation=gate["passed"],
        )
        run.mark_succeeded(metrics=metrics, phase="done", heartbeat_at=timezone.now())
    return version


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
            project_id=run.project_id,
            name=f"{run.name or 'run'} #{run.pk}",
            backbone=config.backbone,
            artifact_path=model_dir,
            dataset_version=dataset_version,
            metrics=metrics,
            passed_evaluation=gate["passed"],
        )
        if gate["passed"] and run.dataset_description.get("activate", True):
            version.activate()
        run.mark_succeeded(metrics=metrics, phase="done", heartbeat_at=timezone.now())
    return version
