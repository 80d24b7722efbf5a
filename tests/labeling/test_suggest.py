"""Suggest mode (issue 46): the labeling page shows a suggest batch's judge label for the step
being rated, a rating says which suggestion it saw, and the server stores the provenance it
checked against the PreLabel, never the client's word for the label or the score."""

import pytest
from django.urls import reverse

from labeling.models import Batch, StepLabel
from labeling.selectors import latest_prelabel, prelabels_for_solutions
from tests.factories import make_batch, make_prelabel, make_solution
from tests.labeling.helpers import next_labeling

pytestmark = pytest.mark.django_db

STEPS = ["Let $x = 2$.", "Then $x^2 = 4$.", "So $x^3 = 9$.", "# Answer\n\n9"]


def suggest_batch(**extra) -> Batch:
    return make_batch(prelabel_mode=Batch.PrelabelMode.SUGGEST, prelabel_judge="prm", **extra)


@pytest.fixture
def suggested(labeler):
    solution = make_solution(suggest_batch(), steps=STEPS)
    prelabel = make_prelabel(
        solution, labels=[1, 1, -1, None], scores=[0.92, 0.61, 0.8, None], judge="prm: v3"
    )
    return next_labeling(labeler), prelabel


def rate(client, labeling, data):
    url = reverse("labeling:rate", args=[labeling.pk])
    return client.post(url, data, HTTP_HX_REQUEST="true")


def test_the_latest_prelabel_of_a_kind_and_all_of_some_solutions(db):
    solution, other = make_solution(), make_solution()
    old = make_prelabel(solution, labels=[1, 1, 1])
    new = make_prelabel(solution, labels=[1, -1, None])
    llm = make_prelabel(solution, labels=[1, 1, 1], kind="llm", judge="llm: critic")
    assert latest_prelabel(solution.pk, "prm") == new
    assert latest_prelabel(solution.pk, "llm") == llm
    assert latest_prelabel(solution.pk, "mc") is None
    assert latest_prelabel(other.pk, "prm") is None
    found = prelabels_for_solutions([solution.pk, other.pk])
    assert set(found) == {solution.pk} and set(found[solution.pk]) == {old, new, llm}


def test_the_page_shows_the_judges_label_name_and_confidence_for_the_step_to_rate(
    client, suggested
):
    labeling, prelabel = suggested
    client.force_login(labeling.labeler)
    body = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert f'data-suggestion="{prelabel.pk}" data-suggestion-label="1"' in body
    assert "prm: v3" in body and "confidence 92%" in body
    assert f'"rating": 1, "suggestion": {prelabel.pk}, "accepted": 1' in body
    assert 'data-key-action="accept"' in body and "accept the judge" in body  # the key help
    # Accepted: the next step comes (as a fragment) with its own suggestion, read by the rating.
    answer = rate(
        client, labeling, {"step_index": 0, "rating": 1, "suggestion": prelabel.pk, "accepted": 1}
    )
    assert answer.status_code == 200 and answer["HX-Reswap"] == "none"
    fragment = answer.content.decode()
    assert 'data-suggestion-label="1"' in fragment and "confidence 61%" in fragment
    step = StepLabel.objects.get(labeling=labeling)
    assert (
        step.suggestion_shown,
        step.suggestion_judge,
        step.suggestion_label,
        step.suggestion_score,
        step.suggestion_accepted,
    ) == (True, "prm: v3", 1, 0.92, True)


def test_an_override_keeps_what_was_shown_and_a_step_without_a_label_shows_none(client, suggested):
    labeling, prelabel = suggested
    client.force_login(labeling.labeler)
    rate(client, labeling, {"step_index": 0, "rating": 1, "suggestion": prelabel.pk})
    rate(client, labeling, {"step_index": 1, "rating": 0, "suggestion": prelabel.pk})
    rate(client, labeling, {"step_index": 2, "rating": 1, "suggestion": prelabel.pk})
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert 'id="suggestion"' not in page  # step 4: the judge gave no label after its −1
    refused = rate(client, labeling, {"step_index": 3, "rating": 1, "suggestion": prelabel.pk})
    assert refused.status_code == 400
    rate(client, labeling, {"step_index": 3, "rating": 1})
    rows = list(
        StepLabel.objects.filter(labeling=labeling)
        .order_by("index")
        .values_list("suggestion_shown", "suggestion_label", "suggestion_accepted")
    )
    assert rows == [(True, 1, False), (True, 1, False), (True, -1, False), (False, None, None)]


