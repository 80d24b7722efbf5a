"""The lead's item browser: every filter returns exactly the right solutions (on PostgreSQL and
SQLite alike), the page is the lead's, its fragment answers htmx, and its queries do not grow
with the rows shown."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from labeling import selectors
from labeling.models import Labeling, Solution
from labeling.selectors import ItemFilters
from labeling.services import adjudication, notes, queue
from labeling.services.rating import rate_step
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.users import grant, make_user

pytestmark = pytest.mark.django_db


def labeled(solution: Solution, user, ratings: list[int], *, flagged_at: int | None = None):
    """A labeling of this solution by this user with these ratings (open while unfinished),
    made a labeler of its project if they were not (only a project's labelers rate there)."""
    grant(user, "labeler", project=solution.project_id)
    queue.ensure_labeler(user)
    Solution.objects.filter(pk=solution.pk).update(active_count=F("active_count") + 1)
    labeling = Labeling.objects.create(
        solution=solution, labeler=user, lease_expires_at=timezone.now()
    )
    for step, rating in enumerate(ratings):
        rate_step(
            labeling_id=labeling.pk,
            user=user,
            step_index=step,
            rating=rating,
            flagged=step == flagged_at,
            elapsed_ms=1000,
        )
    labeling.refresh_from_db()
    return labeling


@dataclass
class Items:
    batch: object
    lena: object
    lars: object
    luca: object
    waiting: Solution
    gold: Solution
    in_progress: Solution
    partial: Solution
    agree: Solution
    disagree: Solution
    adjudicated: Solution
    other_batch: Solution


def build_items() -> Items:
    lead = make_user("lea", "lead", "labeler")
    lena, lars, luca = (make_user(n, "labeler") for n in ("lena", "lars", "luca"))
    batch = make_batch("Generation 4 · geometry", overlap=2, gold_rate=0)
    waiting = make_solution(batch)
    gold = make_solution(batch)
    Solution.objects.filter(pk=gold.pk).update(is_quality_control=True)
    partial = make_solution(batch)
    labeled(partial, lena, [1, 1, 1], flagged_at=1)
    agree = make_solution(
        batch,
        problem=make_problem("Find the area of a Triangle with sides $3$, $4$ and $\\sqrt{25}$."),
    )
    labeled(agree, lena, [1, 1, 1])
    labeled(agree, lars, [1, 1, 1])
    disagree = make_solution(batch)
    labeled(disagree, lena, [1, 1, 1])
    found = labeled(disagree, lars, [1, -1])
    notes.note_add(labeling_id=found.pk, user=lars, step_index=1, text="2 × 21 is 42, not 44")
    adjudicated = make_solution(batch)
    labeled(adjudicated, lena, [1, 1, 1])
    labeled(adjudicated, lars, [-1])
    adjudication.adjudication_save(solution=adjudicated, lead=lead, ratings=[1, 1, 1], note="")
    in_progress = make_solution(batch)
    labeled(in_progress, luca, [1])
    other_batch = make_solution(make_batch("elsewhere"), problem=make_problem("A Triangle too."))
    return Items(
        batch, lena, lars, luca, waiting, gold, in_progress, partial, agree, disagree,
        adjudicated, other_batch,
    )  # fmt: skip


@pytest.fixture
def items(db) -> Items:
    return build_items()


def ids(items: Items, **filters) -> list[int]:
    return list(
        selectors.batch_items(items.batch, ItemFilters(**filters)).values_list("pk", flat=True)
    )


def pks(*solutions: Solution) -> list[int]:
    return sorted(s.pk for s in solutions)


def test_no_filter_lists_every_solution_of_the_batch_and_no_other(items):
    assert ids(items) == pks(
        items.waiting, items.gold, items.partial, items.agree, items.disagree,
        items.adjudicated, items.in_progress,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("waiting", ("waiting", "gold")),
        ("in_progress", ("in_progress",)),
        ("partial", ("partial",)),
        ("complete", ("agree", "disagree", "adjudicated")),
        ("needs_adjudication", ("disagree",)),
        ("adjudicated", ("adjudicated",)),
    ],
)
def test_state_filter(items, state, expected):
    assert ids(items, state=state) == pks(*(getattr(items, name) for name in expected))


def test_finish_reason_labeler_agreement_flag_gold_and_note_filters(items):
    assert ids(items, finish_reason="found_error") == pks(items.disagree, items.adjudicated)
    assert ids(items, labeler_id=items.luca.pk) == pks(items.in_progress)
    assert ids(items, labeler_id=items.lars.pk) == pks(
        items.agree, items.disagree, items.adjudicated
    )
    assert ids(items, agreement="disagree") == pks(items.disagree, items.adjudicated)
    assert ids(items, agreement="agree") == pks(items.agree)
    assert ids(items, agreement="none") == pks(
        items.waiting, items.gold, items.partial, items.in_progress
    )
    assert ids(items, flagged="yes") == pks(items.partial)
    assert ids(items, gold="yes") == pks(items.gold)
    assert items.gold.pk not in ids(items, gold="no")
    assert ids(items, notes="yes") == pks(items.disagree)
    # Filters combine: lars's labelings that ended at an error and still wait for a lead.
    assert ids(
        items, labeler_id=items.lars.pk, finish_reason="found_error", state="needs_adjudication"
    ) == pks(items.disagree)


def test_search_matches_words_of_the_problem_text_in_any_case(items):
    assert ids(items, q="triangle") == pks(items.agree)
    assert ids(items, q="AREA triangle") == pks(items.agree)
    assert ids(items, q="triangle hexagon") == []


