"""Two processes under torchrun (gloo, CPU) train as one does: the same loss curve when the
global batch is the same, and a checkpoint written by two processes resumes in one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modeling.training.cli import config_flags
from modeling.training.model import ProcessRewardModel
from modeling.training.train import latest_checkpoint, train
from tests.helpers.checkpoints import read_checkpoint
from tests.helpers.tiny_models import SAMPLES

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


def torchrun(*args: str, nproc: int = 2) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--standalone",  # rendezvous on a free local port: tests may run beside other torchruns
        *args,
    ]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def two_process_cli_run(config) -> None:
    torchrun(
        "-m",
        "modeling.training.cli",
        "train",
        "--prm800k",
        str(SAMPLES),
        *config_flags(config),
    )


def assert_curves_match(a, b, rel=1e-4):
    assert [s for s, _ in a] == [s for s, _ in b]
    for (step, x), (_, y) in zip(a, b, strict=True):
        assert x == pytest.approx(y, rel=rel, abs=1e-6), f"step {step}: {x} != {y}"


# Head mode under DDP: test_two_processes_attending_with_flex_train_like_one_with_sdpa.
@pytest.mark.parametrize("mode", ["full", "lora"])
def test_two_processes_train_like_one_with_the_same_global_batch(
    mode, tiny_llama, make_config, samples, tmp_path
):
    # One process taking 2 micro-batches a step sees what 2 processes taking 1 each see.
    settings = dict(mode=mode, max_steps=4, batch_tokens=1024, max_length=512, lora_dropout=0.0)
    one = train(
        make_config(tiny_llama, grad_accum=2, output_dir=str(tmp_path / "one"), **settings),
        samples,
    )
    two_config = make_config(tiny_llama, grad_accum=1, output_dir=str(tmp_path / "two"), **settings)
    two_process_cli_run(two_config)

    two_curve = read_checkpoint(latest_checkpoint(tmp_path / "two"))
    meta = json.loads((latest_checkpoint(tmp_path / "two") / "meta.json").read_text())
    assert meta["world_size"] == 2
    assert_curves_match(meta["loss_curve"], one.loss_curve)
    saved = json.loads((tmp_path / "two" / "prm.json").read_text())
    assert saved["world_size"] == 2 and saved["global_batch"]["micro_batches"] == 2
    # The trained parameters agree too, whether sharded (full) or replicated (DDP).
    a = read_checkpoint(latest_checkpoint(tmp_path / "one"))["model"]
    assert a.keys() == two_curve["model"].keys()
    for name in a:
        torch.testing.assert_close(two_curve["model"][name], a[name], rtol=1e-3, atol=1e-5)
    # And the model rank 0 saved loads and scores in one process.
    model = ProcessRewardModel.load(tmp_path / "two")
    reference = ProcessRewardModel.load(tmp_path / "one")
    head_a, head_b = model.head.weight, reference.head.weight
    torch.testing.assert_close(head_a, head_b, rtol=1e-3, atol=1e-5)


def test_two_processes_attending_with_flex_train_like_one_with_sdpa(
    tiny_llama, make_config, samples, tmp_path
):
    # The new path against the old: FlexAttention's block mask over packed rows in every
    # step's forward pass (no feature cache) under DDP, against the dense mask in one process.
    # Head mode: the CPU has no FlexAttention backward pass.
    # 1024 tokens: two of the six sample trees share a packed row; 3 steps of 2 micro-batches
    # see all five packed rows.
    settings = dict(
        mode="head", cache_features=False, max_steps=3, batch_tokens=1024, max_length=1024
    )
    one = train(
        make_config(
            tiny_llama, attention="sdpa", grad_accum=2, output_dir=str(tmp_path / "one"), **settings
        ),
        samples,
    )
    two_config = make_config(
        tiny_llama, attention="flex", grad_accum=1, output_dir=str(tmp_path / "two"), **settings
    )
    two_process_cli_run(two_config)

    assert one.metrics["packed_rows"] < one.metrics["rows"]
    meta = json.loads((latest_checkpoint(tmp_path / "two") / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["config"]["attention"] == "flex"
    assert meta["config"]["pack_solutions"]
    assert_curves_match(meta["loss_curve"], one.loss_curve)
    a = read_checkpoint(latest_checkpoint(tmp_path / "one"))["model"]
    b = read_checkpoint(latest_checkpoint(tmp_path / "two"))["model"]
    assert a.keys() == b.keys() == {"head.weight", "head.bias"}
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-5)


def test_a_checkpoint_written_by_two_processes_resumes_in_one(
    tiny_llama, make_config, samples, tmp_path
):
    settings = dict(
        mode="full", max_steps=6, batch_tokens=1024, max_length=512, checkpoint_every=1000
    )
    straight = train(
        make_config(tiny_llama, grad_accum=2, output_dir=str(tmp_path / "straight"), **settings),
        samples,
    )
    config = make_config(tiny_llama, output_dir=str(tmp_path / "run"), **settings)
    torchrun(str(HERE / "torchrun_train.py"), json.dumps(config.to_dict()), str(SAMPLES), "3")
    checkpoint = latest_checkpoint(tmp_path / "run")
    assert checkpoint.name == "step-00000003"
    assert not (tmp_path / "run" / "prm.json").exists()  # stopped, not finished

    with pytest.raises(ValueError, match="resume with grad_accum 2"):
        train(config, samples)  # one process, same grad_accum: a different global batch
    resumed = train(config.replace(grad_accum=2), samples)

    assert resumed.step == 6 and not resumed.stopped
    # Sharded parameters and optimizer state came back whole: the run ends where one
    # process would have ended without a stop.
    assert_curves_match(resumed.loss_curve, straight.loss_curve)
    a = read_checkpoint(latest_checkpoint(tmp_path / "run"))["model"]
    b = read_checkpoint(latest_checkpoint(tmp_path / "straight"))["model"]
    for name in b:
        torch.testing.assert_close(a[name], b[name], rtol=1e-3, atol=1e-5)
    assert json.loads((tmp_path / "run" / "prm.json").read_text())["world_size"] == 1
