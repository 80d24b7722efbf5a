"""Run the test suite on both databases, against the real services.

`make test` runs pytest twice, side by side. The PostgreSQL pass (DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/stepwise, with Redis at REDIS_URL) runs every test, spread
over one pytest-xdist worker per core (`--workers N`). The SQLite pass runs the embedded default
a new user gets from `make demo` with the tests marked `sqlite` (tests/conftest.py names them:
every branch on the database vendor, the demo, every page as every role, one end-to-end test of
each feature); without PostgreSQL it runs every test that needs neither PostgreSQL nor Redis.
`--serial` runs the passes one after the other, each line of output prefixed with its database.
The run fails if either fails. `--db postgres` or `--db sqlite` runs one of them; every other
argument goes to pytest. `--lint` runs `make lint` beside them (`make test` does): its minutes
overlap the tests' instead of coming first.

Without PostgreSQL or Redis the tests that need them are skipped, by name. With CI=true
nothing is skipped: a missing service fails the run. Pytest's "no tests ran" (exit 5) is a
failure too. The last line sums both runs as "N passed, N failed, N skipped".
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlparse

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/stepwise"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_MARKERS = "not slow"  # pyproject's addopts
ROOT = Path(__file__).resolve().parent.parent


def postgres_problem(url: str) -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    parsed = urlparse(url)
    try:
        psycopg.connect(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 5432,
            user=parsed.username or "postgres",
            password=parsed.password or None,
            dbname="postgres",
            connect_timeout=3,
        ).close()
    except Exception as exc:  # any failure means "not reachable"; say which
        return f"PostgreSQL at {parsed.hostname}:{parsed.port or 5432} is not reachable ({exc.__class__.__name__}: {str(exc).strip()[:120]})"
    return None


def redis_problem(url: str) -> str | None:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=3
        ) as sock:
            sock.sendall(b"PING\r\n")
            if not sock.recv(16).startswith(b"+PONG"):
                return f"Redis at {parsed.hostname}:{parsed.port} did not answer PING"
    except OSError as exc:
        return f"Redis at {parsed.hostname}:{parsed.port or 6379} is not reachable ({exc})"
    return None


def split_markers(pytest_args: list[str]) -> tuple[str, list[str]]:
    """The -m expression the caller gave (else the default), and the other arguments."""
    markers, rest, args = DEFAULT_MARKERS, [], iter(pytest_args)
    for arg in args:
        if arg == "-m":
            markers = next(args, "")
        elif arg.startswith("-m") and len(arg) > 2:
            markers = arg[2:]
        else:
            rest.append(arg)
    return markers, rest


def counts(junit: Path) -> dict[str, int]:
    """passed/failed/skipped from pytest's JUnit XML (errors count as failed)."""
    if not junit.exists():
        return {"passed": 0, "failed": 0, "skipped": 0}
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total, failed, skipped = (int(suite.get(key, 0)) for key in ("tests", "failures", "skipped"))
    failed += int(suite.get("errors", 0))
    return {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}


CLAIM_KEY = "stepwise:test-session:redis-db:{db}"
CLAIM_TTL_S = 6 * 3600  # longer than any test session; a killed session's claims lapse
CLAIM_WAIT_S = 3600
TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisClaims:
    """Databases 1-15 of one Redis, each claimed by at most one live test session.

    A claim is a key in database 0 (tests flush only their own databases) holding
    "host:pid" of the claiming runner, set only if absent. A claim whose runner is gone (same
    host, no such process) is taken over; when all are taken, the session waits for one to be
    released. Without Redis (its tests are skipped) the databases are spread by pid, as before.
    """

    claimed: list[tuple[object, int]] = []

    def __init__(self, url: str) -> None:
        self.url = url
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.fallback = os.getpid()

    def client(self):
        import redis

        return redis.Redis.from_url(self.url, db=0, socket_timeout=5)

    def _alive(self, owner: str) -> bool:
        host, _, pid = owner.rpartition(":")
        if host != socket.gethostname() or not pid.isdigit():
            return True  # another machine's runner: trust its expiry
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def claim(self, count: int) -> list[int]:
        if redis_problem(self.url):
            dbs = [1 + (self.fallback + n) % 15 for n in range(count)]
            self.fallback += count
            return dbs
        client = self.client()
        deadline = time.monotonic() + CLAIM_WAIT_S
        dbs: list[int] = []
        noted = False
        while len(dbs) < count:
            for db in range(1, 16):
                if len(dbs) == count:
                    break
                key = CLAIM_KEY.format(db=db)
                if client.set(key, self.owner, nx=True, ex=CLAIM_TTL_S):
                    dbs.append(db)
                    RedisClaims.claimed.append((client, db))
                    continue
                holder = client.get(key)
                holder = holder.decode() if holder else ""
                if holder and holder != self.owner and not self._alive(holder):
                    # A runner that died without releasing: its databases are free again.
                    # Compare-and-set: of two sessions that see it dead, one takes it.
                    if client.eval(TAKE_OVER, 1, key, holder, self.owner, CLAIM_TTL_S):
                        dbs.append(db)
                        RedisClaims.claimed.append((client, db))
            if len(dbs) < count:
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"run_tests: no free Redis database for {CLAIM_WAIT_S} s "
                        "(other test sessions hold them)"
                    )
                if not noted:
                    print(
                        f"note: waiting for {count - len(dbs)} Redis database(s) that other "
                        "test sessions on this Redis hold",
                        file=sys.stderr,
                        flush=True,
                    )
                    noted = True
                time.sleep(5)
        return dbs

    @classmethod
    def release_all(cls) -> None:
        owner = f"{socket.gethostname()}:{os.getpid()}"
        for client, db in cls.claimed:
            key = CLAIM_KEY.format(db=db)
            try:
                client.eval(RELEASE, 1, key, owner)  # type: ignore[attr-defined]
            except Exception:  # Redis gone at exit: the claim lapses with its expiry
                pass
        cls.claimed.clear()


