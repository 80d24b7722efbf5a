"""The training CLI as a torchrun process group on this machine, launched and watched by the
gpu worker (`execution.execute_training_run` when STEPWISE_TRAIN_PROCESSES > 1); and the CLI's
command line and environment for any child process that does model work (`cli_command`).

No database here: `execution` turns what this module reads (progress lines, exit code, files)
into rows. torchrun starts each rank in a session of its own, so tearing the group down signals
torchrun's process group and every rank found under it, never by name.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs installed (types-psutil)

ROOT = Path(__file__).resolve().parents[2]  # the checkout: `-m modeling.training.cli` from here
TERMINATE_GRACE_S = 30.0
KILL_WAIT_S = 10.0  # SIGKILL cannot be ignored; this only bounds a stuck (D-state) process
LOG_TAIL_CHARS = 2000


def command(
    processes: int, data_file: Path, holdout_fraction: float, flags: Sequence[str], **files: Path
) -> list[str]:
    """`torchrun --standalone --nproc-per-node N -m modeling.training.cli train ...`;
    `files` are the CLI's --progress-file and --stop-file."""
    extra = [item for name, path in files.items() for item in (f"--{name}-file", str(path))]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # rendezvous on a free local port: one machine
        f"--nproc-per-node={processes}",
        "-m",
        "modeling.training.cli",
        "train",
        "--prm800k",
        str(data_file),
        "--holdout-fraction",
        repr(holdout_fraction),  # repr round-trips the float: the same split as load_split
        *flags,
        *extra,
    ]


def cli_command(*args: str) -> list[str]:
    """`python -m modeling.training.cli ARGS` with this interpreter: model work in a child process
    (an export, an adapter's merge), so the process that asks never loads a model."""
    return [sys.executable, "-m", "modeling.training.cli", *args]


def cli_env() -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH: the child imports this code."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def launch(argv: Sequence[str], *, cwd: Path, log: Path) -> subprocess.Popen:
    """Start `argv` in its own session (a process group to signal), output appended to `log`.
    On Linux torchrun also gets SIGTERM if this process dies (a SIGKILLed worker), and
    forwards it to the ranks: a killed worker leaves no ranks training on."""
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )


def _die_with_parent() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork, called after
    pr_set_pdeathsig, sigterm = 1, int(signal.SIGTERM)

    def set_pdeathsig() -> None:
        prctl(pr_set_pdeathsig, sigterm)

    return set_pdeathsig


def terminate(proc: subprocess.Popen, grace_s: float | None = None) -> None:
    """SIGTERM torchrun's process group and every process under it (each rank leads its own
    session), then SIGKILL whatever is still there after `grace_s`. Waits for torchrun."""
    grace_s = TERMINATE_GRACE_S if grace_s is None else grace_s
    deadline = time.monotonic() + grace_s
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    own = os.getpgid(0)
    groups = {proc.pid} | {g for g in map(_pgid, family) if g is not None and g != own}
    _signal_groups(groups, signal.SIGTERM)  # torchrun also passes it on to its ranks
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_groups({proc.pid}, signal.SIGKILL)
    _, alive = psutil.wait_procs(family, timeout=max(0.0, deadline - time.monotonic()))
    for p in alive:
        try:
            p.kill()  # psutil checks it is still the process it listed (no reused pid)
        except psutil.NoSuchProcess:
            pass
    _wait_until_dead(alive, timeout_s=KILL_WAIT_S)
    proc.wait()


def _wait_until_dead(processes: list[psutil.Process], timeout_s: float) -> None:
    """SIGKILL is delivered when the kernel next schedules the process, later on a loaded
    machine: wait for it so that the caller sees no rank left. An orphaned rank belongs to
    init, which may never reap it in a container, so a zombie counts as dead (it holds no GPU
    memory)."""
    deadline = time.monotonic() + timeout_s
    left = list(processes)
    while left and time.monotonic() < deadline:
        left = [p for p in left if _still_running(p)]
        if left:
            time.sleep(0.02)


def _still_running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pgid(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except ProcessLookupError:
        return None


def _signal_groups(groups: set[int], sig: signal.Signals) -> None:
    for group in groups:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass


class ProgressFile:
    """The JSON lines rank 0 appends (one `Progress` each): `new()` gives the complete lines
    written since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def new(self) -> Iterator[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next call
        self.offset += end
        for line in chunk[:end].splitlines():
            if line.strip():
                yield json.loads(line)


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - chars))
            return f.read().decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return ""
