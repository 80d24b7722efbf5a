"""A pause stops work in progress: a paused labeler may not rate, extend, claim or continue
their open labeling (live lease or expired), on the pages; 403 with the reason, nothing saved."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from labeling.models import LabelerRecord, Labeling, RatingEvent, Solution, StepLabel
from labeling.services import quality, queue, rating
from tests.factories import make_batch, make_solutions
from tests.labeling.helpers import next_labeling, record_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def paused_labeling(labeler, lead):
    """The labeler's labeling, one step rated, then a lead pauses them."""
    make_solutions(make_batch(gold_rate=0), 2)
    labeling = next_labeling(labeler)
    rating.rate_step(labeling_id=labeling.pk, user=labeler, step_index=0, rating=1)
    quality.labeler_set_state(
        record=record_of(labeler),
        state=LabelerRecord.State.PAUSED,
        reason="paused by a lead",
        actor=lead,
    )
    return labeling


def expire(labeling: Labeling) -> None:
    Labeling.objects.filter(pk=labeling.pk).update(
        lease_expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert queue.expire_stale_leases() == 1


def assert_nothing_written(labeling: Labeling, status: str) -> None:
    labeling.refresh_from_db()
    assert labeling.status == status
    assert StepLabel.objects.filter(labeling=labeling).count() == 1  # only the step before
    assert RatingEvent.objects.filter(labeling=labeling).count() == 1
    assert Labeling.objects.filter(labeler=labeling.labeler).count() == 1  # nothing claimed


@pytest.mark.parametrize("lease", ["live", "expired"])
def test_a_paused_labeler_rating_is_refused_with_403(client, paused_labeling, lease):
    if lease == "expired":
        expire(paused_labeling)
    client.force_login(paused_labeling.labeler)

    response = client.post(
        reverse("labeling:rate", args=[paused_labeling.pk]),
        {"step_index": 1, "rating": 1},
        HTTP_HX_REQUEST="true",
    )

    assert response.status_code == 403
    assert "Your labeling is paused" in response.content.decode()
    assert_nothing_written(paused_labeling, "in_progress" if lease == "live" else "expired")
    # An expired claim is not taken back: the solution's room stays free for others.
    solution = Solution.objects.get(pk=paused_labeling.solution_id)
    assert solution.active_count == (1 if lease == "live" else 0)
    assert next_labeling(paused_labeling.labeler) is None


@pytest.mark.parametrize("lease", ["live", "expired"])
def test_a_paused_labeler_cannot_extend_the_lease(client, paused_labeling, lease):
    if lease == "expired":
        expire(paused_labeling)
    before = Labeling.objects.get(pk=paused_labeling.pk).lease_expires_at
    client.force_login(paused_labeling.labeler)

    response = client.post(reverse("labeling:extend", args=[paused_labeling.pk]))

    assert response.status_code == 403
    assert "Your labeling is paused" in response.json()["detail"]
    assert Labeling.objects.get(pk=paused_labeling.pk).lease_expires_at == before
    assert_nothing_written(paused_labeling, "in_progress" if lease == "live" else "expired")


def test_a_paused_labeler_cannot_finish_or_undo_either(client, paused_labeling):
    client.force_login(paused_labeling.labeler)
    for name, data in (("finish", {"reason": "give_up"}), ("undo", {})):
        response = client.post(
            reverse(f"labeling:{name}", args=[paused_labeling.pk]), data, HTTP_HX_REQUEST="true"
        )
        assert response.status_code == 403, name
    assert_nothing_written(paused_labeling, "in_progress")


def test_a_paused_labeler_claim_hands_out_nothing_not_even_their_open_labeling(
    client, paused_labeling, lead
):
    assert next_labeling(paused_labeling.labeler) is None
    client.force_login(paused_labeling.labeler)

    response = client.post(reverse("labeling:claim"), follow=True)

    page = response.content.decode()
    assert response.redirect_chain[-1][0] == reverse("labeling:queue")
    assert "Your queue is paused" in page and "paused by a lead" in page
    assert "until a lead reinstates you" in page and 'id="start"' not in page
    assert_nothing_written(paused_labeling, "in_progress")
    # Reinstated, they continue where they stopped.
    quality.labeler_set_state(
        record=record_of(paused_labeling.labeler),
        state=LabelerRecord.State.ACTIVE,
        actor=lead,
    )
    assert next_labeling(paused_labeling.labeler) == paused_labeling
    rating.rate_step(
        labeling_id=paused_labeling.pk, user=paused_labeling.labeler, step_index=1, rating=1
    )
    assert StepLabel.objects.filter(labeling=paused_labeling).count() == 2
