"""Many labelers at once against one batch on the real PostgreSQL: row locks hold the invariant."""

import threading
from collections import Counter

import pytest
from django.db import connection, connections

from labeling.models import Labeling, Solution
from labeling.services import queue, rating
from tests.factories import make_batch, make_solutions
from tests.helpers.users import make_user
from tests.labeling.helpers import next_labeling

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def run_labelers(users, work):
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(users))

    def run(user):
        try:
            barrier.wait()
            work(user)
        except BaseException as exc:  # surfaced below; a thread must not swallow it
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors


@pytest.mark.parametrize("overlap", [1, 2])
def test_concurrent_labelers_never_overshoot_or_double_claim(overlap):
    assert connection.vendor == "postgresql"
    batch = make_batch(overlap=overlap)
    solutions = make_solutions(batch, 12)
    users = [make_user(f"l{i}", "labeler") for i in range(8)]
    submitted: list[tuple[int, int]] = []
    lock = threading.Lock()

    def label_until_empty(user):
        while True:
            labeling = next_labeling(user)
            if labeling is None:
                return
            for step in range(len(labeling.solution.steps)):
                rating.rate_step(labeling_id=labeling.pk, user=user, step_index=step, rating=1)
            with lock:
                submitted.append((labeling.solution_id, user.pk))

    run_labelers(users, label_until_empty)

    per_solution = Counter(solution_id for solution_id, _ in submitted)
    assert set(per_solution.values()) == {overlap}  # exactly N each: no overshoot, none starved
    assert len(set(submitted)) == len(submitted)  # never the same solution twice for one labeler
    for solution in Solution.objects.filter(pk__in=[s.pk for s in solutions]):
        assert (solution.completed_count, solution.active_count) == (overlap, 0)
    completed = Labeling.objects.filter(status="completed")
    assert completed.count() == len(submitted) == 12 * overlap
    assert not completed.filter(is_surplus=True).exists()
    # every acknowledged rating is stored
    assert sum(done.step_labels.count() for done in completed) == 3 * len(submitted)


@pytest.mark.parametrize("overlap", [1, 2])
def test_leases_expiring_mid_run_keep_every_rating_and_never_overshoot(settings, overlap):
    """Leases expire as soon as they are taken: others re-claim, late submits are kept as surplus."""
    settings.STEPWISE_LEASE_SECONDS_MIN = 0
    settings.STEPWISE_LEASE_SECONDS_MAX = 0
    batch = make_batch(overlap=overlap, gold_rate=0)
    solutions = make_solutions(batch, 10)
    users = [make_user(f"e{i}", "labeler") for i in range(8)]
    submitted: list[tuple[int, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def sweep():
        while not stop.is_set():
            queue.expire_stale_leases()
        connections.close_all()

    sweeper = threading.Thread(target=sweep)
    sweeper.start()

    def label_until_empty(user):
        for _ in range(20):  # bounded: a labeler gets each solution at most once
            labeling = next_labeling(user)
            if labeling is None:
                return
            for step in range(3):
                rating.rate_step(
                    labeling_id=labeling.pk, user=user, step_index=step, rating=(1, 0, 1)[step]
                )
            with lock:
                submitted.append((labeling.solution_id, user.pk))

    try:
        run_labelers(users, label_until_empty)
    finally:
        stop.set()
        sweeper.join(timeout=30)

    assert len(set(submitted)) == len(submitted)  # no double claims
    done = Labeling.objects.filter(status="completed")
    assert done.count() == len(submitted)  # every submit kept, counted or surplus
    assert Labeling.objects.filter(status="in_progress").count() == 0
    for solution in Solution.objects.filter(pk__in=[s.pk for s in solutions]):
        counted = done.filter(solution=solution, is_surplus=False).count()
        assert counted == solution.completed_count == overlap  # zero overshoot, none starved
        assert solution.active_count == 0
    assert done.filter(is_surplus=True).count() == len(submitted) - 10 * overlap
    # every acknowledged rating is stored, in order
    assert sum(d.step_labels.count() for d in done) == 3 * len(submitted)
    assert (
        Solution.objects.filter(
            pk__in=[s.pk for s in solutions], completed_count__gt=overlap
        ).count()
        == 0
    )
