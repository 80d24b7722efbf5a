"""TRL 1.13.0's PRMTrainer beside ours: its virtualenv, our labels in its format, and one run
of `_train_trl.py` in that virtualenv (benchmarks.train and benchmarks.train_quality share it).

TRL lives in its own virtualenv (default $STEPWISE_CACHE/venv-trl) and runs as a subprocess,
so its pins never touch the project's. TRL's code runs as released: only its inputs are ours.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRL_VERSION = "1.13.0"
# peft: PRMTrainer's peft_config (the LoRA side of benchmarks.train_quality).
TRL_PINS = [f"trl=={TRL_VERSION}", "torch==2.13.0", "transformers==5.23.0", "peft==0.21.2"]


def trl_venv() -> Path:
    from modeling.training.backbones import cache_dir

    return cache_dir() / "venv-trl"


def setup_trl(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *TRL_PINS], check=True)


def trl_python(given: str | None, setup: bool) -> Path | None:
    """The TRL virtualenv's python (created first when `setup`); None, said why, if missing."""
    python = Path(given) if given else trl_venv() / "bin" / "python"
    if setup and not python.exists():
        setup_trl(trl_venv())
    if not python.exists():
        print(
            f"TRL: no virtualenv at {python.parent.parent}; run with --setup-trl "
            f"(pip install {' '.join(TRL_PINS)})"
        )
        return None
    return python


def trl_rows(examples: list) -> list[dict]:
    """The same labels in TRL's stepwise format: the path, then one row per alternative."""
    rows = []
    for e in examples:
        if e.steps:
            labels = [-100 if r is None else r + 1 for r in e.ratings]
            rows.append({"prompt": e.problem, "completions": e.steps, "labels": labels})
        for a in e.alternatives:
            rows.append(
                {
                    "prompt": e.problem,
                    "completions": e.steps[: a.after] + [a.text],
                    "labels": [-100] * a.after + [a.rating + 1],
                }
            )
    return rows


def run_trl(
    python: Path, model_dir: Path, rows: list[dict], workdir: Path, options: list[str]
) -> dict[str, Any] | None:
    """`_train_trl.py` on `rows` in TRL's virtualenv: its JSON report (tokens, labels,
    seconds ...), or None after printing why it failed."""
    data = workdir / "trl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    started = time.perf_counter()
    done = subprocess.run(
        [
            str(python),
            str(REPO / "benchmarks" / "_train_trl.py"),
            "--model-dir",
            str(model_dir),
            "--data",
            str(data),
            *options,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode:
        print(done.stderr[-3000:])
        print(f"TRL: failed after {time.perf_counter() - started:.0f} s")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])
