"""The admin has every model of both apps. A superuser opens each list and each change page;
where an edit would break an invariant (the rating history, counters, snapshots, runs, model
versions...) the admin is view only: a forged change or delete leaves the row as it was."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Max
from django.urls import reverse
from django.utils import timezone

from labeling import models as lm
from labeling.services import tokens
from modeling import models as mm
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.users import make_user

pytestmark = pytest.mark.django_db

MODELS = [m for app in ("labeling", "modeling") for m in apps.get_app_config(app).get_models()]
EDITABLE = {lm.Problem, lm.Batch, mm.PoolEntry}  # configuration, not history or counters
REVOCABLE = {lm.ApiToken}  # seen and deleted (revoked), never made or changed here
READ_ONLY = [m for m in MODELS if m not in EDITABLE | REVOCABLE]


def _id(model) -> str:
    return model._meta.label


@pytest.fixture
def superuser(client):
    user = get_user_model().objects.create_superuser("ada", password="ada-pw")
    client.force_login(user)
    return user


@pytest.fixture
def one_of_each(superuser):
    """One row of every model, written directly (the admin only reads them)."""
    batch = make_batch()
    solution = make_solution(batch, problem=make_problem())
    lena, lars = make_user("lena", "labeler"), make_user("lars", "labeler")
    lm.Labeler.objects.create(user=lena)
    labeling = lm.Labeling.objects.create(
        solution=solution, labeler=lena, status="completed", finish_reason="solution"
    )
    step = lm.StepLabel.objects.create(labeling=labeling, index=0, chosen_completion=0)
    lm.Completion.objects.create(step=step, index=0, text="I add.", rating=1)
    lm.RatingEvent.objects.create(labeling=labeling, step_index=0, new_rating=1, reason="rate")
    lm.Note.objects.create(
        solution=solution, labeling=labeling, step_index=0, author=lena, text="Why +1."
    )
    lm.GoldLabel.objects.create(solution=solution, ratings=[1, 1, 1])
    lm.GoldResult.objects.create(labeling=labeling, labeler=lena, solution=solution)
    lm.BatchLabelerStats.objects.create(batch=batch, labeler=lena, labelings=1)
    lm.BatchHourStats.objects.create(batch=batch, hour=timezone.now(), labelings=1)
    lm.SolutionAgreement.objects.create(solution=solution, batch=batch, labelings=2)
    lm.BatchAgreement.objects.create(batch=batch, solutions=1)
    lm.PairAgreement.objects.create(labeler_a=lena, labeler_b=lars, solutions=1)
    lm.Adjudication.objects.create(solution=solution, ratings=[1, 1, 1], lead=superuser)
    version = (lm.Guidelines.objects.aggregate(v=Max("version"))["v"] or 0) + 1
    lm.Guidelines.objects.create(version=version, text="# Rate every step")
    lm.Snapshot.objects.create(status="done", sha256="0" * 64, row_count=1)
    tokens.token_create(user=lena, name="lena's script", expires_in=None)
    run = mm.TrainingRun.objects.create(name="first", config={})
    model = mm.ModelVersion.objects.create(
        run=run, name="prm-1", backbone="tiny", artifact_path="/x"
    )
    mm.SolutionScore.objects.create(
        solution=solution, model_version=model, score=0.5, step_probs=[[0.1, 0.2, 0.7]]
    )
    mm.PoolEntry.objects.create(solution=make_solution(), extracted_answer="42")
    mm.EvaluationSet.objects.create(
        version=1, problem_ids=[solution.problem_id], file_path="e.jsonl", sha256="0" * 64
    )
    lm.ProposedSteps.objects.create(
        problem=solution.problem, prefix=[], prefix_sha256="0" * 64, k=2, steps=["I add."]
    )
    mm.SamplingRun.objects.create(samples=2, sampling={}, problem_ids=[solution.problem_id])
    generation = mm.GenerationRun.objects.create(generation=1, batch=batch)
    mm.SelectionReason.objects.create(
        generation_run=generation, solution=solution, score=0.5, rank=1, rule="convincing_wrong"
    )


def _values(row) -> dict:
    return {f.attname: f.value_from_object(row) for f in row._meta.concrete_fields}


def _forged(row) -> dict:
    """A change to every field the form could carry."""
    data = {}
    for field in row._meta.concrete_fields:
        value = field.value_from_object(row)
        if isinstance(value, bool):
            data[field.name] = "" if value else "on"
        elif isinstance(value, int):
            data[field.name] = str(value + 7)
        elif isinstance(value, str):
            data[field.name] = value + " changed"
    return data


def test_every_model_of_both_apps_is_in_the_admin():
    assert len(MODELS) == 29
    assert [_id(m) for m in MODELS if m not in admin.site._registry] == []


@pytest.mark.parametrize("model", MODELS, ids=_id)
def test_a_superuser_opens_each_list_and_change_page(client, one_of_each, model):
    meta = model._meta
    listing = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
    assert listing.status_code == 200 and listing.context["cl"].result_count >= 1
    row = model.objects.first()
    change = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk]))
    assert change.status_code == 200


@pytest.mark.parametrize("model", READ_ONLY, ids=_id)
def test_a_read_only_model_refuses_add_change_and_delete(client, one_of_each, model):
    meta = model._meta
    row = model.objects.first()
    before = _values(row)
    page = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk]))
    assert b'name="_save"' not in page.content  # a view page, nothing to submit
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk])
    assert client.post(url, _forged(row)).status_code == 403
    delete = reverse(f"admin:{meta.app_label}_{meta.model_name}_delete", args=[row.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    add = reverse(f"admin:{meta.app_label}_{meta.model_name}_add")
    assert client.get(add).status_code == 403
    row.refresh_from_db()
    assert _values(row) == before


def test_a_problem_keeps_the_fields_imports_match_on(client, one_of_each):
    problem = lm.Problem.objects.first()
    before = (problem.text, problem.text_sha256, problem.unique_id)
    response = client.post(
        reverse("admin:labeling_problem_change", args=[problem.pk]),
        {**_forged(problem), "ground_truth_answer": "43", "subject": "Algebra", "level": "3"},
    )
    assert response.status_code == 302
    problem.refresh_from_db()
    assert problem.ground_truth_answer == "43" and problem.level == 3
    assert (problem.text, problem.text_sha256, problem.unique_id) == before


def test_an_admin_sees_api_tokens_and_revokes_one_but_cannot_make_or_change_one(
    client, one_of_each
):
    token = lm.ApiToken.objects.get()
    listing = client.get(reverse("admin:labeling_apitoken_changelist")).content.decode()
    change = client.get(reverse("admin:labeling_apitoken_change", args=[token.pk]))
    assert "lena&#x27;s script" in listing
    # The digest is the row's key (in its links) but not a field shown.
    assert change.status_code == 200 and "Digest" not in change.content.decode()
    assert client.get(reverse("admin:labeling_apitoken_add")).status_code == 403
    assert (
        client.post(
            reverse("admin:labeling_apitoken_change", args=[token.pk]), {"name": "renamed"}
        ).status_code
        == 403
    )
    delete = reverse("admin:labeling_apitoken_delete", args=[token.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not lm.ApiToken.objects.exists()


def test_the_admin_names_every_model_in_plain_english(client, superuser):
    html = client.get(reverse("admin:index")).content.decode()
    for name in ("Batch hour stats", "Batch labeler stats", "Proposed steps", "API tokens"):
        assert f">{name}</a>" in html, name
    assert "statss" not in html and "stepss" not in html and "Api tokens" not in html
    # No plural is a name already ending in "s" with one more tacked on.
    doubled = [
        _id(model)
        for model in apps.get_models()
        if model._meta.verbose_name.endswith("s")
        and model._meta.verbose_name_plural == f"{model._meta.verbose_name}s"
    ]
    assert doubled == []
