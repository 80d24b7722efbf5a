"""The home page: one cockpit per role the user holds, each a fixed number of queries."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from labeling import selectors
from labeling.models import (
    Batch,
    BatchHourStats,
    BatchLabelerStats,
    LabelerRecord,
    Labeling,
    Snapshot,
    SolutionAgreement,
    default_project_id,
)
from labeling.services import alternatives, notes, quality, queue
from modeling import selectors as modeling_selectors
from modeling.models import GenerationRun, ModelVersion, PoolEntry, RunStatus, TrainingRun
from tests.factories import make_batch, make_problem, make_solution, make_solutions
from tests.helpers.users import make_user
from tests.labeling.helpers import claim_and_label, label, next_labeling

pytestmark = pytest.mark.django_db


def home(client, user) -> str:
    client.force_login(user)
    response = client.get(reverse("home"))
    assert response.status_code == 200  # nobody is redirected away from home
    return response.content.decode()


def text(html: str) -> str:
    """The page's words, tags dropped and spaces squeezed: what a reader sees."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# --- each role its sections -------------------------------------------------------------------


def test_a_labeler_sees_only_the_labeling_section(client, labeler):
    page = home(client, labeler)
    assert 'id="labeler-cockpit"' in page
    assert 'id="lead-cockpit"' not in page and 'id="research-cockpit"' not in page


def test_a_lead_who_labels_sees_both_sections_and_no_research(client, lead):
    page = home(client, lead)
    assert 'id="labeler-cockpit"' in page and 'id="lead-cockpit"' in page
    assert 'id="research-cockpit"' not in page


def test_a_researcher_sees_only_the_research_section(client, researcher):
    page = home(client, researcher)
    assert 'id="research-cockpit"' in page
    assert 'id="labeler-cockpit"' not in page and 'id="lead-cockpit"' not in page


# --- the labeler's big button -----------------------------------------------------------------


def test_continue_opens_the_labeling_in_progress(client, labeler):
    make_solutions(make_batch(gold_rate=0), 2)
    labeling = next_labeling(labeler)
    label(labeling, [1])
    page = home(client, labeler)
    button = re.search(r'<a class="button primary big" id="start" href="([^"]+)">Continue', page)
    assert button and button.group(1) == reverse("labeling:labeling", args=[labeling.pk])
    assert "1 of 3 steps rated" in text(page)
    client.get(button.group(1))
    assert Labeling.objects.get(labeler=labeler).status == Labeling.Status.IN_PROGRESS


def _expire(labeling: Labeling) -> None:
    Labeling.objects.filter(pk=labeling.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    queue.expire_stale_leases()


def test_an_expired_lease_with_room_is_taken_back_by_continue(client, labeler):
    make_solutions(make_batch(gold_rate=0), 2)
    labeling = next_labeling(labeler)
    label(labeling, [1, 1])
    _expire(labeling)
    page = text(home(client, labeler))
    assert "expired" in page and "after 2 steps rated" in page
    assert "Continue takes it back where you stopped" in page
    assert "Continue where you stopped" in page
    response = client.post(reverse("labeling:claim"))
    assert response["Location"] == reverse("labeling:labeling", args=[labeling.pk])
    assert Labeling.objects.get(pk=labeling.pk).status == Labeling.Status.IN_PROGRESS


def test_an_expired_lease_in_a_paused_batch_says_the_steps_are_not_counted(client, labeler):
    batch = make_batch(gold_rate=0)
    make_solutions(batch, 2)
    labeling = next_labeling(labeler)
    label(labeling, [1])
    _expire(labeling)
    batch.is_active = False
    batch.save(update_fields=["is_active"])
    page = text(home(client, labeler))
    assert "after 1 step rated" in page
    assert (
        "Its batch was paused since, so your ratings stay in its history but are not counted"
        in (page)
    )
    assert "Continue where you stopped" not in page and "Start labeling" not in page
    assert "No active batch is open to you" in page


def test_a_paused_labeler_is_told_why_and_gets_no_start_button(client, labeler):
    make_solutions(make_batch(gold_rate=0), 2)
    LabelerRecord.objects.create(
        user=labeler,
        project_id=default_project_id(),
        state=LabelerRecord.State.PAUSED,
        state_reason="Gold accuracy 50% over 4.",
    )
    page = home(client, labeler)
    assert "Your queue is paused" in page and "Gold accuracy 50% over 4." in page
    assert 'id="start"' not in page
    assert "until a lead reinstates you" in page


def test_nothing_waiting_is_said_and_waiting_work_is_counted_per_batch(client, labeler, labeler2):
    batch = make_batch(name="Generation 3", gold_rate=0)
    make_solutions(batch, 1)
    page = text(home(client, labeler))
    assert "Start labeling" in page and "1 solution waiting for you" in page
    claim_and_label(labeler2, [1, 1, 1])  # its only label, taken by someone else
    cache.clear()  # as a new process would, before the cached counts expire
    page = text(home(client, labeler))
    assert "Nothing is waiting for you right now" in page and "Start labeling" not in page


def test_counts_are_pluralized(client, labeler):
    batch = make_batch(gold_rate=0)
    make_solutions(batch, 3)
    claim_and_label(labeler, [1, 1, 1])
    page = text(home(client, labeler))
    assert "2 solutions waiting for you" in page
    assert "1 solution, 3 steps" in page  # today, and all time
    queue_page = text(client.get(reverse("labeling:queue")).content.decode())
    assert "1 solution, 3 steps rated" in queue_page and "1 solutions" not in queue_page
    claim_and_label(labeler, [1, 1, 1])
    cache.clear()  # as a new process would, before the cached counts expire
    page = text(home(client, labeler))
    assert "1 solution waiting for you" in page and "2 solutions, 6 steps" in page


def test_today_counts_only_labelings_finished_since_midnight(labeler):
    make_solutions(make_batch(gold_rate=0), 3)
    claim_and_label(labeler, [1, 1, 1])
    old = claim_and_label(labeler, [1, -1])
    Labeling.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=2))
    cockpit = selectors.labeler_cockpit(labeler, selectors.labeler_record(labeler))
    assert (cockpit.today_solutions, cockpit.today_steps) == (1, 3)
    assert (cockpit.total_solutions, cockpit.total_steps) == (2, 5)