@pytest.mark.parametrize(
    "data, why",
    [
        ({"rating": 1, "suggestion": 999_999}, "is not the one shown"),
        ({"rating": 0, "suggestion": "PREV", "accepted": 1}, "with the judge"),
        ({"rating": 1, "accepted": 1}, "Only a suggestion shown"),
        ({"rating": 1, "suggestion": "nan"}, "must be an integer"),
        ({"rating": 1, "suggestion": "1e999"}, "must be an integer"),
        ({"rating": 1, "suggestion": str(2**40)}, "suggestion:"),
    ],
)
def test_a_rating_claiming_a_suggestion_that_was_not_shown_is_refused_and_writes_nothing(
    client, suggested, data, why
):
    labeling, prelabel = suggested
    if data.get("suggestion") == "PREV":
        data = {**data, "suggestion": prelabel.pk}
    client.force_login(labeling.labeler)
    answer = rate(client, labeling, {"step_index": 0, **data})
    assert answer.status_code == 400 and why in answer.content.decode()
    assert not StepLabel.objects.filter(labeling=labeling).exists()


def test_another_solutions_prelabel_or_an_older_one_is_not_the_one_shown(client, suggested):
    labeling, prelabel = suggested
    elsewhere = make_prelabel(make_solution(suggest_batch()), labels=[1, 1, 1])
    newer = make_prelabel(labeling.solution, labels=[0, 1, 1, 1], judge="prm: v4")
    client.force_login(labeling.labeler)
    for claimed in (elsewhere.pk, prelabel.pk):
        answer = rate(client, labeling, {"step_index": 0, "rating": 1, "suggestion": claimed})
        assert answer.status_code == 400
        # The refusal answers with the panel as saved: it shows the suggestion that stands.
        assert f'data-suggestion="{newer.pk}"' in answer.content.decode()
    assert not StepLabel.objects.filter(labeling=labeling).exists()


def test_another_users_labeling_is_refused_with_its_suggestion(client, suggested, labeler2):
    labeling, prelabel = suggested
    client.force_login(labeler2)
    data = {"step_index": 0, "rating": 1, "suggestion": prelabel.pk, "accepted": 1}
    assert rate(client, labeling, data).status_code in (403, 404)
    assert not StepLabel.objects.filter(labeling=labeling).exists()


@pytest.mark.parametrize("mode", ["off", "blind"])
def test_batches_not_in_suggest_mode_never_show_their_prelabels(client, labeler, mode):
    batch = make_batch(prelabel_mode=mode, prelabel_judge="prm")
    prelabel = make_prelabel(make_solution(batch, steps=STEPS), labels=[1, 1, 1, 1])
    labeling = next_labeling(labeler)
    client.force_login(labeler)
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert 'id="suggestion"' not in page and 'data-key-action="accept"' not in page
    answer = rate(client, labeling, {"step_index": 0, "rating": 1, "suggestion": prelabel.pk})
    assert answer.status_code == 400
    assert not StepLabel.objects.filter(labeling=labeling).exists()


def test_another_judge_kind_than_the_batchs_is_not_shown(client, labeler):
    solution = make_solution(suggest_batch(), steps=STEPS)
    make_prelabel(solution, labels=[1, 1, 1, 1], kind="llm", judge="llm: critic")
    labeling = next_labeling(labeler)
    client.force_login(labeler)
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert 'id="suggestion"' not in page


