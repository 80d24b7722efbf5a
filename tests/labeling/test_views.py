import pytest
from django.urls import reverse

from labeling import selectors
from labeling.models import Labeling
from tests.factories import make_batch, make_solution, make_solutions
from tests.labeling.helpers import next_labeling, record_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def labeling(labeler) -> Labeling:
    make_solution(make_batch(), steps=["Let $x = 2$.", "Then $x^2 = 4$.", "# Answer\n\n4"])
    return next_labeling(labeler)


def htmx_post(client, url, data):
    return client.post(url, data, HTTP_HX_REQUEST="true")


def test_login_required(client):
    response = client.get(reverse("labeling:queue"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_queue_page_and_claim_redirect_to_the_labeling(client, labeler):
    make_solution(make_batch(name="Generation 7"))
    client.force_login(labeler)
    page = client.get(reverse("labeling:queue"))
    assert page.status_code == 200 and b"Generation 7" in page.content
    response = client.post(reverse("labeling:claim"))
    labeling = Labeling.objects.get(labeler=labeler)
    assert response["Location"] == reverse("labeling:labeling", args=[labeling.pk])


def test_claim_with_nothing_waiting_says_so(client, labeler):
    client.force_login(labeler)
    response = client.post(reverse("labeling:claim"), follow=True)
    assert b"Nothing is waiting for you" in response.content


def test_labeling_page_shows_problem_and_only_the_current_step(client, labeling):
    client.force_login(labeling.labeler)
    response = client.get(reverse("labeling:labeling", args=[labeling.pk]))
    body = response.content.decode()
    assert "Let $x = 2$." in body and "Then $x^2 = 4$." not in body
    assert (
        '<p class="muted hidden-steps" id="hidden-steps">2 more steps after this one.</p>' in body
    )
    assert 'data-key-action="rate-pos"' in body


def test_rating_through_htmx_answers_with_only_what_changed_and_saves(client, labeling):
    client.force_login(labeling.labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    response = htmx_post(client, url, {"step_index": 0, "rating": 1, "elapsed_ms": 1500})
    assert response.status_code == 200 and response["HX-Reswap"] == "none"
    body = response.content.decode()
    assert '<section id="labeling"' not in body and "<html" not in body
    # Out of band, by id: the rated step, the next one (appended), their map cells, progress.
    assert '<li class="step rated rating-1" data-step="0" id="step-0" hx-swap-oob="true"' in body
    assert 'hx-swap-oob="beforeend:#steps"' in body and "Then $x^2 = 4$." in body
    assert 'id="map-0" hx-swap-oob="true"' in body and 'id="map-1" hx-swap-oob="true"' in body
    assert "Step 2 of 3" in body and "1 / 3 steps rated" in body
    assert '"step_index": 1, "rating": 1' in body  # the rate buttons now rate step 2
    assert labeling.step_labels.get().time_ms == 1500
    # The same panel as a reload would show: the page is what the fragment left.
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert "Step 2 of 3" in page and "Then $x^2 = 4$." in page


def test_the_rating_that_ends_a_solution_answers_with_the_done_fragment(client, labeling):
    client.force_login(labeling.labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    response = htmx_post(client, url, {"step_index": 0, "rating": -1})
    assert response.status_code == 200 and response["HX-Reswap"] == "none"
    body = response.content.decode()
    assert '<section id="labeling"' not in body and "<html" not in body
    # Out of band, by id: the rated step in place of the current one, its map cell, the
    # progress line, and the "done" block in place of the rate buttons.
    assert '<li class="step rated rating--1" data-step="0" id="step-0" hx-swap-oob="true"' in body
    assert 'id="map-0" hx-swap-oob="true"' in body
    assert "Done at step 1 of 3" in body and "1 / 3 steps rated" in body
    assert 'hx-swap-oob="outerHTML:#actions"' in body and 'data-status="completed"' in body
    assert "Submitted: <strong>found an error</strong>" in body
    assert 'name="csrfmiddlewaretoken"' in body and reverse("labeling:claim") in body
    assert reverse("labeling:undo", args=[labeling.pk]) in body
    labeling.refresh_from_db()
    assert labeling.finish_reason == "found_error" and labeling.status == "completed"
    # The same panel as a reload would show.
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert "Done at step 1 of 3" in page and 'data-status="completed"' in page


def test_a_minus_one_where_the_batch_asks_for_alternatives_answers_with_the_whole_panel(
    client, labeler, monkeypatch
):
    from labeling.models import Batch

    make_solution(
        make_batch(alternatives_after_error=True, protocol=Batch.Protocol.STEPS),
        steps=["Let $x = 2$.", "Then $x^2 = 5$.", "# Answer\n\n5"],
    )
    labeling = next_labeling(labeler)
    client.force_login(labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    response = htmx_post(client, url, {"step_index": 0, "rating": -1})
    assert response.status_code == 200 and "HX-Reswap" not in response
    assert response.content.decode().lstrip().startswith('<section id="labeling"')


def _own_statements(captured) -> tuple[list[str], list[str]]:
    sql = [q["sql"] for q in captured.captured_queries]
    auth = [q for q in sql if '"django_session"' in q or '"auth_user"' in q]
    # The test's own transaction turns the request's transaction into a savepoint.
    own = [q for q in sql if q not in auth and not q.startswith(("SAVEPOINT", "RELEASE"))]
    return own, auth


def written_together(own: list[str]) -> list[str]:
    """The statements' first words, where PostgreSQL's one statement that writes the step, its
    completion (and the event) stands for the ORM's inserts of them on SQLite."""
    from django.db import connection

    words = [q.split()[0] for q in own]
    if connection.vendor != "postgresql":
        return words
    with_at = words.index("WITH")
    writes = own[with_at].count("INSERT INTO")
    assert own[with_at].startswith('WITH step AS (INSERT INTO "labeling_steplabel"')
    return [*words[:with_at], *["INSERT"] * writes, *words[with_at + 1 :]]


def test_the_rating_that_ends_a_solution_is_ten_statements(client, labeling):
    """Past authentication: the locked read, the step and its completion, one read of the
    ratings, the solution's lock, the labeling (its release line with it), the solution's
    counters, both audit events in one insert, one upsert per counter table. The answer (the
    "done" fragment) needs no query. On PostgreSQL the step and its completion are one
    statement: nine."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labeling.models import BatchHourStats, BatchLabelerStats
    from labeling.prm800k import render_record
    from labeling.selectors import release_record

    client.force_login(labeling.labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    for index in (0, 1):
        htmx_post(client, url, {"step_index": index, "rating": 1})
    with CaptureQueriesContext(connection) as captured:
        response = htmx_post(client, url, {"step_index": 2, "rating": 0, "flagged": "1"})
    assert response.status_code == 200 and response["HX-Reswap"] == "none"
    own, auth = _own_statements(captured)
    assert len(auth) == (1 if connection.vendor == "postgresql" else 2)
    assert len(own) == (9 if connection.vendor == "postgresql" else 10), "\n".join(own)
    assert written_together(own) == [
        "SELECT",  # the labeling, locked, with its solution, problem, batch, rated count
        "INSERT",  # the step
        "INSERT",  # its completion
        "SELECT",  # the steps and completions (times, ratings, the release line)
        "SELECT",  # the solution, locked
        "UPDATE",  # the labeling: completed, its release line
        "UPDATE",  # the solution's counters
        "INSERT",  # the 'rate' and 'finish' events
        "INSERT",  # BatchLabelerStats, upserted
        "INSERT",  # BatchHourStats, upserted
    ], "\n".join(own)
    labeling.refresh_from_db()
    assert labeling.status == "completed" and labeling.finish_reason == "solution"
    # The line rendered from what the request held is the release's line, byte for byte.
    assert labeling.release_line == render_record(release_record(labeling.pk))
    assert list(labeling.events.values_list("reason", flat=True).order_by("id"))[-2:] == [
        "rate",
        "finish",
    ]
    stats = BatchLabelerStats.objects.get(labeler=labeling.labeler)
    assert (stats.labelings, stats.steps, stats.pos, stats.neu, stats.flagged) == (1, 3, 2, 1, 1)
    assert BatchHourStats.objects.get().fin_solution == 1


def test_a_suggest_mode_page_and_its_ratings_cost_the_statements_of_plain_ones(
    client, labeler, django_assert_max_num_queries
):
    """Suggest mode (issue 46): the judge's labels come with the page's read and the rating's
    locked read (subqueries), and the provenance with the step's insert: the page's bound, the
    middle rating's four statements and the ending rating's ten are those of a plain batch."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labeling.models import Batch
    from tests.factories import make_prelabel

    batch = make_batch(prelabel_mode=Batch.PrelabelMode.SUGGEST, prelabel_judge="prm")
    solution = make_solution(batch, steps=["Let $x = 2$.", "Then $x^2 = 5$.", "# Answer\n\n5"])
    prelabel = make_prelabel(solution, labels=[1, -1, None], scores=[0.9, 0.7, None])
    labeling = next_labeling(labeler)
    client.force_login(labeler)
    with django_assert_max_num_queries(7):
        page = client.get(reverse("labeling:labeling", args=[labeling.pk]))
    assert f'data-suggestion="{prelabel.pk}"' in page.content.decode()
    url = reverse("labeling:rate", args=[labeling.pk])
    accept = {"step_index": 0, "rating": 1, "suggestion": prelabel.pk, "accepted": 1}
    with CaptureQueriesContext(connection) as captured:
        middle = htmx_post(client, url, accept)
    assert middle.status_code == 200 and 'data-suggestion-label="-1"' in middle.content.decode()
    own, _auth = _own_statements(captured)
    assert written_together(own) == ["SELECT", "INSERT", "INSERT", "INSERT"], "\n".join(own)
    override = {"step_index": 1, "rating": 0, "suggestion": prelabel.pk}
    with CaptureQueriesContext(connection) as captured:
        htmx_post(client, url, override)
    own, _auth = _own_statements(captured)
    assert written_together(own) == ["SELECT", "INSERT", "INSERT", "INSERT"], "\n".join(own)
    with CaptureQueriesContext(connection) as captured:
        last = htmx_post(client, url, {"step_index": 2, "rating": 1})
    assert last.status_code == 200
    own, _auth = _own_statements(captured)
    assert len(own) == (9 if connection.vendor == "postgresql" else 10), "\n".join(own)
    shown = list(
        labeling.step_labels.order_by("index").values_list(
            "suggestion_shown", "suggestion_label", "suggestion_score", "suggestion_accepted"
        )
    )
    assert shown == [(True, 1, 0.9, True), (True, -1, 0.7, False), (False, None, None, None)]


def test_agreement_is_computed_by_the_finish_that_brings_the_nth_labeling_only(
    client, labeler, labeler2
):
    """N = 2: the first finish of a solution is the same ten statements (no agreement table
    read); the second also computes the solution's agreement and folds it into the batch's and
    the pair's counters: seven more, once those rows exist (the batch's first solution creates
    them)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labeling.models import BatchAgreement, PairAgreement, SolutionAgreement

    batch = make_batch(overlap=2, gold_rate=0)
    make_solution(batch, steps=["One.", "Two."])
    make_solution(batch, steps=["Three.", "Four."])
    statements = []
    for user, rating in ((labeler, 1), (labeler2, 1), (labeler, 1), (labeler2, 0)):
        labeling = next_labeling(user)
        client.force_login(user)
        url = reverse("labeling:rate", args=[labeling.pk])
        htmx_post(client, url, {"step_index": 0, "rating": 1})
        with CaptureQueriesContext(connection) as captured:
            htmx_post(client, url, {"step_index": 1, "rating": rating})
        statements.append(_own_statements(captured)[0])
    first, _creates_the_rows, third, fourth = statements
    finish = 9 if connection.vendor == "postgresql" else 10  # step and completion in one
    for alone in (first, third):
        assert len(alone) == finish, "\n".join(alone)
        assert not any("agreement" in q for q in alone), "\n".join(alone)
    # The same ten, then seven: the labelings with their ratings, whether a lead decided and
    # what an earlier computation added, in one read; the batch's row locked and written; the
    # pair's locked and written; both labelers' counters in one statement; the solution's row.
    assert [q.split()[0] for q in fourth[finish:]] == [
        "SELECT",
        "SELECT",
        "UPDATE",
        "SELECT",
        "UPDATE",
        "UPDATE",
        "INSERT",
    ], "\n".join(fourth)
    read = fourth[finish]
    assert "labeling_solutionagreement" in read and "labeling_completion" in read
    assert "labeling_labelerrecord" in fourth[-2] and "labeling_solutionagreement" in fourth[-1]
    assert list(SolutionAgreement.objects.order_by("id").values_list("labelings", "raw")) == [
        (2, 1.0),
        (2, 0.5),
    ]
    totals = BatchAgreement.objects.get()
    assert (totals.solutions, totals.pairs, totals.pairs_same) == (2, 4, 3)
    pair = PairAgreement.objects.get()
    assert (pair.solutions, pair.steps_compared, pair.steps_same) == (2, 4, 3)
    for user in (labeler, labeler2):
        record = record_of(user)
        assert (record.agree_steps_compared, record.agree_steps_same) == (4, 3)


def test_double_submit_returns_the_same_state(client, labeling):
    client.force_login(labeling.labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    first = htmx_post(client, url, {"step_index": 0, "rating": 1})
    second = htmx_post(client, url, {"step_index": 0, "rating": 1})
    assert first.status_code == second.status_code == 200
    assert labeling.step_labels.count() == 1


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        ({"step_index": 0, "rating": 5}, 400, "A rating is -1, 0 or +1."),
        ({"step_index": "x", "rating": 1}, 400, "step_index must be an integer"),
        ({"step_index": 2, "rating": 1}, 409, "Rate step 1 first"),
        ({"step_index": 9, "rating": 1}, 400, "This solution has no step 10."),
    ],
)
def test_invalid_ratings_get_a_clear_error_and_change_nothing(
    client, labeling, data, status, message
):
    client.force_login(labeling.labeler)
    response = htmx_post(client, reverse("labeling:rate", args=[labeling.pk]), data)
    assert response.status_code == status
    assert message in response.content.decode()
    assert labeling.step_labels.count() == 0


def test_the_labelers_pages_and_fragments_are_never_kept_by_the_browser(client, labeling):
    """Back after a skip, a finish or a claim asks the server again (no stale live buttons)."""
    client.force_login(labeling.labeler)
    page = reverse("labeling:labeling", args=[labeling.pk])
    answers = {
        "home": client.get(reverse("home")),
        "queue": client.get(reverse("labeling:queue")),
        "labeling": client.get(page),
        "panel fragment": client.get(page, HTTP_HX_REQUEST="true"),
    }
    for name, response in answers.items():
        assert response.status_code == 200, name
        assert "no-store" in response.get("Cache-Control", ""), name


def test_a_labeler_sees_only_their_own_labelings(client, labeling, labeler2):
    client.force_login(labeler2)
    assert client.get(reverse("labeling:labeling", args=[labeling.pk])).status_code == 403
    response = htmx_post(
        client, reverse("labeling:rate", args=[labeling.pk]), {"step_index": 0, "rating": 1}
    )
    assert response.status_code == 403
    assert labeling.step_labels.count() == 0


def test_a_lead_can_read_any_labeling(client, labeling, lead):
    client.force_login(lead)
    response = client.get(reverse("labeling:labeling", args=[labeling.pk]))
    assert response.status_code == 200 and b"Read-only view" in response.content


def test_outsider_cannot_open_the_queue(client, outsider):
    """No role in the project: its pages do not exist for them (404, not 403)."""
    client.force_login(outsider)
    assert client.get(reverse("labeling:queue")).status_code == 404


def test_finish_and_undo_through_the_page(client, labeling):
    client.force_login(labeling.labeler)
    htmx_post(client, reverse("labeling:finish", args=[labeling.pk]), {"reason": "bad_problem"})
    labeling.refresh_from_db()
    assert labeling.finish_reason == "bad_problem"
    response = htmx_post(client, reverse("labeling:undo", args=[labeling.pk]), {})
    labeling.refresh_from_db()
    assert response.status_code == 200 and labeling.status == "in_progress"


def test_labeling_page_and_rating_use_a_bounded_number_of_queries(
    client, labeling, django_assert_max_num_queries
):
    client.force_login(labeling.labeler)
    # 7: the header's waiting count is one query, and one more while the solution counts it
    # reads are not cached yet (as here, the first view).
    with django_assert_max_num_queries(7):
        page = client.get(reverse("labeling:labeling", args=[labeling.pk]))
    with django_assert_max_num_queries(15):
        refused = htmx_post(
            client, reverse("labeling:rate", args=[labeling.pk]), {"step_index": 0, "rating": 2}
        )  # refused: the whole panel comes back, with the error
    # The page and the panel themselves: a redirect (to sign in) passes the counts too.
    assert page.status_code == 200 and "Let $x = 2$." in page.content.decode()
    assert 'id="notes-title"' in page.content.decode()  # the full page, not a fragment
    assert refused.status_code == 400 and "A rating is -1, 0 or +1." in refused.content.decode()
    assert "Let $x = 2$." in refused.content.decode() and "<html" not in refused.content.decode()
    assert labeling.step_labels.count() == 0


def test_the_labeling_header_counts_the_solutions_still_waiting_after_this_one(
    client, labeler, labeler2, lead
):
    batch = make_batch(overlap=2)
    for _ in range(3):
        make_solution(batch)
    make_solution(make_batch(gold_rate=0)).batch.labelers.add(labeler2)  # not this labeler's
    theirs = next_labeling(labeler2)
    labeling = next_labeling(labeler)
    assert labeling.solution.batch == batch and theirs.solution.batch == batch
    client.force_login(labeler)
    url = reverse("labeling:labeling", args=[labeling.pk])
    page = client.get(url).content.decode()
    # The three of the batch are this labeler's to take; this one is under way: two more.
    assert ">2 more waiting</span>" in page
    cockpit = selectors.labeler_cockpit(labeler, selectors.labeler_record(labeler))
    assert cockpit.waiting_total == 3  # the home page counts the claimed one too
    # htmx answers leave the header's figure as it is: none computes it.
    mid = htmx_post(
        client, reverse("labeling:rate", args=[labeling.pk]), {"step_index": 0, "rating": 1}
    )
    assert "waiting-after" not in mid.content.decode()
    panel = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert (
        '<span class="muted waiting-after" id="waiting-after" hx-preserve="true"></span>' in panel
    )
    htmx_post(client, reverse("labeling:finish", args=[labeling.pk]), {"reason": "give_up"})
    assert ">2 more waiting</span>" in client.get(url).content.decode()  # done: counted as such
    labeling.refresh_from_db()
    assert labeling.status == Labeling.Status.COMPLETED
    client.force_login(lead)  # reading it: the count is the labeler's, not shown
    assert "waiting-after" not in client.get(url).content.decode()
    assert Labeling.objects.filter(labeler=labeler).count() == 1


def test_a_rating_in_the_middle_of_a_solution_is_four_queries(client, labeling):
    """Past authentication (the session and the user): the locked read of the labeling and
    three inserts (the step, its completion, the audit event), one statement on PostgreSQL;
    the answer needs no query."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(labeling.labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    with CaptureQueriesContext(connection) as captured:
        response = htmx_post(client, url, {"step_index": 0, "rating": 1})
    assert response.status_code == 200 and response["HX-Reswap"] == "none"
    sql = [q["sql"] for q in captured.captured_queries]
    auth = [q for q in sql if '"django_session"' in q or '"auth_user"' in q]
    # The test's own transaction turns the rating's transaction into a savepoint.
    own = [q for q in sql if q not in auth and not q.startswith(("SAVEPOINT", "RELEASE"))]
    # The user, and the session but where it is read from the cache (Redis, beside PostgreSQL).
    assert len(auth) == (1 if connection.vendor == "postgresql" else 2)
    assert len(own) == (2 if connection.vendor == "postgresql" else 4), "\n".join(sql)
    assert written_together(own) == ["SELECT", "INSERT", "INSERT", "INSERT"], "\n".join(sql)
    step = labeling.step_labels.get()
    assert (step.index, step.chosen_completion, step.has_completions) == (0, 0, True)
    assert list(step.completions.values_list("index", "text", "rating", "flagged")) == [
        (0, "Let $x = 2$.", 1, False)
    ]
    event = labeling.events.get()
    assert (event.step_index, event.new_rating, event.reason, event.actor_id) == (
        0,
        1,
        "rate",
        labeling.labeler_id,
    )


def test_a_rating_posted_without_htmx_goes_back_to_the_page_after_its_own_statements(
    client, labeling
):
    """Without JavaScript the buttons post plainly: the rating's statements, then a redirect
    to the page, which reads the labeling afresh (no read for an answer not rendered). A
    refused one comes back as a message on the page, nothing saved."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(labeling.labeler)
    url = reverse("labeling:rate", args=[labeling.pk])
    page = reverse("labeling:labeling", args=[labeling.pk])
    with CaptureQueriesContext(connection) as captured:
        response = client.post(url, {"step_index": 0, "rating": 1})
    assert response.status_code == 302 and response["Location"] == page
    own, _auth = _own_statements(captured)
    assert written_together(own) == ["SELECT", "INSERT", "INSERT", "INSERT"], "\n".join(own)
    assert list(labeling.step_labels.values_list("index", flat=True)) == [0]
    refused = client.post(url, {"step_index": 2, "rating": 1}, follow=True)
    assert refused.redirect_chain == [(page, 302)] and refused.status_code == 200
    assert "Rate step 2 first" in refused.content.decode()
    assert labeling.step_labels.count() == 1


def test_the_demo_brings_reference_labels_to_train_on(db):
    from labeling.models import Labeling
    from labeling.services.demo import REFERENCE_BATCH, load_sample_data

    load_sample_data()
    labelings = Labeling.objects.filter(
        solution__batch__name=REFERENCE_BATCH, status=Labeling.Status.COMPLETED
    )
    assert labelings.count() == 63
    assert (
        labelings.filter(finish_reason="found_error").exists()
        and labelings.filter(finish_reason="solution").exists()
    )
    load_sample_data()  # running setup_demo again adds nothing
    assert labelings.count() == 63


def test_every_response_says_how_long_the_server_took(client):
    import re

    response = client.get(reverse("login"))
    assert re.fullmatch(r"app;dur=\d+\.\d", response["Server-Timing"])


def test_a_claim_is_four_statements(client, labeler):
    """Past authentication: the roles and the batches come from the cache, and one read locks
    the next solution and brings the labeler's state and gold count; then the solution's count,
    the labeler's, and the new labeling. The first claim filled the cache."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labeling.services import rating

    batch = make_batch(gold_rate=0.5)
    solutions = [make_solution(batch, steps=["One."]), make_solution(batch, steps=["Two."])]
    client.force_login(labeler)
    first = client.post(reverse("labeling:claim"))
    opened = Labeling.objects.get(labeler=labeler)
    assert first["Location"] == reverse("labeling:labeling", args=[opened.pk])
    rating.rate_step(labeling_id=opened.pk, user=labeler, step_index=0, rating=1)
    with CaptureQueriesContext(connection) as captured:
        response = client.post(reverse("labeling:claim"))
    own, auth = _own_statements(captured)
    assert len(auth) == (1 if connection.vendor == "postgresql" else 2)
    assert [q.split()[0] for q in own] == ["SELECT", "UPDATE", "UPDATE", "INSERT"], "\n".join(own)
    claimed = Labeling.objects.get(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
    assert response["Location"] == reverse("labeling:labeling", args=[claimed.pk])
    other = next(s for s in solutions if s.pk != opened.solution_id)
    other.refresh_from_db()
    assert claimed.solution == other and other.active_count == 1
    assert claimed.lease_expires_at > claimed.started_at
    # Gold was due (rate 0.5), but there is none: regular work, counted as before.
    assert record_of(labeler).claims_since_gold == 2


def test_a_claim_sees_batch_and_role_changes_made_after_its_cache_was_filled(client, labeler):
    from labeling.models import Membership
    from labeling.services import rating
    from tests.helpers.users import grant

    low = make_batch(name="low", priority=0, gold_rate=0)
    make_solutions(low, 3)
    client.force_login(labeler)
    client.post(reverse("labeling:claim"))
    opened = Labeling.objects.get(labeler=labeler)
    rating.finish_labeling(labeling_id=opened.pk, user=labeler, reason="give_up")
    # A new batch with a higher priority, assigned to this labeler: their next claim is there.
    high = make_batch(name="high", priority=5, gold_rate=0)
    high.labelers.add(labeler)
    make_solutions(high, 1)
    client.post(reverse("labeling:claim"))
    claimed = Labeling.objects.get(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
    assert claimed.solution.batch == high
    rating.finish_labeling(labeling_id=claimed.pk, user=labeler, reason="give_up")
    # Deactivated: back to the other batch.
    high.is_active = False
    high.save()
    make_solutions(high, 1)
    client.post(reverse("labeling:claim"))
    claimed = Labeling.objects.get(labeler=labeler, status=Labeling.Status.IN_PROGRESS)
    assert claimed.solution.batch == low
    rating.finish_labeling(labeling_id=claimed.pk, user=labeler, reason="give_up")
    # The labeler role taken away (a researcher of the project still): the claim is refused,
    # and nothing is claimed.
    grant(labeler, "researcher")
    Membership.objects.filter(user=labeler, role="labeler").delete()
    assert client.post(reverse("labeling:claim")).status_code == 403
    assert not Labeling.objects.filter(labeler=labeler, status="in_progress").exists()


def test_a_rating_answer_leaves_the_pages_skip_form_which_still_submits(labeling):
    """The rating's answer swaps in only the actions that change (flag box, rate buttons, Undo):
    it brings no form, so none comes without its CSRF token (one did once: the skip answered
    403 and the labeler's reason was lost). The page's own skip form submits after it."""
    import re

    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(labeling.labeler)
    page = browser.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    skip_form = re.search(r'<form method="post" action="([^"]+/skip/)".*?</form>', page, re.S)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', skip_form.group(0)).group(1)
    answer = browser.post(
        reverse("labeling:rate", args=[labeling.pk]),
        {"step_index": 0, "rating": 1},
        HTTP_HX_REQUEST="true",
        HTTP_X_CSRFTOKEN=token,
    ).content.decode()
    assert 'id="rate-buttons" hx-swap-oob="true"' in answer
    assert '"step_index": 1, "rating": 1' in answer  # the buttons now rate step 2
    assert "<form" not in answer and 'id="skip"' not in answer
    response = browser.post(
        skip_form.group(1), {"reason": "Too long for me right now", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    labeling.refresh_from_db()
    assert (labeling.status, labeling.skip_reason) == ("skipped", "Too long for me right now")
    assert labeling.step_labels.count() == 1  # the rating before it is kept in its history
