"""Cached counts and medians are shared by every process: what one process invalidates,
another does not read stale. Two real processes against the real cache (Redis beside
PostgreSQL; the embedded default's local memory is one process's and is checked in-process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from labeling import selectors
from labeling.models import Labeling, Solution
from labeling.services import batches as batch_service
from tests.factories import make_batch, make_solution
from tests.helpers.processes import current_database_url

ROOT = Path(__file__).resolve().parent.parent

# A second process that stays up (as a web worker beside this one does): it reads a batch id
# per line and answers that batch's solution count as it reads it, cache included.
COUNTING_PROCESS = """
import json, sys, django
django.setup()
from labeling import selectors
for line in sys.stdin:
    print(json.dumps(selectors.solution_counts([int(line)])), flush=True)
"""


@pytest.fixture
def other_process():
    process = subprocess.Popen(
        [sys.executable, "-c", COUNTING_PROCESS],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "stepwise.settings",
            "DATABASE_URL": current_database_url(),
        },
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def count(batch_id: int) -> int:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(f"{batch_id}\n")
        process.stdin.flush()
        return json.loads(process.stdout.readline())[str(batch_id)]

    yield count
    process.kill()
    process.wait()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    "RedisCache" not in settings.CACHES["default"]["BACKEND"],
    reason="the embedded default's cache is one process's memory",
)
def test_a_move_in_one_process_is_not_read_stale_by_another(other_process):
    source, target = make_batch(name="source"), make_batch(name="target")
    moved = [make_solution(source).pk for _ in range(3)]
    selectors.solution_counts([source.pk])  # cached here too
    # The other process counts first and caches what it saw (for a minute).
    assert other_process(target.pk) == 0
    assert selectors.solution_counts([target.pk]) == {target.pk: 0}  # read from the cache
    # This process moves the solutions, which clears the count for every process.
    assert batch_service.batch_move_solutions(batch=target, source=source) == 3
    assert Solution.objects.filter(batch=target, pk__in=moved).count() == 3
    assert other_process(target.pk) == 3


def test_the_cache_is_redis_beside_postgresql_and_local_memory_embedded():
    backend = settings.CACHES["default"]["BACKEND"]
    if connection.vendor == "postgresql":
        assert backend == "stepwise.caching.RedisCache"
    else:
        assert backend == "django.core.cache.backends.locmem.LocMemCache"


@pytest.mark.django_db
def test_a_cache_that_is_down_costs_the_count_not_the_request(settings):
    batch = make_batch()
    make_solution(batch)
    settings.CACHES = {
        "default": {
            "BACKEND": "stepwise.caching.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
    assert selectors.solution_counts([batch.pk]) == {batch.pk: 1}
    selectors.clear_count_cache(batch.pk)  # nothing to forget, and no error


DEAD_CACHE = {  # nothing listens on port 1: every cache call is refused at once
    "default": {
        "BACKEND": "stepwise.caching.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
    }
}


def test_with_the_cache_down_a_labeler_signs_in_labels_and_signs_out(client, db, settings):
    """Sessions live in the cache and the database beside PostgreSQL. With Redis down the
    requests read and write the database instead: no 500, and the sign-out still ends the
    session (its row is gone)."""
    from django.contrib.sessions.models import Session
    from django.urls import reverse

    from tests.helpers.users import make_user

    settings.CACHES = DEAD_CACHE
    settings.SESSION_ENGINE = "stepwise.sessions"
    make_user("lena", "labeler")
    make_solution(make_batch(), steps=["$1+1=2$.", "# Answer\n\n2"])
    signed_in = client.post(reverse("login"), {"username": "lena", "password": "lena-pw"})
    assert signed_in.status_code == 302 and Session.objects.count() == 1
    assert client.get(reverse("home")).status_code == 200  # the session is read from its row
    claimed = client.post(reverse("labeling:claim"))
    assert claimed.status_code == 302
    labeling = Labeling.objects.get()
    for step in (0, 1):
        rated = client.post(
            reverse("labeling:rate", args=[labeling.pk]), {"step_index": step, "rating": 1}
        )
        assert rated.status_code in (200, 302)
    labeling.refresh_from_db()
    assert labeling.status == Labeling.Status.COMPLETED and labeling.step_labels.count() == 2
    signed_out = client.post(reverse("logout"))
    assert signed_out.status_code == 302 and Session.objects.count() == 0
    assert client.get(reverse("home")).status_code == 302  # signed out: to the sign-in page


@pytest.mark.skipif(
    "RedisCache" not in settings.CACHES["default"]["BACKEND"],
    reason="the Redis client is the cache beside PostgreSQL",
)
def test_one_redis_client_serves_every_call_and_every_thread():
    """stepwise.caching.RedisCache keeps one redis.Redis per pool (Django builds one per call):
    the same client answers each call, and threads sharing it each read their own values."""
    import threading

    from django.core.cache import cache

    client = cache._cache.get_client()
    assert cache._cache.get_client() is client
    assert cache._cache.get_client(write=True) is client  # one server: one pool

    def read_own(n: int, seen: dict[int, object]) -> None:
        for round_ in range(50):
            cache.set(f"thread-{n}", (n, round_), 30)
            seen[n] = cache.get(f"thread-{n}")

    seen: dict[int, object] = {}
    threads = [threading.Thread(target=read_own, args=(n, seen)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {n: (n, 49) for n in range(8)}
    cache.delete_many([f"thread-{n}" for n in range(8)])
