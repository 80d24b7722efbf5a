import json
from datetime import timedelta

import pytest
from django.utils import timezone

from labeling.models import Labeling, RatingEvent, Solution
from labeling.services import errors, queue, rating
from labeling.services.exporting import iter_prm800k_lines
from labeling.services.rating import rate_step
from tests.factories import make_batch, make_solution, make_solutions
from tests.labeling.helpers import next_labeling

pytestmark = pytest.mark.django_db


def claim(user, **kwargs) -> Labeling:
    labeling = next_labeling(user, **kwargs)
    assert labeling is not None
    return labeling


def rate(labeling, step, rating, **kwargs):
    return rate_step(
        labeling_id=labeling.pk, user=labeling.labeler, step_index=step, rating=rating, **kwargs
    ).labeling


def test_claim_takes_a_slot_and_resumes_the_same_labeling(labeler):
    batch = make_batch()
    solution = make_solution(batch)
    first = claim(labeler)
    assert first.solution == solution and first.lease_expires_at > timezone.now()
    assert Solution.objects.get(pk=solution.pk).active_count == 1
    assert claim(labeler) == first  # a reload resumes, never claims a second one


def test_second_labeler_never_gets_a_claimed_solution_when_one_label_is_wanted(labeler, labeler2):
    batch = make_batch(overlap=1)
    make_solution(batch)
    claim(labeler)
    assert next_labeling(labeler2) is None


def test_overlap_two_gives_the_same_solution_to_two_labelers_but_not_a_third(
    labeler, labeler2, lead
):
    batch = make_batch(overlap=2)
    solution = make_solution(batch)
    assert claim(labeler).solution == solution
    assert claim(labeler2).solution == solution
    assert next_labeling(lead) is None


def test_positive_ratings_to_the_end_finish_with_solution(labeler):
    labeling = claim(labeler, batch=make_solution(make_batch()).batch)
    for step in range(3):
        labeling = rate(labeling, step, 1, elapsed_ms=1000 + step)
    labeling.refresh_from_db()
    assert labeling.status == Labeling.Status.COMPLETED and labeling.finish_reason == "solution"
    assert labeling.total_time_ms == 3003
    assert [s.time_ms for s in labeling.step_labels.order_by("index")] == [1000, 1001, 1002]
    solution = labeling.solution
    solution.refresh_from_db()
    assert (solution.completed_count, solution.active_count) == (1, 0)


def test_minus_one_stops_the_solution_with_found_error(labeler):
    make_solution(make_batch())
    labeling = claim(labeler)
    rate(labeling, 0, 0, flagged=True)
    rate(labeling, 1, -1)
    labeling.refresh_from_db()
    assert labeling.finish_reason == "found_error"
    steps = list(labeling.step_labels.order_by("index"))
    assert [s.chosen_completion for s in steps] == [0, None]
    assert steps[0].completions.get().flagged is True


def test_double_submit_is_harmless_and_a_different_rating_conflicts(labeler):
    make_solution(make_batch())
    labeling = claim(labeler)
    rate(labeling, 0, 1)
    rate(labeling, 0, 1)  # the same request again: a no-op
    assert labeling.step_labels.count() == 1
    with pytest.raises(errors.Conflict, match="already rated"):
        rate(labeling, 0, -1)
    with pytest.raises(errors.Conflict, match="Rate step 2 first"):
        rate(labeling, 2, 1)
    with pytest.raises(errors.LabelingError, match="-1, 0 or \\+1"):
        rate(labeling, 1, 7)
    assert labeling.step_labels.count() == 1