@pytest.mark.parametrize("flag", ["is_quality_control", "is_screening"])
def test_gold_and_screening_items_never_show_a_suggestion(client, labeler, flag):
    solution = make_solution(suggest_batch(gold_rate=0), steps=STEPS)
    prelabel = make_prelabel(solution, labels=[1, 1, 1, 1])
    labeling = next_labeling(labeler)
    # Marked after the claim: the page and the rating read the flag, not the queue.
    type(solution).objects.filter(pk=solution.pk).update(**{flag: True})
    client.force_login(labeler)
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert 'id="suggestion"' not in page
    answer = rate(client, labeling, {"step_index": 0, "rating": 1, "suggestion": prelabel.pk})
    assert answer.status_code == 400
    assert not StepLabel.objects.filter(labeling=labeling).exists()


def batch_form_data(batch: Batch, **changes) -> dict:
    data = {
        "name": batch.name,
        "generation": batch.generation or "",
        "overlap": batch.overlap,
        "priority": batch.priority,
        "is_active": "on",
        "protocol": batch.protocol,
        "alternatives_k": batch.alternatives_k,
    }
    return {**data, **changes}


def test_a_lead_switches_a_batch_to_suggest_on_its_form(client, lead):
    batch = make_batch()
    client.force_login(lead)
    url = reverse("labeling:batch_edit", args=[batch.pk])
    assert "Machine pre-labels" in client.get(url).content.decode()
    answer = client.post(url, batch_form_data(batch, prelabel_mode="suggest", prelabel_judge="prm"))
    assert answer.status_code == 302
    batch.refresh_from_db()
    assert (batch.prelabel_mode, batch.prelabel_judge) == ("suggest", "prm")
    # A form that leaves the fields out (an older client) keeps them.
    client.post(url, batch_form_data(batch, priority=3))
    batch.refresh_from_db()
    assert (batch.prelabel_mode, batch.prelabel_judge, batch.priority) == ("suggest", "prm", 3)


@pytest.mark.parametrize(
    "mode, judge, why",
    [
        ("suggest", "", "names the judge"),
        ("suggest", "gpt", "not one of the available choices"),
        ("loud", "prm", "not one of the available choices"),
        ("suggest", "prm\x00", "<html"),  # the site's 400 page: NUL is refused before the form
    ],
)
def test_the_batch_form_refuses_a_bad_mode_or_judge_and_saves_nothing(
    client, lead, mode, judge, why
):
    batch = make_batch()
    client.force_login(lead)
    url = reverse("labeling:batch_edit", args=[batch.pk])
    answer = client.post(url, batch_form_data(batch, prelabel_mode=mode, prelabel_judge=judge))
    assert answer.status_code in (200, 400) and why in answer.content.decode()
    batch.refresh_from_db()
    assert (batch.prelabel_mode, batch.prelabel_judge) == ("off", "")


def test_the_api_switches_a_batch_and_shows_its_mode(lead):
    from tests.helpers.users import api_client_for

    batch = make_batch()
    api = api_client_for(lead)
    answer = api.post(
        f"/p/default/api/batches/{batch.pk}/prelabel/",
        {"mode": "suggest", "judge": "mc"},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["prelabel_mode"], answer.json()["prelabel_judge"]) == ("suggest", "mc")
    assert api.get(f"/p/default/api/batches/{batch.pk}/").json()["prelabel_mode"] == "suggest"
    batch.refresh_from_db()
    assert (batch.prelabel_mode, batch.prelabel_judge) == ("suggest", "mc")