# torch (and the BLAS under it) start one thread per core, and each parallel region waits for all
# of them: two passes side by side on two cores, or a loaded machine, leave threads waiting for a
# core: on a shared 2-core machine, SmolLM2-135M's generation took 38.6 s with 2 threads against
# 4.5 s with 1. Each pass gets its share of the cores unless the caller set these.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def compute_threads(passes: int) -> str:
    return str(max(1, (os.cpu_count() or 1) // max(1, passes)))


def start_pytest(
    label: str, env: dict[str, str], markers: str, args: list[str]
) -> subprocess.Popen:
    junit = Path(env["STEPWISE_VAR_DIR"]) / f"junit-{label}.xml"
    junit.unlink(missing_ok=True)
    print(f"\n=== {label}: pytest -m {markers!r} {' '.join(args)}", flush=True)
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-m", markers, f"--junitxml={junit}", *args],
        cwd=ROOT,  # `-m pytest` puts it on sys.path: `-p tests.worker_env` imports from it
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )


def relay(label: str, process: subprocess.Popen, lock: threading.Lock) -> None:
    """Each line of a run's output, prefixed with its database, as it comes."""
    assert process.stdout is not None
    for line in process.stdout:
        with lock:
            sys.stdout.write(f"[{label}] {line}")
            sys.stdout.flush()


def finish_pytest(
    label: str, env: dict[str, str], process: subprocess.Popen
) -> tuple[int, dict[str, int]]:
    code = process.wait()
    if code == 5:
        print(f"{label}: pytest collected no tests: treating that as a failure", file=sys.stderr)
        code = 1
    return code, counts(Path(env["STEPWISE_VAR_DIR"]) / f"junit-{label}.xml")


def main() -> int:
    try:
        return run()
    finally:
        RedisClaims.release_all()


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--db", choices=("both", "postgres", "sqlite"), default="both")
    parser.add_argument("--serial", action="store_true")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="pytest-xdist workers of the PostgreSQL pass (default: one per core; 1: none)",
    )
    parser.add_argument("--lint", action="store_true", help="run `make lint` beside the passes")
    options, pytest_args = parser.parse_known_args()
    markers, pytest_args = split_markers(pytest_args)

    ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    base = dict(os.environ)
    base.setdefault("REDIS_URL", DEFAULT_REDIS_URL)

    # Redis databases of this session's own (1-15): a broker and a cache for each pytest process
    # (an xdist worker of the PostgreSQL pass, or the SQLite pass). Two test sessions on one
    # machine, two workers, or the two passes must not take each other's tasks from a shared
    # queue, and a test's cache FLUSHDB must not drop another's queued tasks or counts: each
    # database is claimed in database 0 for the session's life (see RedisClaims).
    redis_url = urllib.parse.urlsplit(base["REDIS_URL"])
    claims = RedisClaims(base["REDIS_URL"])

    def redis_dbs(count: int) -> list[str]:
        dbs = claims.claim(count)
        return [urllib.parse.urlunsplit(redis_url._replace(path=f"/{db}")) for db in dbs]

    base["STEPWISE_TESTING"] = "1"
    base.setdefault("SECRET_KEY", "test-only-secret")
    base.setdefault("HF_HUB_OFFLINE", "1")
    base.setdefault("TRANSFORMERS_OFFLINE", "1")
    # Redis on a loaded machine answers late now and then; the app then reads the database,
    # which changes a statement-count test's figures. Tests that need the cache down close it.
    base.setdefault("STEPWISE_CACHE_TIMEOUT_S", "5")
    if ci:
        base["STEPWISE_REQUIRE_ALL"] = "1"
    database_url = base.pop("DATABASE_URL", None) or DEFAULT_DATABASE_URL

    problems = {
        "postgres": postgres_problem(database_url),
        "redis": redis_problem(base["REDIS_URL"]),
    }
    missing = {name: why for name, why in problems.items() if why}
    if missing and ci:
        for why in missing.values():
            print(f"CI=true and a required service is missing: {why}", file=sys.stderr)
        return 2
    for name, why in missing.items():
        base[f"STEPWISE_SKIP_{name.upper()}"] = why
        print(f"note: tests marked '{name}' will be skipped: {why}", file=sys.stderr)

    runs: list[tuple[str, dict[str, str], str, list[str]]] = []
    postgres_runs = options.db in ("both", "postgres") and not problems["postgres"]
    workers = max(1, options.workers)
    if postgres_runs:
        brokers, caches = redis_dbs(workers), redis_dbs(workers)
        env = dict(
            base,
            DATABASE_URL=database_url,
            STEPWISE_VAR_DIR=str(ROOT / "var" / "test-postgres"),
            CELERY_BROKER_URL=brokers[0],
            STEPWISE_CACHE_URL=caches[0],
            STEPWISE_TEST_BROKER_URLS=",".join(brokers),
            STEPWISE_TEST_CACHE_URLS=",".join(caches),
        )
        # xdist starts its workers with this Python and environment; -p loads tests.worker_env
        # in each before Django's settings, to give it its own Redis databases and var folder.
        spread = ["-p", "tests.worker_env", "-n", str(workers), "--dist", "worksteal"]
        runs.append(("postgres", env, markers, spread if workers > 1 else []))
    elif options.db == "postgres":
        print(f"--db postgres: {problems['postgres']}", file=sys.stderr)
        return 2
    if options.db in ("both", "sqlite"):
        # DATABASE_URL unset: the embedded default. Beside the PostgreSQL pass, the tests marked
        # for it; without PostgreSQL, everything that needs neither PostgreSQL nor Redis.
        var = ROOT / "var" / "test-sqlite"
        shutil.rmtree(var, ignore_errors=True)
        chosen = "not postgres and not redis"
        if postgres_runs or not missing.get("postgres"):
            chosen = f"sqlite and {chosen}"
        else:
            print("note: no PostgreSQL: the SQLite pass runs every test it can", file=sys.stderr)
        sqlite_markers = f"({markers}) and {chosen}" if markers.strip() else chosen
        broker, cache = redis_dbs(1) + redis_dbs(1)
        env = dict(
            base, STEPWISE_VAR_DIR=str(var), CELERY_BROKER_URL=broker, STEPWISE_CACHE_URL=cache
        )
        runs.append(("sqlite", env, sqlite_markers, []))

    # Side by side: most of a test's time is waiting (browsers, workers, servers), so the two
    # passes overlap on two cores; --serial runs one after the other.
    processes = sum(workers if spread else 1 for _, _, _, spread in runs)
    threads = compute_threads(processes if not options.serial else 1)
    for _, env, _, _ in runs:
        for name in THREAD_VARIABLES:
            env.setdefault(name, threads)
    failed_runs, total = [], {"passed": 0, "failed": 0, "skipped": 0}
    lock = threading.Lock()
    started = []
    linting = None
    if options.lint:
        print("\n=== lint: make lint", flush=True)
        linting = subprocess.Popen(
            ["make", "--no-print-directory", "lint"],
            cwd=ROOT,
            env=base,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        lint_relay = threading.Thread(target=relay, args=("lint", linting, lock))
        lint_relay.start()
    for label, env, run_markers, spread in runs:
        Path(env["STEPWISE_VAR_DIR"]).mkdir(parents=True, exist_ok=True)
        process = start_pytest(label, env, run_markers, [*spread, *pytest_args])
        relaying = threading.Thread(target=relay, args=(label, process, lock))
        relaying.start()
        started.append((label, env, process, relaying))
        if options.serial:
            relaying.join()
            process.wait()
    for label, env, process, relaying in started:
        relaying.join()
        code, figures = finish_pytest(label, env, process)
        print(
            f"=== {label}: {figures['passed']} passed, {figures['failed']} failed, {figures['skipped']} skipped (exit {code})",
            flush=True,
        )
        total = {key: total[key] + figures[key] for key in total}
        if code:
            failed_runs.append(label)
    if linting is not None:
        lint_relay.join()
        lint_code = linting.wait()
        print(f"=== lint: exit {lint_code}", flush=True)
        if lint_code:
            failed_runs.append("lint")
    if failed_runs:
        print(f"failed on: {', '.join(failed_runs)}", file=sys.stderr)
    print(
        f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped",
        flush=True,
    )
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
