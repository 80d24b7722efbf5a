"""Notes: a labeler's note on one of their ratings, a lead's reply on the item; bounded,
escaped wherever shown, never another user's, exported in the stepwise formats and never in
the PRM800K line."""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections import Counter

import pytest
from django.db import connection, connections, transaction
from django.urls import reverse

from labeling import selectors
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


def test_one_author_writes_at_most_the_cap_of_notes_on_a_step(
    found_error, labeler, lead, client, settings
):
    settings.STEPWISE_NOTES_PER_STEP = 3
    ids = {"labeling_id": found_error.pk, "user": labeler}
    for n in range(3):
        notes.note_add(**ids, step_index=1, text=f"why {n}")
    with pytest.raises(LabelingError, match="You have 3 notes on step 2 already"):
        notes.note_add(**ids, step_index=1, text="one more")
    client.force_login(labeler)
    url = reverse("labeling:note", args=[found_error.pk])
    refused_in_the_error_line(
        client.post(url, {"step": 2, "text": "one more"}, HTTP_HX_REQUEST="true"),
        "You have 3 notes on step 2 already, the most one person may write there.",
    )
    notes.note_add(**ids, step_index=0, text="another step")  # each step has its own cap
    # A lead's replies count apart from the labeler's, the whole solution apart from each step.
    solution = found_error.solution
    for step_index in (1, 1, 1, None, None, None):
        notes.note_reply(solution=solution, lead=lead, text="reply", step_index=step_index)
    with pytest.raises(LabelingError, match="You have 3 notes on step 2 already"):
        notes.note_reply(solution=solution, lead=lead, text="reply", step_index=1)
    with pytest.raises(LabelingError, match="You have 3 notes on the whole solution already"):
        notes.note_reply(solution=solution, lead=lead, text="reply")
    assert Counter(Note.objects.values_list("author", "step_index")) == {
        (labeler.pk, 1): 3,
        (labeler.pk, 0): 1,
        (lead.pk, 1): 3,
        (lead.pk, None): 3,
    }


def sessions_waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_tabs_sending_the_last_note_a_step_takes_save_one(labeler, settings):
    """The second waits for the first to commit, counts its note and is refused: the cap holds
    under a double submit."""
    settings.STEPWISE_NOTES_PER_STEP = 2
    make_solution(make_batch(gold_rate=0))
    labeling = claim_and_label(labeler, [1, -1])
    ids = {"labeling_id": labeling.pk, "user": labeler, "step_index": 1}
    notes.note_add(**ids, text="first")
    first_saved, first_may_commit = threading.Event(), threading.Event()
    second: list[str] = []

    def first_tab() -> None:
        try:
            with transaction.atomic():
                notes.note_add(**ids, text="second")
                first_saved.set()
                first_may_commit.wait(timeout=60)
        finally:
            connections.close_all()

    def second_tab() -> None:
        first_saved.wait(timeout=60)
        try:
            notes.note_add(**ids, text="third")
            second.append("saved")
        except LabelingError as refused:
            second.append(str(refused))
        finally:
            connections.close_all()

    tabs = [threading.Thread(target=first_tab), threading.Thread(target=second_tab)]
    for tab in tabs:
        tab.start()
    deadline = time.monotonic() + 60
    while sessions_waiting_on_a_lock() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sessions_waiting_on_a_lock() == 1  # the second tab waits on the first one's lock
    first_may_commit.set()
    for tab in tabs:
        tab.join(timeout=60)
    assert second == [
        "You have 2 notes on step 2 already, the most one person may write there. "
        "Nothing was saved."
    ]
    assert list(Note.objects.order_by("pk").values_list("text", flat=True)) == ["first", "second"]


def test_another_users_labeling_is_not_found(found_error, labeler2, client):
    with pytest.raises(NotFound):
        notes.note_add(labeling_id=found_error.pk, user=labeler2, step_index=0, text="mine?")
    client.force_login(labeler2)
    url = reverse("labeling:note", args=[found_error.pk])
    assert client.post(url, {"step": 1, "text": "mine?"}).status_code == 404
    assert client.post(url, {"step": 1, "text": "x"}, HTTP_HX_REQUEST="true").status_code == 404
    assert not Note.objects.exists()


def refused_in_the_error_line(response, message: str) -> None:
    """A refused note's htmx answer: the reason, swapped into the card's error line (the form,
    and the draft in it, stay as they are in the page), nothing else."""
    body = response.content.decode()
    assert response.status_code == 400 and message in body
    assert (response["HX-Retarget"], response["HX-Reswap"]) == ("#note-error", "outerHTML")
    assert body.strip().startswith('<p class="banner warn" id="note-error"')
    assert 'id="notes"' not in body and "<textarea" not in body and "<li" not in body