@pytest.mark.parametrize(
    "body",
    [
        {"mode": "suggest"},
        {"mode": "suggest", "judge": "gpt"},
        '{"mode": NaN, "judge": "prm"}',
        '{"mode": "suggest", "judge": "prm", "judge": 1e999}',
        {"mode": "blind", "judge": 10**30},
        {"mode": ["suggest"], "judge": "prm"},
        {},
    ],
)
def test_the_api_refuses_bad_values_and_writes_nothing(lead, body):
    from tests.helpers.users import api_client_for

    batch = make_batch()
    url = f"/p/default/api/batches/{batch.pk}/prelabel/"
    api = api_client_for(lead)
    if isinstance(body, str):  # JSON no json.dumps writes
        answer = api.post(url, body, content_type="application/json")
    else:
        answer = api.post(url, body, format="json")
    assert answer.status_code == 400, answer.content
    batch.refresh_from_db()
    assert (batch.prelabel_mode, batch.prelabel_judge) == ("off", "")


def test_a_batch_of_another_lead_is_refused_to_a_researcher_and_unknown_ids_are_404(
    lead, researcher, labeler
):
    from tests.helpers.users import api_client_for

    theirs = make_batch(created_by=lead)
    body = {"mode": "suggest", "judge": "prm"}
    answer = api_client_for(researcher).post(
        f"/p/default/api/batches/{theirs.pk}/prelabel/", body, format="json"
    )
    assert answer.status_code == 403
    assert (
        api_client_for(labeler)
        .post(f"/p/default/api/batches/{theirs.pk}/prelabel/", body, format="json")
        .status_code
        == 403
    )
    assert (
        api_client_for(lead)
        .post(f"/p/default/api/batches/{2**31 + 5}/prelabel/", body, format="json")
        .status_code
        == 404
    )
    theirs.refresh_from_db()
    assert theirs.prelabel_mode == "off"
    own = make_batch(created_by=researcher)
    assert (
        api_client_for(researcher)
        .post(f"/p/default/api/batches/{own.pk}/prelabel/", body, format="json")
        .status_code
        == 200
    )


# --- provenance out ---------------------------------------------------------------------------


def _export(fmt: str) -> bytes:
    import io

    from labeling.services.exporting import (
        ExportFilters,
        StepwiseOptions,
        select_labelings,
        write_export,
    )

    out = io.BytesIO()
    write_export(out, fmt, select_labelings(ExportFilters()), options=StepwiseOptions())
    return out.getvalue()


def rate_through_the_page(client, labeling, prelabel, ratings: list[tuple[int, bool]]) -> None:
    """(rating, accepted) per step, each posted as the page's buttons post it."""
    client.force_login(labeling.labeler)
    for index, (value, accepted) in enumerate(ratings):
        data = {"step_index": index, "rating": value, "suggestion": prelabel.pk}
        if accepted:
            data["accepted"] = 1
        assert rate(client, labeling, data).status_code == 200


