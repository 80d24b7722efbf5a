"""Generations and sampling runs whose task never reached a worker are sent again, like training
runs: by the sweeper, and (a generation) by a retry, which a freshly sent one still refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from modeling.models import GenerationRun, SamplingRun
from modeling.services import loop, sampling
from stepwise.celery import UNSENT
from tests.factories import make_problem

pytestmark = pytest.mark.django_db


def test_retry_sends_a_stuck_generation_again_and_refuses_a_freshly_sent_one(
    lead, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as sent:
        run = loop.start_generation(params={"k": 3}, created_by=lead)
    run.refresh_from_db()
    assert len(sent) == 1 and run.sent_at is not None and run.error == ""
    with pytest.raises(loop.GenerationError, match="its step was sent to the task queue"):
        loop.retry_generation(run)

    GenerationRun.objects.filter(pk=run.pk).update(error=UNSENT, sent_at=None)  # broker was down
    with pytest.raises(loop.GenerationError, match="could not be reached"):
        loop.start_generation(params={"k": 3}, created_by=lead)
    with django_capture_on_commit_callbacks(execute=False) as resent:
        retried = loop.retry_generation(run)
    assert len(resent) == 1
    assert retried.status == GenerationRun.Status.QUEUED and retried.error == ""
    assert retried.sent_at is not None
    assert GenerationRun.objects.count() == 1


def test_the_sweeper_sends_generations_and_sampling_runs_that_no_worker_took(
    lead, settings, django_capture_on_commit_callbacks
):
    make_problem()
    with django_capture_on_commit_callbacks(execute=False):
        generation = loop.start_generation(params={"k": 3}, created_by=lead)
        run = sampling.create_sampling_run(samples=1, user=lead)
    assert loop.generations_resend() == 0 and sampling.sampling_runs_resend() == 0  # just sent

    long_ago = timezone.now() - timedelta(seconds=settings.STEPWISE_RESEND_AFTER_SECONDS + 1)
    GenerationRun.objects.filter(pk=generation.pk).update(sent_at=long_ago)  # message lost
    SamplingRun.objects.filter(pk=run.pk).update(error=UNSENT, sent_at=None)  # broker was down
    with django_capture_on_commit_callbacks(execute=False) as resent:
        assert loop.generations_resend() == 1 and sampling.sampling_runs_resend() == 1
    assert len(resent) == 2
    generation.refresh_from_db()
    run.refresh_from_db()
    assert generation.sent_at > long_ago and run.sent_at is not None and run.error == ""
    # Claimed by a worker meanwhile: nothing to send.
    SamplingRun.objects.filter(pk=run.pk).update(status=SamplingRun.Status.RUNNING)
    SamplingRun.objects.filter(pk=run.pk).update(sent_at=long_ago)
    assert sampling.sampling_runs_resend() == 0
