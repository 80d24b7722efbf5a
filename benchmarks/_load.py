"""The HTTP load generator the labeling benchmarks share (benchmarks/queue_load.py, floor.py, and
soak.py's helpers): gunicorn on 127.0.0.1, labelers signed in with `requests` and then sending on
a keep-alive urllib3 connection each (threads in a few client processes), running one scenario
until a deadline, round trips and Django's own time per request (the Server-Timing header),
percentiles."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def login(base: str, username: str) -> Any:
    """A `requests` session signed in through the login form, sending the CSRF token as htmx
    does (X-CSRFToken) on every later POST."""
    import requests

    session = requests.Session()
    page = session.get(f"{base}/accounts/login/", timeout=30)
    token = CSRF.search(page.text).group(1)  # type: ignore[union-attr]
    response = session.post(
        f"{base}/accounts/login/",
        data={"username": username, "password": "pw", "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base}/accounts/login/"},
        timeout=30,
        allow_redirects=False,
    )
    assert response.status_code == 302, f"login of {username} failed: {response.status_code}"
    session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
    session.headers["Referer"] = base + "/"
    return session


class LightSession:
    """A signed-in labeler on one keep-alive urllib3 connection: the saturating scenarios'
    client (queue_load.py, floor.py). The load generator shares the machine with the server;
    a `requests.Session` spent 1.6 ms of client CPU per request here (its cookie jar, hooks and
    adapters) where urllib3, which it wraps, spends 0.7 ms. Label Studio's harness sends two
    requests per solution where ours sends one per step, so the client's cost per request
    weighs five times as much on our side. Takes the cookies and headers `login` set."""

    def __init__(self, base: str, signed_in: Any) -> None:
        import urllib3

        host, port = base.removeprefix("http://").split(":")
        self.base = base
        self.pool = urllib3.HTTPConnectionPool(host, int(port), maxsize=1, retries=False)
        cookie = "; ".join(f"{name}={value}" for name, value in signed_in.cookies.items())
        self.headers = {**signed_in.headers, "Cookie": cookie}

    def post(
        self,
        url: str,
        data: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        allow_redirects: bool = False,
        timeout: float = 60,
    ) -> LightResponse:
        assert not allow_redirects, "the scenarios read redirects themselves"
        sent = {**self.headers, **(headers or {})}
        body = None
        if data is not None:
            body = urlencode(data)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        answer = self.pool.request(
            "POST",
            url.removeprefix(self.base),
            body=body,
            headers=sent,
            redirect=False,
            timeout=timeout,
        )
        return LightResponse(answer.status, answer.headers, answer.data)


@dataclass
class LightResponse:
    """The parts of a response the scenarios read (as `requests` names them)."""

    status_code: int
    headers: Any  # urllib3's HTTPHeaderDict: case-insensitive, as requests' is
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode()


def server_seconds(response: Any) -> float:
    """Django's own time for the request (stepwise.middleware.ServerTimingMiddleware)."""
    match = re.search(r"dur=([0-9.]+)", response.headers.get("Server-Timing", ""))
    return float(match.group(1)) / 1000 if match else float("nan")


def pct(values: list[float], p: float) -> float:
    """The p-th percentile of `values` (seconds), in milliseconds; nan when there are none."""
    values = [v for v in values if v == v]  # drop nan (no Server-Timing header)
    if not values:
        return float("nan")
    values = sorted(values)
    return 1000 * values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def wait_for(base: str, timeout: float = 60) -> None:
    import requests

    end = time.time() + timeout
    while time.time() < end:
        try:
            requests.get(f"{base}/accounts/login/", timeout=2)
            return
        except requests.RequestException:
            time.sleep(0.3)
    raise SystemExit("gunicorn did not start")