def test_stepwise_exports_and_the_api_carry_provenance_and_prm800k_stays_as_it_was(
    client, labeler, researcher
):
    import io
    import json

    import pyarrow.parquet as pq

    from labeling.models import Labeling
    from tests.helpers.users import api_client_for

    steps = ["Let $x = 2$.", "Then $x^2 = 4$.", "# Answer\n\n4"]
    plain = make_solution(make_batch(), steps=steps)
    plain_labeling = next_labeling(labeler)
    assert plain_labeling.solution == plain
    client.force_login(labeler)
    for index in range(3):
        rate(client, plain_labeling, {"step_index": index, "rating": 1})
    prm800k_before = _export("prm800k")

    solution = make_solution(suggest_batch(), steps=steps)
    prelabel = make_prelabel(solution, labels=[1, 0, 1], scores=[0.9, 0.55, 0.8], judge="prm: v3")
    labeling = next_labeling(labeler)
    rate_through_the_page(client, labeling, prelabel, [(1, True), (1, False), (1, True)])
    labeling.refresh_from_db()
    assert labeling.status == Labeling.Status.COMPLETED

    # PRM800K: the release's fields only; the plain labeling's line is as it was, byte for byte.
    prm800k = _export("prm800k")
    assert prm800k.startswith(prm800k_before) and b"suggestion" not in prm800k
    rows = [json.loads(line) for line in _export("stepwise_jsonl").splitlines()]
    by_labeling = {row["labeling_id"]: row for row in rows}
    assert by_labeling[plain_labeling.pk]["provenance"][0]["suggestion_shown"] is False
    assert by_labeling[labeling.pk]["provenance"] == [
        {
            "step": 0,
            "suggestion_shown": True,
            "suggestion_judge": "prm: v3",
            "suggestion_label": 1,
            "suggestion_score": 0.9,
            "suggestion_accepted": True,
        },
        {
            "step": 1,
            "suggestion_shown": True,
            "suggestion_judge": "prm: v3",
            "suggestion_label": 0,
            "suggestion_score": 0.55,
            "suggestion_accepted": False,
        },
        {
            "step": 2,
            "suggestion_shown": True,
            "suggestion_judge": "prm: v3",
            "suggestion_label": 1,
            "suggestion_score": 0.8,
            "suggestion_accepted": True,
        },
    ]
    table = pq.read_table(io.BytesIO(_export("stepwise_parquet"))).to_pylist()
    parquet = {row["labeling_id"]: row["provenance"] for row in table}
    assert parquet[labeling.pk] == by_labeling[labeling.pk]["provenance"]

    api = api_client_for(researcher)
    detail = api.get(f"/p/default/api/labelings/{labeling.pk}/").json()
    assert [
        (s["suggestion_shown"], s["suggestion_label"], s["suggestion_accepted"])
        for s in detail["step_labels"]
    ] == [(True, 1, True), (True, 0, False), (True, 1, True)]
    shown = api.get(f"/p/default/api/solutions/{solution.pk}/").json()["prelabels"]
    assert [(p["id"], p["kind"], p["judge"], p["labels"], p["scores"]) for p in shown] == [
        (prelabel.pk, "prm", "prm: v3", [1, 0, 1], [0.9, 0.55, 0.8])
    ]
    assert api.get(f"/p/default/api/solutions/{plain.pk}/").json()["prelabels"] == []


def test_the_solutions_list_reads_prelabels_in_one_query_for_the_page(
    researcher, django_assert_max_num_queries
):
    from tests.helpers.users import api_client_for

    for _ in range(5):
        make_prelabel(make_solution(), labels=[1, 1, 1])
    api = api_client_for(researcher)
    api.get("/p/default/api/solutions/")  # warm: the token's own reads
    with django_assert_max_num_queries(6):
        listed = api.get("/p/default/api/solutions/").json()["results"]
    assert len(listed) == 5 and all(len(row["prelabels"]) == 1 for row in listed)


# --- agreement on the lead's pages ------------------------------------------------------------


def test_kappa_and_its_confusion_matrix_match_a_hand_computed_case():
    from labeling.selectors import kappa_and_confusion

    # Agreement 3/4; chance (2·1 + 1·2 + 1·1)/16 = 5/16: κ = (3/4 − 5/16)/(1 − 5/16) = 7/11.
    kappa, confusion = kappa_and_confusion([1, 1, 0, -1], [1, 0, 0, -1])
    assert kappa == pytest.approx(7 / 11)
    assert confusion == [[1, 0, 0], [0, 1, 0], [0, 1, 1]]  # rows: human −1, 0, +1
    assert kappa_and_confusion([1, 1], [1, 1])[0] is None  # one label everywhere: undefined
    assert kappa_and_confusion([], [])[0] is None


