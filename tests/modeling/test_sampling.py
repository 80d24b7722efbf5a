"""generate_pool: the generator's solutions, graded, into the candidate pool (the real local
SmolLM2; problems short enough that a sample ends within a few dozen tokens)."""

from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from labeling.models import Batch, Solution
from modeling.grading import is_equivalent
from modeling.models import PoolEntry, SamplingRun
from modeling.services import loop, pool, sampling
from tests.factories import make_problem
from tests.helpers.threads import background_threads

LOCAL_NAME = "SmolLM2-135M-Instruct (local)"
SHORT = {"max_tokens": 96, "seed": 7}


@pytest.fixture
def problems(db):
    return [
        make_problem("What is $2 + 3$?", answer="5"),
        make_problem("What is $4 \\cdot 2$?", answer="8"),
    ]


def entries_of(run: SamplingRun):
    return PoolEntry.objects.filter(sampling_run=run).select_related("solution")


@pytest.mark.django_db
def test_a_run_adds_graded_complete_samples_to_the_pool(problems):
    run = sampling.create_sampling_run(
        samples=3, problem_ids=[p.pk for p in problems], send=False, **SHORT
    )
    assert run.status == SamplingRun.Status.QUEUED and run.problem_ids == [p.pk for p in problems]
    run = sampling.execute_sampling_run(run.pk)
    assert run.status == SamplingRun.Status.SUCCEEDED, run.error
    assert run.next_index == 2 and run.generator == LOCAL_NAME
    assert run.sampling == {"max_tokens": 96, "temperature": 0.8, "top_p": 0.95, "seed": 7}
    # Every sample is accounted for: added, without an answer, or the same as another one.
    assert run.added + run.incomplete + run.duplicates == 6
    entries = list(entries_of(run))
    assert len(entries) == run.added > 0
    truth = {p.pk: p.ground_truth_answer for p in problems}
    for entry in entries:
        solution = entry.solution
        assert solution.batch is None and solution.generator == LOCAL_NAME
        assert solution.steps and solution.steps[-1].startswith("# Answer") or solution.final_answer
        assert entry.extracted_answer == solution.final_answer
        assert entry.source == f"generate_pool run {run.pk}"
        expected = is_equivalent(solution.final_answer, truth[solution.problem_id])
        assert solution.answer_correct is expected
    assert run.graded_correct == sum(e.solution.answer_correct is True for e in entries)
    assert run.graded_wrong == sum(e.solution.answer_correct is False for e in entries)
    # In the pool, selectable by the next generation.
    assert set(pool.selectable_pool().values_list("pk", flat=True)) >= {
        e.solution_id for e in entries
    }


@pytest.mark.django_db
def test_a_seeded_run_again_adds_nothing_twice(problems):
    first = sampling.create_sampling_run(
        samples=2, problem_ids=[problems[0].pk], send=False, **SHORT
    )
    first = sampling.execute_sampling_run(first.pk)
    again = sampling.create_sampling_run(
        samples=2, problem_ids=[problems[0].pk], send=False, **SHORT
    )
    again = sampling.execute_sampling_run(again.pk)
    assert again.status == SamplingRun.Status.SUCCEEDED
    assert again.added == 0 and again.duplicates == first.added + first.duplicates
    assert Solution.objects.filter(pool_entry__isnull=False).count() == first.added


@pytest.mark.django_db
def test_a_cancelled_run_resumes_from_the_first_problem_not_written(problems):
    run = sampling.create_sampling_run(
        samples=2, problem_ids=[p.pk for p in problems], send=False, **SHORT
    )

    def cancel_after_first(progress: SamplingRun) -> None:
        if progress.next_index == 1:
            sampling.cancel_sampling_run(progress)

    run = sampling.execute_sampling_run(run.pk, progress=cancel_after_first)
    assert run.status == SamplingRun.Status.CANCELLED and run.next_index == 1
    written_first = set(entries_of(run).values_list("solution_id", flat=True))
    assert {s.problem_id for s in Solution.objects.filter(pk__in=written_first)} <= {problems[0].pk}

    run = sampling.resume_sampling_run(run)  # eager in tests: queued, then run by the task
    run = sampling.execute_sampling_run(run.pk) or run
    run.refresh_from_db()
    assert run.status == SamplingRun.Status.SUCCEEDED and run.next_index == 2
    # The first problem was not sampled again: its rows are the ones written before.
    first_rows = entries_of(run).filter(solution__problem=problems[0])
    assert set(first_rows.values_list("solution_id", flat=True)) == written_first


