"""Every view that answers htmx with a `page.html#fragment` answers a direct visit with the
whole page: a link opened in a new tab, a reload or a bookmark never shows a bare fragment."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labeling.models import Labeling
from modeling.models import GenerationRun, TrainingRun
from tests.factories import make_batch, make_solution
from tests.helpers.users import make_user

pytestmark = pytest.mark.django_db


def _snapshot_list():
    return make_user("rhea", "researcher"), reverse("research:snapshots")


def _labeling_page():
    user = make_user("lena", "labeler")
    labeling = Labeling.objects.create(solution=make_solution(make_batch()), labeler=user)
    return user, reverse("labeling:labeling", args=[labeling.pk])


def _batch_dashboard():
    return make_user("lea", "lead"), reverse("labeling:batch_dashboard", args=[make_batch().pk])


def _generation_detail():
    GenerationRun.objects.create(generation=3)
    return make_user("lea", "lead"), reverse("modeling_loop:generation", args=[3])


def _run_detail():
    run = TrainingRun.objects.create(name="tiny", config={})
    return make_user("rhea", "researcher"), reverse("modeling_runs:detail", args=[run.pk])


@pytest.mark.parametrize(
    "setup", [_snapshot_list, _labeling_page, _batch_dashboard, _generation_detail, _run_detail]
)
def test_a_direct_visit_gets_the_page_and_htmx_the_fragment(client, setup):
    user, url = setup()
    client.force_login(user)
    page = client.get(url)
    assert page.status_code == 200
    assert b"<html" in page.content and b"<nav>" in page.content
    fragment = client.get(url, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200
    assert b"<html" not in fragment.content and b"<nav>" not in fragment.content
    assert fragment.content.strip()  # the fragment itself, not nothing


def test_a_refused_snapshot_form_is_the_page_when_posted_without_htmx(client):
    client.force_login(make_user("rhea", "researcher"))
    page = client.post(reverse("research:create"), {"format": "csv"})
    assert page.status_code == 400 and b"<html" in page.content and b"<nav>" in page.content
    fragment = client.post(reverse("research:create"), {"format": "csv"}, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 400 and b"<html" not in fragment.content
    assert b'id="export-form"' in fragment.content
