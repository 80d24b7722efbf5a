"""Runs trained by a torchrun process group (STEPWISE_TRAIN_PROCESSES=2, gloo on the CPU) that
execute_training_run launches and supervises: the row, cancel, a killed rank, a torn-down task.

Each torchrun start costs about ten seconds, so the real ones are few, and they run in the
PostgreSQL pass only: what they prove is the process group's, and the row they write is an
ordinary one (test_runs.py writes it on both databases). The tear-down test stands a small script in
for torchrun. Nothing waits on time: the tests act from the progress callback, on what the row
or the progress says.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
from celery.exceptions import SoftTimeLimitExceeded

from labeling.services.importing import import_prm800k
from modeling.models import ModelVersion, TrainingRun
from modeling.services import execution, run_data, runs, scoring, torchrun
from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config


@pytest.fixture(scope="module")
def backbone(tmp_path_factory) -> str:
    return make_tiny_backbone(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def labels(db, shared_data):
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")


@pytest.fixture
def two_processes(settings, open_evaluation_gate):
    settings.STEPWISE_TRAIN_PROCESSES = 2
    settings.STEPWISE_RUN_PROGRESS_SECONDS = 0  # every report written, cancel read each time


STEPS = 40


def full(backbone: str, **overrides) -> dict:
    """Full fine-tuning of the tiny Llama (FSDP2 over gloo, about 0.4 s a step here): a cancel
    or a kill lands around step 3, far from the last of STEPS even on a loaded machine."""
    return {**tiny_train_config(backbone), "mode": "full", "lr": 1e-3, **overrides}


def torchrun_processes() -> list[psutil.Process]:
    """torchrun (a child of this test process) and its ranks."""
    found = []
    for child in psutil.Process().children():
        if "torch.distributed.run" in " ".join(child.cmdline()):
            found += [child, *child.children()]
    return found


def gone(processes: list[psutil.Process]) -> bool:
    def dead(p: psutil.Process) -> bool:
        try:
            return p.status() == psutil.STATUS_ZOMBIE  # exited; its reaper has not looked yet
        except psutil.NoSuchProcess:
            return True

    return all(dead(p) for p in processes)


def first_train_steps(into: list[int]):
    def record(p) -> None:
        if p.phase == "train":
            into.append(p.step)

    return record


def test_a_run_trains_in_two_processes_and_records_its_model(
    labels, backbone, two_processes, tmp_path
):
    from modeling.training.config import TrainConfig
    from modeling.training.data import problem_key
    from modeling.training.model import ProcessRewardModel

    scoring_model = ProcessRewardModel.from_config(
        TrainConfig.from_dict(tiny_train_config(backbone))
    )
    scoring.load_model_dir(str(scoring_model.save(tmp_path / "scoring")))  # a scoring model, cached
    cached_at_first_report: list[int] = []

    def progress(p) -> None:
        if not cached_at_first_report:
            cached_at_first_report.append(scoring.load_model_dir.cache_info().currsize)

    run = runs.create_training_run(config=tiny_train_config(backbone), holdout_fraction=0.25)
    version = execution.execute_training_run(run.pk, progress=progress)

    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert cached_at_first_report == [0]  # no cached model held memory while it trained
    assert version.is_active and version == ModelVersion.active() and version.run == run
    assert run.step == run.total_steps == 3 and [p[0] for p in run.loss_curve] == [1, 2, 3]
    assert run.metrics["world_size"] == 2 and "accuracy" in run.metrics["held_out"]
    model_dir = Path(version.artifact_path)
    saved = json.loads((model_dir / "prm.json").read_text())
    assert saved["world_size"] == 2 and saved["config"] == run.config
    # The CLI split the frozen data itself: the same held-out problems as load_split.
    _, held_out = run_data.load_split(run)
    split = json.loads((model_dir / execution.SPLIT_FILE).read_text())
    assert held_out and split["test_problems"] == sorted({problem_key(e.problem) for e in held_out})
    assert "train" in (Path(run.output_dir) / execution.LOG_FILE).read_text()
    assert gone(torchrun_processes())


def test_cancel_stops_every_rank_then_resume_finishes_the_run(labels, backbone, two_processes):
    before = ModelVersion.active()
    run = runs.create_training_run(config=full(backbone, max_steps=STEPS, checkpoint_every=2))
    asked = []

    def cancel_once_the_row_shows_a_step(p) -> None:  # a user presses Cancel while it trains
        if not asked and TrainingRun.objects.get(pk=run.pk).step >= 1:
            asked.append(runs.cancel_training_run(run))

    assert execution.execute_training_run(run.pk, progress=cancel_once_the_row_shows_a_step) is None
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.CANCELLED and run.resumable, run.error
    assert 1 <= run.step < STEPS and ModelVersion.active() == before
    assert not (Path(run.output_dir) / execution.MODEL_DIR / "prm.json").exists()

    runs.resume_training_run(run, send=False)
    steps: list[int] = []
    version = execution.execute_training_run(run.pk, progress=first_train_steps(steps))
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED and run.attempts == 2, run.error
    assert steps[0] > 1 and run.step == STEPS and version.is_active  # from its checkpoint
    assert [p[0] for p in run.loss_curve] == list(range(1, STEPS + 1))  # no step trained twice


def test_a_killed_rank_fails_the_run_resumably_and_resume_finishes_it(
    labels, backbone, two_processes
):
    run = runs.create_training_run(config=full(backbone, max_steps=STEPS, checkpoint_every=2))
    killed: list[psutil.Process] = []

    def kill_a_rank_after_a_checkpoint(p) -> None:  # step 3 reported: step 2's checkpoint saved
        if not killed and p.phase == "train" and p.step >= 3:
            family = torchrun_processes()
            os.kill(family[-1].pid, signal.SIGKILL)  # a rank, lost (OOM killer, a fault)
            killed.extend(family)

    assert execution.execute_training_run(run.pk, progress=kill_a_rank_after_a_checkpoint) is None
    run.refresh_from_db()
    assert killed and run.status == TrainingRun.Status.FAILED and run.resumable
    assert "training processes failed (torchrun exited with code 1" in run.error
    assert "SIGKILL" in run.error  # the end of the log names the lost rank
    assert gone(killed)  # torchrun tore down the other rank and exited
    assert ModelVersion.objects.count() == 0

    runs.resume_training_run(run, send=False)
    steps: list[int] = []
    version = execution.execute_training_run(run.pk, progress=first_train_steps(steps))
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED and run.attempts == 2, run.error
    assert steps[0] > 1 and run.step == STEPS and version.is_active  # from its checkpoint
    assert [p[0] for p in run.loss_curve] == list(range(1, STEPS + 1))


# Stands in for torchrun: starts a "rank" in a session of its own that ignores SIGTERM, which
# reports step 1 and waits forever.
FAKE_TORCHRUN = """
import subprocess, sys, time
rank = '''
import json, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
line = dict(phase="train", step=1, total=10, loss=1.0, lr=0.1, elapsed_s=0.1)
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(line) + "\\\\n")
time.sleep(600)
'''
subprocess.Popen([sys.executable, "-c", rank, sys.argv[1]], start_new_session=True)
time.sleep(600)
"""


def test_a_task_torn_down_mid_run_leaves_no_training_process(
    labels, backbone, two_processes, monkeypatch
):
    monkeypatch.setattr(torchrun, "TERMINATE_GRACE_S", 1.0)
    monkeypatch.setattr(
        torchrun,
        "command",
        lambda *args, progress, stop: [sys.executable, "-c", FAKE_TORCHRUN, str(progress)],
    )
    run = runs.create_training_run(config=tiny_train_config(backbone))
    seen: list[psutil.Process] = []

    def time_limit(p) -> None:  # Celery's soft time limit fires while the ranks train
        for child in psutil.Process().children():
            if FAKE_TORCHRUN in child.cmdline():
                seen.extend([child, *child.children()])
        raise SoftTimeLimitExceeded()

    assert execution.execute_training_run(run.pk, progress=time_limit) is None
    run.refresh_from_db()
    assert len(seen) == 2 and gone(seen)  # the launcher and the rank that ignored SIGTERM
    assert run.status == TrainingRun.Status.FAILED and run.resumable
    assert run.error.startswith("SoftTimeLimitExceeded")


def test_auto_is_this_machines_gpu_count(settings):
    import torch

    settings.STEPWISE_TRAIN_PROCESSES = "auto"
    assert execution.train_processes() == (torch.cuda.device_count() or 1)
    settings.STEPWISE_TRAIN_PROCESSES = "3"
    assert execution.train_processes() == 3