def test_undo_takes_back_the_last_rating_and_reopens_a_finished_labeling(labeler):
    make_solution(make_batch())
    labeling = claim(labeler)
    rate(labeling, 0, 1, elapsed_ms=500)
    rate(labeling, 1, -1, elapsed_ms=700)
    labeling = rating.undo_last(labeling_id=labeling.pk, user=labeler)
    labeling.refresh_from_db()
    assert labeling.status == Labeling.Status.IN_PROGRESS
    # The −1 taken back takes its 700 ms with it (the total is summed at the next finish).
    assert [step.time_ms for step in labeling.step_labels.all()] == [500]
    assert labeling.step_labels.count() == 1
    solution = Solution.objects.get(pk=labeling.solution_id)
    assert (solution.completed_count, solution.active_count) == (0, 1)
    reasons = list(
        RatingEvent.objects.filter(labeling=labeling).values_list(
            "reason", "old_rating", "new_rating"
        )
    )
    assert ("undo", -1, None) in reasons and ("rate", None, 1) in reasons
    rate(labeling, 1, 1)
    assert labeling.step_labels.count() == 2


def test_undo_is_refused_long_after_submission(labeler, settings):
    make_solution(make_batch())
    labeling = claim(labeler)
    rate(labeling, 0, -1)
    Labeling.objects.filter(pk=labeling.pk).update(finished_at=timezone.now() - timedelta(hours=1))
    with pytest.raises(errors.Conflict, match="too long ago"):
        rating.undo_last(labeling_id=labeling.pk, user=labeler)


@pytest.mark.parametrize("reason", ["give_up", "bad_problem"])
def test_give_up_and_bad_problem_end_the_labeling(labeler, reason):
    make_solution(make_batch())
    labeling = claim(labeler)
    rate(labeling, 0, 1)
    rating.finish_labeling(labeling_id=labeling.pk, user=labeler, reason=reason)
    rating.finish_labeling(labeling_id=labeling.pk, user=labeler, reason=reason)  # repeat: no-op
    labeling.refresh_from_db()
    assert labeling.finish_reason == reason and labeling.status == "completed"
    assert Solution.objects.get(pk=labeling.solution_id).completed_count == 1
    with pytest.raises(errors.LabelingError):
        rating.finish_labeling(labeling_id=labeling.pk, user=labeler, reason="solution")


def test_someone_elses_labeling_cannot_be_rated(labeler, labeler2):
    make_solution(make_batch())
    labeling = claim(labeler)
    with pytest.raises(errors.LabelingError, match="not yours"):
        rating.rate_step(labeling_id=labeling.pk, user=labeler2, step_index=0, rating=1)


def test_users_without_the_labeler_role_cannot_claim(outsider, researcher):
    make_solution(make_batch())
    for user in (outsider, researcher):
        with pytest.raises(errors.LabelingError):
            next_labeling(user)


