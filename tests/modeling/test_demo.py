"""The demo's candidate pool: `setup_demo` loads it (once), and a generation runs on it end to
end, retrain -> score -> select -> queue, into the demo labeler's queue."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from labeling.models import Batch, Problem, Solution
from modeling.models import (
    EvaluationSet,
    GenerationRun,
    PoolEntry,
    SelectionReason,
    SolutionScore,
)
from modeling.services import execution, run_data, runs
from modeling.services.loop import start_generation
from modeling.services.pipeline import run_generation_inline
from tests.helpers.threads import background_threads, join_all
from tests.labeling.helpers import next_labeling
from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config

pytestmark = pytest.mark.django_db


def setup_demo() -> str:
    out = io.StringIO()
    call_command("setup_demo", stdout=out)
    return out.getvalue()


def demo_pool() -> dict[str, int]:
    pool = Solution.objects.filter(pool_entry__isnull=False, source_id__startswith="demo-pool-")
    return {
        "pool": pool.count(),
        "entries": PoolEntry.objects.count(),
        "unqueued": pool.filter(batch__isnull=True).count(),
        "right": pool.filter(answer_correct=True).count(),
        "wrong": pool.filter(answer_correct=False).count(),
        "problems": pool.values("problem").distinct().count(),
    }


def test_setup_demo_loads_the_graded_pool_once():
    first = setup_demo()
    assert "pool.jsonl: 63 lines read; created 63 pool solutions, 26 graded correct" in first
    assert "63 pool solutions and 6 demo accounts." in first
    counts = demo_pool()
    assert counts == {
        "pool": 63,
        "entries": 63,
        "unqueued": 63,
        "right": 26,
        "wrong": 37,
        "problems": 21,
    }
    # Every problem has right and wrong candidates, so selection has convincing wrong ones.
    for problem_id in Solution.objects.filter(pool_entry__isnull=False).values("problem"):
        answers = set(
            Solution.objects.filter(
                pool_entry__isnull=False, **{"problem": problem_id["problem"]}
            ).values_list("answer_correct", flat=True)
        )
        assert answers == {True, False}

    second = setup_demo()
    assert "pool.jsonl: 63 lines read; created nothing new; 63 already present" in second
    assert "This run added nothing" in second
    assert demo_pool() == counts


def test_a_generation_runs_on_the_demo_gated_on_its_evaluation_set_to_the_labelers_queue(
    tmp_path, settings, open_evaluation_gate
):
    assert "evaluation set v1: 5 problems (15 labelings)" in setup_demo()
    evaluation_set = EvaluationSet.objects.get()
    # The demo's own backbone takes a minute on a CPU; a tiny random one exercises the same path.
    settings.STEPWISE_GENERATION_TRAIN_CONFIG = tiny_train_config(
        make_tiny_backbone(tmp_path / "tiny")
    )
    researcher = get_user_model().objects.get(username="researcher")
    # As a new user would: train a first model on the reference labels, then a generation.
    first = runs.create_training_run(config=settings.STEPWISE_GENERATION_TRAIN_CONFIG)
    active = execution.execute_training_run(first.pk)
    assert active is not None and active.is_active

    run = run_generation_inline(
        start_generation(params={"k": 10, "per_problem_cap": 1}, created_by=researcher, send=False)
    )

    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    assert run.generation == 2  # after the demo's own generation 1
    assert run.training_run is not None and run.training_run.status == "succeeded"
    # Both models scored on the demo's set in the generation's run: one set, named by id.
    training = run.training_run
    on_set, gate = training.metrics["evaluation_set"], training.metrics["gate"]
    assert EvaluationSet.objects.count() == 1
    assert on_set["id"] == gate["evaluation_set_id"] == evaluation_set.pk
    assert active.metrics["evaluation_set"]["id"] == evaluation_set.pk
    assert on_set["active_model"] == active.pk
    assert on_set["new_auroc"] is not None and on_set["active_auroc"] is not None
    assert run.steps["retrain"]["detail"]["evaluation_set"] == evaluation_set.version
    for training_run in (first, training):  # 16 problems trained on, none of the set's
        trained = {
            json.loads(line)["question"]["problem"]
            for line in (run_data.run_dir(training_run) / run_data.DATA_FILE)
            .read_text()
            .splitlines()
        }
        assert len(trained) == 16
        assert not trained & set(
            Problem.objects.filter(pk__in=evaluation_set.problem_ids).values_list("text", flat=True)
        )
    assert SolutionScore.objects.filter(model_version=run.model_version).count() == 63
    batch = Batch.objects.get(name="Generation 2")
    assert (batch.generation, batch.origin, batch.is_active) == (
        2,
        Batch.Origin.ACTIVE_LEARNING,
        True,
    )
    queued = Solution.objects.filter(batch=batch)
    assert queued.count() == 10
    assert all(s.source_id.startswith("demo-pool-") for s in queued)
    assert queued.values("problem").distinct().count() == 10  # the cap of 1 per problem
    reasons = SelectionReason.objects.filter(generation_run=run)
    assert set(reasons.values_list("solution_id", flat=True)) == set(
        queued.values_list("pk", flat=True)
    )
    assert sorted(reasons.values_list("rank", flat=True)) == list(range(1, 11))
    assert reasons.filter(rule="convincing_wrong", correct=False).count() == 8  # 0.8 of K

    labeler = get_user_model().objects.get(username="labeler")
    labeling = next_labeling(labeler)
    assert labeling is not None and labeling.solution.batch_id == batch.pk


def test_a_generation_whose_retrained_model_fails_the_gate_says_so_and_which_model_scored(
    tmp_path, settings, open_evaluation_gate, client
):
    setup_demo()
    settings.STEPWISE_GENERATION_TRAIN_CONFIG = tiny_train_config(
        make_tiny_backbone(tmp_path / "tiny")
    )
    first = runs.create_training_run(config=settings.STEPWISE_GENERATION_TRAIN_CONFIG)
    active = execution.execute_training_run(first.pk)
    assert active is not None and active.is_active
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 1.01  # no model reaches it: the retrained one fails

    run = run_generation_inline(start_generation(params={"k": 4}, send=False))

    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    retrained = run.training_run.model_version
    assert not retrained.passed_evaluation and not retrained.is_active
    assert run.model_version == active  # the pool was scored by the model active before
    on_set = run.training_run.metrics["evaluation_set"]
    recorded = run.steps["retrain"]["detail"]
    assert recorded["passed_evaluation"] is False and recorded["model_name"] == retrained.name
    assert (recorded["new_auroc"], recorded["active_auroc"]) == (
        on_set["new_auroc"],
        on_set["active_auroc"],
    )
    assert recorded["new_auroc"] is not None and recorded["active_auroc"] is not None
    client.force_login(get_user_model().objects.get(username="researcher"))
    page = client.get(reverse("modeling_loop:generation", args=[run.generation])).content
    text = " ".join(page.decode().split())
    assert (
        f"The retrained model <strong>{retrained.name}</strong> failed the evaluation gate" in text
    )
    assert (
        f"new model {recorded['new_auroc']:.3f}, active model {recorded['active_auroc']:.3f}"
        in text
    )
    assert f"scored with the model active before it, <strong>{active.name}</strong>" in text
    assert "the retrained one failed the gate" in text


@pytest.fixture
def demo_threads(tmp_path, settings, monkeypatch, open_evaluation_gate):
    """The demo as `make demo` runs it: steps in a thread of this process, no Celery worker.
    The list fills with the threads that ran a generation."""
    setup_demo()
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True
    settings.STEPWISE_GENERATION_TRAIN_CONFIG = tiny_train_config(
        make_tiny_backbone(tmp_path / "tiny")
    )

    def no_worker(*args, **kwargs):
        raise AssertionError("the demo has no Celery worker to send a step to")

    monkeypatch.setattr("stepwise.celery.send_row", no_worker)
    monkeypatch.setattr("stepwise.celery.enqueue_on_commit", no_worker)
    return background_threads()


@pytest.mark.django_db(transaction=True)
def test_in_the_demo_a_generation_started_on_the_page_runs_in_a_thread(client, demo_threads):
    client.force_login(get_user_model().objects.get(username="researcher"))
    response = client.post(
        reverse("modeling_loop:generations"),
        {
            "k": 6,
            "convincing_wrong_fraction": 0.5,
            "per_problem_cap": 2,
            "scope": "pool",
            "overlap": 1,
            "retrain": "on",
        },
    )
    assert response.status_code == 302
    # Wait for the thread, not the rows: an in-memory SQLite test database answers "table is
    # locked" to a read while the thread writes (the demo's file database waits instead).
    join_all(demo_threads)  # one thread a step, each started by the one before
    run = GenerationRun.objects.get()
    assert response.url.endswith(f"/p/default/generations/{run.generation}/")
    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    assert run.training_run is not None and run.batch is not None
    assert run.batch.solutions.count() == 6


def test_in_the_demo_run_generation_runs_the_steps_in_its_own_process(demo_threads, capsys):
    call_command("run_generation", "--k", "4", "--project", "default")
    assert demo_threads == []  # no thread: it would stop with the command
    run = GenerationRun.objects.get()
    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    assert "4 solutions queued in batch 'Generation 2'" in capsys.readouterr().out
