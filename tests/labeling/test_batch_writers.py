"""Who may write into a batch: one rule (`roles.may_add_to_batch`) on every path that does.
Leads add to any batch; anyone else only to a batch they created."""

import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from labeling.models import Batch, Problem, Solution
from labeling.roles import may_add_to_batch
from tests.factories import make_batch, make_problem
from tests.helpers.users import api_client_for, make_user

pytestmark = pytest.mark.django_db


def _samples(step: str = "2+2=4.") -> SimpleUploadedFile:
    line = {"problem": "2+2?", "ground_truth_answer": "4", "steps": [step], "answer": "4"}
    content = (json.dumps(line) + "\n").encode()
    return SimpleUploadedFile("samples.jsonl", content, content_type="application/jsonl")


def _upload(user, batch_name: str, step: str = "2+2=4."):
    return api_client_for(user).post(
        "/p/default/api/solutions/import-samples/",
        {"file": _samples(step), "batch_name": batch_name},
        format="multipart",
    )


def test_a_researcher_uploading_into_a_leads_batch_is_refused_with_403_and_nothing_is_written(
    client, lead, researcher
):
    batch = make_batch("lead's round", created_by=lead)
    response = _upload(researcher, batch.name)
    assert response.status_code == 403
    assert "creator" in response.json()["detail"]
    assert not Solution.objects.exists() and not Problem.objects.exists()
    # The same researcher is refused the batch's page: the API is no way around it.
    client.force_login(researcher)
    assert client.get(reverse("labeling:batch_dashboard", args=[batch.pk])).status_code == 403


def test_a_lead_uploads_into_anyones_batch_and_a_researcher_into_their_own(lead, researcher):
    other = make_user("rex", "researcher")
    theirs = make_batch("rex's", created_by=other)
    assert _upload(lead, theirs.name).status_code == 201
    assert theirs.solutions.count() == 1
    # A new batch is the uploader's: they may add to it again, another researcher may not.
    assert _upload(researcher, "rhea's").status_code == 201
    mine = Batch.objects.get(name="rhea's")
    assert mine.created_by == researcher
    assert _upload(researcher, "rhea's", step="4 = 2+2.").status_code == 201
    assert _upload(other, "rhea's", step="2 plus 2 is 4.").status_code == 403
    assert mine.solutions.count() == 2 and Solution.objects.count() == 3


def test_adding_problems_over_the_api_follows_the_same_rule(lead, researcher):
    problem = make_problem()
    leads = make_batch("phase 1", protocol=Batch.Protocol.ALTERNATIVES, created_by=lead)
    own = make_batch("own", protocol=Batch.Protocol.ALTERNATIVES, created_by=researcher)
    body = {"problems": [problem.pk]}
    url = "/p/default/api/batches/{}/problems/"
    response = api_client_for(researcher).post(url.format(leads.pk), body, format="json")
    assert response.status_code == 403 and not leads.solutions.exists()
    assert api_client_for(researcher).post(url.format(own.pk), body, format="json").json() == {
        "added": 1
    }
    assert api_client_for(lead).post(url.format(leads.pk), body, format="json").json() == {
        "added": 1
    }


def test_leads_and_admins_add_to_any_batch_others_only_to_their_own(lead, researcher, labeler):
    admin = make_user("ada", "admin")
    batch = make_batch("b", created_by=researcher)
    assert may_add_to_batch(lead, batch) and may_add_to_batch(admin, batch)
    assert may_add_to_batch(researcher, batch) and not may_add_to_batch(labeler, batch)
    assert not may_add_to_batch(researcher, make_batch("nobody's"))


def test_a_lead_still_uploads_on_the_batch_form(client, lead, researcher):
    batch = make_batch("researcher's", created_by=researcher)
    upload = io.BytesIO(_samples().read())
    upload.name = "samples.jsonl"
    client.force_login(lead)
    response = client.post(
        reverse("labeling:batch_edit", args=[batch.pk]),
        {"name": batch.name, "overlap": 1, "priority": 0, "upload": upload},
    )
    assert response.status_code == 302 and batch.solutions.count() == 1