def test_the_note_request_answers_htmx_with_the_new_note_alone(found_error, labeler, client):
    client.force_login(labeler)
    url = reverse("labeling:note", args=[found_error.pk])
    response = client.post(url, {"step": 2, "text": "wrong product"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    note = Note.objects.get()
    assert response.status_code == 200 and "<html" not in body and 'id="labeling"' not in body
    # The note, added to the card's list, and the card's error line emptied: not the card.
    assert body.count("<li") == 1 and f'id="note-{note.pk}"' in body
    assert "wrong product" in body and "step 2" in body
    assert 'id="notes"' not in body and "<form" not in body and "<textarea" not in body
    assert 'id="note-error"' in body and 'hx-swap-oob="true"' in body
    refused_in_the_error_line(
        client.post(url, {"step": 3, "text": "kept draft"}, HTTP_HX_REQUEST="true"),
        "Step 3 has no rating of yours",
    )
    refused_in_the_error_line(
        client.post(url, {"step": "two", "text": "x"}, HTTP_HX_REQUEST="true"),
        "step must be an integer",
    )
    assert list(Note.objects.values_list("text", flat=True)) == ["wrong product"]


def test_the_answer_to_a_note_does_not_grow_with_the_notes_before_it(found_error, labeler, client):
    """The answer was the whole card, every note on the solution in it: the tenth note sent the
    nine before it back. Now each answer is its own note, the same size whatever came before."""
    client.force_login(labeler)
    url = reverse("labeling:note", args=[found_error.pk])
    sizes = []
    for n in range(10):
        response = client.post(url, {"step": 2, "text": f"note {n}"}, HTTP_HX_REQUEST="true")
        body = response.content.decode()
        assert response.status_code == 200 and f"note {n}" in body
        assert not any(f"note {earlier}<" in body for earlier in range(n))
        sizes.append(len(re.sub(r"\d", "", body)))  # its id and time aside
    # The same answer each time (a time's microseconds, when 0, drop a ".").
    assert max(sizes) - min(sizes) <= 1
    assert Note.objects.count() == 10


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


# --- replies the labeler has not read --------------------------------------------------------


def home_text(client, user) -> str:
    client.force_login(user)
    response = client.get(reverse("home"))
    assert response.status_code == 200
    return response.content.decode()


def reply_links(page: str) -> list[str]:
    return re.findall(r'<a href="([^"]+)" data-reply="\d+">', page)


def test_a_reply_to_a_note_is_on_the_labelers_home_until_they_open_it(
    found_error, labeler, lead, client
):
    notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=1, text="2 × 21 is 42")
    reply = notes.note_reply(
        solution=found_error.solution, lead=lead, text="Agreed: −1 <b>here</b>.", step_index=1
    )
    page = home_text(client, labeler)
    assert "1 unread reply</strong> from a lead to your notes" in page
    link = reverse("labeling:labeling", args=[found_error.pk]) + f"#note-{reply.pk}"
    assert reply_links(page) == [link]
    assert "lea on step 2 of" in page and "Agreed: −1 &lt;b&gt;here&lt;/b&gt;." in page
    opened = client.get(link.split("#")[0]).content.decode()
    assert f'id="note-{reply.pk}"' in opened and "Agreed: −1 &lt;b&gt;here&lt;/b&gt;." in opened
    found_error.refresh_from_db()
    assert found_error.replies_seen_at == reply.created_at
    assert 'id="unread-replies"' not in home_text(client, labeler)  # read
    later = notes.note_reply(solution=found_error.solution, lead=lead, text="Also step 1.")
    page = home_text(client, labeler)
    assert "1 unread reply</strong>" in page and reply_links(page) == [
        reverse("labeling:labeling", args=[found_error.pk]) + f"#note-{later.pk}"
    ]


def test_the_home_counts_every_unread_reply_and_links_the_newest(
    found_error, labeler, lead, client
):
    notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=1, text="why")
    replies = [
        notes.note_reply(solution=found_error.solution, lead=lead, text=f"reply {n}")
        for n in range(7)
    ]
    page = home_text(client, labeler)
    assert "7 unread replies</strong> from a lead to your notes, the newest 5 here" in page
    opens = reverse("labeling:labeling", args=[found_error.pk])
    assert reply_links(page) == [f"{opens}#note-{r.pk}" for r in reversed(replies[2:])]
    client.get(opens)  # the page shows all seven: all read
    assert 'id="unread-replies"' not in home_text(client, labeler)


