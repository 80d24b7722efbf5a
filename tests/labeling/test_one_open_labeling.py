"""A labeler holds one open labeling, in all batches: the database refuses a second
(one_open_labeling_per_labeler), and claims that lose the race get the one that won. On both
databases (SQLite: the test database is a file, so each thread has its own connection)."""

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from labeling.models import LabelerRecord, Labeling, Solution, StepLabel, default_project_id
from labeling.services import errors, quality, queue, rating
from tests.factories import make_batch, make_solution, make_solutions
from tests.labeling.helpers import label, next_labeling, record_of

TABS = 4


def claim_from_tabs(user, tabs: int = TABS) -> list[str]:
    """`tabs` signed-in clients of one labeler send POST /label/next/ at the same moment;
    returns where each was sent."""
    clients = []
    for _ in range(tabs):
        client = Client()
        client.force_login(user)
        clients.append(client)
    barrier = threading.Barrier(tabs)
    locations: list[str] = []
    failures: list[BaseException | int] = []

    def tab(client: Client) -> None:
        try:
            barrier.wait()
            response = client.post(reverse("labeling:claim"))
            if response.status_code != 302:
                failures.append(response.status_code)
            locations.append(response["Location"])
        except BaseException as exc:  # surfaced below; a thread must not swallow it
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=tab, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    return locations


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("gold", [False, True], ids=["regular", "gold"])
def test_four_tabs_claiming_at_once_get_one_labeling(labeler, gold):
    batch = make_batch(gold_rate=1.0 if gold else 0)
    make_solutions(batch, 2 * TABS)
    for _ in range(TABS if gold else 0):
        quality.gold_label_set(solution=make_solution(), ratings=[1, 1, 1], screening=False)
    LabelerRecord.objects.create(
        user=labeler, project_id=default_project_id(), state=LabelerRecord.State.ACTIVE
    )

    locations = claim_from_tabs(labeler)

    open_ = Labeling.objects.filter(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
    assert open_.count() == 1
    assert Labeling.objects.filter(labeler=labeler).count() == 1  # the losers left no row
    the_one = open_.get()
    assert the_one.solution.is_quality_control is gold
    assert set(locations) == {reverse("labeling:labeling", args=[the_one.pk])}
    # Only the winner's claim is counted: the losers' counter updates rolled back with them.
    assert sum(Solution.objects.values_list("active_count", flat=True)) == 1
    expected_since_gold = 0 if gold else 1
    assert record_of(labeler).claims_since_gold == expected_since_gold


@pytest.mark.django_db
def test_the_database_refuses_a_second_open_labeling_for_one_labeler(labeler):
    first, second = make_solutions(make_batch(), 2)
    Labeling.objects.create(solution=first, labeler=labeler)
    with pytest.raises(IntegrityError), transaction.atomic():
        Labeling.objects.create(solution=second, labeler=labeler)
    Labeling.objects.create(solution=second, labeler=labeler, status=Labeling.Status.EXPIRED)
    assert Labeling.objects.filter(labeler=labeler).count() == 2


@pytest.mark.django_db
def test_an_expired_labeling_is_not_taken_back_while_another_is_open(settings, labeler):
    """Rating (or extending) a claim that ran out while the labeler has started another keeps
    the rating but leaves it expired: one open labeling."""
    batch = make_batch(gold_rate=0)
    make_solutions(batch, 2)
    old = next_labeling(labeler)
    rating.rate_step(labeling_id=old.pk, user=labeler, step_index=0, rating=1)
    Labeling.objects.filter(pk=old.pk).update(lease_expires_at=timezone.now() - timedelta(1))
    queue.expire_stale_leases()
    new = Labeling.objects.create(
        solution=Solution.objects.exclude(pk=old.solution_id).get(), labeler=labeler
    )

    with pytest.raises(errors.Conflict):
        queue.extend_lease(old.pk, labeler)
    rating.rate_step(labeling_id=old.pk, user=labeler, step_index=1, rating=1)

    old.refresh_from_db()
    assert old.status == Labeling.Status.EXPIRED
    assert StepLabel.objects.filter(labeling=old).count() == 2  # the rating is kept
    assert list(
        Labeling.objects.filter(labeler=labeler, status="in_progress").values_list("pk", flat=True)
    ) == [new.pk]
    assert Solution.objects.get(pk=old.solution_id).active_count == 0


@pytest.mark.django_db
def test_undo_after_claiming_the_next_solution_is_refused_with_409(client, labeler):
    batch = make_batch(gold_rate=0)
    make_solutions(batch, 2)
    done = label(next_labeling(labeler), [1, 1, 1])
    following = next_labeling(labeler)
    client.force_login(labeler)

    response = client.post(reverse("labeling:undo", args=[done.pk]), HTTP_HX_REQUEST="true")

    assert response.status_code == 409
    assert "You have started another solution since" in response.content.decode()
    done.refresh_from_db()
    assert done.status == Labeling.Status.COMPLETED and done.step_labels.count() == 3
    solution = Solution.objects.get(pk=done.solution_id)
    assert (solution.completed_count, solution.active_count) == (1, 0)
    assert list(
        Labeling.objects.filter(labeler=labeler, status="in_progress").values_list("pk", flat=True)
    ) == [following.pk]


@pytest.mark.django_db(transaction=True)
def test_the_migration_expires_all_but_the_newest_open_labeling_keeping_ratings(labeler):
    executor = MigrationExecutor(connections["default"])
    executor.migrate([("labeling", "0008_alternatives_protocol")])
    apps = executor.loader.project_state([("labeling", "0008_alternatives_protocol")]).apps
    OldLabeling = apps.get_model("labeling", "Labeling")
    OldSolution = apps.get_model("labeling", "Solution")
    OldStepLabel = apps.get_model("labeling", "StepLabel")
    # The batch row as 0008 had it (later migrations add columns); the current model only
    # names it for the solutions' foreign key.
    old_batch = apps.get_model("labeling", "Batch").objects.create(name="before", generation=1)
    # Solutions as 0008 had them too (a project came later).
    old_problem = apps.get_model("labeling", "Problem").objects.create(
        text="1 + 1?", text_sha256="p" * 64
    )
    solutions = [
        OldSolution.objects.create(
            problem=old_problem, batch=old_batch, steps=["2"], content_sha256=f"{i}" * 64
        )
        for i in range(3)
    ]
    now = timezone.now()
    rows = []
    for minutes, solution in enumerate(solutions):
        OldSolution.objects.filter(pk=solution.pk).update(active_count=1)
        rows.append(
            OldLabeling.objects.create(
                solution_id=solution.pk,
                labeler_id=labeler.pk,
                status="in_progress",
                started_at=now + timedelta(minutes=minutes),
            )
        )
        OldStepLabel.objects.create(labeling_id=rows[-1].pk, index=0)

    executor = MigrationExecutor(connections["default"])
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    newest = rows[-1]
    statuses = dict(Labeling.objects.values_list("pk", "status"))
    assert statuses == {
        rows[0].pk: "expired",
        rows[1].pk: "expired",
        newest.pk: "in_progress",
    }
    assert StepLabel.objects.count() == 3  # no rating lost
    assert dict(Solution.objects.values_list("pk", "active_count")) == {
        solutions[0].pk: 0,
        solutions[1].pk: 0,
        solutions[2].pk: 1,
    }
