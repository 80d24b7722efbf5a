"""The candidate pool, selection into a batch, and the generation pipeline step by step.

Training and scoring are process boundaries here (the `runs` services): the steps that call them
are tested with fakes that write what the real ones write; tests/modeling/test_loop_celery.py
runs the whole chain on a tiny real model through a real worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from labeling.models import Batch, Labeling, Solution
from labeling.services.importing import LineError, import_math
from modeling.models import (
    GenerationRun,
    ModelVersion,
    PoolEntry,
    SelectionReason,
    SolutionScore,
    TrainingRun,
)
from modeling.services import execution, loop, pipeline, pool, runs, scoring
from modeling.services.loop import GenerationError
from modeling.services.pipeline import run_generation_inline, run_step
from modeling.services.pool import import_pool
from tests.factories import make_batch, make_problem
from tests.helpers.paths import SAMPLE_DIR
from tests.labeling.helpers import next_labeling


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def demo_pool(db):
    """The demo's 21 problems and 63 solutions, imported into the pool and graded."""
    import_math(SAMPLE_DIR / "problems.jsonl")
    return import_pool(SAMPLE_DIR / "solutions.jsonl")


def active_model(name: str = "prm-1") -> ModelVersion:
    version = ModelVersion.objects.create(
        name=name, backbone="tiny", artifact_path="/nonexistent", passed_evaluation=True
    )
    version.activate()
    return version


def score_pool_by_id(version: ModelVersion) -> None:
    """Deterministic scores: a higher id is more convincing."""
    SolutionScore.objects.bulk_create(
        SolutionScore(solution=s, model_version=version, score=s.pk / 1000, step_probs=[])
        for s in Solution.objects.filter(pool_entry__isnull=False)
    )


# --- the pool ----------------------------------------------------------------------------------


def test_import_pool_grades_every_answer_like_the_reference_labels(demo_pool):
    assert demo_pool.created["pool solutions"] == 63
    reference = {
        json.loads(line)["source_id"]: json.loads(line)["correct"]
        for line in (SAMPLE_DIR / "reference_labels.jsonl").read_text().splitlines()
    }
    graded = dict(Solution.objects.values_list("source_id", "answer_correct"))
    assert graded == reference
    assert Solution.objects.filter(batch__isnull=True).count() == 63  # in no queue yet
    assert PoolEntry.objects.exclude(extracted_answer=None).count() == 63


def test_import_pool_twice_adds_nothing(demo_pool):
    again = import_pool(SAMPLE_DIR / "solutions.jsonl")
    assert again.created["pool solutions"] == 0
    assert again.duplicates == 63
    assert PoolEntry.objects.count() == 63


def test_import_pool_grades_from_steps_when_the_line_has_no_answer(db, tmp_path):
    problem = make_problem("What is 6 times 7?", answer="42")
    path = write_jsonl(
        tmp_path / "pool.jsonl",
        [
            {"problem": problem.text, "steps": ["6 * 7 = 42.", "# Answer\n\n42"]},
            {"problem": problem.text, "steps": ["6 * 7 = 48.", "# Answer\n\n48"]},
            {"problem": problem.text, "steps": ["I am not sure.", "# Answer"], "generator": "g"},
        ],
    )
    import_pool(path)
    verdicts = sorted(
        (s.steps[0], s.answer_correct, s.pool_entry.extracted_answer)
        for s in Solution.objects.select_related("pool_entry")
    )
    assert verdicts == [
        ("6 * 7 = 42.", True, "42"),
        ("6 * 7 = 48.", False, "48"),
        ("I am not sure.", None, None),
    ]


def test_import_pool_bad_line_names_line_and_field_and_writes_nothing(db, tmp_path):
    problem = make_problem("What is 1 + 1?", answer="2")
    path = write_jsonl(
        tmp_path / "pool.jsonl",
        [
            {"problem": problem.text, "steps": ["1 + 1 = 2", "# Answer\n\n2"]},
            {"problem": problem.text, "steps": ["ok", ""]},
        ],
    )
    with pytest.raises(LineError) as error:
        import_pool(path)
    assert (error.value.line, error.value.field) == (2, "steps[1]")
    assert not Solution.objects.exists()