def test_a_labeler_is_told_only_of_replies_to_their_own_notes(lead, labeler, labeler2, client):
    solution = make_solution(make_batch(overlap=2, gold_rate=0))
    early = notes.note_reply(solution=solution, lead=lead, text="Before any note: not a reply.")
    mine = claim_and_label(labeler, [1, -1])
    theirs = claim_and_label(labeler2, [1, 1, 1])  # the same solution, and no note on it
    notes.note_add(labeling_id=mine.pk, user=labeler, step_index=1, text="why −1")
    reply = notes.note_reply(solution=solution, lead=lead, text="Looked at it.")
    other = make_solution(make_batch(gold_rate=0))
    noted = claim_and_label(labeler2, [1, -1])
    assert noted.solution_id == other.pk
    notes.note_add(labeling_id=noted.pk, user=labeler2, step_index=1, text="theirs")
    assert 'id="unread-replies"' not in home_text(client, labeler2)
    assert reply_links(home_text(client, labeler)) == [
        reverse("labeling:labeling", args=[mine.pk]) + f"#note-{reply.pk}"
    ]
    assert early.pk not in [n.pk for n in selectors.unread_replies(labeler, limit=5).newest]
    # Opening another labeler's labeling, or a lead's read-only view of theirs, reads nothing.
    client.force_login(labeler2)
    assert client.get(reverse("labeling:labeling", args=[mine.pk])).status_code == 403
    assert client.get(reverse("labeling:labeling", args=[theirs.pk])).status_code == 200
    client.force_login(lead)
    assert client.get(reverse("labeling:labeling", args=[mine.pk])).status_code == 200
    assert selectors.unread_replies(labeler, limit=5).total == 1
    assert Labeling.objects.get(pk=mine.pk).replies_seen_at is None


def test_the_unread_replies_are_one_query(found_error, labeler, lead, django_assert_num_queries):
    notes.note_add(labeling_id=found_error.pk, user=labeler, step_index=1, text="why")
    for n in range(3):
        notes.note_reply(solution=found_error.solution, lead=lead, text=f"reply {n}")
    with django_assert_num_queries(1):
        unread = selectors.unread_replies(labeler, limit=2)
        shown = [
            (n.author.username, bool(n.solution.problem.text), n.open_on) for n in unread.newest
        ]
    assert unread.total == 3 and shown == [("lea", True, found_error.pk)] * 2


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
    ("step", "text", "message"),
    [
        ("1", "   ", "A note needs some text."),
        ("1", "x" * 21, "at most 20 characters; this one has 21"),
        ("2", "kept draft", "Step 2 has no rating of yours yet"),
        ("32767", "kept draft", "Step 32767 has no rating of yours yet"),
        ("2147483647", "kept draft", "Step 2147483647 has no rating of yours yet"),
        ("99999999999", "kept draft", "step: Out of range: a number runs from"),
        ("two", "kept draft", "step must be an integer"),
    ],
)
def test_a_refused_note_step_by_step_stores_nothing_and_keeps_the_draft(
    rated_step_one, labeler, client, settings, step, text, message
):
    settings.STEPWISE_NOTE_MAX_CHARS = 20
    client.force_login(labeler)
    url = reverse("labeling:note", args=[rated_step_one.pk])
    # Only the reason comes back: the box, with the labeler's text in it, is not swapped.
    refused_in_the_error_line(
        client.post(url, {"step": step, "text": text}, HTTP_HX_REQUEST="true"), message
    )
    plain = client.post(url, {"step": step, "text": text})  # no htmx: back to the page
    assert plain.status_code == 302
    assert plain["Location"] == reverse("labeling:labeling", args=[rated_step_one.pk])
    page = client.get(plain["Location"]).content.decode()
    assert message in page and 'id="note-form"' in page and "alternatives" in page
    assert not Note.objects.exists()


def test_the_note_request_answers_step_by_step_with_the_new_note(rated_step_one, labeler, client):
    client.force_login(labeler)
    url = reverse("labeling:note", args=[rated_step_one.pk])
    saved = client.post(url, {"step": "1", "text": "−1: 6 is a product"}, HTTP_HX_REQUEST="true")
    body = saved.content.decode()
    assert saved.status_code == 200 and "<html" not in body and 'id="labeling"' not in body
    assert "−1: 6 is a product" in body and "step 1" in body
    assert body.count("<li") == 1 and "<form" not in body  # the note alone, for the list
    plain = client.post(url, {"step": "1", "text": "plain post"})
    assert plain["Location"] == reverse("labeling:labeling", args=[rated_step_one.pk])
    page = client.get(plain["Location"]).content.decode()
    # The alternatives page: its panel, the notes card with both notes, and N among its keys.
    assert 'class="card panel alternatives"' in page and 'id="note-form"' in page
    assert "the step whose candidates you are rating" in page  # the key's help, this page's
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
