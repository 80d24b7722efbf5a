"""Shared setup for the benchmark scripts: the reference data, Django on a dedicated PostgreSQL
database, RSS probes. Standard library only at import: gpu_acceptance.py imports it too."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shared_data() -> Path:
    """The reference data, where the tests look (tests/conftest.py): ../shared/data beside the
    checkout, or $STEPWISE_SHARED_DATA. Exits with a message when it is not there."""
    data = Path(os.environ.get("STEPWISE_SHARED_DATA", ROOT.parent / "shared" / "data"))
    if not data.is_dir():
        raise SystemExit(f"reference data not found at {data} (set STEPWISE_SHARED_DATA)")
    return data


def django_on(database: str) -> str:
    """Point Django at its own database (created and migrated if missing); returns its URL.

    BENCH_DATABASE_URL names the database outright; otherwise `database` on the server of
    DATABASE_URL (default the local PostgreSQL)."""
    from urllib.parse import urlparse, urlunparse

    base = urlparse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/stepwise"))
    url = os.environ.get("BENCH_DATABASE_URL", urlunparse(base._replace(path=f"/{database}")))
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("SECRET_KEY", "benchmark-only")
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("STEPWISE_HTTPS", "0")  # loopback, plain HTTP
    os.environ.setdefault("STEPWISE_SERVER_TIMING", "1")
    os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import psycopg

    parsed = urlparse(url)
    with psycopg.connect(
        host=parsed.hostname,
        port=parsed.port or 5432,
        user=parsed.username or "postgres",
        password=parsed.password,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        name = parsed.path.lstrip("/")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def percentiles(samples: list[float], points=(50, 95, 99)) -> dict[int, float]:
    ordered = sorted(samples)
    return {
        p: ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] for p in points
    }


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class PeakRSS:
    """Samples RSS every few ms in a thread; `.growth` is peak minus the RSS at start."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.start = 0
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        import gc

        gc.collect()
        self.start = self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.start) / 2**20
