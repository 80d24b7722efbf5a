"""The sampling page estimates a run's time before it starts, from the generator's measured
tokens/s (issue 31), and its defaults fit the embedded default (a few samples of few problems)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from modeling.forms import SamplingForm
from modeling.models import SamplingRun
from modeling.services import sampling
from tests.factories import make_problem

LOCAL_NAME = "SmolLM2-135M-Instruct (local)"


@pytest.fixture
def problems(db):
    return [make_problem(f"What is ${n} + {n}$?", answer=str(2 * n)) for n in range(1, 6)]


def measured_run(*, samples: int, tokens: int, seconds: float, generator: str = LOCAL_NAME):
    return SamplingRun.objects.create(
        samples=1,
        sampling={},
        problem_ids=[],
        generator=generator,
        status=SamplingRun.Status.SUCCEEDED,
        generated_samples=samples,
        generated_tokens=tokens,
        generating_seconds=seconds,
    )


def test_no_measurement_gives_no_estimate(problems):
    measured_run(samples=4, tokens=400, seconds=10.0, generator="another model at http://x")
    estimate = sampling.estimate(problems=3, samples=2)
    assert estimate.generator == LOCAL_NAME and estimate.samples == 6
    assert estimate.tokens_per_s is None and estimate.seconds is None


def test_the_estimate_is_samples_times_tokens_per_sample_over_tokens_per_s(problems, settings):
    settings.STEPWISE_GENERATOR_MAX_TOKENS = 512
    measured_run(samples=4, tokens=800, seconds=100.0)  # 200 tokens a sample
    measured_run(samples=6, tokens=1200, seconds=100.0)  # both: 2000 tokens in 200 s = 10/s
    estimate = sampling.estimate(problems=3, samples=2)
    assert estimate.tokens_per_s == pytest.approx(10.0)
    assert estimate.tokens_per_sample == pytest.approx(200.0)
    assert estimate.seconds == pytest.approx(6 * 200 / 10)
    assert estimate.seconds_at_most == pytest.approx(6 * 512 / 10)
    assert sampling.estimate(problems=3, samples=2, max_tokens=100).seconds_at_most == 60
    assert estimate.measured_runs == 2


def test_a_run_measures_the_generators_speed(problems):
    run = sampling.create_sampling_run(
        samples=1, problem_ids=[problems[0].pk], send=False, max_tokens=16, seed=1
    )
    run = sampling.execute_sampling_run(run.pk)
    assert run.status == SamplingRun.Status.SUCCEEDED, run.error
    assert run.generated_samples == 1
    assert 0 < run.generated_tokens <= 16 + 2  # SmolLM2's own tokenizer, at most the limit
    assert run.generating_seconds > 0
    estimate = sampling.estimate(problems=1, samples=1)
    assert estimate.seconds == pytest.approx(run.generating_seconds, rel=1e-6)


def test_the_form_defaults_are_small():
    form = SamplingForm()
    assert form.fields["samples"].initial == 2 and form.fields["limit"].initial == 3


def test_the_page_estimates_before_the_run_starts(client, lead, problems):
    client.force_login(lead)
    page = client.get(reverse("modeling_loop:sampling")).content.decode()
    assert 'id="sampling-estimate"' in page and "sampling/estimate/" in page
    url = reverse("modeling_loop:sampling_estimate")
    fragment = client.get(url, {"samples": 2, "limit": 3}).content.decode()
    assert "6 samples (3 problems): no measurement yet" in fragment
    measured_run(samples=4, tokens=800, seconds=100.0)
    fragment = client.get(url, {"samples": 2, "limit": 3}).content.decode()
    assert '<strong id="estimate-time">2 min 30 s</strong>' in fragment  # 6 x 200 tokens at 8/s
    fragment = client.get(url, {"samples": 2, "subject": "Nonsense"}).content.decode()
    assert "No problem with a ground truth answer matches" in fragment
    fragment = client.get(url, {"samples": 0}).content.decode()
    assert "Fix the form" in fragment
    assert not SamplingRun.objects.exclude(generated_tokens=800).exists()  # nothing started
