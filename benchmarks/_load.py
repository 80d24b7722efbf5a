"""The HTTP load generator the labeling benchmarks share (benchmarks/queue_load.py, floor.py, and
soak.py's helpers): gunicorn on 127.0.0.1, labelers as logged-in `requests` sessions (threads
in a few client processes) running one scenario until a deadline, round trips and Django's own
time per request (the Server-Timing header), percentiles."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
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
        scenario(login(base, username), base, deadline, think_s, tally)
        with lock:
            total.merge(tally)

    threads = [threading.Thread(target=person, args=(u,)) for u in usernames]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=deadline - time.time() + 120)
    with lock:
        out.put(total)


@dataclass
class Run:
    """A finished load: the merged tally, its wall time (the deadline plus the requests in
    flight then) and the 1-minute load average before and after."""

    tally: Tally
    wall: float
    load_before: float
    load_after: float

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
    return Run(total, time.perf_counter() - started, load_before, os.getloadavg()[0])