def test_today_and_all_time_count_the_same_work_with_gold_mixed_in(client, labeler):
    """Gold is labeled like any solution, and the counters behind "all time" leave it out:
    today's figure counted it (2 solutions, 6 steps today against 1 and 3 all time)."""
    make_solutions(make_batch(gold_rate=1.0), 2)
    gold = make_solution()
    quality.gold_label_set(solution=gold, ratings=[1, 1, 1], screening=False)
    labeled = {claim_and_label(labeler, [1, 1, 1]).solution_id for _ in range(2)}
    assert gold.pk in labeled
    cockpit = selectors.labeler_cockpit(labeler, selectors.labeler_record(labeler))
    assert (cockpit.today_solutions, cockpit.today_steps) == (1, 3)
    assert (cockpit.total_solutions, cockpit.total_steps) == (1, 3)
    assert text(home(client, labeler)).count("1 solution, 3 steps") == 2  # today, and all time


def test_today_and_all_time_agree_on_a_step_written_in_the_alternatives_protocol(labeler):
    """A step the labeler wrote (no candidate rated) was a step today but none all time."""
    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2, generation=None)
    problem = make_problem("What is $2 + 3$?", answer="5")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])
    labeling = next_labeling(labeler)
    assert labeling is not None
    alternatives.write_step(
        labeling_id=labeling.pk, user=labeler, step_index=0, text="# Answer\n\n5"
    )
    assert Labeling.objects.get(pk=labeling.pk).status == Labeling.Status.COMPLETED
    cockpit = selectors.labeler_cockpit(labeler, selectors.labeler_record(labeler))
    stats = BatchLabelerStats.objects.get(batch=batch, labeler=labeler)
    assert cockpit.today_solutions == cockpit.total_solutions == 1
    assert cockpit.today_steps == cockpit.total_steps == stats.steps


# --- the lead's numbers on a known fixture ------------------------------------------------------


def test_throughput_eta_and_stall_alerts_are_right_on_a_known_fixture(lead, labeler):
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    hour = now.replace(minute=0)
    long_ago = now - timedelta(hours=5)
    busy = make_batch(name="busy", overlap=2, created_at=long_ago)
    make_solutions(busy, 10)  # 20 labels wanted
    BatchLabelerStats.objects.create(batch=busy, labeler=labeler, labelings=8)
    for hours_ago, labelings in ((3, 100), (2, 3), (1, 6), (0, 3)):  # 3 h ago is out of the pace
        BatchHourStats.objects.create(
            batch=busy, hour=hour - timedelta(hours=hours_ago), labelings=labelings
        )
    idle = make_batch(name="idle", created_at=long_ago)
    make_solutions(idle, 4)
    BatchHourStats.objects.create(batch=idle, hour=hour - timedelta(hours=2), labelings=1)
    make_solutions(make_batch(name="new"), 2)  # created just now: no alert yet
    make_solutions(make_batch(name="paused", is_active=False, created_at=long_ago), 2)

    cockpit = selectors.lead_cockpit(now=now)
    rows = {row.batch.name: row for row in cockpit.batches}
    assert set(rows) == {"busy", "idle", "new"}  # active batches only
    busy_row = rows["busy"]
    assert (busy_row.labels_wanted, busy_row.labels_done, busy_row.labels_remaining) == (20, 8, 12)
    assert busy_row.labels_per_hour == pytest.approx(12 / 2.5)  # 3 + 6 + 3 over 2.5 hours
    assert busy_row.eta == timedelta(hours=2.5)  # 12 labels at 4.8 an hour
    assert rows["idle"].labels_per_hour == pytest.approx(1 / 2.5)
    assert rows["new"].eta is None  # no pace, no ETA
    # The batch dashboard computes the same pace from the same counters.
    assert selectors.batch_summary(busy, now=now).labels_per_hour == pytest.approx(4.8)
    alerts = [alert.text for alert in cockpit.alerts]
    assert alerts == [
        f"idle: 4 labels still wanted and none finished since "
        f"{timezone.localtime(hour - timedelta(hours=1)):%H:%M}."
    ]


