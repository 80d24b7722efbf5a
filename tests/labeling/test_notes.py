"""Notes: a labeler's note on one of their ratings, a lead's reply on the item; bounded,
escaped wherever shown, never another user's, exported in the stepwise formats and never in
the PRM800K line."""

from __future__ import annotations

import io
import json

import pytest
from django.urls import reverse

from labeling.models import Batch, Labeling, Note, ProposedSteps, Solution
from labeling.services import alternatives, notes
from labeling.services.errors import LabelingError, NotFound
from labeling.services.exporting import (
    ExportFilters,
    StepwiseOptions,
    select_labelings,
    write_export,
)
from tests.factories import make_batch, make_problem, make_solution
from tests.labeling.helpers import claim_and_label, label, next_labeling

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
    mine = label(next_labeling(labeler), [1, 0, 1])
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


# --- step by step (the alternatives protocol) ------------------------------------------------

CANDIDATES = ["I add: $2 + 3 = 5$.", "I multiply: $2 \\cdot 3 = 6$."]


def ready_candidates(problem, prefix: list[str], steps: list[str]) -> None:
    """The model's candidates for a prefix, as the generate task leaves them: the pages and
    services find them, and nothing is sent to the generator."""
    ProposedSteps.objects.create(
        problem=problem,
        prefix=prefix,
        prefix_sha256=alternatives.prefix_hash(prefix),
        k=len(steps),
        status=ProposedSteps.Status.READY,
        steps=steps,
        generator="test",
    )


def step_by_step_batch(overlap: int = 1) -> Batch:
    batch = make_batch(
        protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2, overlap=overlap, generation=None
    )
    problem = make_problem("What is $2 + 3$?", answer="5")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])
    ready_candidates(problem, [], CANDIDATES)
    ready_candidates(problem, [CANDIDATES[0]], ["# Answer\n\n5", "# Answer\n\n6"])
    return batch


@pytest.fixture
def rated_step_one(labeler) -> Labeling:
    """Lena's labeling step by step: step 1's candidates rated +1 and −1, none chosen yet."""
    step_by_step_batch()
    labeling = next_labeling(labeler)
    assert labeling is not None and labeling.solution.format == Solution.Format.PHASE1
    ids = {"labeling_id": labeling.pk, "user": labeler, "step_index": 0}
    alternatives.rate_candidate(**ids, candidate_index=0, rating_value=1)
    alternatives.rate_candidate(**ids, candidate_index=1, rating_value=-1)
    return labeling


def test_a_note_step_by_step_needs_candidates_rated_at_that_step(rated_step_one, labeler):
    ids = {"labeling_id": rated_step_one.pk, "user": labeler}
    # On the step being rated, before a candidate is chosen.
    note = notes.note_add(**ids, step_index=0, text="the product is a trap")
    with pytest.raises(LabelingError, match="Step 2 has no rating of yours"):
        notes.note_add(**ids, step_index=1, text="too early")
    alternatives.choose_candidate(**ids, step_index=0, candidate_index=0)
    # Step 2 the labeler's own, with no candidate rated: nothing to explain.
    alternatives.write_step(**ids, step_index=1, text="# Answer\n\n5")
    with pytest.raises(LabelingError, match="Step 2 has no rating of yours"):
        notes.note_add(**ids, step_index=1, text="mine")
    rated_step_one.refresh_from_db()
    assert rated_step_one.status == Labeling.Status.COMPLETED
    later = notes.note_add(**ids, step_index=0, text="chose the sum")  # after the submit too
    assert list(
        Note.objects.values_list("labeling_id", "solution_id", "step_index", "author", "text")
    ) == [
        (rated_step_one.pk, rated_step_one.solution_id, 0, labeler.pk, "the product is a trap"),
        (rated_step_one.pk, rated_step_one.solution_id, 0, labeler.pk, "chose the sum"),
    ]
    assert [note.pk, later.pk] == list(Note.objects.values_list("pk", flat=True))


@pytest.mark.parametrize(
    ("step", "text", "status", "message"),
    [
        ("1", "   ", 400, "A note needs some text."),
        ("1", "x" * 21, 400, "at most 20 characters; this one has 21"),
        ("2", "kept draft", 400, "Step 2 has no rating of yours yet"),
        ("32767", "kept draft", 400, "Step 32767 has no rating of yours yet"),
        ("2147483647", "kept draft", 400, "Step 2147483647 has no rating of yours yet"),
        ("99999999999", "kept draft", 400, "step: Out of range: a number runs from"),
        ("two", "kept draft", 400, "step must be an integer"),
    ],
)
def test_a_refused_note_step_by_step_stores_nothing_and_keeps_the_draft(
    rated_step_one, labeler, client, settings, step, text, status, message
):
    settings.STEPWISE_NOTE_MAX_CHARS = 20
    client.force_login(labeler)
    url = reverse("labeling:note", args=[rated_step_one.pk])
    refused = client.post(url, {"step": step, "text": text}, HTTP_HX_REQUEST="true")
    body = refused.content.decode()
    assert refused.status_code == status and message in body
    assert 'id="notes"' in body and 'id="labeling"' not in body  # only the card
    assert f"{text.strip() and text}</textarea>" in body  # the labeler's text is not lost
    plain = client.post(url, {"step": step, "text": text})  # no htmx: back to the page
    assert plain.status_code == 302
    assert plain["Location"] == reverse("labeling:labeling", args=[rated_step_one.pk])
    page = client.get(plain["Location"]).content.decode()
    assert message in page and 'id="note-form"' in page and "alternatives" in page
    assert not Note.objects.exists()


