"""Side by side with Label Studio, on this machine, in one run: its harness, then ours, then one
table of ratios.

    python -m benchmarks.peers [--seconds 60] [--labelers 1,20,50] [--skip-peer]
                               [--skip-import-export] [--repeat 3]

1. Label Studio 1.23.2: ../shared/peers/label_studio/run.sh (beside the checkout, or under
   $STEPWISE_PEERS; see ../shared/peers/README.md), with LOAD_S=--seconds and SKIP_RUNSERVER=1 (uWSGI, its
   production server, only). It needs Label Studio in /tmp/ls-venv ($LS_VENV); the script
   stops with the install command when it is missing. It starts its own PostgreSQL (:5433,
   the port benchmarks/soak.py's cluster uses too: never run both at once) and server
   (:8089), stops them, and writes /tmp/ls-bench/results.jsonl. Its full output
   goes to /tmp/ls-peers-run.log; its `==` progress lines are echoed. run.sh always measures
   1 labeler (30 s), 20 and 50; a level of --labelers it lacks shows n/a. --skip-peer reads
   the last results.jsonl instead (and says so).
2. Ours: benchmarks/queue_load.py at each --labelers level for --seconds (its own database
   stepwise_peers_queue, reseeded once: 100k solutions of 10 steps; port 8733), then unless
   --skip-import-export benchmarks/import.py (20k PRM800K lines, 200k step labels) and
   benchmarks/export.py (200k step labels), each on a database of its own (stepwise_peers_*).
   Their output is echoed.

Then one table: step ratings/s saturated (no think time) at each level, next-item and submit
p50/p99 at each level, import and export step labels/s; ours, Label Studio's, ours / Label
Studio, and which is better. Label Studio submits a whole labeling (10 steps) per request:
its step ratings/s are results.jsonl's annotations_per_s x 10, and its import and export rates
are tasks x 10 step labels per second. The last line reads

    side-by-side: step ratings/s at 50 labelers: ours X, Label Studio Y, ratio Z

(X and Y step ratings/s, Z = X / Y). --labelers must include 50. Exits 1 with a message if a
harness is missing or fails, or an output cannot be read; when run.sh fails after writing its
load levels (its bulk import and exports come last) the table is still printed, with a
warning, and the exit status is 1. Takes about 15 minutes at
--seconds 60 on 2 cores (Label Studio's run about 8 of them, its exports included).

--repeat N runs all of it N times back to back (Label Studio then ours each time; our database
seeded once), prints each run's table as above, then per level each run's step ratings/s
ratio and the median of the N: the figure to quote, as one run on a shared machine can be
off by a third.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# ../shared/peers beside the checkout, or $STEPWISE_PEERS (a worktree elsewhere).
PEERS = Path(os.environ.get("STEPWISE_PEERS") or ROOT.parent / "shared" / "peers")
RUN_SH = PEERS / "label_studio" / "run.sh"
LS_VENV = Path(os.environ.get("LS_VENV", "/tmp/ls-venv"))
RESULTS = Path(os.environ.get("BENCH_DIR", "/tmp/ls-bench")) / "results.jsonl"
PEER_LOG = Path("/tmp/ls-peers-run.log")  # not under BENCH_DIR: run.sh empties that first
INSTALL = "python3 -m venv /tmp/ls-venv && /tmp/ls-venv/bin/pip install label-studio==1.23.2"
LS_STEPS = 10  # steps per Label Studio task and annotation (its bench.py's N_STEPS)
QUEUE_DB, QUEUE_PORT, SOLUTIONS = "stepwise_peers_queue", 8733, 100_000
IMPORT_DB, EXPORT_DB, BULK_STEP_LABELS = "stepwise_peers_import", "stepwise_peers_export", 200_000


# --- reading the outputs -------------------------------------------------------------------------


def _line(text: str, pattern: str, what: str) -> re.Match[str]:
    match = re.search(pattern, text, re.MULTILINE)
    if match is None:
        raise ValueError(f"no {what} line in the output: {text[-400:]!r}")
    return match


def _number(text: str) -> float:
    return float(text.replace(",", ""))


NUM = r"(nan|[0-9][0-9,]*(?:\.[0-9]+)?)"


def parse_queue(text: str) -> dict[str, float]:
    """benchmarks/queue_load.py's output at one level: step ratings/s, claim (next item) and submit
    p50/p99 in ms, non-200 answers, lost ratings and overshoot."""
    claim = _line(text, rf"^claim .*?p50\s+{NUM} ms.*?p99\s+{NUM} ms", "claim")
    submit = _line(text, rf"^submit .*?p50\s+{NUM} ms.*?p99\s+{NUM} ms", "submit")
    throughput = _line(
        text, rf"^throughput: .*? {NUM} step ratings/s .*?; (\d+) non-200", "throughput"
    )
    checks = _line(text, r"^overshoot: (\d+) .*lost ratings: (\d+)", "overshoot")
    cpu = re.search(
        rf"^cpu per 1000 step ratings: app {NUM} s, database {NUM} s", text, re.MULTILINE
    )
    return {
        "ratings_per_s": _number(throughput.group(1)),
        "errors": int(throughput.group(2)),
        "next_p50": _number(claim.group(1)),
        "next_p99": _number(claim.group(2)),
        "submit_p50": _number(submit.group(1)),
        "submit_p99": _number(submit.group(2)),
        "overshoot": int(checks.group(1)),
        "lost": int(checks.group(2)),
        # The server's CPU (app and PostgreSQL) per 1000 step ratings; None from an output
        # that does not print it.
        "server_cpu": None if cpu is None else _number(cpu.group(1)) + _number(cpu.group(2)),
    }


def parse_import(text: str) -> float:
    """benchmarks/import.py's output: our importer's step labels/s."""
    return _number(
        _line(text, rf"^import_prm800k: .*= {NUM} step labels/s", "import_prm800k").group(1)
    )


def parse_export(text: str) -> float:
    """benchmarks/export.py's output: the streamed export's step labels/s."""
    return _number(
        _line(text, rf"^streamed export .*= {NUM} step labels/s", "streamed export").group(1)
    )


@dataclass
class Peer:
    """Label Studio's figures from its results.jsonl: per labeler level (uWSGI runs; the last
    one wins) step ratings/s, next and submit p50/p99 (ms), errors; import and export of
    annotated tasks in step labels/s; how many lines could not be read."""

    load: dict[int, dict[str, float | None]] = field(default_factory=dict)
    import_rate: float | None = None
    export_rate: float | None = None
    unreadable: int = 0


def _rate(items: object, seconds: object) -> float | None:
    if not isinstance(items, int | float) or not isinstance(seconds, int | float) or not seconds:
        return None
    return items * LS_STEPS / seconds


def _server_cpu(record: dict[str, Any]) -> float | None:
    """Label Studio's app (uWSGI) and PostgreSQL CPU seconds per 1000 step ratings over a load
    level, as its harness measured them (None where it could not)."""
    app, database = record.get("app_server_cpu_s"), record.get("postgres_cpu_s")
    steps = (record.get("annotations_per_s") or 0) * (record.get("duration_s") or 0) * LS_STEPS
    if not isinstance(app, int | float) or not isinstance(database, int | float) or not steps:
        return None
    return 1000 * (app + database) / steps


def read_peer(text: str) -> Peer:
    peer = Peer()
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step, server = record.get("step"), record.get("server", "uwsgi")
            if step == "load" and server == "uwsgi":
                per_s = record.get("annotations_per_s")
                peer.load[int(record["users"])] = {
                    "ratings_per_s": None if per_s is None else per_s * LS_STEPS,
                    "next_p50": (record.get("next") or {}).get("p50_ms"),
                    "next_p99": (record.get("next") or {}).get("p99_ms"),
                    "submit_p50": (record.get("post_annotation") or {}).get("p50_ms"),
                    "submit_p99": (record.get("post_annotation") or {}).get("p99_ms"),
                    "errors": record.get("error_count"),
                    "server_cpu": _server_cpu(record),
                }
            elif step == "import" and record.get("with_annotations"):
                if record.get("status") in (200, 201):
                    peer.import_rate = _rate(record.get("n_tasks"), record.get("wall_s"))
            elif step == "export" and server == "uwsgi" and record.get("format") == "JSON":
                if record.get("status") == 200:
                    peer.export_rate = _rate(record.get("items"), record.get("wall_s"))
        except (ValueError, TypeError, KeyError, AttributeError):
            peer.unreadable += 1
    return peer


# --- the table ---------------------------------------------------------------------------------


@dataclass
class Row:
    measure: str
    ours: float | None
    peer: float | None
    higher_is_better: bool

    @property
    def ratio(self) -> float | None:
        if self.ours is None or self.peer is None or not self.peer:
            return None
        if math.isnan(self.ours) or math.isnan(self.peer):
            return None
        return self.ours / self.peer


def rows(
    ours: dict[int, dict[str, float]],
    peer: Peer,
    levels: list[int],
    ours_import: float | None = None,
    ours_export: float | None = None,
) -> list[Row]:
    out = []
    for n in levels:
        got = ours.get(n, {}).get("ratings_per_s")
        out.append(
            Row(
                f"step ratings/s, {_labelers(n)}",
                got,
                peer.load.get(n, {}).get("ratings_per_s"),
                True,
            )
        )
    for key, name in (
        ("server_cpu", "server CPU-s/1k"),
        ("next_p50", "next item p50 ms"),
        ("next_p99", "next item p99 ms"),
        ("submit_p50", "submit p50 ms"),
        ("submit_p99", "submit p99 ms"),
    ):
        for n in levels:
            out.append(
                Row(
                    f"{name}, {_labelers(n)}",
                    ours.get(n, {}).get(key),
                    peer.load.get(n, {}).get(key),
                    False,
                )
            )
    # Import and export rows only where a side measured them (--skip-import-export, SKIP_EXPORT).
    for name, mine, theirs in (
        ("import, step labels/s", ours_import, peer.import_rate),
        ("export, step labels/s", ours_export, peer.export_rate),
    ):
        if mine is not None or theirs is not None:
            out.append(Row(name, mine, theirs, True))
    return out


def _cell(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _ratio_cell(value: float | None) -> str:
    # Two decimals, or two significant digits below 0.1 (latency ratios get small).
    return _cell(value, 2) if value is None or value >= 0.1 else f"{value:.2g}"


def _labelers(n: int) -> str:
    return f"{n} labeler{'' if n == 1 else 's'}"


def table(table_rows: list[Row]) -> list[str]:
    lines = [
        f"{'measure':32s} {'ours':>11s} {'Label Studio':>13s} {'ours/LS':>8s}  better",
        f"{'-' * 32} {'-' * 11} {'-' * 13} {'-' * 8}  ------",
    ]
    for row in table_rows:
        ratio = row.ratio
        if ratio is None:
            better = "n/a"
        elif ratio == 1:
            better = "same"
        else:
            better = "ours" if (ratio > 1) == row.higher_is_better else "LS"
        lines.append(
            f"{row.measure:32s} {_cell(row.ours):>11s} {_cell(row.peer):>13s} "
            f"{_ratio_cell(ratio):>8s}  {better}"
        )
    return lines


def last_line(ours: float, peer: float) -> str:
    return (
        f"side-by-side: step ratings/s at 50 labelers: ours {ours:.1f}, "
        f"Label Studio {peer:.1f}, ratio {ours / peer:.2f}"
    )


def report(
    ours: dict[int, dict[str, float]],
    peer: Peer,
    levels: list[int],
    ours_import: float | None = None,
    ours_export: float | None = None,
) -> list[str]:
    """The table, its notes, and the side-by-side line last. Raises ValueError when either
    side has no step ratings/s at 50 labelers."""
    ours50 = ours.get(50, {}).get("ratings_per_s")
    peer50 = peer.load.get(50, {}).get("ratings_per_s")
    if ours50 is None or peer50 is None or not peer50 or math.isnan(ours50):
        raise ValueError(f"no step ratings/s at 50 labelers (ours {ours50}, Label Studio {peer50})")
    lines = table(rows(ours, peer, levels, ours_import, ours_export))
    errors = "; ".join(
        f"{n}: ours {_cell(ours.get(n, {}).get('errors'), 0)}, "
        f"LS {_cell(peer.load.get(n, {}).get('errors'), 0)}"
        for n in levels
    )
    lines += [
        "Label Studio submits a whole labeling (10 steps) per request, we one step: its step",
        "ratings/s = results.jsonl's annotations_per_s x 10; its next item is GET .../next, ours",
        "the claim POST /p/bench/label/next/ (in a project, as every rating and finish);",
        "import/export: annotated tasks x 10 step labels per second",
        "(LS: one 20k-task POST with annotations, JSON export; ours: benchmarks/import.py and",
        "export.py, PRM800K). No think time; LS's 1-labeler level always runs 30 s (run.sh).",
        "Server CPU-s/1k: app and PostgreSQL CPU seconds per 1000 step ratings over the level (ours:",
        "queue_load's gunicorn tree and postgres processes; LS: its harness's uWSGI and PostgreSQL",
        "trees); the load generator's own CPU is left out on both sides.",
        "ours/LS above 1 is better for rates, below 1 for latencies and CPU.",
        f"Non-200 answers per level: {errors}.",
    ]
    if peer.unreadable:
        lines.append(
            f"({peer.unreadable} unreadable lines in Label Studio's results.jsonl skipped)"
        )
    lines.append(last_line(ours50, peer50))
    return lines


def parse_levels(text: str) -> list[int]:
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of labeler counts: {text!r}") from None
    if 50 not in levels or levels[0] < 1:
        raise argparse.ArgumentTypeError("--labelers must include 50 (the last line compares it)")
    return levels


# --- running them ----------------------------------------------------------------------------


def install_command() -> str:
    """The install line ../shared/peers/README.md gives (this constant if it cannot be read)."""
    try:
        for line in (PEERS / "README.md").read_text().splitlines():
            if "pip install label-studio" in line:
                return line.strip()
    except OSError:
        pass
    return INSTALL


def run_peer(seconds: float, skip_export: bool) -> str | None:
    """Run Label Studio's run.sh; None when it succeeded, else what went wrong (the caller
    goes on if its load levels were written: its bulk import and exports come after them)."""
    if not RUN_SH.is_file():
        raise SystemExit(
            f"Label Studio's harness is missing: {RUN_SH} (../shared/peers/label_studio/run.sh "
            "beside the checkout). Use --skip-peer to reuse an earlier results.jsonl."
        )
    if not os.access(LS_VENV / "bin" / "label-studio", os.X_OK):
        raise SystemExit(
            f"Label Studio is not installed in {LS_VENV}. Install it first (a few minutes):\n"
            f"    {install_command()}"
        )
    env = dict(os.environ, LOAD_S=f"{seconds:g}", SKIP_RUNSERVER="1")
    if skip_export:
        env["SKIP_EXPORT"] = "1"
    print(f"== Label Studio: bash {RUN_SH} (LOAD_S={seconds:g}); full output in {PEER_LOG}")
    started = time.time()
    with open(PEER_LOG, "w", buffering=1) as log:  # line by line: readable while it runs
        proc = subprocess.Popen(
            ["bash", str(RUN_SH)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if line.startswith("=="):
                print(f"   {line.rstrip()}", flush=True)
        code = proc.wait()
    print(f"   Label Studio done in {time.time() - started:.0f} s, exit {code}", flush=True)
    if code:
        tail = PEER_LOG.read_text().splitlines()[-12:]
        return f"run.sh failed (exit {code}); its last lines:\n" + "\n".join(tail)
    return None


def run_ours(name: str, *args: str) -> str:
    """Run one of our benchmarks (`python -m benchmarks.NAME`) to the end; echo and return its
    output."""
    command = [sys.executable, "-m", f"benchmarks.{name}", *args]
    print(f"== ours: {' '.join(command[1:])}", flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout.rstrip(), flush=True)
    if done.returncode:
        raise SystemExit(
            f"benchmarks.{name} failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    return done.stdout


def ratio_summary(runs: list[dict[int, float | None]], levels: list[int]) -> list[str]:
    """One line per level: each run's step ratings/s ratio (ours / Label Studio) and their
    median (of the runs that have one)."""
    lines = ["step ratings/s, ours / Label Studio, run by run, and the median:"]
    for n in levels:
        got = [run.get(n) for run in runs]
        known = [r for r in got if r is not None]
        median = statistics.median(known) if known else None
        each = ", ".join(_ratio_cell(r) for r in got)
        lines.append(f"  {_labelers(n):12s} {each}   median {_ratio_cell(median)}")
    return lines


def one_run(args: argparse.Namespace, reseed: bool) -> tuple[dict[int, float | None], bool]:
    """Label Studio, then ours, then the table; returns the step ratings/s ratio per level and
    whether Label Studio's run.sh failed part way."""
    peer_failed = None
    if args.skip_peer:
        if not RESULTS.is_file():
            raise SystemExit(f"--skip-peer: no earlier results at {RESULTS}; run without it")
        written = time.strftime("%Y-%m-%d %H:%M", time.localtime(RESULTS.stat().st_mtime))
        print(f"== Label Studio: not run (--skip-peer); reusing {RESULTS}, written {written}")
    else:
        peer_failed = run_peer(args.seconds, skip_export=args.skip_import_export)
    peer = read_peer(RESULTS.read_text() if RESULTS.is_file() else "")
    if peer_failed:
        if 50 not in peer.load:
            raise SystemExit(peer_failed)
        print(f"WARNING {peer_failed}\ngoing on with the load levels it wrote to {RESULTS}")

    from benchmarks import queue_load as bench

    bench.seed(QUEUE_DB, SOLUTIONS, max(args.labelers), reseed=reseed)
    ours = {}
    for n in args.labelers:
        out = run_ours(
            "queue_load",
            *("--db", QUEUE_DB, "--port", str(QUEUE_PORT), "--solutions", str(SOLUTIONS)),
            *("--labelers", str(n), "--seconds", f"{args.seconds:g}"),
        )
        ours[n] = parse_queue(out)
    ours_import = ours_export = None
    if not args.skip_import_export:
        out = run_ours("import", "--database", IMPORT_DB, "--naive-lines", "100")
        ours_import = parse_import(out)
        out = run_ours(
            "export",
            *("--database", EXPORT_DB, "--step-labels", str(BULK_STEP_LABELS)),
            *("--naive-labelings", "200"),
        )
        ours_export = parse_export(out)

    print(
        f"\nbenchmarks/peers.py on {os.cpu_count()} cores: Label Studio 1.23.2 (uWSGI, "
        f"run.sh) then Stepwise (benchmarks/queue_load.py), {args.seconds:g} s per level"
    )
    bad = [n for n, got in ours.items() if got["lost"] or got["overshoot"]]
    if bad:
        print(f"WARNING: ours lost ratings or went over N at {bad} labelers (see above)")
    if peer_failed:
        print("WARNING: Label Studio's run.sh failed part way (above); its figures may be partial")
    print("\n".join(report(ours, peer, args.labelers, ours_import, ours_export)), flush=True)
    step_rows = rows(ours, peer, args.labelers)[: len(args.labelers)]
    return {n: row.ratio for n, row in zip(args.labelers, step_rows, strict=True)}, bool(
        peer_failed
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seconds", type=float, default=60, help="per load level (run.sh's LOAD_S)"
    )
    parser.add_argument(
        "--labelers", type=parse_levels, default=[1, 20, 50], help="levels, e.g. 1,20,50"
    )
    parser.add_argument(
        "--skip-peer", action="store_true", help=f"reuse the last {RESULTS} instead of run.sh"
    )
    parser.add_argument(
        "--skip-import-export", action="store_true", help="no import/export rows (both sides)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="whole runs back to back (Label Studio then ours each time); prints each run's "
        "table, then each step ratings/s ratio and their median",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat is 1 or more")

    runs, failed = [], False
    for number in range(1, args.repeat + 1):
        if args.repeat > 1:
            print(f"\n===== run {number} of {args.repeat} =====", flush=True)
        # Our database is seeded once: a run uses about 2% of its solutions.
        ratios, peer_failed = one_run(args, reseed=number == 1)
        runs.append(ratios)
        failed = failed or peer_failed
    if args.repeat > 1:
        print()
        print("\n".join(ratio_summary(runs, args.labelers)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