def test_the_lead_home_shows_eta_and_pace_columns(client, lead):
    batch = make_batch(name="no pace yet")
    make_solutions(batch, 1)
    client.force_login(lead)
    page = text(client.get(reverse("labeling:lead_home")).content.decode())
    assert "Labels / hour" in page and "ETA" in page and "no pace yet" in page
    assert "1 / 1" not in page and "0 / 1" in page


def test_lead_alerts_name_gold_accuracy_failed_runs_and_generations_and_unsent_work(lead, labeler):
    LabelerRecord.objects.create(
        user=labeler,
        project_id=default_project_id(),
        state=LabelerRecord.State.ACTIVE,
        gold_labelings=6,
        gold_steps=20,
        gold_steps_exact=10,
    )
    TrainingRun.objects.create(
        name="broken",
        status=RunStatus.FAILED,
        error="CUDA out of memory\n...",
        finished_at=timezone.now(),
    )
    GenerationRun.objects.create(generation=4, status=RunStatus.FAILED, current_step="score")
    TrainingRun.objects.create(
        name="waiting", error="", created_at=timezone.now() - timedelta(hours=2)
    )
    Snapshot.objects.create(created_at=timezone.now() - timedelta(hours=2))
    alerts = " | ".join(a.text for a in modeling_selectors.lead_cockpit().alerts)
    assert "lena's gold accuracy is 50%, under the pause threshold (70%)" in alerts
    assert "Training run broken failed: CUDA out of memory" in alerts
    assert "Generation 4 failed at “score the pool”" in alerts
    assert "1 training run queued but not taken by a worker" in alerts
    assert "1 snapshot waiting for a worker" in alerts


def test_in_the_embedded_default_a_run_waiting_behind_a_training_is_no_alert(lead, settings):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # one training at a time in this process
    TrainingRun.objects.create(name="waiting", created_at=timezone.now() - timedelta(hours=2))
    training = TrainingRun.objects.create(name="training", status=RunStatus.RUNNING)

    def alerts() -> str:
        return " | ".join(a.text for a in modeling_selectors.lead_cockpit().alerts)

    assert "not taken by a worker" not in alerts()
    TrainingRun.objects.filter(pk=training.pk).update(status=RunStatus.SUCCEEDED)
    assert "1 training run queued but not taken by a worker" in alerts()  # nothing ahead of it


# --- the researcher's view ----------------------------------------------------------------------


def test_paused_by_gold_counts_the_gold_checks_pauses_not_a_leads(client, lead):
    by_gold, by_hand = make_user("gus", "labeler"), make_user("hana", "labeler")
    # As quality.pause_if_inaccurate pauses a labeler: by no one.
    quality.labeler_set_state(
        record=quality.record_ensure(user_id=by_gold.pk, project_id=default_project_id()),
        state=LabelerRecord.State.PAUSED,
        reason="Your accuracy on quality-control solutions fell to 40% over the last 5.",
    )
    client.force_login(lead)
    client.post(
        reverse("labeling:labeler_state", args=[by_hand.pk]), {"state": LabelerRecord.State.PAUSED}
    )
    assert LabelerRecord.objects.filter(state=LabelerRecord.State.PAUSED).count() == 2
    page = home(client, lead)
    kpi = text(page[page.index("Paused by gold") : page.index("To adjudicate")])
    assert "Paused by gold 1 labeler paused by the gold check; 1 by a lead" in kpi, kpi
    attention = text(page[page.index('id="attention"') :])
    assert "gus paused by gold" in attention and "hana paused by a lead" in attention


