"""Every benchmark README.md and docs/*.md document starts as written: `python -m
benchmarks.NAME --help` from the root of a fresh copy of the checkout (the files git would
clone), with no PYTHONPATH, exits 0 and prints its usage. And every benchmark with a
`__main__` entry is documented that way, so a new one cannot go unlisted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MODULE_COMMAND = re.compile(r"-m benchmarks\.([a-z_][a-z0-9_]*)\b")  # not the placeholder NAME
# The old form: run as a script, benchmarks/ lands first on sys.path and `import benchmarks`
# (or a module named like the stdlib's) goes wrong.
SCRIPT_COMMAND = re.compile(r"python3?\s+benchmarks/\w+\.py")


def documented() -> set[str]:
    return {name for doc in DOCS for name in MODULE_COMMAND.findall(doc.read_text())}


def runnable() -> set[str]:
    """The public benchmarks: benchmarks/*.py with a __main__ entry (_private helpers are run by
    other benchmarks, not by people)."""
    return {
        path.stem
        for path in (ROOT / "benchmarks").glob("*.py")
        if not path.stem.startswith("_") and 'if __name__ == "__main__":' in path.read_text()
    }


def fresh_copy(into: Path) -> Path:
    """The checkout's files as a clone would have them (tracked, plus new files not ignored),
    without build outputs, caches or a local database."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not there
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def help_of(name: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", f"benchmarks.{name}", "--help"]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)


def test_every_benchmark_is_documented_as_a_module_command():
    names = documented()
    assert names, "README.md and docs/*.md document no `python -m benchmarks.NAME` command"
    assert names <= runnable(), f"documented but no such benchmark: {sorted(names - runnable())}"
    assert runnable() <= names, f"not documented: {sorted(runnable() - names)}"
    script_forms = [
        f"{doc.name}: {line.strip()}"
        for doc in DOCS
        for line in doc.read_text().splitlines()
        if SCRIPT_COMMAND.search(line)
    ]
    assert not script_forms, "run benchmarks as `python -m benchmarks.NAME`:\n" + "\n".join(
        script_forms
    )


def test_every_documented_benchmark_prints_its_help_from_a_fresh_clone(tmp_path):
    root = fresh_copy(tmp_path / "clone")
    assert not (root / "benchmarks" / "queue.py").exists()  # it shadowed the stdlib's `queue`
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    names = sorted(documented())
    assert names
    # Each imports torch or Django: a few seconds apiece, so all at once.
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        done = dict(zip(names, pool.map(lambda name: help_of(name, root, env), names), strict=True))
    failed = {
        name: run.stderr[-1500:]
        for name, run in done.items()
        if run.returncode != 0 or not run.stdout.startswith("usage:")
    }
    assert not failed, failed
    for name, run in done.items():
        assert "-h, --help" in run.stdout, name
