"""Notes: a labeler's note on one of their ratings, a lead's reply on the item; bounded,
escaped wherever shown, never another user's, exported in the stepwise formats and never in
the PRM800K line."""

from __future__ import annotations

import io
import json

import pytest
from django.urls import reverse

from labeling.models import Labeling, Note
from labeling.services import notes, queue
from labeling.services.errors import LabelingError, NotFound
from labeling.services.exporting import (
    ExportFilters,
    StepwiseOptions,
    select_labelings,
    write_export,
)
from tests.factories import make_batch, make_solution
from tests.labeling.helpers import claim_and_label, label

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def found_error(labeler) -> Labeling:
    """Lena's labeling that ended at a −1 on step 2."""
    make_solution(make_batch(gold_rate=0))
    return claim_and_label(labeler, [1, -1])


def test_a_labeler_notes_why_a_step_is_wrong(found_error, labeler):
    note = notes.note_add(
        labeling_id=found_error.pk, user=labeler, step_index=1, text="  2 × 21 is 42, not 44 \n"
    )
    stored = Note.objects.get()
    assert stored == note and stored.text == "2 × 21 is 42, not 44"
    assert (stored.solution_id, stored.labeling_id, stored.step_index, stored.author) == (
        found_error.solution_id,
        found_error.pk,
        1,
        labeler,
    )


def test_a_note_needs_a_rated_step_and_some_text(found_error, labeler):
    with pytest.raises(LabelingError, match="Step 3 has no rating of yours"):
        notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=2, text="why")
    with pytest.raises(LabelingError, match="needs some text"):
        notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=1, text="   ")
    assert not Note.objects.exists()


def test_a_note_past_the_limit_is_refused_whole(found_error, labeler, settings):
    settings.STEPWISE_NOTE_MAX_CHARS = 20
    with pytest.raises(LabelingError, match="at most 20 characters; this one has 21"):
        notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=1, text="x" * 21)
    notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=1, text="x" * 20)
    assert Note.objects.get().text == "x" * 20


def test_another_users_labeling_is_not_found(found_error, labeler2, client):
    with pytest.raises(NotFound):
        notes.note_add(labeling_id=found_error.pk, user=labeler2, step_index=0, text="mine?")
    client.force_login(labeler2)
    url = reverse("labeling:note", args=[found_error.pk])
    assert client.post(url, {"step": 1, "text": "mine?"}).status_code == 404
    assert client.post(url, {"step": 1, "text": "x"}, HTTP_HX_REQUEST="true").status_code == 404
    assert not Note.objects.exists()