def test_the_researcher_sees_runs_with_auroc_the_active_model_and_what_is_queued(
    client, researcher
):
    run = TrainingRun.objects.create(
        name="gen-2 prm", status=RunStatus.SUCCEEDED, metrics={"auroc": 0.8123}
    )
    model = ModelVersion.objects.create(
        run=run,
        name="prm-v2",
        backbone="tiny",
        artifact_path="x",
        metrics={"auroc": 0.8123},
        passed_evaluation=True,
    )
    model.activate()
    batch = make_batch(name="gen 2 picks", generation=2)
    make_solutions(batch, 3)
    GenerationRun.objects.create(generation=2, status=RunStatus.SUCCEEDED, batch=batch)
    for _ in range(4):
        PoolEntry.objects.create(solution=make_solution())
    Snapshot.objects.create(status=Snapshot.Status.DONE, row_count=42)
    page = home(client, researcher)
    words = text(page)
    assert "gen-2 prm" in words and "0.812" in words and "prm-v2" in words
    assert "3 labels wanted in 1 generation batch" in words and "gen 2 picks" in words
    assert "4 of 4 solutions still selectable" in words
    snapshot = Snapshot.objects.get()
    assert reverse("research:download", args=[snapshot.pk]) in page


# --- query counts: one bounded set per role, whatever the data ---------------------------------


def populate(scale: int, measured: dict) -> None:
    """`scale` times a small operation: batches, labelers and their work, their notes and leads'
    replies, adjudication, paused labelers, training runs and models, generations, snapshots and
    the candidate pool."""
    n = Labeling.objects.count()
    replier = make_user(f"replier-{n}", "lead")
    for i in range(2 * scale):
        batch = make_batch(overlap=2, gold_rate=0)
        make_solutions(batch, 3)
        for user in (measured["labeler"], make_user(f"worker-{n}-{i}", "labeler")):
            labeling = claim_and_label(user, [1, 1, -1])
            notes.note_add(labeling_id=labeling.pk, user=user, step_index=2, text="why −1")
            notes.note_reply(solution=labeling.solution, lead=replier, text="unread reply")
        solution = batch.solutions.first()
        SolutionAgreement.objects.create(solution=solution, batch=batch, needs_adjudication=True)
        paused = make_user(f"paused-{n}-{i}", "labeler")
        LabelerRecord.objects.create(
            user=paused,
            project_id=default_project_id(),
            state=LabelerRecord.State.PAUSED,
            state_reason="gold",
        )
    for _ in range(scale):
        run = TrainingRun.objects.create(status=RunStatus.SUCCEEDED, metrics={"auroc": 0.7})
        ModelVersion.objects.create(run=run, name=f"m{run.pk}", backbone="b", artifact_path="p")
        TrainingRun.objects.create(status=RunStatus.FAILED, finished_at=timezone.now(), error="x")
        generation = GenerationRun.objects.count() + 1
        batch = make_batch(generation=generation)
        make_solutions(batch, 2)
        GenerationRun.objects.create(generation=generation, batch=batch, status=RunStatus.FAILED)
        Snapshot.objects.create(status=Snapshot.Status.DONE, row_count=3)
        PoolEntry.objects.create(solution=make_solution())


def home_queries(client, user, assert_at_most, most: int) -> int:
    """Queries of one visit to the home page (not the first, which creates the labeler row),
    solution counts read afresh as in a new process; fails above `most`."""
    client.force_login(user)
    client.get(reverse("home"))
    cache.clear()  # as a new process would, before the cached counts expire
    with assert_at_most(most) as captured:
        assert client.get(reverse("home")).status_code == 200
    return len(captured)


# The labeler's: 13 since their home lists the leads' unread replies to their notes (one query,
# selectors.unread_replies); the lead's and the researcher's are as they were.
@pytest.mark.parametrize(
    ("roles", "most"), [(("labeler",), 13), (("lead",), 17), (("researcher",), 14)]
)
def test_each_role_home_is_a_bounded_query_set_independent_of_data_size(
    client, labeler, django_assert_max_num_queries, roles, most
):
    viewer = make_user("viewer", *roles)
    measured = {"labeler": labeler}
    populate(1, measured)
    small = home_queries(client, viewer, django_assert_max_num_queries, most)
    populate(2, measured)  # three times the data
    assert home_queries(client, viewer, django_assert_max_num_queries, most) == small


def test_the_labelers_own_home_is_the_same_query_set_with_three_times_the_history(
    client, labeler, django_assert_max_num_queries
):
    measured = {"labeler": labeler}
    populate(1, measured)
    small = home_queries(client, labeler, django_assert_max_num_queries, 12)
    populate(2, measured)
    assert home_queries(client, labeler, django_assert_max_num_queries, 12) == small