def test_import_pool_unknown_problem_is_a_line_error(db, tmp_path):
    path = write_jsonl(tmp_path / "pool.jsonl", [{"unique_id": "nope/1.json", "steps": ["x"]}])
    with pytest.raises(LineError, match="line 1: unique_id"):
        import_pool(path)


def test_import_pool_command_reports(db, capsys):
    import_math(SAMPLE_DIR / "problems.jsonl")
    call_command("import_pool", str(SAMPLE_DIR / "solutions.jsonl"))
    assert "63 pool solutions" in capsys.readouterr().out


def test_import_pool_command_fails_on_a_blank_file_and_writes_nothing(db, tmp_path):
    path = tmp_path / "pool.jsonl"
    path.write_text("\n\n")
    with pytest.raises(
        CommandError, match=r"pool.jsonl has no records \(only blank lines\); nothing was imported"
    ):
        call_command("import_pool", str(path))
    assert not Solution.objects.exists()


# --- selection into a batch --------------------------------------------------------------------


def test_generation_without_retraining_queues_convincing_wrong_answers_with_reasons(
    demo_pool, lead
):
    version = active_model()
    score_pool_by_id(version)
    make_batch("PRM800K generation 3", generation=3, origin=Batch.Origin.IMPORT)
    run = loop.start_generation(
        params={"k": 10, "per_problem_cap": 1, "retrain": False}, created_by=lead
    )
    run = run_generation_inline(run)

    assert run.status == GenerationRun.Status.SUCCEEDED
    assert run.generation == 4  # previous max + 1
    batch = run.batch
    assert (batch.generation, batch.origin, batch.is_active) == (
        4,
        Batch.Origin.ACTIVE_LEARNING,
        True,
    )
    reasons = list(run.selections.select_related("solution"))
    assert [r.rank for r in reasons] == list(range(1, 11))
    assert [r.rule for r in reasons] == ["convincing_wrong"] * 8 + ["convincing"] * 2
    assert all(r.correct is False for r in reasons[:8])
    assert all(r.model_version_id == version.pk for r in reasons)
    wrong = Solution.objects.filter(pool_entry__isnull=False, answer_correct=False).order_by("-pk")
    assert reasons[0].solution_id == wrong[0].pk  # the most convincing wrong answer first
    assert [r.score for r in reasons[:8]] == sorted((r.score for r in reasons[:8]), reverse=True)
    assert len({r.solution.problem_id for r in reasons}) == 10  # the cap of 1 per problem
    queued = Solution.objects.filter(batch=batch)
    assert set(queued.values_list("pk", flat=True)) == {r.solution_id for r in reasons}
    assert set(queued.values_list("generation", flat=True)) == {4}
    assert run.steps["retrain"]["status"] == "skipped"
    assert all(run.steps[s]["status"] == "done" for s in ("score", "select", "enqueue"))


def test_selection_excludes_labeled_and_queued_solutions(demo_pool, labeler):
    version = active_model()
    score_pool_by_id(version)
    top = list(Solution.objects.order_by("-pk")[:3])
    other = make_batch("elsewhere")
    Solution.objects.filter(pk=top[0].pk).update(batch=other)
    Labeling.objects.create(solution=top[1], labeler=labeler, status=Labeling.Status.EXPIRED)
    run = run_generation_inline(
        loop.start_generation(
            params={
                "k": 63,
                "per_problem_cap": None,
                "convincing_wrong_fraction": 0,
                "retrain": False,
            }
        )
    )
    chosen = set(run.selections.values_list("solution_id", flat=True))
    assert top[0].pk not in chosen and top[1].pk not in chosen and top[2].pk in chosen
    assert len(chosen) == 61
    assert Solution.objects.get(pk=top[0].pk).batch == other  # never taken from another batch