def test_the_batch_page_shows_kappa_alpha_and_the_anchoring_check_as_computed_by_hand(
    client, lead, labeler, labeler2
):
    """Two labelers on one suggest solution: A rates +1 0 0, B rates +1 0 +1; the judge says
    +1 0 +1. Steps as units, alpha (ordinal; two values, so nominal's): coincidences o(1,1) = 2,
    o(0,0) = 2, o(0,1) = o(1,0) = 1, n = 6; D_o = 2/6, D_e = (3·3 + 3·3)/(6·5) = 3/5:
    α = 1 − (1/3)/(3/5) = 4/9. The judge against the six human ratings: agreement 5/6, chance
    (3·4 + 3·2)/36 = 1/2: κ = (5/6 − 1/2)/(1/2) = 2/3."""
    batch = suggest_batch(overlap=2, gold_rate=0)
    steps = ["Let $x = 2$.", "Then $x^2 = 4$.", "# Answer\n\n4"]
    solution = make_solution(batch, steps=steps)
    prelabel = make_prelabel(solution, labels=[1, 0, 1], scores=[0.9, 0.6, 0.7], judge="prm: v3")
    first, second = next_labeling(labeler), next_labeling(labeler2)
    rate_through_the_page(client, first, prelabel, [(1, True), (0, True), (0, False)])
    rate_through_the_page(client, second, prelabel, [(1, True), (0, True), (1, True)])

    client.force_login(lead)
    page = client.get(reverse("labeling:batch_dashboard", args=[batch.pk])).content.decode()
    assert "α 0.44" in page  # 4/9
    assert '<strong class="kappa">κ 0.667</strong> over 6 steps' in page
    assert "6 rated with its suggestion shown" in page
    assert 'id="anchoring"' in page and "Anchoring check" in page
    # The confusion matrix: humans −1, 0, +1 (rows) against the judge (columns).
    from labeling.selectors import anchoring_check, judge_agreement

    (agreement,) = judge_agreement(batch)
    assert agreement.confusion == [[0, 0, 0], [0, 2, 1], [0, 0, 3]]
    rows = {row.username: row for row in anchoring_check(batch)}
    assert rows[labeler.username].accepted_share == pytest.approx(2 / 3)
    assert rows[labeler2.username].accepted_share == 1.0
    # A batch page polled (htmx) computes none of it: only the counters.
    url = reverse("labeling:batch_dashboard", args=[batch.pk])
    polled = client.get(url, HTTP_HX_REQUEST="true")
    assert "Machine pre-labels" not in polled.content.decode()


def test_the_anchoring_check_compares_suggest_work_with_work_without(client, labeler):
    from datetime import timedelta

    from django.utils import timezone

    from labeling.models import GoldResult, Labeling
    from labeling.selectors import anchoring_check

    plain = make_solution(make_batch(gold_rate=0), steps=STEPS[:2])
    plain_labeling = next_labeling(labeler)
    assert plain_labeling.solution == plain
    client.force_login(labeler)
    for index in range(2):
        rate(client, plain_labeling, {"step_index": index, "rating": 1, "elapsed_ms": 4000})
    batch = suggest_batch(gold_rate=0)
    solution = make_solution(batch, steps=STEPS[:2])
    prelabel = make_prelabel(solution, labels=[1, 1])
    labeling = next_labeling(labeler)
    for index in range(2):
        data = {"step_index": index, "rating": 1, "suggestion": prelabel.pk, "accepted": 1}
        rate(client, labeling, {**data, "elapsed_ms": 1000})
    # Gold results: one during the plain work (3 of 4 steps right), one during the suggest work.
    now = timezone.now()
    Labeling.objects.filter(pk=plain_labeling.pk).update(started_at=now - timedelta(hours=2))
    Labeling.objects.filter(pk=labeling.pk).update(started_at=now - timedelta(hours=1))
    for minutes, (compared, exact) in ((90, (4, 3)), (30, (4, 1))):
        gold = make_solution(make_batch(), steps=STEPS)
        gold_labeling = Labeling.objects.create(
            solution=gold,
            labeler=labeler,
            status=Labeling.Status.COMPLETED,
            started_at=now - timedelta(minutes=minutes),
        )
        type(gold).objects.filter(pk=gold.pk).update(is_quality_control=True)
        GoldResult.objects.create(
            labeling=gold_labeling,
            labeler=labeler,
            solution=gold,
            steps_compared=compared,
            steps_exact=exact,
        )
    (row,) = anchoring_check(batch)
    assert (row.gold_with, row.gold_without) == (0.25, 0.75)
    assert (row.seconds_with, row.seconds_without) == (1.0, 4.0)
    assert row.accepted_share == 1.0


