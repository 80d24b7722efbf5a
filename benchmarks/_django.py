"""Shared setup for benchmarks: a dedicated PostgreSQL database, migrated, Django ready."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent


def setup(database: str) -> str:
    """Point Django at `database` on the configured server (created if missing) and migrate."""
    import psycopg

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/stepwise")
    parsed = urlparse(base)
    with psycopg.connect(
        host=parsed.hostname, port=parsed.port or 5432, user=parsed.username or "postgres",
        password=parsed.password, dbname="postgres", autocommit=True,
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')
    url = urlunparse(parsed._replace(path=f"/{database}"))
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("SECRET_KEY", "benchmark-only")
    os.environ.setdefault("STEPWISE_TESTING", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def percentiles(samples: list[float], points=(50, 95, 99)) -> dict[int, float]:
    ordered = sorted(samples)
    return {p: ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] for p in points}
