"""Issue 48 on the Django side: an outcome run (ORM) on the graded solutions Stepwise holds, its
gate (solution AUROC of correctness), and best-of-N comparisons as queued work with a page, a
PNG, the API and a command, on the training core's outcome objective and best-of-N comparison
(modeling/training: config, data, inputs, evaluate)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from labeling.models import Solution
from modeling.models import (
    BestOfNComparison,
    EvaluationSet,
    ModelVersion,
    PoolEntry,
    SamplingRun,
    TrainingRun,
)
from modeling.services import best_of_n, execution, run_data, runs
from tests.factories import make_problem
from tests.helpers.threads import background_threads
from tests.helpers.users import make_user
from tests.modeling.loop_helpers import make_tiny_backbone
from tests.modeling.test_runs import tiny, wait_for

RIGHT = ["Add $20 + 22 = 42$.", "# Answer\n\n42"]
WRONG = ["Add $20 + 21 = 41$.", "# Answer\n\n41"]


@pytest.fixture(scope="module")
def backbone(tmp_path_factory) -> str:
    return make_tiny_backbone(tmp_path_factory.mktemp("tiny"))


def graded(problem, steps: list[str], correct: bool | None, sampling_run=None) -> Solution:
    digest = hashlib.sha256(f"{problem.pk} {steps} {Solution.objects.count()}".encode())
    solution = Solution.objects.create(
        problem=problem,
        steps=steps,
        final_answer=steps[-1].rsplit("\n", 1)[-1],
        answer_correct=correct,
        content_sha256=digest.hexdigest(),
    )
    PoolEntry.objects.create(solution=solution, sampling_run=sampling_run)
    return solution


def sampled_pool(problems: int = 4, per_problem: int = 4) -> SamplingRun:
    """A finished sampling run: per problem, half right (42) and half wrong (41)."""
    made = [make_problem(f"What is 20 + 22, take {i}?", answer="42") for i in range(problems)]
    sampling = SamplingRun.objects.create(
        samples=per_problem,
        sampling={"seed": 0},
        problem_ids=[p.pk for p in made],
        status=SamplingRun.Status.SUCCEEDED,
    )
    for problem in made:
        for j in range(per_problem):
            right = j % 2 == 0
            graded(problem, RIGHT if right else WRONG, right, sampling)
    sampling.added = problems * per_problem
    sampling.save(update_fields=["added"])
    return sampling


def current_set(*problems) -> EvaluationSet:
    return EvaluationSet.objects.create(
        version=1, problem_ids=[p.pk for p in problems], file_path="sets/v1.jsonl", sha256="0",
        is_current=True,
    )  # fmt: skip


def saved_model(backbone: str, folder: Path, *, training: dict | None = None, **config) -> str:
    from tests.modeling.training.test_export import save_model

    folder.mkdir(parents=True)
    path = save_model(backbone, "head", folder, **config)
    if training is not None:  # what orm-core's prm.json records
        meta_path = Path(path) / "prm.json"
        meta = json.loads(meta_path.read_text())
        meta_path.write_text(json.dumps({**meta, "training": training}))
    return path


EQUAL = {"problems": ["a"], "problems_digest": "d1", "optimizer_steps": 4, "examples": 8}


def prm_and_orm(backbone: str, tmp_path: Path, *, orm_training=EQUAL) -> tuple[ModelVersion, ...]:
    prm = ModelVersion.objects.create(
        name="prm", backbone=backbone, passed_evaluation=True,
        artifact_path=saved_model(backbone, tmp_path / "prm", training=EQUAL),
    )  # fmt: skip
    prm.activate()
    orm = ModelVersion.objects.create(
        name="orm", backbone=backbone, objective=ModelVersion.Objective.OUTCOME,
        artifact_path=saved_model(backbone, tmp_path / "orm", training=orm_training, num_labels=2),
    )  # fmt: skip
    return prm, orm


# --- the objective: migration, config, API --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_existing_versions_as_process_models():
    executor = MigrationExecutor(connection)
    before, after = (
        [("modeling", "0013_model_export")],
        [("modeling", "0014_objective_and_best_of_n")],
    )
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("modeling", "ModelVersion")
    old.objects.create(name="old", backbone="x", artifact_path="/nowhere")
    try:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
        # Read as 0014 has the row (later migrations add columns, a project among them).
        at_0014 = executor.loader.project_state(after).apps.get_model("modeling", "ModelVersion")
        objective = at_0014.objects.get(name="old").objective
    finally:
        # Back to the newest state of every app: later tests in this process need the whole
        # schema.
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    version = ModelVersion.objects.get(name="old")
    assert objective == "process" and version.objective == "process" and not version.is_outcome


@pytest.mark.django_db
def test_outcome_config_is_two_classes_and_bad_objectives_are_refused_in_one_line(backbone):
    run = runs.create_training_run(config=tiny(backbone, objective="outcome"))
    assert run.config["objective"] == "outcome" and run.config["num_labels"] == 2
    assert run.dataset_description["graded"] == {"sampling_run": None}
    assert runs.create_training_run(config=tiny(backbone)).objective == "process"
    for config, said in (
        (tiny(backbone, objective="outcom"), "objective must be one of"),
        (tiny(backbone, objective="outcome", num_labels=3), "trains a 2-class head"),
    ):
        with pytest.raises(runs.RunError, match=said):
            runs.create_training_run(config=config)
    with pytest.raises(runs.RunError, match="labelings, data filters and data files"):
        runs.create_training_run(
            config=tiny(backbone, objective="outcome"), filters={"batches": [1]}
        )
    assert TrainingRun.objects.count() == 2  # the refused ones left nothing


@pytest.mark.django_db
def test_the_api_starts_an_outcome_run_on_one_sampling_run(
    client, researcher, backbone, settings, django_capture_on_commit_callbacks
):
    settings.STEPWISE_MODELS_ROOT = str(Path(backbone).parent)
    sampling = sampled_pool(problems=1, per_problem=2)
    client.force_login(researcher)
    with django_capture_on_commit_callbacks():
        answer = client.post(
            "/p/default/api/runs/",
            {"objective": "outcome", "sampling_run": sampling.pk, "config": tiny(backbone)},
            content_type="application/json",
        )
    assert answer.status_code == 201, answer.content
    run = TrainingRun.objects.get()
    assert run.objective == "outcome" and answer.json()["config"]["objective"] == "outcome"
    assert run.dataset_description["graded"] == {"sampling_run": sampling.pk}


# --- an outcome run's data and gate ------------------------------------------------------------


@pytest.mark.django_db
def test_an_outcome_runs_frozen_data_holds_only_graded_solutions_and_no_evaluation_set_problem(
    backbone,
):
    sampling = sampled_pool(problems=3, per_problem=2)
    on_set = make_problem("What is on the set?", answer="42")
    graded(on_set, RIGHT, True)
    unknown = graded(make_problem("Ungraded?", answer=""), RIGHT, None)  # no truth: left out
    # Labeled or imported: an answer and its problem's truth, graded by the checker here.
    imported_right = graded(make_problem("Imported, right?"), RIGHT, None)
    imported_wrong = graded(make_problem("Imported, wrong?"), WRONG, None)
    current_set(on_set)
    run = runs.create_training_run(config=tiny(backbone, objective="outcome"))

    path, digest, lines = run_data.freeze_dataset(run)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == len(rows) == 8
    expected = {
        *Solution.objects.filter(pool_entry__sampling_run=sampling).values_list("pk", flat=True)
    }
    assert {r["id"] for r in rows} == expected | {imported_right.pk, imported_wrong.pk}
    assert unknown.pk not in {r["id"] for r in rows}
    assert all(r["problem"] != on_set.text for r in rows)
    assert sorted(r["correct"] for r in rows) == [False] * 4 + [True] * 4
    by_id = {r["id"]: r["correct"] for r in rows}
    assert by_id[imported_right.pk] is True and by_id[imported_wrong.pk] is False
    run.refresh_from_db()
    assert run.dataset_description["graded"]["left_out"] == 1
    assert run.dataset_description["evaluation_set"]["version"] == 1
    train, held_out = run_data.load_split(run)
    assert all(e.ratings[:-1] == [None] and e.ratings[-1] in (1, -1) for e in train + held_out)
    assert run_data.freeze_dataset(run)[1] == digest  # frozen: read again, never rewritten


@pytest.mark.django_db
def test_an_orm_beside_a_prm_run_trains_on_that_runs_problems_only(backbone, shared_data):
    from tests.helpers.tiny_models import SAMPLES

    lines = SAMPLES.read_text().splitlines()[:2]
    prm_run = TrainingRun.objects.create(config=tiny(backbone))
    prm_run.folder.mkdir(parents=True)
    (prm_run.folder / TrainingRun.DATA_FILE).write_text("\n".join(lines) + "\n")
    its = [make_problem(json.loads(line)["question"]["problem"]) for line in lines]
    other = make_problem("A problem the PRM never saw?")
    kept = [graded(problem, RIGHT, True) for problem in its]
    graded(other, WRONG, False)

    run = runs.create_training_run(config=tiny(backbone, objective="outcome"), problems_of=prm_run)
    path, _, written = run_data.freeze_dataset(run)

    assert {json.loads(row)["id"] for row in path.read_text().splitlines()} == {s.pk for s in kept}
    assert written == 2
    run.refresh_from_db()
    assert run.dataset_description["graded"]["problems_of_run"] == prm_run.pk
    assert run.dataset_description["graded"]["not_its_problems"] == 1
    with pytest.raises(runs.RunError, match="sampling run is for outcome runs"):
        runs.create_training_run(config=tiny(backbone), problems_of=prm_run)


@pytest.mark.django_db
def test_an_outcome_run_with_no_graded_solution_fails_at_start_with_the_reason(backbone):
    graded(make_problem(answer=""), RIGHT, None)  # held, never graded, no truth to grade by
    run = runs.create_training_run(config=tiny(backbone, objective="outcome"))
    assert execution.execute_training_run(run.pk) is None
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.FAILED and not run.resumable
    assert "no graded solutions to train the outcome model on" in run.error
    assert not ModelVersion.objects.exists()


@pytest.mark.django_db
def test_an_outcome_run_trains_an_orm_gated_on_the_sets_graded_solutions_never_activated(
    backbone, settings, client, researcher
):
    settings.STEPWISE_ORM_EVAL_MIN_AUROC = 0.0
    sampled_pool(problems=4, per_problem=2)
    on_set = make_problem("What is 21 + 21?", answer="42")
    graded(on_set, RIGHT, True)
    graded(on_set, WRONG, False)
    current_set(on_set)
    run = runs.create_training_run(
        config=tiny(backbone, objective="outcome"), holdout_fraction=0.25
    )
    version = execution.execute_training_run(run.pk)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert version is not None and version.objective == "outcome" and not version.is_active
    assert run.config["objective"] == "outcome"
    on_set_report = version.metrics["evaluation_set"]
    assert on_set_report["solutions"] == 2 and on_set_report["correct"] == 1
    assert on_set_report["solution_auroc"] is not None
    assert version.metrics["gate"]["metric"] == "solution_auroc" and version.passed_evaluation
    with pytest.raises(runs.RunError, match="compared by best-of-N, not activated"):
        runs.activate_model_version(version)
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[run.pk]))
    assert page.status_code == 200 and "on evaluation set v1's 2 graded solutions" in page.text
    model_page = client.get(reverse("modeling_runs:model", args=[version.pk])).text
    assert (
        "Evaluation set solution AUROC" in model_page and "on v1's 2 graded solutions" in model_page
    )


@pytest.mark.django_db
def test_the_orm_gate_refuses_under_its_floor_and_says_so():
    from modeling.services.evaluation import outcome_gate

    metrics = {"evaluation_set": {"version": 3, "id": 1, "solution_auroc": 0.41}}
    gate = outcome_gate(metrics)
    assert not gate["passed"]
    assert (
        gate["reason"]
        == "solution AUROC 0.410 on evaluation set v3's graded solutions is under 0.600"
    )


# --- best-of-N comparisons -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_comparison_scores_both_kinds_and_stores_a_report_and_a_png(backbone, tmp_path):
    prm, orm = prm_and_orm(backbone, tmp_path)
    sampling = sampled_pool(problems=2, per_problem=4)
    comparison = best_of_n.comparison_start(
        model_ids=[prm.pk, orm.pk], sampling_run=sampling, ns=[1, 2, 4], send=False
    )
    comparison = best_of_n.comparison_run(comparison.pk)
    assert comparison.status == BestOfNComparison.Status.SUCCEEDED, comparison.error
    report = comparison.report
    assert set(report["methods"]) == {
        "prm:product", "prm:min", "prm:weighted", "orm", "majority", "pass@n"
    }  # fmt: skip
    assert report["problems"] == 2 and report["samples"] == 8 and report["footing"] == []
    # Half of each problem's samples are right: pass@4 always finds one.
    assert report["methods"]["pass@n"][-1] == {
        "n": 4, "accuracy": 1.0, "low": 1.0, "high": 1.0, "problems": 2
    }  # fmt: skip
    assert comparison.png is not None and comparison.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.django_db
def test_a_mismatched_pair_is_refused_with_the_reason_unless_allowed(
    backbone, tmp_path, client, researcher, django_capture_on_commit_callbacks
):
    other = {**EQUAL, "problems_digest": "d2", "optimizer_steps": 9}
    prm, orm = prm_and_orm(backbone, tmp_path, orm_training=other)
    sampling = sampled_pool(problems=1, per_problem=2)
    refused = best_of_n.comparison_run(
        best_of_n.comparison_start(
            model_ids=[prm.pk, orm.pk], sampling_run=sampling, send=False, user=researcher
        ).pk
    )
    assert refused.status == BestOfNComparison.Status.FAILED and refused.report == {}
    assert "not on equal footing: different training problems" in refused.error
    assert "different optimizer steps" in refused.error and refused.png is None
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:best_of_n", args=[refused.pk])).text
    assert "not on equal footing" in page and 'id="compare-anyway"' in page
    with django_capture_on_commit_callbacks():
        again = client.post(reverse("modeling_runs:best_of_n_anyway", args=[refused.pk]))
    anyway = BestOfNComparison.objects.get(allow_mismatch=True)
    assert again["Location"] == reverse("modeling_runs:best_of_n", args=[anyway.pk])
    assert anyway.model_ids == [prm.pk, orm.pk] and anyway.sampling_run == sampling
    anyway.delete()

    allowed = best_of_n.comparison_run(
        best_of_n.comparison_start(
            model_ids=[prm.pk, orm.pk], sampling_run=sampling, allow_mismatch=True, send=False,
            user=researcher,
        ).pk
    )  # fmt: skip
    assert allowed.status == BestOfNComparison.Status.SUCCEEDED, allowed.error
    assert any("different training problems" in m for m in allowed.report["compared_despite"])
    page = client.get(reverse("modeling_runs:best_of_n", args=[allowed.pk])).text
    assert "Compared despite: different training problems" in page


@pytest.mark.django_db
def test_hostile_requests_are_refused_in_one_line_and_leave_nothing(
    client, researcher, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.STEPWISE_DATA_ROOT = tmp_path / "data"
    settings.STEPWISE_DATA_ROOT.mkdir()
    (tmp_path / "outside.jsonl").write_text("{}\n")
    a = ModelVersion.objects.create(name="a", backbone="x", artifact_path="/nowhere")
    sampling = sampled_pool(problems=1, per_problem=1)
    client.force_login(researcher)
    cases = [
        ({"models": [a.pk, 999999], "sampling_run": sampling.pk}, "no model version 999999"),
        ({"models": [a.pk, a.pk], "sampling_run": sampling.pk}, f"model version {a.pk} is named"),
        ({"models": [a.pk], "input": "../outside.jsonl"}, "under the data root"),
        ({"models": [a.pk], "input": "missing.jsonl"}, "no such file under the data root"),
        ({"models": [a.pk]}, "either a sampling run or a best-of-N file"),
    ]
    told = []
    with django_capture_on_commit_callbacks() as sent:
        for body, said in cases:
            answer = client.post("/p/default/api/best-of-n/", body, content_type="application/json")
            assert answer.status_code == 400 and said in answer.json()["detail"], answer.content
            assert "\n" not in answer.json()["detail"]
            told.append(answer.text)
        huge = client.post(
            "/p/default/api/best-of-n/",
            {"models": [a.pk], "sampling_run": sampling.pk, "ns": [10**9]},
            content_type="application/json",
        )
        assert huge.status_code == 400 and "ns" in huge.json()
        with pytest.raises(best_of_n.ComparisonError, match="N must be a whole number"):
            best_of_n.comparison_start(model_ids=[a.pk], sampling_run=sampling, ns=[10**9])
        form = client.post(
            reverse("modeling_runs:best_of_n_list"), {"models": f"{a.pk},{a.pk}", "sampling_run": sampling.pk}
        )  # fmt: skip
        assert form.status_code == 200 and "is named twice" in form.text
    assert sent == [] and not BestOfNComparison.objects.exists()
    assert not any(str(tmp_path) in text for text in told)  # no server path was told


@pytest.mark.django_db
def test_the_page_and_api_for_a_researcher_and_403_or_404_for_others(
    client, researcher, labeler, lead, backbone, tmp_path, django_capture_on_commit_callbacks
):
    prm, orm = prm_and_orm(backbone, tmp_path)
    sampling = sampled_pool(problems=1, per_problem=2)
    client.force_login(researcher)
    with django_capture_on_commit_callbacks() as sent:
        answer = client.post(
            "/p/default/api/best-of-n/",
            {"models": [prm.pk, orm.pk], "sampling_run": sampling.pk},
            content_type="application/json",
        )
    assert answer.status_code == 201 and answer.json()["status"] == "queued" and len(sent) == 1
    comparison_id = answer.json()["id"]
    best_of_n.comparison_run(comparison_id)
    body = client.get(f"/p/default/api/best-of-n/{comparison_id}/").json()
    assert body["status"] == "succeeded" and body["png_url"].endswith("/curves.png")
    assert [row["id"] for row in client.get("/p/default/api/best-of-n/").json()["results"]] == [
        comparison_id
    ]
    page = client.get(reverse("modeling_runs:best_of_n", args=[comparison_id])).text
    assert 'id="curves"' in page and 'id="png-download"' in page and "prm:product" in page
    assert "On equal footing" in page
    png = client.get(reverse("modeling_runs:best_of_n_png", args=[comparison_id]) + "?download=1")
    assert png["Content-Type"] == "image/png" and "attachment" in png["Content-Disposition"]
    assert "best-of-n" in client.get("/api/schema/").content.decode()

    client.force_login(labeler)
    for url in (
        "/p/default/api/best-of-n/",
        f"/p/default/api/best-of-n/{comparison_id}/",
        reverse("modeling_runs:best_of_n", args=[comparison_id]),
        reverse("modeling_runs:best_of_n_png", args=[comparison_id]),
        reverse("modeling_runs:best_of_n_list"),
    ):
        assert client.get(url).status_code == 403, url
    assert (
        client.post("/p/default/api/best-of-n/", {}, content_type="application/json").status_code
        == 403
    )

    client.force_login(make_user("rita", "researcher"))  # another researcher's id
    assert client.get(f"/p/default/api/best-of-n/{comparison_id}/").status_code == 404
    assert client.get(reverse("modeling_runs:best_of_n", args=[comparison_id])).status_code == 404
    assert client.get(f"/p/default/api/best-of-n/{comparison_id + 1}/").status_code == 404
    client.force_login(lead)  # leads see every comparison
    assert client.get(f"/p/default/api/best-of-n/{comparison_id}/").status_code == 200


@pytest.mark.django_db
def test_the_command_compares_and_refuses_unknown_models(backbone, tmp_path):
    prm, orm = prm_and_orm(backbone, tmp_path)
    sampling = sampled_pool(problems=1, per_problem=2)
    out = io.StringIO()
    call_command(
        "compare_best_of_n", "--models", f"{prm.pk},{orm.pk}", "--sampling-run",
        str(sampling.pk), "--n", "2", stdout=out,
    )  # fmt: skip
    assert "pass@n: N=2 1.000" in out.getvalue()
    with pytest.raises(CommandError, match="no model version 424242"):
        call_command("compare_best_of_n", "--models", "424242", "--sampling-run", str(sampling.pk))


# --- the researcher's buttons ----------------------------------------------------------------


@pytest.mark.django_db
def test_the_buttons_train_the_orm_like_the_active_prm_and_compare_it_on_a_sampling_run(
    client, researcher, backbone, tmp_path, django_capture_on_commit_callbacks
):
    sampling = sampled_pool(problems=1, per_problem=2)
    client.force_login(researcher)
    assert 'id="train-orm-pool"' in client.get(reverse("modeling_loop:sampling")).text
    refused = client.post(reverse("modeling_loop:sampling_compare", args=[sampling.pk]))
    assert refused.status_code == 302 and not BestOfNComparison.objects.exists()

    prm_run = TrainingRun.objects.create(config=tiny(backbone, max_steps=7), step=7)
    prm, orm = prm_and_orm(backbone, tmp_path)
    ModelVersion.objects.filter(pk=prm.pk).update(run=prm_run)
    with django_capture_on_commit_callbacks():
        started = client.post(reverse("modeling_runs:train_orm"), {"sampling_run": sampling.pk})
    run = TrainingRun.objects.exclude(pk=prm_run.pk).get()
    assert started.status_code == 302 and started["Location"].endswith(f"/runs/{run.pk}/")
    assert run.objective == "outcome" and run.config["backbone"] == backbone
    assert run.config["max_steps"] == 7 and run.config["num_labels"] == 2
    assert run.dataset_description["graded"]["sampling_run"] == sampling.pk
    assert run.dataset_description["graded"]["problems_of_run"] == prm_run.pk
    assert run.dataset_description["activate"] is False

    with django_capture_on_commit_callbacks():
        compared = client.post(reverse("modeling_loop:sampling_compare", args=[sampling.pk]))
    comparison = BestOfNComparison.objects.get()
    assert comparison.model_ids == [prm.pk, orm.pk] and comparison.sampling_run == sampling
    assert compared["Location"] == reverse("modeling_runs:best_of_n", args=[comparison.pk])


@pytest.mark.django_db
def test_the_models_pages_show_the_objective_and_the_orms_metric(client, researcher):
    orm = ModelVersion.objects.create(
        name="the orm", backbone="x", artifact_path="/nowhere", objective="outcome",
        metrics={"solution_auroc": 0.7321, "evaluation_set": {"version": 2, "solution_auroc": 0.6543, "solutions": 9}},
    )  # fmt: skip
    client.force_login(researcher)
    listed = client.get(reverse("modeling_runs:models")).text
    assert "0.732" in listed and "compared, not activated" in listed
    page = client.get(reverse("modeling_runs:model", args=[orm.pk])).text
    assert "outcome (ORM)" in page and "0.654" in page and "9 graded solutions" in page
    assert client.get(f"/p/default/api/models/{orm.pk}/").json()["objective"] == "outcome"


# --- end to end: the embedded default (no broker), as the demo runs ----------------------------


@pytest.mark.django_db(transaction=True)
def test_the_embedded_default_compares_in_a_thread_and_the_page_shows_the_curves(
    client, researcher, backbone, tmp_path, settings
):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # what the demo does (no broker, no worker)
    threads = background_threads()
    prm, orm = prm_and_orm(backbone, tmp_path)
    sampling = sampled_pool(problems=2, per_problem=2)
    client.force_login(researcher)
    answer = client.post(
        reverse("modeling_runs:best_of_n_list"),
        {"models": f"{prm.pk}, {orm.pk}", "sampling_run": sampling.pk, "ns": "1,2"},
    )
    comparison = BestOfNComparison.objects.get()
    assert answer.status_code == 302
    [thread] = threads
    thread.join(timeout=300)
    assert not thread.is_alive()
    wait_for(lambda: not BestOfNComparison.objects.get().is_open, 10, "the comparison to end")
    comparison.refresh_from_db()
    assert comparison.status == BestOfNComparison.Status.SUCCEEDED, comparison.error
    page = client.get(answer["Location"]).text
    assert 'id="table"' in page and "hx-trigger" not in page  # polling ends
    assert (
        client.get(reverse("modeling_runs:best_of_n_png", args=[comparison.pk])).status_code == 200
    )


@pytest.mark.django_db
def test_a_comparison_whose_worker_died_is_sent_again_and_taken_over(
    backbone, tmp_path, eager_tasks, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    prm, orm = prm_and_orm(backbone, tmp_path)
    sampling = sampled_pool(problems=1, per_problem=2)
    with django_capture_on_commit_callbacks():
        comparison = best_of_n.comparison_start(model_ids=[prm.pk, orm.pk], sampling_run=sampling)
    assert BestOfNComparison.claim(comparison.pk) is not None  # the worker that is then killed
    assert best_of_n.comparison_run(comparison.pk).attempts == 1  # a redelivery finds it held
    with eager_tasks() as sent:
        assert best_of_n.comparisons_resend() == 0
    assert sent == []

    long_ago = timezone.now() - BestOfNComparison.stale_after() - timedelta(seconds=1)
    BestOfNComparison.objects.filter(pk=comparison.pk).update(
        heartbeat_at=long_ago, sent_at=long_ago
    )
    with eager_tasks() as sent:
        assert best_of_n.comparisons_resend() == 1
    comparison.refresh_from_db()
    assert comparison.status == BestOfNComparison.Status.SUCCEEDED, comparison.error
    assert comparison.attempts == 2 and comparison.png is not None


@pytest.mark.redis
@pytest.mark.postgres
def test_a_real_worker_compares_a_prm_and_an_orm_through_the_api(
    client, researcher, backbone, tmp_path, settings, celery_worker_process, celery_live
):
    """Through Redis to a real worker on the gpu queue: the API's comparison, its report and
    its PNG, as the page then serves them."""
    settings.MEDIA_ROOT = tmp_path / "media"  # the worker's (its STEPWISE_VAR_DIR is tmp_path)
    prm, orm = prm_and_orm(backbone, tmp_path)
    sampling = sampled_pool(problems=2, per_problem=2)
    client.force_login(researcher)
    answer = client.post(
        "/p/default/api/best-of-n/",
        {"models": [prm.pk, orm.pk], "sampling_run": sampling.pk, "ns": [1, 2]},
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content
    comparison_id = answer.json()["id"]

    def finished() -> bool:
        return not BestOfNComparison.objects.get(pk=comparison_id).is_open

    try:
        wait_for(finished, 240, "the comparison to end")
    finally:
        log = (tmp_path / "worker.log").read_text()
    body = client.get(f"/p/default/api/best-of-n/{comparison_id}/").json()
    assert body["status"] == "succeeded", f"{body['error']}\n{log[-3000:]}"
    assert "modeling.tasks.gpu_compare_best_of_n" in log
    assert [row["n"] for row in body["report"]["methods"]["orm"]] == [1, 2]
    png = client.get(body["png_url"])
    assert png.status_code == 200 and b"".join(png.streaming_content)[:4] == b"\x89PNG"


@pytest.mark.django_db
def test_an_uploaded_best_of_n_file_is_kept_under_the_data_root_and_compared_on(
    client, researcher, backbone, tmp_path, settings, eager_tasks
):
    settings.STEPWISE_DATA_ROOT = tmp_path / "data"
    prm, orm = prm_and_orm(backbone, tmp_path)
    samples = Path(__file__).parent / "data" / "best_of_n_samples.jsonl"
    client.force_login(researcher)
    with eager_tasks(), samples.open("rb") as upload:
        answer = client.post(
            "/p/default/api/best-of-n/",
            {"models": [prm.pk, orm.pk], "file": upload, "allow_mismatch": "true"},
        )
    assert answer.status_code == 201, answer.content
    comparison = BestOfNComparison.objects.get()
    kept = Path(comparison.input_path)
    assert kept.parent == settings.STEPWISE_DATA_ROOT / best_of_n.UPLOADS
    assert kept.read_bytes() == samples.read_bytes()
    assert comparison.status == BestOfNComparison.Status.SUCCEEDED, comparison.error
    assert comparison.report["problems"] == 3 and comparison.report["input"]["file"].startswith(
        "STEPWISE_DATA_ROOT/"
    )
    body = client.get(f"/p/default/api/best-of-n/{comparison.pk}/").json()
    assert str(tmp_path) not in json.dumps(body)  # paths under their root's setting
    with eager_tasks():
        again = best_of_n.comparison_anyway(comparison, user=researcher)
    assert again.pk != comparison.pk and again.input_path == comparison.input_path

    with samples.open("rb") as upload:  # an unknown model: refused before the file is kept
        refused = client.post("/p/default/api/best-of-n/", {"models": [424242], "file": upload})
    assert refused.status_code == 400 and "no model version 424242" in refused.json()["detail"]
    assert len(list(kept.parent.iterdir())) == 1  # the one upload, compared twice


@pytest.mark.django_db
def test_the_run_form_starts_an_outcome_run_on_every_graded_solution(
    client, researcher, backbone, settings, django_capture_on_commit_callbacks
):
    settings.STEPWISE_MODELS_ROOT = str(Path(backbone).parent)
    client.force_login(researcher)
    form = {
        "objective": "outcome", "backbone": backbone, "mode": "head", "epochs": 1,
        "batch_tokens": 4096, "max_length": 512, "data": "all", "holdout_fraction": 0.2,
        "extra": '{"device": "cpu"}',
    }  # fmt: skip
    with django_capture_on_commit_callbacks():
        answer = client.post(reverse("modeling_runs:list"), form)
    run = TrainingRun.objects.get()
    assert answer.status_code == 302, answer.content.decode()[-2000:]
    assert run.objective == "outcome" and run.config["num_labels"] == 2
    assert run.dataset_description["graded"] == {"sampling_run": None}
