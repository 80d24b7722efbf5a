"""Labelers pick the batch they label in ("Continue in …") and skip a solution with a reason:
the skip is recorded, counted nowhere, and the solution never comes back to that labeler."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labeling import selectors
from labeling.models import BatchLabelerStats, Labeling, Solution
from labeling.services import quality, queue, rating
from labeling.services.demo import ALTERNATIVES_BATCH, load_sample_data
from labeling.services.errors import Conflict, LabelingError
from labeling.views.common import CHOSEN_BATCH
from tests.factories import make_batch, make_solution, make_solutions
from tests.labeling.helpers import claim_and_label, label, next_labeling

pytestmark = pytest.mark.django_db


# --- skipping: the service ---------------------------------------------------------------------


def test_a_skip_is_recorded_and_frees_the_solution_for_others(labeler, labeler2):
    batch = make_batch(overlap=1, gold_rate=0)
    solution = make_solution(batch)
    opened = next_labeling(labeler)
    rating.rate_step(labeling_id=opened.pk, user=labeler, step_index=0, rating=1)
    skipped = queue.labeling_skip(
        labeling_id=opened.pk, user=labeler, reason="  I cannot judge this subject "
    )
    skipped.refresh_from_db()
    assert skipped.status == Labeling.Status.SKIPPED
    assert skipped.skip_reason == "I cannot judge this subject"
    assert skipped.step_labels.count() == 1  # the rating made before is kept, in its history
    solution.refresh_from_db()
    assert (solution.active_count, solution.completed_count) == (0, 0)
    # Not offered to them again; another labeler gets it.
    assert next_labeling(labeler) is None
    taken = next_labeling(labeler2)
    assert taken is not None and taken.solution == solution


def test_a_skip_is_counted_nowhere(labeler, labeler2):
    batch = make_batch(overlap=2, gold_rate=0)
    make_solutions(batch, 2)
    opened = next_labeling(labeler)
    queue.labeling_skip(labeling_id=opened.pk, user=labeler, reason="too long for me")
    assert not BatchLabelerStats.objects.filter(labeler=labeler).exists()
    assert selectors.tallied_labelings().count() == 0
    summary = selectors.batch_summary(batch)
    assert summary.labels_done == 0
    # Agreement: the solution reaches its two labels from two others, the skip not among them.
    done = claim_and_label(labeler2, [1, 1, 1])
    assert done.solution == opened.solution
    rows = selectors.batch_labeler_rows(batch)
    assert {row.username for row in rows} == {"lars"}
    cockpit = selectors.labeler_cockpit(labeler, selectors.labeler_record(labeler))
    assert (cockpit.total_solutions, cockpit.today_solutions) == (0, 0)


def test_skipping_twice_is_a_no_op_and_a_skipped_labeling_takes_no_rating(labeler):
    make_solutions(make_batch(gold_rate=0), 2)
    opened = next_labeling(labeler)
    queue.labeling_skip(labeling_id=opened.pk, user=labeler, reason="unclear")
    again = queue.labeling_skip(labeling_id=opened.pk, user=labeler, reason="something else")
    again.refresh_from_db()
    assert again.skip_reason == "unclear"
    with pytest.raises(Conflict, match="You skipped this solution"):
        rating.rate_step(labeling_id=opened.pk, user=labeler, step_index=0, rating=1)
    with pytest.raises(Conflict, match="You skipped this solution"):
        rating.finish_labeling(labeling_id=opened.pk, user=labeler, reason="give_up")
    with pytest.raises(Conflict, match="You skipped this solution"):
        queue.extend_lease(opened.pk, labeler)
    opened.solution.refresh_from_db()
    assert opened.solution.active_count == 0  # given back once, not twice


@pytest.mark.parametrize(
    ("reason", "message"),
    [("", "Say why you skip"), ("   ", "Say why you skip"), ("x" * 301, "keep it under 300")],
)
def test_a_skip_needs_a_short_reason(labeler, reason, message):
    make_solution(make_batch(gold_rate=0))
    opened = next_labeling(labeler)
    with pytest.raises(LabelingError, match=message):
        queue.labeling_skip(labeling_id=opened.pk, user=labeler, reason=reason)
    opened.refresh_from_db()
    assert opened.status == Labeling.Status.IN_PROGRESS and opened.skip_reason == ""


def test_a_submitted_or_someone_elses_labeling_cannot_be_skipped(labeler, labeler2):
    make_solutions(make_batch(gold_rate=0), 2)
    done = claim_and_label(labeler, [1, 1, 1])
    with pytest.raises(Conflict, match="already submitted"):
        queue.labeling_skip(labeling_id=done.pk, user=labeler, reason="late")
    theirs = next_labeling(labeler2)
    with pytest.raises(LabelingError, match="not yours"):
        queue.labeling_skip(labeling_id=theirs.pk, user=labeler, reason="not mine")
    theirs.refresh_from_db()
    assert theirs.status == Labeling.Status.IN_PROGRESS


# --- the pages ---------------------------------------------------------------------------------


def test_skip_page_opens_the_next_solution_and_a_double_submit_skips_once(client, labeler):
    batch = make_batch(gold_rate=0)
    make_solutions(batch, 3)
    client.force_login(labeler)
    client.post(reverse("labeling:claim"))
    first = Labeling.objects.get(labeler=labeler)
    url = reverse("labeling:skip", args=[first.pk])
    response = client.post(url, {"reason": "The problem is unclear"})
    second = Labeling.objects.get(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
    assert response.status_code == 302
    assert response["Location"] == reverse("labeling:labeling", args=[second.pk])
    assert second.solution != first.solution
    again = client.post(url, {"reason": "The problem is unclear"})  # the form sent twice
    assert again["Location"] == reverse("labeling:labeling", args=[second.pk])
    assert Labeling.objects.filter(labeler=labeler, status="skipped").count() == 1
    assert Labeling.objects.filter(labeler=labeler).count() == 2
    page = client.get(reverse("labeling:labeling", args=[first.pk]))
    assert "Skipped: <strong>The problem is unclear</strong>" in page.content.decode()


def test_skip_page_refuses_bad_input_with_a_clear_400(client, labeler, labeler2):
    make_solutions(make_batch(gold_rate=0), 2)
    client.force_login(labeler)
    client.post(reverse("labeling:claim"))
    mine = Labeling.objects.get(labeler=labeler)
    response = client.post(reverse("labeling:skip", args=[mine.pk]), {"reason": " "})
    assert response.status_code == 400
    assert "Say why you skip this solution" in response.content.decode()
    mine.refresh_from_db()
    assert mine.status == Labeling.Status.IN_PROGRESS
    theirs = next_labeling(labeler2)
    response = client.post(reverse("labeling:skip", args=[theirs.pk]), {"reason": "x"})
    assert response.status_code == 403
    assert client.post(reverse("labeling:skip", args=[999999]), {"reason": "x"}).status_code == 404
    assert client.get(reverse("labeling:skip", args=[mine.pk])).status_code == 405


def test_home_lists_each_batch_with_a_continue_in_button(client, labeler):
    high = make_batch("High", priority=5, gold_rate=0)
    low = make_batch("Low", priority=0, gold_rate=0)
    make_solutions(high, 2)
    make_solutions(low, 2)
    client.force_login(labeler)
    page = client.get(reverse("home")).content.decode()
    assert "Continue in High" in page and "Continue in Low" in page
    assert f'name="batch" value="{low.pk}"' in page


def test_a_chosen_batch_serves_the_claims_while_it_has_work_then_the_others(client, labeler):
    high = make_batch("High", priority=5, gold_rate=0)
    low = make_batch("Low", priority=0, gold_rate=0)
    make_solutions(high, 2)
    make_solutions(low, 2)
    client.force_login(labeler)
    client.post(reverse("labeling:claim"), {"batch": str(low.pk)})
    assert client.session[CHOSEN_BATCH] == low.pk
    for round in range(2):  # "Next solution" posts no batch: the choice holds
        opened = Labeling.objects.get(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
        assert opened.solution.batch == low
        label(opened, [1, 1, 1])
        if round == 0:  # the home page says where the next one comes from
            home = client.get(reverse("home")).content.decode()
            assert 'id="start" type="submit">Continue in Low' in home
            assert "your choice" in home
        client.post(reverse("labeling:claim"))
    # Low has nothing more for this labeler: on to High, the choice forgotten.
    opened = Labeling.objects.get(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
    assert opened.solution.batch == high
    assert CHOSEN_BATCH not in client.session


def test_an_empty_batch_takes_the_choice_back(client, labeler):
    high = make_batch("High", priority=5, gold_rate=0)
    low = make_batch("Low", priority=0, gold_rate=0)
    make_solutions(high, 2)
    make_solutions(low, 2)
    client.force_login(labeler)
    session = client.session
    session[CHOSEN_BATCH] = low.pk
    session.save()
    client.post(reverse("labeling:claim"), {"batch": ""})
    assert CHOSEN_BATCH not in client.session
    assert Labeling.objects.get(labeler=labeler).solution.batch == high


@pytest.mark.parametrize("value", ["abc", "999999", "paused"])
def test_a_batch_choice_that_is_not_open_is_a_clear_400(client, labeler, value):
    paused = make_batch("Paused", is_active=False, gold_rate=0)
    make_solutions(paused, 1)
    make_solutions(make_batch("Open", gold_rate=0), 1)
    client.force_login(labeler)
    posted = str(paused.pk) if value == "paused" else value
    response = client.post(reverse("labeling:claim"), {"batch": posted})
    assert response.status_code == 400
    text = response.content.decode()
    assert (
        "must be a batch&#x27;s number" in text if value == "abc" else "is not open to you" in text
    )
    assert not Labeling.objects.filter(labeler=labeler).exists()
    assert CHOSEN_BATCH not in client.session


def test_a_batch_assigned_to_others_cannot_be_chosen(client, labeler, labeler2):
    theirs = make_batch("Theirs", gold_rate=0)
    theirs.labelers.add(labeler2)
    make_solutions(theirs, 1)
    client.force_login(labeler)
    response = client.post(reverse("labeling:claim"), {"batch": str(theirs.pk)})
    assert response.status_code == 400
    assert Solution.objects.get(batch=theirs).active_count == 0


def test_the_demo_alternatives_batch_once_activated_is_one_click_from_home(client, labeler):
    """The step-by-step batch is the demo's second project's: one click from its home."""
    load_sample_data()
    from labeling.models import Batch
    from labeling.services.demo import STEPS_SLUG
    from stepwise.links import project_reverse
    from tests.helpers.users import grant

    alternatives = Batch.objects.get(name=ALTERNATIVES_BATCH)
    assert alternatives.project.slug == STEPS_SLUG
    grant(labeler, "labeler", project=alternatives.project)
    alternatives.is_active = True
    alternatives.save(update_fields=["is_active"])
    record = quality.record_ensure(user_id=labeler.pk, project_id=alternatives.project_id)
    quality.labeler_set_state(record=record, state="active", reason="admitted")
    client.force_login(labeler)
    home = client.get(project_reverse(STEPS_SLUG, "home")).content.decode()
    assert f"Continue in {ALTERNATIVES_BATCH}" in home
    assert f"Continue in {ALTERNATIVES_BATCH}" not in client.get(reverse("home")).content.decode()
    response = client.post(
        project_reverse(STEPS_SLUG, "labeling:claim"), {"batch": str(alternatives.pk)}
    )
    opened = Labeling.objects.get(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
    assert response["Location"] == project_reverse(STEPS_SLUG, "labeling:labeling", opened.pk)
    assert opened.solution.batch == alternatives


def test_a_skip_is_in_no_export_not_even_of_unfinished_passes(labeler, labeler2):
    from labeling.services.exporting import ExportFilters, select_labelings

    make_solutions(make_batch(gold_rate=0), 2)
    skipped = next_labeling(labeler)
    rating.rate_step(labeling_id=skipped.pk, user=labeler, step_index=0, rating=1)
    queue.labeling_skip(labeling_id=skipped.pk, user=labeler, reason="unclear")
    unfinished = next_labeling(labeler2)
    rating.rate_step(labeling_id=unfinished.pk, user=labeler2, step_index=0, rating=1)
    exported = set(
        select_labelings(ExportFilters(complete_only=False)).values_list("pk", flat=True)
    )
    assert exported == {unfinished.pk}
    assert not select_labelings(ExportFilters()).exists()
