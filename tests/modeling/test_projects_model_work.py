"""Model work per project: a project's evaluation sets, runs, models, pool, generations,
best-of-N and pre-label runs are its own; its modeling pages work in it and show nothing of
another project, and another project's rows under its link are 404."""

import pytest

from labeling.models import Batch
from labeling.services.importing import import_math, import_prm800k
from modeling.models import EvaluationSet, GenerationRun, ModelVersion, TrainingRun
from modeling.services import best_of_n, loop, pool, prelabeling
from modeling.services.evaluation_sets import (
    EvaluationSetError,
    create_evaluation_set,
    ensure_evaluation_set,
)
from stepwise.links import project_reverse
from tests.helpers.paths import SAMPLE_DIR
from tests.helpers.users import api_client_for, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def lead2(phase2):
    return make_user("lead2", "lead", "researcher", project=phase2)


def test_an_evaluation_set_is_drawn_from_its_projects_labels_and_current_there_only(
    shared_data, phase2
):
    import_prm800k(shared_data / "prm800k" / "samples.jsonl", project_id=phase2.pk)
    made = create_evaluation_set(count=2, project_id=phase2.pk)
    assert (made.project_id, made.version, made.is_current) == (phase2.pk, 1, True)
    assert EvaluationSet.current(phase2.pk) == made
    assert EvaluationSet.current() is None  # the Default project has none
    with pytest.raises(EvaluationSetError, match="only 0 problems"):
        create_evaluation_set(count=1)  # the Default project has no labels to draw from
    assert ensure_evaluation_set()[0] is None
    again = create_evaluation_set(count=2, project_id=phase2.pk, seed=1)
    assert again.version == 2 and EvaluationSet.current(phase2.pk) == again


def test_the_pool_and_the_generations_are_the_projects(phase2):
    import_math(SAMPLE_DIR / "problems.jsonl")
    report = pool.import_pool(SAMPLE_DIR / "solutions.jsonl", project_id=phase2.pk)
    added = report.created["pool solutions"]
    assert added > 0
    assert pool.pool_stats(phase2.pk)["total"] == added
    assert pool.pool_stats()["total"] == 0  # the Default project's pool is empty
    params = {"retrain": False}
    mine = loop.start_generation(params=params, send=False, project_id=phase2.pk)
    theirs = loop.start_generation(params=params, send=False)  # the Default project's own loop
    assert (mine.project_id, mine.generation) == (phase2.pk, 1)
    assert theirs.generation == 1 and theirs.project_id != phase2.pk
    assert list(loop.recent_runs(phase2.pk)) == [mine]
    with pytest.raises(loop.GenerationError, match="is queued"):  # one open run per project
        loop.start_generation(params=params, send=False, project_id=phase2.pk)


def test_a_pool_prelabel_run_judges_its_projects_pool_only(phase2):
    import_math(SAMPLE_DIR / "problems.jsonl")
    pool.import_pool(SAMPLE_DIR / "solutions.jsonl", project_id=phase2.pk)
    run = prelabeling.start_prelabel_run(
        batch=None, judge="llm", created_by=None, options={}, send=False, project=phase2
    )
    assert run.project_id == phase2.pk and run.batch is None
    assert set(run.solution_ids) == set(
        pool.selectable_pool(phase2.pk).values_list("pk", flat=True)
    )
    with pytest.raises(prelabeling.PrelabelError, match="nothing|no solution"):
        prelabeling.start_prelabel_run(
            batch=None, judge="llm", created_by=None, options={}, send=False
        )  # the Default project's pool is empty
    theirs = Batch.objects.create(name="Default's")
    with pytest.raises(prelabeling.PrelabelError, match="no such batch"):
        prelabeling.start_prelabel_run(
            batch=theirs, judge="llm", created_by=None, options={}, send=False, project=phase2
        )