def test_model_filter_without_an_active_model_matches_nothing(items):
    assert ids(items, model="disagree") == []


def test_model_filter_keeps_solutions_where_the_active_model_disagrees(db, labeler, labeler2):
    from tests.modeling.test_review import build_scored_batch

    batch, agreeing, disputed, _ = build_scored_batch(labeler, labeler2)
    found = selectors.batch_items(batch, ItemFilters(model="disagree"))
    assert list(found.values_list("pk", flat=True)) == [disputed.pk]


def test_rows_carry_each_labelers_ratings_side_by_side(items):
    rows = selectors.item_rows(list(selectors.batch_items(items.batch, ItemFilters())))
    by_id = {row.solution.pk: row for row in rows}
    disputed = by_id[items.disagree.pk]
    assert [(i.labeling.labeler.username, i.ratings) for i in disputed.labelings] == [
        ("lena", [1, 1, 1]),
        ("lars", [1, -1]),
    ]
    assert disputed.state == "needs adjudication"
    assert by_id[items.adjudicated.pk].state == "adjudicated"
    assert by_id[items.in_progress.pk].state == "in progress"
    assert by_id[items.waiting.pk].labelings == []


# --- the pages -----------------------------------------------------------------------------


def test_items_page_is_for_leads_only(client, items):
    url = reverse("labeling:items", args=[items.batch.pk])
    client.force_login(items.lena)
    assert client.get(url).status_code == 403
    assert client.get(reverse("labeling:item_detail", args=[items.agree.pk])).status_code == 403
    response = client.post(reverse("labeling:item_reply", args=[items.agree.pk]), {"text": "hello"})
    assert response.status_code == 403
    assert not items.agree.notes.exists()


def test_items_page_filters_on_the_server_and_htmx_gets_the_results_only(client, items):
    client.force_login(make_user("leo", "lead"))
    url = reverse("labeling:items", args=[items.batch.pk])
    page = client.get(url, {"state": "needs_adjudication"})
    body = page.content.decode()
    assert page.status_code == 200 and "<html" in body and "1 item" in body
    assert f'data-item="{items.disagree.pk}"' in body
    assert f'data-item="{items.agree.pk}"' not in body
    fragment = client.get(url, {"q": "triangle"}, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and 'id="results"' in fragment
    assert f'data-item="{items.agree.pk}"' in fragment and fragment.count("data-item=") == 1


def test_a_filter_value_that_is_not_a_choice_shows_an_error_and_no_rows(client, items):
    client.force_login(make_user("leo", "lead"))
    url = reverse("labeling:items", args=[items.batch.pk])
    body = client.get(url, {"state": "everything", "labeler": "99999999999999999999"})
    assert body.status_code == 200
    text = body.content.decode()
    assert "These filters are not valid" in text and "data-item=" not in text


def test_the_labeler_filter_lists_who_labeled_in_this_batch_and_nobody_else(client, items):
    # An administrator who once opened the queue (a labeler record, no labeling here) and an
    # account the importer made for PRM800K labels of another batch (inactive, no password).
    queue.ensure_labeler(make_user("ada", "admin"))
    imported = get_user_model()(username="prm800k-5b8a1c", is_active=False)
    imported.set_unusable_password()
    imported.save()
    labeled(items.other_batch, imported, [1])
    client.force_login(make_user("leo", "lead"))
    url = reverse("labeling:items", args=[items.batch.pk])
    page = client.get(url).content.decode()
    choices = re.search(r'<select name="labeler"[^>]*>(.*?)</select>', page, re.S).group(1)
    assert re.findall(r"<option[^>]*>([^<]*)</option>", choices) == ["any", "lars", "lena", "luca"]
    # Someone who labeled elsewhere is not a choice here: the filter says so and lists nothing.
    refused = client.get(url, {"labeler": imported.pk}).content.decode()
    assert "These filters are not valid" in refused and "data-item=" not in refused


def test_items_page_queries_do_not_grow_with_the_rows(client, items):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(make_user("leo", "lead"))
    url = reverse("labeling:items", args=[items.batch.pk])
    client.get(url)  # warm the session and role caches
    with CaptureQueriesContext(connection) as few:
        client.get(url, {"state": "needs_adjudication"})  # one row
    with CaptureQueriesContext(connection) as many:
        client.get(url)  # seven rows
    assert len(many) == len(few)


def test_items_are_paginated(client, items, settings):
    from labeling.views import items as item_views

    client.force_login(make_user("leo", "lead"))
    url = reverse("labeling:items", args=[items.batch.pk])
    per_page, item_views.ITEMS_PER_PAGE = item_views.ITEMS_PER_PAGE, 3
    try:
        first = client.get(url, {"gold": "no"}).content.decode()
        second = client.get(url, {"gold": "no", "page": 2}).content.decode()
    finally:
        item_views.ITEMS_PER_PAGE = per_page
    assert first.count("data-item=") == 3 and second.count("data-item=") == 3
    assert "gold=no&amp;page=2" in first


def test_item_page_shows_ratings_notes_and_history(client, items):
    client.force_login(make_user("leo", "lead"))
    body = client.get(reverse("labeling:item_detail", args=[items.disagree.pk])).content.decode()
    assert "2 × 21 is 42, not 44" in body
    assert body.count('class="adj-step') == 3
    history = body[body.index('id="item-history"') :]
    assert history.count("rated") >= 5 and "note" in history and "found an error" not in history


def test_missing_item_is_the_apps_404(client, items):
    client.force_login(make_user("leo", "lead"))
    assert client.get(reverse("labeling:item_detail", args=[10**9])).status_code == 404
    assert client.get(reverse("labeling:items", args=[10**9])).status_code == 404
