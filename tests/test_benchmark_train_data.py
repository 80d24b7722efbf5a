"""`python -m benchmarks.train --data PATH` trains on a TRL-format file (no TRL needed with
--skip-trl) and prints what it read and its tree-training line."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.paths import ROOT

ROWS = [
    {"prompt": "What is 2+3?", "completions": ["2+3=5.", "So 5."], "labels": [True, True]},
    {"prompt": "What is 2+3?", "completions": ["2+3=5.", "So 6."], "labels": [True, False]},
    {"prompt": "What is 7-4?", "completions": ["7-4=2.", "So 2."], "labels": [False, False]},
]


def test_benchmark_train_runs_on_trl_format_input_and_prints_its_tree_training_line(tmp_path):
    data = tmp_path / "trl.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    small = ["--hidden", "64", "--layers", "1", "--max-length", "128", "--batch-tokens", "512"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.train", "--data", str(data), "--skip-trl", *small],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert (
        f"{data}: read as TRL stepwise supervision (JSONL) (3 rows -> 2 solutions, 5 step labels)"
        in lines
    )
    tree = [line for line in lines if line.startswith("tree training: labeled steps/s ours ")]
    assert len(tree) == 1 and "trl n/a" in tree[0] and "tokens per labeled step ours" in tree[0]