def test_per_problem_scope(demo_pool):
    version = active_model()
    score_pool_by_id(version)
    run = run_generation_inline(
        loop.start_generation(
            params={
                "k": 100,
                "scope": "per_problem",
                "per_problem_k": 1,
                "per_problem_cap": None,
                "retrain": False,
            }
        )
    )
    problems = list(run.selections.values_list("solution__problem_id", flat=True))
    assert len(problems) == len(set(problems)) == 21


def test_generation_number_shows_in_the_export(demo_pool, labeler):
    from labeling.services import rating
    from labeling.services.exporting import iter_prm800k_lines

    version = active_model()
    score_pool_by_id(version)
    run = run_generation_inline(loop.start_generation(params={"k": 1, "retrain": False}))
    labeler.groups.add(*lead_groups())
    labeling = next_labeling(labeler)
    assert labeling.solution.batch == run.batch
    for index in range(len(labeling.solution.steps)):
        rating.rate_step(labeling_id=labeling.pk, user=labeler, step_index=index, rating=1)
    [line] = list(iter_prm800k_lines(Labeling.objects.filter(pk=labeling.pk)))
    assert json.loads(line)["generation"] == run.generation


def lead_groups():
    from django.contrib.auth.models import Group

    return [Group.objects.get_or_create(name="labeler")[0]]


# --- idempotency, failure and retry of each step ----------------------------------------------


def fake_services(monkeypatch, *, train_fails: bool = False, score_fails: bool = False):
    """Stand-ins for the training and scoring services at the process boundary (no model is
    trained)."""
    calls = {"train": 0, "score": 0}

    def create_training_run(*, config, created_by=None, name="", labelings=None, project=None):
        return TrainingRun.objects.create(
            name=name, config=config, created_by=created_by, project=project
        )

    def execute_training_run(run_id, *, should_stop=None):
        calls["train"] += 1
        run = TrainingRun.objects.get(pk=run_id)
        if train_fails:
            run.mark_failed("CUDA out of memory")
            return None
        version = ModelVersion.objects.create(
            run=run,
            name=f"prm-{run_id}",
            backbone="tiny",
            artifact_path="/x",
            passed_evaluation=True,
        )
        version.activate()
        run.status = TrainingRun.Status.SUCCEEDED
        run.save(update_fields=["status"])
        return version

    def score_solutions_with(*, model_version, solutions, batch_size=64, progress=None):
        calls["score"] += 1
        if score_fails:
            raise RuntimeError("scoring worker lost")
        rows = list(solutions)
        SolutionScore.objects.bulk_create(
            [
                SolutionScore(
                    solution=s, model_version=model_version, score=s.pk / 1000, step_probs=[]
                )
                for s in rows
            ],
            ignore_conflicts=True,
        )
        if progress:
            progress(len(rows), len(rows))
        return len(rows)

    monkeypatch.setattr(runs, "create_training_run", create_training_run)
    monkeypatch.setattr(execution, "execute_training_run", execute_training_run)
    monkeypatch.setattr(scoring, "score_solutions_with", score_solutions_with)
    return calls


def test_full_generation_with_retraining(demo_pool, monkeypatch):
    calls = fake_services(monkeypatch)
    run = run_generation_inline(loop.start_generation(params={"k": 5}))
    assert run.status == GenerationRun.Status.SUCCEEDED
    assert run.training_run.status == TrainingRun.Status.SUCCEEDED
    assert run.model_version == ModelVersion.active()
    assert calls == {"train": 1, "score": 1}
    assert run.batch.solutions.count() == 5
    for step in GenerationRun.STEPS:
        assert run.steps[step]["status"] == "done" and run.steps[step]["seconds"] >= 0
    assert run.steps["score"]["done"] == run.steps["score"]["total"] == 63


