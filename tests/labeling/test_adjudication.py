"""Agreement on N >= 2 solutions, the adjudication queue, final ratings, the audit trail."""

import pytest
from django.urls import reverse

from labeling import selectors
from labeling.models import (
    Adjudication,
    BatchAgreement,
    LabelerRecord,
    Labeling,
    PairAgreement,
    RatingEvent,
    SolutionAgreement,
)
from labeling.services import adjudication, errors, rating
from tests.factories import make_batch, make_solution
from tests.labeling.helpers import claim_and_label, next_labeling, record_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def disputed(labeler, labeler2):
    solution = make_solution(make_batch(overlap=2, gold_rate=0))
    claim_and_label(labeler, [1, 1, 1])
    claim_and_label(labeler2, [1, -1])
    return solution


def test_agreeing_labelers_do_not_go_to_adjudication(labeler, labeler2):
    solution = make_solution(make_batch(overlap=2, gold_rate=0))
    claim_and_label(labeler, [1, 0, 1])
    claim_and_label(labeler2, [1, 0, 1])
    agreement = SolutionAgreement.objects.get(solution=solution)
    assert (agreement.raw, agreement.alpha, agreement.needs_adjudication) == (1.0, 1.0, False)
    assert selectors.final_step_ratings(solution).ratings == [1, 0, 1]
    pair = PairAgreement.objects.get()
    assert (pair.steps_compared, pair.steps_same, pair.first_error_same) == (3, 3, 1)
    assert record_of(labeler).agreement == 1.0


def test_a_first_error_disagreement_goes_to_the_adjudication_queue(disputed):
    agreement = SolutionAgreement.objects.get(solution=disputed)
    assert agreement.needs_adjudication and not agreement.first_error_agree
    assert agreement.raw == pytest.approx(0.5)
    assert [a.solution_id for a in selectors.adjudication_queue()] == [disputed.pk]
    batch = BatchAgreement.objects.get(batch=disputed.batch)
    assert (batch.solutions, batch.flagged, batch.pairs, batch.pairs_same) == (1, 1, 2, 1)


def test_the_nth_labeling_undone_and_finished_again_replaces_its_agreement(disputed, labeler2):
    """A recompute takes back what the first computation added to the batch's, the pair's and
    the labelers' counters before it adds its own: nothing is counted twice."""
    second = Labeling.objects.get(labeler=labeler2)
    rating.undo_last(labeling_id=second.pk, user=labeler2)  # the -1 taken back: reopened
    rating.rate_step(labeling_id=second.pk, user=labeler2, step_index=1, rating=1)
    rating.rate_step(labeling_id=second.pk, user=labeler2, step_index=2, rating=1)
    agreement = SolutionAgreement.objects.get(solution=disputed)
    assert (agreement.raw, agreement.first_error_agree, agreement.needs_adjudication) == (
        1.0,
        True,
        False,
    )
    batch = BatchAgreement.objects.get(batch=disputed.batch)
    assert (batch.solutions, batch.flagged, batch.pairs, batch.pairs_same) == (1, 0, 3, 3)
    assert batch.coincidence == agreement.contribution["coincidence"]
    pair = PairAgreement.objects.get()
    assert (pair.solutions, pair.steps_compared, pair.steps_same) == (1, 3, 3)
    assert list(
        LabelerRecord.objects.order_by("user_id").values_list(
            "agree_steps_compared", "agree_steps_same"
        )
    ) == [(3, 3), (3, 3)]


