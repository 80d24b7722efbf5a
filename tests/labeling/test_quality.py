"""Gold solutions, screening, auto-pause: the claim follows the labeler's state."""

import pytest
from django.urls import reverse

from labeling.models import GoldResult, LabelerRecord, Labeling, default_project_id
from labeling.services import quality, rating
from tests.factories import make_batch, make_solution, make_solutions
from tests.helpers.users import make_user
from tests.labeling.helpers import claim_and_label, label, next_labeling, record_of

pytestmark = pytest.mark.django_db


def make_gold(ratings, *, screening=False, batch=None):
    solution = make_solution(batch)
    quality.gold_label_set(solution=solution, ratings=ratings, screening=screening)
    return solution


def test_gold_is_mixed_in_at_the_batch_rate_and_looks_like_any_solution(client, labeler):
    batch = make_batch(gold_rate=0.5)
    regular = make_solutions(batch, 4)
    gold = make_gold([1, 1, 1])
    first = next_labeling(labeler)
    assert first.solution in regular
    label(first, [1, 1, 1])
    second = next_labeling(labeler)
    assert second.solution == gold  # every 2nd claim at rate 0.5
    client.force_login(labeler)
    page = client.get(reverse("labeling:labeling", args=[second.pk])).content.decode()
    for tell in ("gold", "quality", "screening", "reference"):
        assert tell not in page.lower()
    label(second, [1, 1, 1])
    assert next_labeling(labeler).solution in regular  # gold served once per labeler