def test_each_step_runs_once_when_its_task_is_delivered_twice(demo_pool, monkeypatch):
    calls = fake_services(monkeypatch)
    run = loop.start_generation(params={"k": 5})
    for step in ("retrain", "score", "select", "enqueue"):
        assert run_step(run.pk, step) is not None or step == "enqueue"
        assert run_step(run.pk, step) is None  # the redelivery finds it done
    assert calls == {"train": 1, "score": 1}
    run.refresh_from_db()
    assert run.status == GenerationRun.Status.SUCCEEDED
    assert Batch.objects.filter(origin=Batch.Origin.ACTIVE_LEARNING).count() == 1
    assert run.selections.count() == 5


def test_select_and_enqueue_are_idempotent_functions(demo_pool):
    version = active_model()
    score_pool_by_id(version)
    run = loop.start_generation(params={"k": 4, "retrain": False})
    run_step(run.pk, "score")
    run.refresh_from_db()
    first = [(r.solution_id, r.rank, r.rule) for r in pool.select_for_run(run)]
    second = [(r.solution_id, r.rank, r.rule) for r in pool.select_for_run(run)]
    assert first == second and SelectionReason.objects.count() == 4
    batch = pool.enqueue_selection(run)
    assert pool.enqueue_selection(run) == batch
    assert batch.solutions.count() == 4


def test_a_run_stored_before_its_parameters_existed_runs_on_their_defaults(demo_pool):
    """Every step reads a run's parameters through loop.with_defaults: a row whose params
    leave some out (stored by an older version) selects and enqueues with the defaults."""
    version = active_model()
    score_pool_by_id(version)
    run = loop.start_generation(params={"k": 3, "retrain": False})
    GenerationRun.objects.filter(pk=run.pk).update(params={"k": 3, "retrain": False})
    assert loop.with_defaults({"k": 3})["overlap"] == loop.DEFAULT_PARAMS["overlap"] == 1
    assert loop.with_defaults({"k": 3})["k"] == 3 and loop.DEFAULT_PARAMS["k"] == 50
    run_generation_inline(run)
    run.refresh_from_db()
    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    assert run.selections.count() == 3
    batch = Batch.objects.get(generation=run.generation)
    assert (batch.solutions.count(), batch.overlap, batch.priority) == (3, 1, 10)


@pytest.mark.parametrize("failing", ["retrain", "score", "select", "enqueue"])
def test_a_failed_step_keeps_the_previous_generation_and_model_and_retries_from_there(
    demo_pool, monkeypatch, failing
):
    calls = fake_services(monkeypatch)
    previous = run_generation_inline(loop.start_generation(params={"k": 3}))
    model_before = ModelVersion.active()
    queued_before = set(Solution.objects.filter(batch__isnull=False).values_list("pk", "batch_id"))

    real = pipeline.STEP_FUNCTIONS[failing]

    def boom(run):
        if failing == "enqueue":  # fail after the batch was written: the transaction undoes it
            real(run)
        raise RuntimeError(f"injected failure in {failing}")

    monkeypatch.setitem(pipeline.STEP_FUNCTIONS, failing, boom)
    run = run_generation_inline(loop.start_generation(params={"k": 3}))
    assert run.status == GenerationRun.Status.FAILED
    assert run.current_step == failing
    assert f"injected failure in {failing}" in run.error
    assert run.steps[failing]["status"] == "failed"
    if failing == "retrain":
        assert ModelVersion.active() == model_before
    if failing != "enqueue":
        assert (
            set(Solution.objects.filter(batch__isnull=False).values_list("pk", "batch_id"))
            == queued_before
        )
        assert Batch.objects.filter(generation=run.generation).count() == 0
    assert previous.batch.solutions.count() == 3
    with pytest.raises(GenerationError):
        loop.start_generation(params={"k": 3})  # retry or cancel it first

    monkeypatch.setitem(pipeline.STEP_FUNCTIONS, failing, real)
    trains_before = calls["train"]
    loop.retry_generation(run)
    run = run_generation_inline(run)
    assert run.status == GenerationRun.Status.SUCCEEDED
    assert run.attempts == 5  # four steps, the failed one twice
    assert calls["train"] == trains_before + (1 if failing == "retrain" else 0)
    assert run.batch.solutions.count() == 3
    assert Batch.objects.filter(origin=Batch.Origin.ACTIVE_LEARNING).count() == 2