def test_the_note_request_answers_htmx_with_the_notes_card(found_error, labeler, client):
    client.force_login(labeler)
    url = reverse("labeling:note", args=[found_error.pk])
    response = client.post(url, {"step": 2, "text": "wrong product"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body and 'id="labeling"' not in body
    assert 'id="notes"' in body and "wrong product" in body and "step 2" in body
    refused = client.post(url, {"step": 3, "text": "kept draft"}, HTTP_HX_REQUEST="true")
    text = refused.content.decode()
    assert refused.status_code == 400 and "Step 3 has no rating of yours" in text
    assert "kept draft</textarea>" in text  # the labeler's text is not lost
    bad_step = client.post(url, {"step": "two", "text": "x"}, HTTP_HX_REQUEST="true")
    assert bad_step.status_code == 400 and "step must be an integer" in bad_step.content.decode()
    assert list(Note.objects.values_list("text", flat=True)) == ["wrong product"]


def test_a_lead_replies_on_the_item_about_a_step_or_the_whole(found_error, lead, client):
    solution = found_error.solution
    client.force_login(lead)
    url = reverse("labeling:item_reply", args=[solution.pk])
    response = client.post(url, {"step": "2", "text": "Agreed: −1."})
    assert response.status_code == 302
    client.post(url, {"step": "", "text": "Whole solution: fine otherwise."})
    assert list(Note.objects.values_list("step_index", "labeling_id", "author", "text")) == [
        (1, None, lead.pk, "Agreed: −1."),
        (None, None, lead.pk, "Whole solution: fine otherwise."),
    ]
    refused = client.post(url, {"step": "9", "text": "where?"})
    assert refused.status_code == 400 and "Step 9 is not a step" in refused.content.decode()
    assert Note.objects.count() == 2


def test_notes_are_escaped_on_every_page_that_shows_them(found_error, labeler, lead, client):
    notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=1, text=XSS)
    notes.note_reply(solution=found_error.solution, lead=lead, text=XSS)
    client.force_login(lead)
    pages = [
        reverse("labeling:item_detail", args=[found_error.solution_id]),
        reverse("labeling:labeling", args=[found_error.pk]),  # the lead's read-only view
    ]
    client.force_login(labeler)
    own = client.get(reverse("labeling:labeling", args=[found_error.pk])).content.decode()
    client.force_login(lead)
    for body in [own, *(client.get(url).content.decode() for url in pages)]:
        assert '<script>alert("x")' not in body and "<img src=x" not in body
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x" in body


def test_notes_show_in_adjudication_under_their_step(lead, labeler, labeler2, client):
    solution = make_solution(make_batch(overlap=2, gold_rate=0))
    claim_and_label(labeler, [1, 1, 1])
    found = claim_and_label(labeler2, [1, -1])
    notes.note_add(labeling_id=found.pk, user=labeler2, step_index=1, text="21 × 2 ≠ 44")
    notes.note_reply(solution=solution, lead=lead, text="Looking at it.")
    client.force_login(lead)
    body = client.get(reverse("labeling:adjudicate", args=[solution.pk])).content.decode()
    step_two = body[body.index('data-step="1"') : body.index('data-step="2"')]
    assert "21 × 2 ≠ 44" in step_two and "lars" in step_two
    assert "Looking at it." in body


# --- exports ---------------------------------------------------------------------------------


def _export(fmt: str, **options) -> bytes:
    out = io.BytesIO()
    write_export(out, fmt, select_labelings(ExportFilters()), options=StepwiseOptions(**options))
    return out.getvalue()


def test_prm800k_export_is_byte_exact_with_notes_and_stepwise_rows_carry_them(samples, lead):
    before = _export("prm800k")
    assert before == samples.read_bytes()
    labeling = Labeling.objects.order_by("pk").first()
    note = notes.note_add(
        labeling_id=labeling.pk, user=labeling.labeler, step_index=0, text="unsure of the sign"
    )
    reply = notes.note_reply(solution=labeling.solution, lead=lead, text="Checked.", step_index=0)
    assert _export("prm800k") == before  # the release line has no place for notes
    rows = [json.loads(line) for line in _export("stepwise_jsonl").splitlines()]
    carried = [row for row in rows if row["notes"]]
    assert carried and {row["labeling_id"] for row in carried} == {labeling.pk}
    public_id = str(labeling.labeler.labeler.public_id)
    assert carried[0]["notes"] == [
        {
            "step": 0,
            "text": "unsure of the sign",
            "role": "labeler",
            "author": public_id,
            "created_at": note.created_at.isoformat(),
        },
        {
            "step": 0,
            "text": "Checked.",
            "role": "lead",
            "author": None,  # the lead never labeled: no public id, and never a username
            "created_at": reply.created_at.isoformat(),
        },
    ]
    assert all(row["notes"] == [] for row in rows if row["labeling_id"] != labeling.pk)


def test_the_final_row_of_a_solution_carries_every_note_on_it(lead, labeler, labeler2):
    import pyarrow.parquet as pq

    solution = make_solution(make_batch(overlap=2, gold_rate=0))
    mine = label(queue.claim_next(labeler), [1, 0, 1])
    theirs = claim_and_label(labeler2, [1, 1, 1])
    notes.note_add(labeling_id=mine.pk, user=labeler, step_index=1, text="unhelpful")
    notes.note_add(labeling_id=theirs.pk, user=labeler2, step_index=1, text="fine")
    notes.note_reply(solution=solution, lead=lead, text="0 is right")
    rows = [json.loads(line) for line in _export("stepwise_jsonl").splitlines()]
    assert len(rows) == 1  # one final row for the solution
    assert [n["text"] for n in rows[0]["notes"]] == ["unhelpful", "fine", "0 is right"]
    every = [json.loads(line) for line in _export("stepwise_jsonl", labels="every").splitlines()]
    assert {row["labeling_id"]: [n["text"] for n in row["notes"]] for row in every} == {
        mine.pk: ["unhelpful", "0 is right"],
        theirs.pk: ["fine", "0 is right"],
    }
    table = pq.read_table(io.BytesIO(_export("stepwise_parquet")))
    assert [n["text"] for n in table.column("notes").to_pylist()[0]] == [
        "unhelpful",
        "fine",
        "0 is right",
    ]
