"""Revisiting rated steps before finishing (revise_rating, undo_to), and the labeling page's
progress header (labeling_panel)."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from labeling import selectors
from labeling.models import BatchLabelerStats, Completion, Labeling, RatingEvent, Solution
from labeling.services import errors, rating
from tests.factories import make_batch, make_solution
from tests.helpers.users import make_user
from tests.labeling.helpers import next_labeling

pytestmark = pytest.mark.django_db

STEPS = ["Let $x = 2$.", "Then $x^2 = 4$.", "So $x^3 = 8$.", "# Answer\n\n8"]


@pytest.fixture
def labeling(labeler) -> Labeling:
    make_solution(make_batch(), steps=STEPS)
    labeling = next_labeling(labeler)
    assert labeling is not None
    return labeling


def rate(labeling, *ratings):
    for index, value in enumerate(ratings):
        rating.rate_step(
            labeling_id=labeling.pk,
            user=labeling.labeler,
            step_index=index,
            rating=value,
            elapsed_ms=100 * (index + 1),
        )


def saved_ratings(labeling) -> list[int]:
    return list(
        Completion.objects.filter(step__labeling=labeling, index=0)
        .order_by("step__index")
        .values_list("rating", flat=True)
    )


def events(labeling, reason) -> list[tuple]:
    return list(
        RatingEvent.objects.filter(labeling=labeling, reason=reason)
        .order_by("pk")
        .values_list("step_index", "old_rating", "new_rating")
    )


def test_undo_to_takes_back_that_step_and_later_ones_one_event_each(labeling):
    rate(labeling, 1, 0, 1)
    rating.undo_to(labeling_id=labeling.pk, user=labeling.labeler, step_index=1)
    labeling.refresh_from_db()
    assert saved_ratings(labeling) == [1]
    assert events(labeling, "undo") == [(2, 1, None), (1, 0, None)]  # last step first
    # The time of the steps taken back goes with them (the total is summed at the finish).
    assert sum(step.time_ms or 0 for step in labeling.step_labels.all()) == 100
    assert events(labeling, "rate") == [(0, None, 1), (1, None, 0), (2, None, 1)]  # history kept
    rating.rate_step(labeling_id=labeling.pk, user=labeling.labeler, step_index=1, rating=1)
    assert saved_ratings(labeling) == [1, 1]


def test_undo_to_reopens_a_just_finished_labeling_and_moves_the_counters_back(labeling):
    rate(labeling, 1, 1, -1)
    assert BatchLabelerStats.objects.get().labelings == 1
    rating.undo_to(labeling_id=labeling.pk, user=labeling.labeler, step_index=0)
    labeling.refresh_from_db()
    assert labeling.status == Labeling.Status.IN_PROGRESS and labeling.release_line is None
    assert saved_ratings(labeling) == [] and len(events(labeling, "undo")) == 4  # reopen + 3
    solution = Solution.objects.get(pk=labeling.solution_id)
    assert (solution.completed_count, solution.active_count) == (0, 1)
    assert BatchLabelerStats.objects.get().labelings == 0


@pytest.mark.parametrize("step_index", [2, 9, -1])
def test_undo_to_a_step_that_is_not_rated_is_refused_and_changes_nothing(labeling, step_index):
    rate(labeling, 1, 1)
    with pytest.raises(errors.Conflict, match="not rated"):
        rating.undo_to(labeling_id=labeling.pk, user=labeling.labeler, step_index=step_index)
    assert saved_ratings(labeling) == [1, 1] and events(labeling, "undo") == []


def test_undo_to_is_refused_long_after_submission_and_to_others(labeling, labeler2):
    rate(labeling, 1, -1)
    with pytest.raises(errors.LabelingError, match="not yours"):
        rating.undo_to(labeling_id=labeling.pk, user=labeler2, step_index=0)
    Labeling.objects.filter(pk=labeling.pk).update(finished_at=timezone.now() - timedelta(hours=1))
    with pytest.raises(errors.Conflict, match="too long ago"):
        rating.undo_to(labeling_id=labeling.pk, user=labeling.labeler, step_index=0)
    assert saved_ratings(labeling) == [1, -1]


def test_revise_rating_changes_a_rating_between_0_and_1_and_renews_the_claim(labeling):
    rate(labeling, 1, 1)
    Labeling.objects.filter(pk=labeling.pk).update(
        lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    rating.revise_rating(labeling_id=labeling.pk, user=labeling.labeler, step_index=0, rating=0)
    labeling.refresh_from_db()
    assert saved_ratings(labeling) == [0, 1]
    assert events(labeling, "edit") == [(0, 1, 0)]
    assert labeling.status == Labeling.Status.IN_PROGRESS
    assert labeling.lease_expires_at > timezone.now() + timedelta(minutes=1)
    # The same change again (a retry) records nothing more.
    rating.revise_rating(labeling_id=labeling.pk, user=labeling.labeler, step_index=0, rating=0)
    assert events(labeling, "edit") == [(0, 1, 0)]


def test_revise_rating_refuses_unrated_steps_a_minus_one_others_and_old_submissions(labeling, lead):
    rate(labeling, 1, -1)
    revise = rating.revise_rating
    with pytest.raises(errors.LabelingError, match="Step 3 is not rated"):
        revise(labeling_id=labeling.pk, user=labeling.labeler, step_index=2, rating=0)
    with pytest.raises(errors.LabelingError, match="undo it instead"):
        revise(labeling_id=labeling.pk, user=labeling.labeler, step_index=1, rating=0)
    with pytest.raises(errors.LabelingError, match="not yours"):  # a lead edits elsewhere
        revise(labeling_id=labeling.pk, user=lead, step_index=0, rating=0)
    Labeling.objects.filter(pk=labeling.pk).update(finished_at=timezone.now() - timedelta(hours=1))
    with pytest.raises(errors.Conflict, match="too long ago"):
        revise(labeling_id=labeling.pk, user=labeling.labeler, step_index=0, rating=0)
    assert saved_ratings(labeling) == [1, -1] and events(labeling, "edit") == []


def test_the_panel_counts_todays_solutions_and_the_step_being_rated(labeler):
    batch = make_batch()
    for _ in range(4):
        make_solution(batch, steps=STEPS)
    yesterday = timezone.now() - timedelta(days=1, hours=1)
    first = next_labeling(labeler)
    rating.finish_labeling(labeling_id=first.pk, user=labeler, reason="give_up")
    Labeling.objects.filter(pk=first.pk).update(started_at=yesterday)  # not today's
    second = next_labeling(labeler)
    rating.finish_labeling(labeling_id=second.pk, user=labeler, reason="give_up")
    next_labeling(make_user("other", "labeler"))  # someone else's work is not counted
    third = next_labeling(labeler)
    rate(third, 1, 0)

    panel = selectors.labeling_panel(selectors.labelings_for_page().get(pk=third.pk))
    assert panel.number_today == 2  # the second and this one
    assert (panel.step_number, panel.step_total, len(panel.rated)) == (3, 4, 2)
    assert panel.current.index == 2 and panel.hidden_count == 1
    assert [s.taken_back for s in panel.steps] == [2, 1, 0, 0]
    # Loaded some other way, the panel still knows the count (one more query).
    assert selectors.labeling_panel(Labeling.objects.get(pk=third.pk)).number_today == 2


def htmx_post(client, url, data):
    return client.post(url, data, HTTP_HX_REQUEST="true")


def test_the_rate_view_answers_with_the_progress_and_the_two_changed_map_cells(
    client, labeling, django_assert_max_num_queries
):
    client.force_login(labeling.labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    htmx_post(client, url, {"step_index": 0, "rating": 1})
    # Session, user, savepoint, lock, 3 inserts, release: the answer adds none.
    with django_assert_max_num_queries(8):
        response = htmx_post(client, url, {"step_index": 1, "rating": 1})
    body = response.content.decode()
    assert "Step 3 of 4" in body and "Solution 1 today" not in body  # the header stays
    assert 'aria-valuenow="2" aria-valuemax="4"' in body
    # Only the cells that changed: step 2 now rated, step 3 now current.
    assert body.count('class="map-cell rated rating-1"') == 1 and 'id="map-1"' in body
    assert body.count('class="map-cell current"') == 1 and 'id="map-2"' in body
    assert "map-cell unseen" not in body
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert page.count('class="map-cell rated rating-1"') == 2 and "Solution 1 today" in page


def test_revise_and_undo_to_views_answer_with_the_panel(client, labeling):
    client.force_login(labeling.labeler)
    rate(labeling, 1, 1, 1)
    response = htmx_post(
        client, reverse("labeling:revise", args=[labeling.pk]), {"step_index": 1, "rating": 0}
    )
    assert response.status_code == 200 and saved_ratings(labeling) == [1, 0, 1]
    response = htmx_post(client, reverse("labeling:undo_to", args=[labeling.pk]), {"step_index": 1})
    assert response.status_code == 200 and "Step 2 of 4" in response.content.decode()
    assert saved_ratings(labeling) == [1]


@pytest.mark.parametrize(
    ("view", "data", "status", "message"),
    [
        ("revise", {"step_index": 3, "rating": 0}, 400, "Step 4 is not rated."),
        ("revise", {"step_index": 0, "rating": -1}, 400, "use undo to move a -1"),
        ("revise", {"step_index": "x", "rating": 0}, 400, "step_index must be an integer"),
        ("undo_to", {"step_index": 3}, 409, "Step 4 is not rated"),
        ("undo_to", {}, 400, "step_index must be an integer"),
    ],
)
def test_revisiting_a_step_that_is_not_rated_is_a_clear_4xx(
    client, labeling, view, data, status, message
):
    client.force_login(labeling.labeler)
    rate(labeling, 1)
    response = htmx_post(client, reverse(f"labeling:{view}", args=[labeling.pk]), data)
    assert response.status_code == status and message in response.content.decode()
    assert saved_ratings(labeling) == [1]


def test_a_labeling_past_its_undo_window_shows_no_revisiting(client, labeling):
    client.force_login(labeling.labeler)
    rate(labeling, 1, -1)
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert "data-select-step" in page and 'data-key-action="again"' in page
    Labeling.objects.filter(pk=labeling.pk).update(finished_at=timezone.now() - timedelta(hours=1))
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert "data-select-step" not in page and 'data-key-action="again"' not in page
    assert 'aria-label="Step 1: rated +1"' in page  # still shown, not clickable