def test_training_that_fails_fails_the_step_and_keeps_the_active_model(demo_pool, monkeypatch):
    fake_services(monkeypatch, train_fails=True)
    before = active_model()
    run = run_generation_inline(loop.start_generation(params={"k": 3}))
    assert run.status == GenerationRun.Status.FAILED and run.current_step == "retrain"
    assert "CUDA out of memory" in run.error
    assert ModelVersion.active() == before
    assert not Batch.objects.filter(origin=Batch.Origin.ACTIVE_LEARNING).exists()


def test_scoring_with_no_active_model_fails_clearly(demo_pool):
    run = run_generation_inline(loop.start_generation(params={"k": 3, "retrain": False}))
    assert run.status == GenerationRun.Status.FAILED
    assert "no active model" in run.error


def test_cancel_lets_a_new_generation_start(demo_pool):
    run = run_generation_inline(loop.start_generation(params={"k": 3, "retrain": False}))
    loop.cancel_generation(run)
    assert loop.start_generation(params={"k": 3}).generation == run.generation + 1


def test_bad_parameters_are_refused(db):
    with pytest.raises(GenerationError, match="per_problem_k"):
        loop.start_generation(params={"scope": "per_problem"})
    with pytest.raises(GenerationError, match="unknown"):
        loop.start_generation(params={"kk": 3})


# --- the automatic trigger ---------------------------------------------------------------------


def test_next_generation_starts_once_the_last_is_labeled_to_the_fraction(demo_pool, monkeypatch):
    fake_services(monkeypatch)
    first = run_generation_inline(loop.start_generation(params={"k": 4}))
    assert loop.maybe_start_next_generation(fraction=0.5) is None
    ids = list(first.batch.solutions.values_list("pk", flat=True)[:2])
    Solution.objects.filter(pk__in=ids).update(completed_count=1)
    assert loop.maybe_start_next_generation(fraction=0) is None  # off
    second = loop.maybe_start_next_generation(fraction=0.5)
    assert second is not None and second.trigger == GenerationRun.Trigger.AUTO
    assert second.generation == first.generation + 1
    assert loop.maybe_start_next_generation(fraction=0.5) is None  # one open run


# --- pages, API, CLI ---------------------------------------------------------------------------


def test_lead_starts_a_generation_from_the_page(client, lead, demo_pool, eager_tasks):
    version = active_model()
    score_pool_by_id(version)
    client.force_login(lead)
    response = client.get(reverse("modeling_loop:generations"))
    assert response.status_code == 200 and b"Start generation" in response.content
    with eager_tasks():
        response = client.post(
            reverse("modeling_loop:generations"),
            {
                "k": 6,
                "convincing_wrong_fraction": 0.5,
                "per_problem_cap": 2,
                "scope": "pool",
                "overlap": 1,
            },
        )
    run = GenerationRun.objects.get()
    assert response.status_code == 302 and response.url.endswith(
        f"/p/default/generations/{run.generation}/"
    )
    run.refresh_from_db()
    assert run.status == GenerationRun.Status.SUCCEEDED
    page = client.get(response.url)
    assert page.content.count(b"<tr>") >= 6
    assert b"convincing wrong" in page.content
    fragment = client.get(response.url, headers={"HX-Request": "true"})
    assert b'id="progress"' in fragment.content and b"<html" not in fragment.content


def test_generation_pages_are_for_leads_and_researchers(client, labeler, researcher, db):
    client.force_login(labeler)
    assert client.get(reverse("modeling_loop:generations")).status_code == 403
    client.force_login(researcher)
    assert client.get(reverse("modeling_loop:generations")).status_code == 200


