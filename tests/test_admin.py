"""The admin has every model of both apps. A superuser opens each list and each change page;
where an edit would break an invariant (the rating history, counters, snapshots, runs, model
versions...) the admin is view only: a forged change or delete leaves the row as it was."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import reverse

from labeling import models as lm
from modeling import models as mm
from tests.factories import make_one_of_each

pytestmark = pytest.mark.django_db

MODELS = [m for app in ("labeling", "modeling") for m in apps.get_app_config(app).get_models()]
EDITABLE = {
    lm.Problem,
    lm.Batch,
    mm.PoolEntry,
    lm.Project,
    lm.Membership,
}  # configuration, not history or counters
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
    return make_one_of_each(lead=superuser)


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
    assert len(MODELS) == 36
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