# --- the demo ---------------------------------------------------------------------------------


def test_the_demo_has_an_inactive_suggest_batch_with_prelabels_a_lead_opens_to_labelers(
    client, labeler
):
    from io import StringIO

    from django.core.management import call_command

    from labeling.models import PreLabel
    from labeling.services.demo import SUGGEST_BATCH, SUGGEST_SOLUTIONS

    out = StringIO()
    call_command("setup_demo", stdout=out)
    assert f"{SUGGEST_BATCH!r} (suggest mode, judge prm" in out.getvalue()
    batch = Batch.objects.get(name=SUGGEST_BATCH)
    assert (batch.prelabel_mode, batch.prelabel_judge, batch.is_active) == ("suggest", "prm", False)
    solutions = batch.solutions.all()
    assert solutions.count() == SUGGEST_SOLUTIONS
    prelabels = PreLabel.objects.filter(solution__batch=batch, kind="prm")
    assert prelabels.count() == SUGGEST_SOLUTIONS
    assert all(len(p.labels) == len(p.solution.steps) for p in prelabels.select_related("solution"))
    call_command("setup_demo", stdout=StringIO())  # a re-run adds nothing
    assert batch.solutions.count() == SUGGEST_SOLUTIONS and prelabels.count() == SUGGEST_SOLUTIONS
    # The lead activates it alone: the labeler's next solution shows the judge's label.
    Batch.objects.exclude(pk=batch.pk).update(is_active=False)
    Batch.objects.filter(pk=batch.pk).update(is_active=True, gold_rate=0)
    from labeling.models import LabelerRecord
    from labeling.services import quality

    # Past screening in the batch's project: the demo has screening gold for newcomers.
    record = quality.record_ensure(user_id=labeler.pk, project_id=batch.project_id)
    quality.labeler_set_state(record=record, state=LabelerRecord.State.ACTIVE)
    labeling = next_labeling(labeler)
    assert labeling.solution.batch_id == batch.pk
    client.force_login(labeler)
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert 'id="suggestion"' in page and "prm: Demo judge #" in page
    # A real judge's run: a PRM the demo trained, never made the active model.
    from modeling.models import ModelVersion, PreLabelRun
    from modeling.services.demo_suggest import DEMO_JUDGE_RUN

    run = PreLabelRun.objects.get(batch=batch)
    judge_model = ModelVersion.objects.get(pk=run.options["model_version"])
    assert (run.kind, run.status, run.done) == ("prm", "succeeded", SUGGEST_SOLUTIONS)
    assert judge_model.run.name == DEMO_JUDGE_RUN and not judge_model.is_active
    assert {p.run_id for p in prelabels} == {run.pk} and "thresholds" in run.options


def test_changing_an_accepted_rating_while_revisiting_it_marks_it_no_longer_accepted(
    client, suggested
):
    labeling, prelabel = suggested
    client.force_login(labeling.labeler)
    data = {"step_index": 0, "rating": 1, "suggestion": prelabel.pk, "accepted": 1}
    rate(client, labeling, data)
    revise = reverse("labeling:revise", args=[labeling.pk])
    answer = client.post(revise, {"step_index": 0, "rating": 0}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    step = StepLabel.objects.get(labeling=labeling)
    assert (step.suggestion_shown, step.suggestion_label, step.suggestion_accepted) == (
        True,
        1,
        False,
    )
    assert step.completions.get().rating == 0


def test_the_admin_form_refuses_suggest_mode_without_a_known_judge(db):
    from django.forms.models import model_to_dict

    from labeling.admin import BatchAdminForm

    batch = make_batch()
    data = {k: v for k, v in model_to_dict(batch).items() if v is not None}
    for judge, valid in (("", False), ("gpt", False), ("llm", True)):
        form = BatchAdminForm(
            {**data, "prelabel_mode": "suggest", "prelabel_judge": judge}, instance=batch
        )
        assert form.is_valid() is valid, form.errors