@pytest.mark.django_db
def test_a_redelivered_task_does_nothing_and_a_dead_workers_run_is_taken_over(problems):
    run = sampling.create_sampling_run(samples=1, problem_ids=[problems[0].pk], send=False, **SHORT)
    SamplingRun.objects.filter(pk=run.pk).update(
        status=SamplingRun.Status.RUNNING, heartbeat_at=timezone.now()
    )
    assert sampling.execute_sampling_run(run.pk) is None  # another worker has it
    stale = timezone.now() - timedelta(hours=1)
    SamplingRun.objects.filter(pk=run.pk).update(heartbeat_at=stale)
    run = sampling.execute_sampling_run(run.pk)
    assert run is not None and run.status == SamplingRun.Status.SUCCEEDED
    assert sampling.execute_sampling_run(run.pk) is None  # finished: nothing to do


@pytest.mark.django_db
def test_a_generator_that_cannot_answer_fails_the_run_resumably(problems, settings):
    sampling.generator_from_settings.cache_clear()
    settings.STEPWISE_GENERATOR_URL = "http://127.0.0.1:9/v1"  # nothing listens on port 9
    settings.STEPWISE_GENERATOR_RETRIES = 0
    try:
        run = sampling.create_sampling_run(samples=1, problem_ids=[problems[0].pk], send=False)
        run = sampling.execute_sampling_run(run.pk)
    finally:
        sampling.generator_from_settings.cache_clear()
    assert run.status == SamplingRun.Status.FAILED
    assert "GeneratorError" in run.error and "127.0.0.1:9" in run.error
    assert run.next_index == 0 and not PoolEntry.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--problems", "999999"], "No problem with a ground truth answer has id 999999"),
        (["--subject", "Nonsense"], "No problem with a ground truth answer matches"),
        (["--batch", "999999"], "There is no batch 999999"),
        (["--samples", "100"], "samples must be between 1 and 64"),
        (["--resume", "999999"], "There is no sampling run 999999"),
    ],
)
def test_the_command_refuses_bad_filters_and_writes_nothing(problems, arguments, message):
    with pytest.raises(CommandError, match=message):
        call_command("generate_pool", *arguments, stdout=StringIO())
    assert not SamplingRun.objects.exists()


@pytest.mark.django_db
def test_the_command_samples_with_progress_lines(problems):
    out = StringIO()
    call_command(
        "generate_pool",
        "--samples",
        "1",
        "--problems",
        str(problems[0].pk),
        "--max-tokens",
        "64",
        "--seed",
        "3",
        stdout=out,
    )
    text = out.getvalue()
    run = SamplingRun.objects.get()
    assert run.status == SamplingRun.Status.SUCCEEDED
    assert f"Sampling run {run.pk}: 1 samples x 1 problems" in text
    assert "problem 1/1:" in text and f"added to the pool by {LOCAL_NAME}" in text