def test_another_projects_model_is_not_there_for_a_comparison_or_a_judge(phase2):
    theirs = ModelVersion.objects.create(name="A's model", backbone="x", artifact_path="/x")
    with pytest.raises(best_of_n.ComparisonError, match=f"no model version {theirs.pk}"):
        best_of_n.checked_model_ids([theirs.pk], project_id=phase2.pk)
    assert best_of_n.checked_model_ids([theirs.pk]) == [theirs.pk]  # in its own project
    with pytest.raises(prelabeling.PrelabelError, match=f"no model version {theirs.pk}"):
        prelabeling.check_options("prm", {"model_version": theirs.pk}, project_id=phase2.pk)


def test_the_modeling_pages_work_in_every_project_and_show_only_its_rows(client, phase2, lead2):
    theirs = TrainingRun.objects.create(name="run-of-default")
    mine = TrainingRun.objects.create(name="run-of-phase-2", project=phase2)
    model = ModelVersion.objects.create(name="model-of-default", backbone="x", artifact_path="/x")
    GenerationRun.objects.create(generation=7, params={})  # the Default project's
    client.force_login(lead2)
    runs_page = client.get(project_reverse("phase-2", "modeling_runs:list"))
    assert runs_page.status_code == 200
    assert b"run-of-phase-2" in runs_page.content and b"run-of-default" not in runs_page.content
    models_page = client.get(project_reverse("phase-2", "modeling_runs:models"))
    assert models_page.status_code == 200 and b"model-of-default" not in models_page.content
    for name in (
        "modeling_loop:generations",
        "modeling_loop:sampling",
        "modeling_prelabel:list",
        "modeling_review:queue",
        "modeling_runs:best_of_n_list",
    ):
        assert client.get(project_reverse("phase-2", name)).status_code == 200, name
    assert (
        client.get(project_reverse("phase-2", "modeling_runs:detail", mine.pk)).status_code == 200
    )
    for name, arg in (
        ("modeling_runs:detail", theirs.pk),
        ("modeling_runs:model", model.pk),
        ("modeling_loop:generation", 7),
    ):
        assert client.get(project_reverse("phase-2", name, arg)).status_code == 404, name
    api = api_client_for(lead2)
    listed = api.get("/p/phase-2/api/runs/").json()["results"]
    assert [row["id"] for row in listed] == [mine.pk]
    assert api.get(f"/p/phase-2/api/models/{model.pk}/").status_code == 404


def test_machine_labels_of_another_projects_batch_are_not_there(client, phase2, lead2):
    theirs = Batch.objects.create(name="Default's")
    client.force_login(lead2)
    card = project_reverse("phase-2", "labeling:batch_machine_labels", theirs.pk)
    assert client.get(card).status_code == 404
    assert client.post(card, {"enabled": "on", "accept": "on"}).status_code == 404
    api = api_client_for(lead2)
    answer = api.post(f"/p/phase-2/api/batches/{theirs.pk}/machine-labels/", {"enabled": True})
    assert answer.status_code == 404
    theirs.refresh_from_db()
    assert not theirs.machine_labels


def test_the_commands_work_in_the_project_named(phase2):
    from django.core.management import CommandError, call_command

    from modeling.models import PreLabelRun

    import_math(SAMPLE_DIR / "problems.jsonl")
    pool.import_pool(SAMPLE_DIR / "solutions.jsonl", project_id=phase2.pk)
    call_command("prelabel", "--pool", "--judge", "llm", "--project", "phase-2")
    assert PreLabelRun.objects.get().project_id == phase2.pk
    with pytest.raises(CommandError, match="no solution"):
        call_command("prelabel", "--pool", "--judge", "llm", "--project", "default")  # empty
    with pytest.raises(CommandError, match="Name the project with --project"):
        call_command("prelabel", "--pool", "--judge", "llm")  # two projects: no guess
    assert PreLabelRun.objects.count() == 1
    with pytest.raises(CommandError, match="no project"):
        call_command("prelabel", "--pool", "--judge", "llm", "--project", "nope")
    Batch.objects.create(name="same name")  # the Default project's
    mine = Batch.objects.create(name="same name", project=phase2)
    call_command("machine_labels", "--batch", "same name", "--project", "phase-2", "--on")
    mine.refresh_from_db()
    assert mine.machine_labels
    assert not Batch.objects.get(name="same name", project__slug="default").machine_labels