def test_expired_lease_returns_to_the_pool_and_a_late_submit_is_kept_as_surplus(labeler, labeler2):
    make_solution(make_batch(overlap=1))
    late = claim(labeler)
    rate(late, 0, 1)
    Labeling.objects.filter(pk=late.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    taken = claim(labeler2)  # the expired claim went back to the pool
    assert taken.solution_id == late.solution_id
    assert Labeling.objects.get(pk=late.pk).status == Labeling.Status.EXPIRED
    for step in range(3):
        rate(taken, step, 1)
    rate(late, 1, 1)
    rate(late, 2, 1)
    late.refresh_from_db()
    assert late.status == "completed" and late.is_surplus  # kept, marked, not counted
    solution = Solution.objects.get(pk=late.solution_id)
    assert (solution.completed_count, solution.active_count) == (1, 0)


def test_expired_lease_submitted_while_there_is_room_counts(labeler):
    make_solution(make_batch(overlap=1))
    labeling = claim(labeler)
    Labeling.objects.filter(pk=labeling.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    queue.expire_stale_leases()
    for step in range(3):
        rate(labeling, step, 1)
    labeling.refresh_from_db()
    assert labeling.status == "completed" and not labeling.is_surplus
    assert Solution.objects.get(pk=labeling.solution_id).completed_count == 1


def _expire(labeling) -> None:
    Labeling.objects.filter(pk=labeling.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    queue.expire_stale_leases()


def test_back_after_the_lease_ran_out_the_labeler_continues_the_same_solution(labeler):
    """The claim expired with a step rated; the solution still has room: the next claim gives
    the same labeling back, in progress, counted again, with its rated step kept."""
    make_solutions(make_batch(overlap=1), 2)
    away = claim(labeler)
    rate(away, 0, 1)
    _expire(away)
    assert Solution.objects.get(pk=away.solution_id).active_count == 0
    back = claim(labeler)
    assert back.pk == away.pk and back.status == Labeling.Status.IN_PROGRESS
    assert back.lease_expires_at > timezone.now() and back.step_labels.count() == 1
    assert Solution.objects.get(pk=away.solution_id).active_count == 1
    rate(back, 1, 1)
    rate(back, 2, 1)
    back.refresh_from_db()
    assert back.status == "completed" and not back.is_surplus
    solution = Solution.objects.get(pk=away.solution_id)
    assert (solution.completed_count, solution.active_count) == (1, 0)


def test_a_claim_says_when_it_took_up_the_labelers_expired_labeling_again(labeler):
    make_solutions(make_batch(overlap=1), 2)
    first = queue.claim(labeler)
    assert first is not None and not first.resumed_expired  # a new claim
    rate(first.labeling, 0, 1)
    assert queue.claim(labeler) == queue.Claim(first.labeling)  # their open one: nothing to say
    _expire(first.labeling)
    back = queue.claim(labeler)
    assert back is not None and back.resumed_expired and back.labeling.pk == first.labeling.pk
    assert queue.claim(labeler) == queue.Claim(back.labeling)  # said once


def test_rate_step_says_how_many_steps_are_rated(labeler):
    make_solution(make_batch())
    labeling = claim(labeler)
    first = rate_step(labeling_id=labeling.pk, user=labeler, step_index=0, rating=1)
    assert first.rated_count == 1 and first.labeling.status == Labeling.Status.IN_PROGRESS
    again = rate_step(labeling_id=labeling.pk, user=labeler, step_index=0, rating=1)
    assert again.rated_count == 1  # a resent rating changes nothing
    last = rate_step(labeling_id=labeling.pk, user=labeler, step_index=1, rating=-1)
    assert last.rated_count == 2 and last.labeling.status == Labeling.Status.COMPLETED


def test_an_expired_claim_taken_by_others_is_explained_and_the_labeler_moves_on(
    client, labeler, labeler2
):
    batch = make_batch(overlap=1)
    make_solutions(batch, 2)
    away = claim(labeler)
    rate(away, 0, 1)
    _expire(away)
    taken = claim(labeler2)
    assert taken.solution_id == away.solution_id  # the room went to someone else
    moved_on = claim(labeler)
    assert moved_on.pk != away.pk and moved_on.solution_id != away.solution_id
    assert Labeling.objects.get(pk=away.pk).status == Labeling.Status.EXPIRED  # kept, as it was
    rating.finish_labeling(labeling_id=moved_on.pk, user=labeler, reason="give_up")
    client.force_login(labeler)
    page = client.get("/p/default/label/").content.decode()
    assert "expired" in page and "after 1 step rated" in page and "not counted" in page


def test_the_page_extends_a_live_claim_and_takes_back_a_lapsed_one_only_with_room(
    client, labeler, labeler2
):
    make_solutions(make_batch(overlap=1), 1)
    labeling = claim(labeler)
    soon = timezone.now() + timedelta(seconds=30)
    Labeling.objects.filter(pk=labeling.pk).update(lease_expires_at=soon)
    client.force_login(labeler)
    response = client.post(f"/p/default/label/{labeling.pk}/extend/")
    assert response.status_code == 200
    extended = Labeling.objects.get(pk=labeling.pk).lease_expires_at
    assert extended > soon + timedelta(minutes=5)
    assert response.json()["lease_expires_at"] == extended.isoformat()

    _expire(labeling)  # lapsed, room still there: taken back
    assert client.post(f"/p/default/label/{labeling.pk}/extend/").status_code == 200
    assert Labeling.objects.get(pk=labeling.pk).status == Labeling.Status.IN_PROGRESS

    _expire(labeling)
    claim(labeler2)  # lapsed, and the room is gone
    response = client.post(f"/p/default/label/{labeling.pk}/extend/")
    assert response.status_code == 409 and "received its labels" in response.json()["detail"]
    assert Labeling.objects.get(pk=labeling.pk).status == Labeling.Status.EXPIRED
    client.force_login(labeler2)
    assert client.post(f"/p/default/label/{labeling.pk}/extend/").status_code == 403  # not theirs


def test_queue_serves_priority_first_then_solutions_closest_to_done(labeler, labeler2):
    low = make_batch(priority=0, overlap=2)
    high = make_batch(priority=5, overlap=2)
    make_solutions(low, 2)
    a, b = make_solutions(high, 2)
    Solution.objects.filter(pk=b.pk).update(completed_count=1)
    assert claim(labeler).solution_id == b.pk


def test_batches_assigned_to_others_are_not_served(labeler, labeler2):
    batch = make_batch()
    batch.labelers.add(labeler2)
    make_solution(batch)
    assert next_labeling(labeler) is None
    assert claim(labeler2).solution.batch == batch


def test_a_labeled_solution_exports_as_a_phase2_line(labeler):
    solution = make_solution(make_batch(generation=3))
    labeling = claim(labeler)
    rate(labeling, 0, 1, elapsed_ms=1200)
    rate(labeling, 1, -1, elapsed_ms=800)
    (line,) = map(json.loads, iter_prm800k_lines(Labeling.objects.filter(pk=labeling.pk)))
    assert list(line) == [
        "labeler",
        "timestamp",
        "generation",
        "is_quality_control_question",
        "is_initial_screening_question",
        "question",
        "label",
    ]
    assert line["generation"] == 3 and line["label"]["finish_reason"] == "found_error"
    assert line["label"]["total_time"] == 2000
    assert line["question"]["pre_generated_steps"] == solution.steps
    assert line["label"]["steps"] == [
        {
            "completions": [{"text": solution.steps[0], "rating": 1, "flagged": False}],
            "human_completion": None,
            "chosen_completion": 0,
        },
        {
            "completions": [{"text": solution.steps[1], "rating": -1, "flagged": False}],
            "human_completion": None,
            "chosen_completion": None,
        },
    ]


def test_a_submitted_labeling_stores_its_release_line_and_undo_clears_it(labeler):
    from labeling.prm800k import render_record
    from labeling.selectors import release_record

    make_solution(make_batch())
    labeling = claim(labeler)
    rate(labeling, 0, 1)
    rate(labeling, 1, -1)
    labeling.refresh_from_db()
    assert labeling.release_line == render_record(release_record(labeling.pk))
    assert json.loads(labeling.release_line)["label"]["finish_reason"] == "found_error"
    rating.undo_last(labeling_id=labeling.pk, user=labeler)
    labeling.refresh_from_db()
    assert labeling.release_line is None
    rate(labeling, 1, 1)
    rate(labeling, 2, 1)
    labeling.refresh_from_db()
    assert json.loads(labeling.release_line)["label"]["finish_reason"] == "solution"


def test_an_edit_after_submission_renders_the_line_again(labeler):
    make_solution(make_batch())
    labeling = claim(labeler)
    for step in range(3):
        rate(labeling, step, 1)
    rating.edit_rating(labeling_id=labeling.pk, user=labeler, step_index=1, rating=0)
    labeling.refresh_from_db()
    steps = json.loads(labeling.release_line)["label"]["steps"]
    assert [s["completions"][0]["rating"] for s in steps] == [1, 0, 1]