@pytest.mark.django_db
def test_api_starts_a_run_for_leads_and_refuses_labelers(client, lead, labeler, problems):
    client.force_login(labeler)
    assert client.post("/p/default/api/sampling-runs/", {"samples": 1}).status_code == 403
    client.force_login(lead)
    bad = client.post("/p/default/api/sampling-runs/", {"samples": 1, "subject": "Nonsense"})
    assert bad.status_code == 400 and "No problem" in bad.json()["detail"]
    assert client.post("/p/default/api/sampling-runs/", {"samples": 0}).status_code == 400
    response = client.post(
        "/p/default/api/sampling-runs/",
        {"samples": 2, "problems": [problems[1].pk], "max_tokens": 32},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued" and body["total"] == 1 and body["samples"] == 2
    listed = client.get("/p/default/api/sampling-runs/").json()
    assert [row["id"] for row in listed] == [body["id"]]
    resumed = client.post(f"/p/default/api/sampling-runs/{body['id']}/resume/")
    assert resumed.status_code == 200  # queued: sent again, a duplicate does nothing
    cancelled = client.post(f"/p/default/api/sampling-runs/{body['id']}/cancel/").json()
    assert cancelled["status"] == "cancelled"


@pytest.mark.django_db
def test_page_starts_a_run_and_lists_it(client, lead, labeler, problems):
    url = reverse("modeling_loop:sampling")
    client.force_login(labeler)
    assert client.get(url).status_code == 403
    client.force_login(lead)
    page = client.get(url)
    assert page.status_code == 200 and b"the local SmolLM2-135M" in page.content
    response = client.post(url, {"samples": 2, "subject": "Nonsense"})
    assert b"No problem with a ground truth answer matches" in response.content
    assert not SamplingRun.objects.exists()
    response = client.post(url, {"samples": 2, "limit": 1, "max_tokens": 16})
    assert response.status_code == 302
    run = SamplingRun.objects.get()
    assert run.problem_ids == [problems[0].pk] and run.created_by == lead
    assert f'id="sampling-run-{run.pk}"'.encode() in client.get(url).content


@pytest.mark.redis
@pytest.mark.postgres
def test_generated_pool_feeds_a_generation_through_the_real_worker(
    shared_data, tmp_path, open_evaluation_gate, settings, celery_worker_process, celery_live
):
    """generate_pool on the generate queue fills the pool; a generation then retrains on real
    labels, scores those generated solutions and queues its picks from them."""
    from labeling.services.importing import import_prm800k
    from modeling.models import GenerationRun
    from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config

    settings.MEDIA_ROOT = tmp_path / "media"
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")  # labels to train on
    problems = [
        make_problem(f"What is ${a} + {b}$?", answer=str(a + b))
        for a, b in ((2, 3), (7, 5), (9, 4))
    ]
    run = sampling.create_sampling_run(
        samples=3, problem_ids=[p.pk for p in problems], max_tokens=96, seed=11
    )  # committed (transactional test): the task is on the broker
    deadline = time.monotonic() + 600
    while run.status not in (SamplingRun.Status.SUCCEEDED, SamplingRun.Status.FAILED):
        assert time.monotonic() < deadline, f"sampling run still {run.status}"
        time.sleep(0.5)
        run.refresh_from_db()
    log = (tmp_path / "worker.log").read_text()
    assert run.status == SamplingRun.Status.SUCCEEDED, f"{run.error}\n{log[-3000:]}"
    assert "generate_pool_run" in log and run.added >= 2

    backbone = make_tiny_backbone(tmp_path / "tiny")
    generation = loop.start_generation(
        params={"k": 2, "per_problem_cap": 1, "train_config": tiny_train_config(backbone)}
    )
    deadline = time.monotonic() + 300
    while generation.status not in (GenerationRun.Status.SUCCEEDED, GenerationRun.Status.FAILED):
        assert time.monotonic() < deadline, f"generation still {generation.status}"
        time.sleep(0.5)
        generation.refresh_from_db()
    assert generation.status == GenerationRun.Status.SUCCEEDED, generation.error
    batch = generation.batch
    assert batch.origin == Batch.Origin.ACTIVE_LEARNING and batch.solutions.count() == 2
    for solution in batch.solutions.all():
        assert solution.generator == LOCAL_NAME
        assert solution.pool_entry.sampling_run_id == run.pk


@pytest.mark.django_db(transaction=True)
def test_the_embedded_default_samples_in_a_thread_and_answers_at_once(settings):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # what the demo does (no broker, no worker)
    threads = background_threads()
    problem = make_problem("What is $1 + 1$?", answer="2")
    run = sampling.create_sampling_run(samples=1, problem_ids=[problem.pk], max_tokens=48, seed=2)
    assert run.status == SamplingRun.Status.QUEUED  # the request answered before sampling
    # Wait for the thread itself: the run's row says nothing before the thread has started.
    [thread] = threads
    thread.join(timeout=300)
    assert not thread.is_alive()
    run.refresh_from_db()
    assert run.status == SamplingRun.Status.SUCCEEDED, run.error
    assert run.next_index == 1 and run.added + run.incomplete == 1
