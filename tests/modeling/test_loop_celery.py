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