def add_load_arguments(parser: Any, *, db: str, port: int) -> None:
    """The flags every gunicorn load benchmark shares (queue_load.py, floor.py): its database, the
    seed, the load and the server's shape."""
    parser.add_argument("--db", default=db)
    parser.add_argument("--solutions", type=int, default=100_000)
    parser.add_argument("--labelers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60, help="length of each load")
    # One process per core plus one, one thread each: the app is CPU-bound, and threads only
    # contend for the GIL (4x4 gthread: 5.7 labelings/s, claim p95 3.9 s; 3x1: 7.7/s, 1.3 s).
    parser.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clients", type=int, default=5, help="client processes")
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--reseed", action="store_true")


@contextmanager
def gunicorn(
    port: int, workers: int, threads: int, env: dict[str, str], wsgi: str = "stepwise.wsgi"
) -> Iterator[str]:
    """gunicorn (gthread workers) on 127.0.0.1:`port` for the block; yields its base URL.
    Settings come from `env` (DJANGO_SETTINGS_MODULE picks an override)."""
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", wsgi, "-b", f"127.0.0.1:{port}", "-k", "gthread"]
        + ["--workers", str(workers), "--threads", str(threads), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
    )
    try:
        wait_for(base)
        yield base
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


@dataclass
class Tally:
    """What labelers saw: round trips and Django's time per kind of request (seconds), the
    (labeling, step) pairs the server acknowledged, and answers that were not 200."""

    latency: dict[str, list[float]] = field(default_factory=dict)
    server: dict[str, list[float]] = field(default_factory=dict)
    acked: list[tuple[int, int]] = field(default_factory=list)
    errors: int = 0

    def timed(self, kind: str, send: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`send(*args, **kwargs)` (one request), its round trip and Server-Timing kept under
        `kind`; returns the response."""
        started = time.perf_counter()
        response = send(*args, **kwargs)
        self.add(kind, time.perf_counter() - started, server_seconds(response))
        return response

    def add(self, kind: str, seconds: float, server: float = float("nan")) -> None:
        self.latency.setdefault(kind, []).append(seconds)
        self.server.setdefault(kind, []).append(server)

    def merge(self, other: Tally) -> None:
        for mine, theirs in ((self.latency, other.latency), (self.server, other.server)):
            for kind, values in theirs.items():
                mine.setdefault(kind, []).extend(values)
        self.acked += other.acked
        self.errors += other.errors

    def n(self, kind: str) -> int:
        return len(self.latency.get(kind, []))

    def p(self, kind: str, q: float, *, server: bool = False) -> float:
        return pct((self.server if server else self.latency).get(kind, []), q)


# A scenario is one labeler's loop: (signed-in session, base URL, deadline, think time per
# step in seconds, the thread's tally). It returns when the deadline passes or work runs out.
Scenario = Callable[[Any, str, float, float, Tally], None]


def _client_process(
    base: str,
    usernames: list[str],
    deadline: float,
    scenario: Scenario,
    think_s: float,
    out: mp.Queue,
) -> None:
    total, lock = Tally(), threading.Lock()

    def person(username: str) -> None:
        tally = Tally()
        scenario(LightSession(base, login(base, username)), base, deadline, think_s, tally)
        with lock:
            total.merge(tally)

    threads = [threading.Thread(target=person, args=(u,)) for u in usernames]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=deadline - time.time() + 120)
    with lock:
        out.put(total)


def _tree_cpu_s(process: Any) -> float:
    """CPU seconds (user + system) of a process, its reaped children included."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def server_cpu_s(base: str) -> dict[str, float]:
    """CPU seconds used so far by the app (the process tree listening on `base`'s port: the
    server's master and its workers) and by PostgreSQL (every postgres process: the
    postmaster's reaped backends count through it). Read before and after a load, as Label
    Studio's harness reads its uWSGI and PostgreSQL trees (../shared/peers/label_studio/
    bench.py), so both sides' CPU per step compares."""
    import psutil

    port = int(base.rsplit(":", 1)[1])
    listening = {
        c.pid for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port
    }
    roots = set()
    for pid in listening:
        try:
            # Up to the server's master: a worker holding the socket runs its master's command.
            server = psutil.Process(pid)
            while (parent := server.parent()) is not None and parent.cmdline() == server.cmdline():
                server = parent
            roots.add(server)
        except psutil.NoSuchProcess:
            continue
    used = {"app": 0.0, "database": 0.0}
    for server in roots:
        try:
            for process in [server, *server.children(recursive=True)]:
                used["app"] += _tree_cpu_s(process)
        except psutil.NoSuchProcess:
            continue
    for process in psutil.process_iter(["name"]):
        try:
            if (process.info["name"] or "").startswith("postgres"):
                used["database"] += _tree_cpu_s(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return used


@dataclass
class Run:
    """A finished load: the merged tally, its wall time (the deadline plus the requests in
    flight then), the 1-minute load average before and after, and the CPU seconds each side
    used during it (app: gunicorn; database: PostgreSQL; client: the load generator)."""

    tally: Tally
    wall: float
    load_before: float
    load_after: float
    cpu_s: dict[str, float] = field(default_factory=dict)

    def per_s(self, count: int) -> float:
        return count / self.wall


def run_labelers(
    base: str,
    usernames: list[str],
    seconds: float,
    scenario: Scenario,
    *,
    clients: int = 5,
    think_s: float = 0.0,
) -> Run:
    """Every username signs in and runs `scenario` for `seconds`, as threads spread over
    `clients` processes (one Python process cannot send fast enough for 50 labelers)."""
    load_before = os.getloadavg()[0]
    server_before = server_cpu_s(base)
    clients_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    deadline = time.time() + seconds
    queue: mp.Queue = mp.Queue()
    procs = [
        mp.Process(
            target=_client_process,
            args=(base, usernames[i::clients], deadline, scenario, think_s, queue),
        )
        for i in range(clients)
    ]
    started = time.perf_counter()
    for p in procs:
        p.start()
    total = Tally()
    for _ in procs:
        total.merge(queue.get(timeout=seconds + 300))
    for p in procs:
        p.join(timeout=30)
    wall = time.perf_counter() - started
    server_after = server_cpu_s(base)
    clients_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the joined client processes
    cpu_s = {side: server_after[side] - server_before[side] for side in server_after}
    cpu_s["client"] = (clients_after.ru_utime - clients_before.ru_utime) + (
        clients_after.ru_stime - clients_before.ru_stime
    )
    return Run(total, wall, load_before, os.getloadavg()[0], cpu_s)
