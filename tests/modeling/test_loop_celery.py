"""One generation through a REAL Celery worker (Redis broker, PostgreSQL) on a tiny model:
retrain on the labels -> score the pool -> select -> enqueue, each step a task."""

from __future__ import annotations

import time

import pytest

from labeling.models import Batch
from modeling.models import GenerationRun, ModelVersion, SolutionScore
from modeling.services import loop
from tests.modeling.loop_helpers import load_pool_and_labels, make_tiny_backbone, tiny_train_config


@pytest.mark.redis
@pytest.mark.postgres
def test_a_generation_runs_through_the_real_worker(
    shared_data, tmp_path, open_evaluation_gate, settings, celery_worker_process, celery_live
):
    settings.MEDIA_ROOT = tmp_path / "media"  # the worker's (its STEPWISE_VAR_DIR is tmp_path)
    load_pool_and_labels(shared_data)
    backbone = make_tiny_backbone(tmp_path / "tiny")
    run = loop.start_generation(
        params={"k": 6, "per_problem_cap": 1, "train_config": tiny_train_config(backbone)}
    )  # committed (transactional test): the first task is on the broker now
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in (GenerationRun.Status.SUCCEEDED, GenerationRun.Status.FAILED):
            break
        time.sleep(0.5)
    log = (tmp_path / "worker.log").read_text() if (tmp_path / "worker.log").exists() else ""
    assert run.status == GenerationRun.Status.SUCCEEDED, f"{run.status}: {run.error}\n{log[-3000:]}"
    assert run.model_version == ModelVersion.active()
    assert SolutionScore.objects.filter(model_version=run.model_version).count() == 63
    batch = run.batch
    assert batch.origin == Batch.Origin.ACTIVE_LEARNING and batch.generation == run.generation
    assert batch.solutions.count() == 6
    reasons = list(run.selections.all())
    assert {r.rule for r in reasons} <= {"convincing_wrong", "convincing"}
    assert sum(r.rule == "convincing_wrong" for r in reasons) == 5  # round(6 * 0.8)
    for step in GenerationRun.STEPS:
        assert run.steps[step]["status"] == "done", run.steps
    assert "gpu_generation_step" in log and "generation_step" in log


@pytest.mark.redis
@pytest.mark.postgres
def test_a_generation_with_an_imported_active_model_gates_its_retrained_model_against_it(
    shared_data, tmp_path, open_evaluation_gate, settings, celery_worker_process, celery_live
):
    """The retrain step's gate scores the retrained and the imported model on the evaluation
    set, in the worker; the scores step then uses whichever model is active."""
    from django.core.management import call_command

    from modeling.services.evaluation_sets import create_evaluation_set
    from tests.modeling.test_import_prm import save_token_classifier

    settings.MEDIA_ROOT = tmp_path / "media"  # the worker's (its STEPWISE_VAR_DIR is tmp_path)
    load_pool_and_labels(shared_data)
    create_evaluation_set(count=3, seed=0)
    trl = save_token_classifier(tmp_path / "trl")
    call_command("import_prm", str(trl), "--activate", "--step-separator", "\\n")
    imported = ModelVersion.active()
    assert imported is not None and imported.kind == ModelVersion.Kind.TOKEN_CLASSIFICATION
    backbone = make_tiny_backbone(tmp_path / "tiny")
    run = loop.start_generation(
        params={"k": 6, "per_problem_cap": 1, "train_config": tiny_train_config(backbone)}
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in (GenerationRun.Status.SUCCEEDED, GenerationRun.Status.FAILED):
            break
        time.sleep(0.5)
    log = (tmp_path / "worker.log").read_text() if (tmp_path / "worker.log").exists() else ""
    assert run.status == GenerationRun.Status.SUCCEEDED, f"{run.status}: {run.error}\n{log[-3000:]}"
    on_set = run.training_run.metrics["evaluation_set"]
    assert on_set["active_model"] == imported.pk and "active_error" not in on_set
    assert on_set["active_auroc"] == pytest.approx(imported.metrics["evaluation_set"]["new_auroc"])
    assert run.model_version == ModelVersion.active() != imported  # the retrained one passed
    assert SolutionScore.objects.filter(model_version=run.model_version).count() == 63
    assert run.batch.solutions.count() == 6


@pytest.mark.redis
@pytest.mark.postgres
def test_a_routing_generation_runs_through_the_real_worker(
    shared_data, tmp_path, open_evaluation_gate, settings, celery_worker_process, celery_live
):
    """Issue 47: the disagreement rule in the worker: the retrained model's verdicts against
    the judges' pre-labels of the pool, the most disputed first."""
    from labeling.models import PreLabel, Solution
    from modeling.services import pool

    settings.MEDIA_ROOT = tmp_path / "media"  # the worker's (its STEPWISE_VAR_DIR is tmp_path)
    load_pool_and_labels(shared_data)
    judged = list(Solution.objects.filter(pool_entry__isnull=False).order_by("pk")[:8])
    for n, solution in enumerate(judged):  # an llm judge's verdicts: wrong at step n % 3, or none
        steps = len(solution.steps)
        first = n % 3 if n % 4 else None
        labels = [
            1 if first is None or i < first else (-1 if i == first else None) for i in range(steps)
        ]
        PreLabel.objects.create(
            solution=solution,
            kind="llm",
            judge="llm: fixed",
            run_id=1,
            labels=labels,
            scores=[None if label is None else 0.9 for label in labels],
            first_error=first,
        )
    backbone = make_tiny_backbone(tmp_path / "tiny")
    run = loop.start_generation(
        params={
            "rule": "disagreement",
            "k": 5,
            "per_problem_cap": None,
            "train_config": tiny_train_config(backbone),
        }
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in (GenerationRun.Status.SUCCEEDED, GenerationRun.Status.FAILED):
            break
        time.sleep(0.5)
    log = (tmp_path / "worker.log").read_text() if (tmp_path / "worker.log").exists() else ""
    assert run.status == GenerationRun.Status.SUCCEEDED, f"{run.status}: {run.error}\n{log[-3000:]}"
    reasons = list(run.selections.order_by("rank"))
    assert len(reasons) == 5 and {r.rule for r in reasons} == {"disagreement"}
    # Only the judged solutions have two verdicts; the picks are the most disputed of them.
    found = pool.judge_disagreements(
        run.model_version_id, Solution.objects.filter(pk__in=[s.pk for s in judged])
    )
    expected = sorted(found, key=lambda pk: (-found[pk], pk))[:5]
    assert [r.solution_id for r in reasons] == expected
    assert [r.score for r in reasons] == [found[pk] for pk in expected]
    assert run.batch.solutions.count() == 5
