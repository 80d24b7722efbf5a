"""A NUL character in any text a request carries is a 400 that names the input, and nothing is
written. PostgreSQL's text columns cannot hold one: a note, a reply, a skip reason, a lead's
reason or adjudication note, a written step, or a token's id in the address was a 500 there
(and stored on SQLite). Every endpoint that takes text, pages and API, on both databases."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from labeling.models import (
    Adjudication,
    ApiToken,
    Batch,
    Guidelines,
    LabelerRecord,
    Labeling,
    Note,
    StepLabel,
)
from modeling.models import TrainingRun
from tests.factories import make_batch, make_solution, make_solutions
from tests.helpers.users import api_client_for, make_user
from tests.labeling.helpers import claim_and_label, next_labeling
from tests.labeling.test_notes import step_by_step_batch

pytestmark = pytest.mark.django_db

NUL = "a\x00b"

# Each case sends one request with a NUL in it, as the user the endpoint is for, and answers
# (the response, what the request must have left unwritten: falsy when nothing was).
Sent = tuple[Any, Callable[[], Any]]


def note(client) -> Sent:
    lena = make_user("lena", "labeler")
    make_solution(make_batch(gold_rate=0))
    labeling = claim_and_label(lena, [1, -1])
    client.force_login(lena)
    url = reverse("labeling:note", args=[labeling.pk])
    return client.post(url, {"step": "2", "text": NUL}, HTTP_HX_REQUEST="true"), Note.objects.exists


def skip_reason(client) -> Sent:
    lena = make_user("lena", "labeler")
    make_solutions(make_batch(gold_rate=0), 2)
    labeling = next_labeling(lena)
    client.force_login(lena)
    sent = client.post(reverse("labeling:skip", args=[labeling.pk]), {"reason": NUL})
    return sent, Labeling.objects.filter(status=Labeling.Status.SKIPPED).exists


def written_step(client) -> Sent:
    mia = make_user("mia", "labeler")
    step_by_step_batch()
    labeling = next_labeling(mia)
    client.force_login(mia)
    url = reverse("labeling:write_step", args=[labeling.pk])
    sent = client.post(url, {"step_index": "0", "text": NUL}, HTTP_HX_REQUEST="true")
    return sent, StepLabel.objects.exists


def claimed_batch(client) -> Sent:
    lena = make_user("lena", "labeler")
    make_solutions(make_batch(gold_rate=0), 2)
    client.force_login(lena)
    return client.post(reverse("labeling:claim"), {"batch": NUL}), Labeling.objects.exists


def reply(client) -> Sent:
    lea = make_user("lea", "lead")
    solution = make_solution(make_batch(gold_rate=0))
    client.force_login(lea)
    url = reverse("labeling:item_reply", args=[solution.pk])
    return client.post(url, {"step": "", "text": NUL}), Note.objects.exists


def labeler_state_reason(client) -> Sent:
    lea, lena = make_user("lea", "lead"), make_user("lena", "labeler")
    client.force_login(lea)
    url = reverse("labeling:labeler_state", args=[lena.pk])
    sent = client.post(url, {"state": "paused", "reason": NUL})
    return sent, LabelerRecord.objects.filter(state=LabelerRecord.State.PAUSED).exists


def adjudication_note(client) -> Sent:
    lea = make_user("lea", "lead")
    solution = make_solution(make_batch(overlap=2, gold_rate=0))
    claim_and_label(make_user("lena", "labeler"), [1, 1, 1])
    claim_and_label(make_user("lars", "labeler"), [1, -1])
    client.force_login(lea)
    url = reverse("labeling:adjudicate", args=[solution.pk])
    sent = client.post(url, {"rating": ["1", "-1", ""], "note": NUL})
    return sent, Adjudication.objects.exists


def batch_name(client) -> Sent:
    lea = make_user("lea", "lead")
    client.force_login(lea)
    sent = client.post(reverse("labeling:batch_new"), {"name": NUL, "overlap": "1"})
    return sent, Batch.objects.exists


def guidelines(client) -> Sent:
    lea = make_user("lea", "lead")
    client.force_login(lea)
    sent = client.post(reverse("labeling:guidelines_edit"), {"text": NUL, "action": "publish"})
    return sent, Guidelines.objects.exists


def new_username(client) -> Sent:
    lea = make_user("lea", "lead")
    client.force_login(lea)
    sent = client.post(reverse("labeling:labeler_add"), {"username": NUL, "method": "link"})
    return sent, get_user_model().objects.exclude(pk=lea.pk).exists


def item_search(client) -> Sent:
    lea = make_user("lea", "lead")
    batch = make_batch()
    client.force_login(lea)
    return client.get(reverse("labeling:items", args=[batch.pk]), {"q": NUL}), lambda: None


def token_name(client) -> Sent:
    lena = make_user("lena", "labeler")
    client.force_login(lena)
    sent = client.post(reverse("tokens:list"), {"name": NUL, "expires": "7"})
    return sent, ApiToken.objects.exists


def token_in_the_address(client) -> Sent:
    lena = make_user("lena", "labeler")
    client.force_login(lena)
    return client.post(reverse("tokens:revoke", args=[NUL])), lambda: None


def sign_in_name(client) -> Sent:
    make_user("lena", "labeler")
    sent = client.post(reverse("login"), {"username": NUL, "password": "x"})
    return sent, lambda: client.session.get("_auth_user_id")


def training_run_name(client) -> Sent:
    rhea = make_user("rhea", "researcher")
    client.force_login(rhea)
    sent = client.post(reverse("modeling_runs:list"), {"name": NUL, "mode": "head"})
    return sent, TrainingRun.objects.exists


def api_query_parameter(client) -> Sent:
    lea = make_user("lea", "lead")
    return api_client_for(lea).get("/p/default/api/labelings/", {"labeler": NUL}), lambda: None


def api_upload_batch_name(client) -> Sent:
    lea = make_user("lea", "lead")
    upload = SimpleUploadedFile("s.jsonl", b"{}\n", content_type="application/jsonl")
    sent = api_client_for(lea).post(
        "/p/default/api/solutions/import-samples/",
        {"file": upload, "batch_name": NUL},
        format="multipart",
    )
    return sent, Batch.objects.exists


def api_json_run_name(client) -> Sent:
    rhea = make_user("rhea", "researcher")
    sent = api_client_for(rhea).post("/p/default/api/runs/", {"name": NUL}, format="json")
    return sent, TrainingRun.objects.exists


@pytest.mark.parametrize(
    "send",
    [
        note,
        skip_reason,
        written_step,
        claimed_batch,
        reply,
        labeler_state_reason,
        adjudication_note,
        batch_name,
        guidelines,
        new_username,
        item_search,
        token_name,
        token_in_the_address,
        sign_in_name,
        training_run_name,
        api_query_parameter,
        api_upload_batch_name,
        api_json_run_name,
    ],
)
def test_a_nul_character_in_any_text_is_a_400_and_nothing_is_written(client, send):
    client.raise_request_exception = False  # a 500 is an answer here, not a crash of the test
    response, written = send(client)
    assert response.status_code == 400, response.content[:300]
    assert "nul" in response.content.decode().lower()  # the answer says what was wrong
    assert not written()


def test_the_refusal_names_the_input_and_answers_each_kind_of_client(client):
    lena = make_user("lena", "labeler")
    make_solution(make_batch(gold_rate=0))
    labeling = claim_and_label(lena, [1, -1])
    client.force_login(lena)
    url = reverse("labeling:note", args=[labeling.pk])
    said = "The form field 'text' holds a NUL character (\\u0000), which no text here may hold."
    page = client.post(url, {"step": "2", "text": NUL})
    body = html.unescape(page.content.decode())
    assert page.status_code == 400 and "<title>Not sent" in body
    assert f"{said} Nothing was saved." in body
    card = html.unescape(
        client.post(url, {"step": "2", "text": NUL}, HTTP_HX_REQUEST="true").content.decode()
    )
    assert said in card and "<html" not in card and 'id="error-page"' in card
    named = client.post(url, {"step": "2", "text": "fine", "a\x00": "x"})
    assert "The form field 'a\\x00' holds a NUL" in html.unescape(named.content.decode())
    address = client.get(f"/p/default/label/{labeling.pk}/%00/")
    assert address.status_code == 400 and "The address holds a NUL" in address.content.decode()
    api = api_client_for(lena).get("/p/default/api/labelings/", {"status": NUL})
    assert api.status_code == 400 and api.json() == {
        "detail": "The query parameter 'status' holds a NUL character (\\u0000), which no text "
        "here may hold. Nothing was saved."
    }
    assert not Note.objects.exists()