def test_the_nth_labeling_undone_and_left_open_takes_its_agreement_back(disputed, labeler2):
    """Undone, the solution is below N again: its agreement over N leaves the adjudication queue
    and the batch's, the pair's and the labelers' counters (a lead is not asked to settle a
    disagreement that no longer stands), until a finish brings it back to N."""
    second = Labeling.objects.get(labeler=labeler2)
    rating.undo_last(labeling_id=second.pk, user=labeler2)  # reopened, and left open
    assert not SolutionAgreement.objects.filter(solution=disputed).exists()
    assert list(selectors.adjudication_queue()) == []
    batch = BatchAgreement.objects.get(batch=disputed.batch)
    assert (batch.solutions, batch.flagged, batch.pairs, batch.pairs_same) == (0, 0, 0, 0)
    assert not any(batch.coincidence.values())
    pair = PairAgreement.objects.get()
    assert (pair.solutions, pair.steps_compared, pair.steps_same) == (0, 0, 0)
    assert list(
        LabelerRecord.objects.order_by("user_id").values_list(
            "agree_steps_compared", "agree_steps_same"
        )
    ) == [(0, 0), (0, 0)]
    # Finished again the same way: the same agreement as before, counted once.
    rating.rate_step(labeling_id=second.pk, user=labeler2, step_index=1, rating=-1)
    assert SolutionAgreement.objects.get(solution=disputed).needs_adjudication
    batch.refresh_from_db()
    assert (batch.solutions, batch.flagged, batch.pairs, batch.pairs_same) == (1, 1, 2, 1)


def test_agreement_is_computed_only_once_a_solution_has_its_n(labeler):
    solution = make_solution(make_batch(overlap=2, gold_rate=0))
    claim_and_label(labeler, [1, 1, 1])
    assert not SolutionAgreement.objects.filter(solution=solution).exists()


def test_a_lead_adjudicates_side_by_side_and_the_final_is_audited(
    client, disputed, lead, labeler, labeler2
):
    client.force_login(lead)
    page = client.get(reverse("labeling:adjudicate", args=[disputed.pk])).content.decode()
    assert "lena" in page and "lars" in page and page.count('name="rating"') == 3
    response = client.post(
        reverse("labeling:adjudicate", args=[disputed.pk]), {"rating": ["1", "0", "1"]}
    )
    assert response.status_code == 302
    assert Adjudication.objects.get(solution=disputed).ratings == [1, 0, 1]
    final = selectors.final_step_ratings(disputed)
    assert (final.ratings, final.source) == ([1, 0, 1], "adjudication")
    assert not SolutionAgreement.objects.get(solution=disputed).needs_adjudication
    events = RatingEvent.objects.filter(reason="adjudication")
    by_labeler = {
        (e.labeling.labeler.username, e.step_index, e.old_rating, e.new_rating) for e in events
    }
    assert ("lena", 1, 1, 0) in by_labeler
    assert ("lars", 1, -1, 0) in by_labeler and ("lars", 2, None, 1) in by_labeler
    assert all(e.actor == lead for e in events)
    # the labelers' own ratings are untouched
    assert selectors.labeling_step_ratings([Labeling.objects.get(labeler=labeler2).pk]) == {
        Labeling.objects.get(labeler=labeler2).pk: [1, -1]
    }


def test_an_adjudication_with_steps_after_a_minus_one_is_refused(client, disputed, lead):
    client.force_login(lead)
    response = client.post(
        reverse("labeling:adjudicate", args=[disputed.pk]), {"rating": ["-1", "1", "1"]}
    )
    assert response.status_code == 400
    assert not Adjudication.objects.exists()


@pytest.mark.parametrize(
    ("posted", "step"),
    [(["1", "", "-1"], 2), (["", "1", "1"], 1), (["1", "0", ""], 3), (["1", "0"], 3)],
)
def test_an_adjudication_missing_a_step_before_the_first_minus_one_is_refused_with_400(
    client, disputed, lead, posted, step
):
    """The server never closes a gap or fills a step: a skipped step is named, nothing saved."""
    client.force_login(lead)
    response = client.post(reverse("labeling:adjudicate", args=[disputed.pk]), {"rating": posted})
    page = response.content.decode()
    assert response.status_code == 400
    assert f"Step {step} has no final rating" in page
    assert not Adjudication.objects.exists()
    assert not RatingEvent.objects.filter(reason="adjudication").exists()
    assert SolutionAgreement.objects.get(solution=disputed).needs_adjudication
    # the refused page shows what the lead chose, so the lead fixes one step, not all
    chosen = page.split('name="rating"')[1:]
    for index, value in enumerate(posted):
        if value:
            assert f'<option value="{value}" selected>' in chosen[index]