def test_gold_due_is_claimed_by_the_full_claim_in_its_own_statements(labeler):
    """The plain claim's read finds gold due and waiting and leaves it to the full claim: the
    labeler's row, their labelings to continue, the batch's next solution locked, then gold in
    its place (found, counted, the lease's median, started) and the gold count started again."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_solutions(make_batch(gold_rate=0.5), 3)
    gold = make_gold([1, 1, 1])
    label(next_labeling(labeler), [1, 1, 1])
    with CaptureQueriesContext(connection) as captured:
        second = next_labeling(labeler)
    sql = [q["sql"] for q in captured.captured_queries]
    own = [q.split()[0] for q in sql if not q.startswith(("SAVEPOINT", "RELEASE"))]
    assert own == [
        "SELECT",  # the plain claim's locked read: gold is due and waits
        "SELECT",  # the labeler's record in the batch's project
        "SELECT",  # their labelings to continue: none
        "SELECT",  # the batch's next solution, locked
        "SELECT",  # the gold that waits for them
        "UPDATE",  # its count
        "SELECT",  # the lease's median (the cache starts empty)
        "INSERT",  # the labeling
        "UPDATE",  # the labeler's gold count (their record's), back to 0
    ], "\n".join(sql)
    assert second.solution == gold
    gold.refresh_from_db()
    assert gold.active_count == 1
    assert record_of(labeler).claims_since_gold == 0


def test_gold_rate_zero_never_serves_gold_and_gold_is_not_regular_work(labeler):
    batch = make_batch(gold_rate=0)
    make_gold([1, 1, 1], batch=batch)  # gold inside an active batch stays out of the regular pool
    regular = make_solutions(batch, 3)
    got = [claim_and_label(labeler, [1, 1, 1]).solution for _ in range(3)]
    assert sorted(s.pk for s in got) == sorted(s.pk for s in regular)
    assert next_labeling(labeler) is None


def test_gold_accuracy_is_measured_per_step_exact_binary_and_first_error(labeler):
    make_solutions(make_batch(gold_rate=1.0), 2)
    make_gold([1, 0, -1])
    labeling = claim_and_label(labeler, [1, 1, 1])  # misses the error at step 3
    result = GoldResult.objects.get(labeling=labeling)
    assert (result.steps_compared, result.steps_exact, result.steps_binary) == (3, 1, 2)
    assert result.first_error_match is False
    me = record_of(labeler)
    assert (me.gold_steps, me.gold_steps_exact, me.gold_steps_binary) == (3, 1, 2)
    assert me.gold_accuracy == pytest.approx(1 / 3)
    assert (me.gold_first_error_total, me.gold_first_error_match) == (1, 0)
    assert not labeling.is_surplus


def test_gold_labeled_right_matches_the_first_error(labeler):
    make_solutions(make_batch(gold_rate=1.0), 2)
    make_gold([1, 0, -1])
    labeling = claim_and_label(labeler, [1, 0, -1])
    assert labeling.gold_result.first_error_match is True
    assert labeling.gold_result.steps_exact == 3


@pytest.fixture
def screening_set(settings):
    settings.STEPWISE_SCREENING_SIZE = 2
    settings.STEPWISE_SCREENING_PASS = 0.8
    return [make_gold([1, 1, 1], screening=True) for _ in range(3)]


def new_labeler(name="nina"):
    user = make_user(name, "labeler")
    # Their record, in screening, as any new labeler's.
    quality.record_ensure(user_id=user.pk, project_id=default_project_id())
    return user


def test_a_new_labeler_gets_only_screening_until_they_pass(screening_set):
    batch = make_batch()
    regular = make_solutions(batch, 2)
    user = new_labeler()
    first = claim_and_label(user, [1, 1, 1])
    assert first.solution in screening_set
    assert record_of(user).state == LabelerRecord.State.SCREENING
    second = claim_and_label(user, [1, 1, 1])
    assert second.solution in screening_set
    me = record_of(user)
    assert (me.state, me.screening_passed, me.screening_score) == ("active", True, 1.0)
    assert next_labeling(user).solution in regular


def test_a_failed_screening_waits_for_a_lead_who_can_admit(client, screening_set, lead):
    make_solutions(make_batch(), 2)
    user = new_labeler()
    claim_and_label(user, [1, -1])
    claim_and_label(user, [-1])
    me = record_of(user)
    assert me.state == "screening" and me.screening_passed is False
    assert next_labeling(user) is None  # no third screening solution, no regular work
    client.force_login(user)
    assert "a lead will review" in client.get(reverse("labeling:queue")).content.decode()
    client.force_login(lead)
    detail = client.get(reverse("labeling:labeler_detail", args=[user.pk])).content.decode()
    assert "under the bar" in detail
    client.post(reverse("labeling:labeler_state", args=[user.pk]), {"state": "active"})
    assert record_of(user).state == "active"
    assert next_labeling(user) is not None


def test_a_rejected_labeler_gets_nothing(client, screening_set, lead):
    make_solutions(make_batch(), 2)
    user = new_labeler()
    client.force_login(lead)
    client.post(reverse("labeling:labeler_state", args=[user.pk]), {"state": "rejected"})
    assert next_labeling(user) is None


def test_without_a_screening_set_a_new_labeler_starts_regular_work():
    batch = make_batch()
    solution = make_solution(batch)
    user = new_labeler()
    assert next_labeling(user).solution == solution
    assert record_of(user).state == "active"


def test_rolling_gold_accuracy_under_the_bar_pauses_until_a_lead_reinstates(
    client, settings, labeler, lead
):
    settings.STEPWISE_GOLD_MIN_RESULTS = 2
    settings.STEPWISE_PAUSE_BELOW = 0.7
    batch = make_batch(gold_rate=1.0)
    make_solutions(batch, 5)
    for _ in range(4):
        make_gold([1, 1, -1])
    claim_and_label(labeler, [1, 1, 1])  # gold, 2/3 right
    assert record_of(labeler).state == "active"  # one result is not enough
    claim_and_label(labeler, [-1])  # gold, 0/1 right: rolling 2/4 = 50%
    me = record_of(labeler)
    assert me.state == "paused" and "50%" in me.state_reason
    assert next_labeling(labeler) is None
    client.force_login(labeler)
    page = client.get(reverse("labeling:queue")).content.decode()
    assert "Your queue is paused" in page and "50%" in page
    client.force_login(lead)
    client.post(reverse("labeling:labeler_state", args=[labeler.pk]), {"state": "active"})
    assert next_labeling(labeler) is not None  # reinstated: the old window is forgotten
    assert quality.rolling_gold_accuracy(record_of(labeler)) == (None, 0)


def test_good_gold_work_does_not_pause(settings, labeler):
    settings.STEPWISE_GOLD_MIN_RESULTS = 2
    make_solutions(make_batch(gold_rate=1.0), 5)
    for _ in range(3):
        make_gold([1, 1, 1])
    for _ in range(3):
        claim_and_label(labeler, [1, 1, 1])
    assert record_of(labeler).state == "active"


def test_undo_of_a_finished_gold_labeling_takes_its_result_back(labeler):
    make_solutions(make_batch(gold_rate=1.0), 2)
    make_gold([1, 1, 1])
    labeling = claim_and_label(labeler, [1, 1, 1])
    rating.undo_last(labeling_id=labeling.pk, user=labeler)
    me = record_of(labeler)
    assert (me.gold_labelings, me.gold_steps) == (0, 0)
    assert not GoldResult.objects.exists()
    assert Labeling.objects.get(pk=labeling.pk).status == "in_progress"


def test_the_api_does_not_let_a_labeler_tell_gold_from_regular_work(labeler, lead):
    from tests.helpers.users import api_client_for

    batch = make_batch(gold_rate=0.5)
    make_solutions(batch, 4)
    gold_batch = make_batch("reference set")
    gold = make_gold([1, 1, 1], batch=gold_batch)
    label(next_labeling(labeler), [1, 1, 1])
    second = next_labeling(labeler)
    assert second.solution == gold
    label(second, [1, 1, 1])
    api = api_client_for(labeler)
    rows = api.get("/p/default/api/labelings/").json()["results"]
    assert len(rows) == 2 and all("batch" not in row for row in rows)
    assert "batch" not in api.get(f"/p/default/api/labelings/{second.pk}/").json()
    # Filtering by the gold batch does not single the gold labeling out.
    assert len(api.get(f"/p/default/api/labelings/?batch={gold_batch.pk}").json()["results"]) == 2
    # A lead still sees where each labeling's solution sits.
    lead_rows = api_client_for(lead).get(f"/p/default/api/labelings/?batch={gold_batch.pk}").json()
    assert [row["id"] for row in lead_rows["results"]] == [second.pk]
    assert lead_rows["results"][0]["batch"] == gold_batch.pk
