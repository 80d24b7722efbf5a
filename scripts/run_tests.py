"""Run the test suite against the real services when they are reachable.

PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/stepwise) and Redis
(REDIS_URL) are probed first. Without them the suite falls back to SQLite and skips, by name,
the tests that need them. With CI=true nothing is skipped: a missing service fails the run.
Pytest's "no tests ran" (exit 5) is a failure too.
"""

import os
import socket
import subprocess
import sys
import urllib.parse
from urllib.parse import urlparse

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/stepwise"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


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
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            if not sock.recv(16).startswith(b"+PONG"):
                return f"Redis at {parsed.hostname}:{parsed.port} did not answer PING"
    except OSError as exc:
        return f"Redis at {parsed.hostname}:{parsed.port or 6379} is not reachable ({exc})"
    return None


def main() -> int:
    ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    env.setdefault("REDIS_URL", DEFAULT_REDIS_URL)
    # A Redis database of this run's own (1-15): two test sessions on one machine must not
    # take each other's tasks from a shared queue.
    broker = urllib.parse.urlsplit(env["REDIS_URL"])._replace(path=f"/{1 + os.getpid() % 15}")
    env.setdefault("CELERY_BROKER_URL", urllib.parse.urlunsplit(broker))
    env["STEPWISE_TESTING"] = "1"
    env.setdefault("SECRET_KEY", "test-only-secret")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")

    problems = {
        "postgres": postgres_problem(env["DATABASE_URL"]),
        "redis": redis_problem(env["REDIS_URL"]),
    }
    missing = {name: why for name, why in problems.items() if why}
    if missing and ci:
        for why in missing.values():
            print(f"CI=true and a required service is missing: {why}", file=sys.stderr)
        return 2
    if problems["postgres"]:
        del env["DATABASE_URL"]
        env["STEPWISE_VAR_DIR"] = os.path.join(os.getcwd(), "var", "test")
    for name, why in missing.items():
        env[f"STEPWISE_SKIP_{name.upper()}"] = why
        print(f"note: tests marked '{name}' will be skipped: {why}", file=sys.stderr)
    if ci:
        env["STEPWISE_REQUIRE_ALL"] = "1"

    code = subprocess.call([sys.executable, "-m", "pytest", *sys.argv[1:]], env=env)
    if code == 5:
        print("pytest collected no tests: treating that as a failure", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