def test_adjudication_save_stores_no_decision_the_lead_did_not_make(disputed, lead):
    with pytest.raises(errors.LabelingError, match="Step 2 has no final rating"):
        adjudication.adjudication_save(solution=disputed, lead=lead, ratings=[1, None, -1])
    assert not Adjudication.objects.exists()
    saved = adjudication.adjudication_save(solution=disputed, lead=lead, ratings=[1, -1, None])
    assert saved.ratings == [1, -1]  # after the -1: no rating, as a labeling ends there


@pytest.mark.parametrize("bad", ["abc", "1.5", "+"])
def test_a_rating_that_is_not_a_number_gets_a_sentence_not_a_python_error(
    client, disputed, lead, bad
):
    client.force_login(lead)
    response = client.post(
        reverse("labeling:adjudicate", args=[disputed.pk]), {"rating": ["1", bad, "1"]}
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert "Final ratings are -1, 0 or +1 for each step." in page
    assert "invalid literal" not in page and "int()" not in page
    assert not Adjudication.objects.exists()


def test_final_ratings_single_labeling_and_majority_with_ties_taking_the_lower(
    labeler, labeler2, lead
):
    single = make_solution(make_batch(overlap=1, gold_rate=0))
    claim_and_label(labeler, [1, 0, 1])
    assert selectors.final_step_ratings(single).ratings == [1, 0, 1]
    assert selectors.final_step_ratings(single).source == "single"
    three = make_solution(make_batch(overlap=3, gold_rate=0, priority=5))
    claim_and_label(labeler, [1, 1, 1])
    claim_and_label(labeler2, [1, 0, 1])
    claim_and_label(lead, [1, 0, -1])
    final = selectors.final_step_ratings(three)
    assert (final.ratings, final.source) == ([1, 0, 1], "majority")
    assert selectors.final_step_ratings(make_solution()).source == "none"


def test_majority_tie_on_two_labelers_takes_the_lower_rating(disputed):
    assert selectors.final_step_ratings(disputed).ratings == [1, -1]


def test_history_shows_every_change_and_only_leads_read_it(client, lead, labeler):
    solution = make_solution(make_batch(gold_rate=0))
    labeling = next_labeling(labeler)
    rating.rate_step(labeling_id=labeling.pk, user=labeler, step_index=0, rating=1)
    rating.undo_last(labeling_id=labeling.pk, user=labeler)
    claim_and_label(labeler, [1, 1, 1])
    rating.edit_rating(labeling_id=labeling.pk, user=lead, step_index=1, rating=0)
    reasons = list(Labeling.objects.get(pk=labeling.pk).events.values_list("reason", flat=True))
    assert reasons == ["rate", "undo", "rate", "rate", "rate", "finish", "edit"]
    client.force_login(labeler)
    assert client.get(reverse("labeling:labeling_history", args=[labeling.pk])).status_code == 403
    client.force_login(lead)
    page = client.get(reverse("labeling:labeling_history", args=[labeling.pk])).content.decode()
    assert (
        "edited by the labeler" in page and "undone" in page and solution.problem.text[:20] in page
    )


def test_an_edit_cannot_move_a_minus_one(labeler):
    make_solution(make_batch(gold_rate=0))
    labeling = claim_and_label(labeler, [1, -1])
    with pytest.raises(errors.LabelingError):
        rating.edit_rating(labeling_id=labeling.pk, user=labeler, step_index=1, rating=1)
    with pytest.raises(errors.LabelingError):
        rating.edit_rating(labeling_id=labeling.pk, user=labeler, step_index=0, rating=-1)
