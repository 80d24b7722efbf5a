"""benchmarks/train_quality.py starts as documented and refuses a split too small to report
a spread: its options are parsed before anything heavy is loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import train_quality

ROOT = Path(__file__).resolve().parent.parent


def test_train_quality_prints_its_help_as_a_module():
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.train_quality", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-1500:]
    assert run.stdout.startswith("usage:")
    for option in ("--folds", "--modes", "--layers", "--processbench-items", "--trl-python"):
        assert option in run.stdout


def test_train_quality_takes_both_modes_and_the_cpu_defaults():
    args = train_quality.parse_args(["--modes", "full, lora"])
    assert args.modes == ["full", "lora"]
    default = train_quality.parse_args([])
    assert (default.modes, default.folds, default.layers) == (["lora"], 5, 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--folds", "3"], "--folds must be at least 5"),
        (["--modes", "head"], "--modes takes lora, full or lora,full"),
    ],
)
def test_train_quality_refuses_fewer_than_five_folds_or_an_unknown_mode(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_quality.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