def test_the_note_request_answers_step_by_step_with_its_card(rated_step_one, labeler, client):
    client.force_login(labeler)
    url = reverse("labeling:note", args=[rated_step_one.pk])
    saved = client.post(url, {"step": "1", "text": "−1: 6 is a product"}, HTTP_HX_REQUEST="true")
    body = saved.content.decode()
    assert saved.status_code == 200 and "<html" not in body and 'id="labeling"' not in body
    assert "−1: 6 is a product" in body and "step 1" in body
    assert "the step whose candidates you are rating" in body  # the key's help, this page's
    assert "></textarea>" in body  # saved: the box is empty again
    plain = client.post(url, {"step": "1", "text": "plain post"})
    assert plain["Location"] == reverse("labeling:labeling", args=[rated_step_one.pk])
    page = client.get(plain["Location"]).content.decode()
    # The alternatives page: its panel, the notes card with both notes, and N among its keys.
    assert 'class="card panel alternatives"' in page and 'id="note-form"' in page
    assert page.index("−1: 6 is a product") < page.index("plain post")
    assert '"n": "note"' in page.replace("&quot;", '"')
    assert list(Note.objects.values_list("step_index", "text")) == [
        (0, "−1: 6 is a product"),
        (0, "plain post"),
    ]


def test_another_users_labeling_step_by_step_is_not_found(rated_step_one, labeler2, lead, client):
    with pytest.raises(NotFound):
        notes.note_add(labeling_id=rated_step_one.pk, user=labeler2, step_index=0, text="mine?")
    url = reverse("labeling:note", args=[rated_step_one.pk])
    for user in (labeler2, lead):  # a lead reads it, but writes no labeler's note
        client.force_login(user)
        assert client.post(url, {"step": 1, "text": "mine?"}).status_code == 404
        htmx = client.post(url, {"step": 1, "text": "mine?"}, HTTP_HX_REQUEST="true")
        assert htmx.status_code == 404
    assert not Note.objects.exists()
    notes.note_add(
        labeling_id=rated_step_one.pk, user=rated_step_one.labeler, step_index=0, text=XSS
    )
    page = client.get(reverse("labeling:labeling", args=[rated_step_one.pk])).content.decode()
    assert 'id="notes"' in page and 'id="note-form"' not in page  # the lead's read-only view
    assert "&lt;script&gt;alert(&quot;x&quot;)" in page and '<script>alert("x")' not in page


def test_notes_step_by_step_show_to_the_lead_under_their_path_step_and_are_exported(
    lead, labeler, labeler2, client
):
    batch = step_by_step_batch(overlap=2)
    texts = {}
    for user, rating, text in ((labeler, 1, "the sum"), (labeler2, -1, "not a product")):
        labeling = next_labeling(user)
        ids = {"labeling_id": labeling.pk, "user": user, "step_index": 0}
        alternatives.rate_candidate(**ids, candidate_index=0, rating_value=rating)
        alternatives.rate_candidate(**ids, candidate_index=1, rating_value=-1)
        notes.note_add(labeling_id=labeling.pk, user=user, step_index=0, text=text)
        if rating == 1:
            alternatives.choose_candidate(**ids, candidate_index=0)
        alternatives.write_step(
            labeling_id=labeling.pk, user=user, step_index=int(rating == 1), text="# Answer\n\n5"
        )
        texts[labeling.pk] = text
    notes.note_reply(solution=Solution.objects.get(batch=batch), lead=lead, text=XSS)
    solution = Solution.objects.get(batch=batch)
    assert solution.completed_count == 2

    client.force_login(lead)
    for url in (
        reverse("labeling:item_detail", args=[solution.pk]),
        reverse("labeling:adjudicate", args=[solution.pk]),
    ):
        body = client.get(url).content.decode()
        for labeling_id, text in texts.items():
            table = body[body.index(f'data-labeling="{labeling_id}"') :]
            start = table.index('data-step="0"')
            step_one = table[start : table.index("</tr>", start)]
            assert text in step_one  # under the step of that labeler's path
        assert "&lt;script&gt;alert(&quot;x&quot;)" in body and '<script>alert("x")' not in body

    for labels in ("final", "every"):
        rows = [json.loads(line) for line in _export("stepwise_jsonl", labels=labels).splitlines()]
        carried = {
            row["labeling_id"]: [n["text"] for n in row["notes"] if n["role"] == "labeler"]
            for row in rows
        }
        assert carried == {pk: [text] for pk, text in texts.items()}, labels