def test_generation_detail_query_count_is_flat(
    client, lead, demo_pool, django_assert_max_num_queries
):
    version = active_model()
    score_pool_by_id(version)
    run = run_generation_inline(loop.start_generation(params={"k": 30, "retrain": False}))
    client.force_login(lead)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("modeling_loop:generation", args=[run.generation]))
    # The page itself, every selected row in it: a redirect (to sign in) passes the count too.
    page = response.content.decode()
    assert response.status_code == 200, response
    assert f"<h1>Generation {run.generation}</h1>" in page
    assert page.count('<span class="chip rule-') == run.selections.count() == 30


def test_api_starts_lists_and_retries(client, researcher, demo_pool, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    client.force_login(researcher)
    response = client.post(
        "/p/default/api/generations/", {"k": 3, "retrain": False}, content_type="application/json"
    )
    assert response.status_code == 201
    generation = response.json()["generation"]
    run = GenerationRun.objects.get(generation=generation)
    run_generation_inline(run)  # no worker in this test: run the queued steps here
    data = client.get(f"/p/default/api/generations/{generation}/").json()
    assert data["status"] == "failed" and data["current_step"] == "score"  # no active model
    assert (
        client.post(
            "/p/default/api/generations/", {"k": 3}, content_type="application/json"
        ).status_code
        == 409
    )
    version = active_model()
    score_pool_by_id(version)
    assert client.post(f"/p/default/api/generations/{generation}/retry/").status_code == 200
    run_generation_inline(run)
    assert client.get("/p/default/api/generations/").json()[0]["status"] == "succeeded"
    picks = client.get(f"/p/default/api/generations/{generation}/selections/").json()
    assert [p["rank"] for p in picks] == [1, 2, 3]


def test_api_refuses_labelers(client, labeler, db):
    client.force_login(labeler)
    response = client.post("/p/default/api/generations/", {"k": 3}, content_type="application/json")
    assert response.status_code == 403
    assert not GenerationRun.objects.exists()


def test_run_generation_command(demo_pool, capsys, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    version = active_model()
    score_pool_by_id(version)
    call_command("run_generation", "--k", "4", "--no-retrain", "--inline")
    out = capsys.readouterr().out
    assert "4 solutions queued" in out
    with pytest.raises(CommandError, match="not failed"):
        call_command("run_generation", "--retry", str(GenerationRun.objects.get().generation))


def test_a_generation_whose_worker_died_is_failed_and_can_be_retried(db, settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.STEPWISE_RUN_STALE_SECONDS = 600
    old = timezone.now() - timedelta(seconds=601)
    dead = GenerationRun.objects.create(
        generation=1,
        status=GenerationRun.Status.RUNNING,
        current_step="score",
        steps={"score": {"status": "running", "started_at": old.isoformat()}},
        heartbeat_at=old,
    )
    alive = GenerationRun.objects.create(
        generation=2,
        status=GenerationRun.Status.RUNNING,
        current_step="score",
        steps={"score": {"status": "running", "started_at": old.isoformat()}},
        heartbeat_at=timezone.now(),
    )
    training = TrainingRun.objects.create(
        status=TrainingRun.Status.FAILED, error="The worker stopped reporting"
    )
    retraining = GenerationRun.objects.create(
        generation=3,
        status=GenerationRun.Status.RUNNING,
        current_step="retrain",
        training_run=training,
    )
    assert pipeline.fail_stale_generations() == 2
    for run in (dead, alive, retraining):
        run.refresh_from_db()
    assert dead.status == GenerationRun.Status.FAILED and "no progress" in dead.error
    assert dead.steps["score"]["status"] == "failed"
    assert alive.status == GenerationRun.Status.RUNNING
    assert (
        retraining.status == GenerationRun.Status.FAILED and "stopped reporting" in retraining.error
    )
    retried = loop.retry_generation(dead, send=False)
    assert retried.status == GenerationRun.Status.QUEUED and retried.current_step == "score"
