"""Lead dashboard, batch form, guidelines, permissions and query counts of the hot views."""

import io
import json

import pytest
from django.urls import reverse

from labeling.models import (
    Batch,
    BatchHourStats,
    BatchLabelerStats,
    Guidelines,
    Labeler,
    LabelerRecord,
    Labeling,
    Solution,
)
from labeling.services import counters, rating
from labeling.tasks import expire_leases
from stepwise.celery import registered_task
from tests.factories import make_batch, make_solution, make_solutions
from tests.helpers.users import make_user
from tests.labeling.helpers import claim_and_label, next_labeling, record_of

pytestmark = pytest.mark.django_db


LEAD_URLS = [
    ("labeling:lead_home", []),
    ("labeling:batch_new", []),
    ("labeling:labelers", []),
    ("labeling:adjudication_queue", []),
    ("labeling:guidelines_edit", []),
]


@pytest.mark.parametrize("name, args", LEAD_URLS)
def test_a_labeler_cannot_open_lead_pages(client, labeler, name, args):
    client.force_login(labeler)
    assert client.get(reverse(name, args=args)).status_code == 403


def test_a_labeler_cannot_open_object_lead_pages_or_change_states(client, labeler, labeler2):
    batch = make_batch()
    solution = make_solution(batch)
    client.force_login(labeler)
    for url in (
        reverse("labeling:batch_dashboard", args=[batch.pk]),
        reverse("labeling:batch_edit", args=[batch.pk]),
        reverse("labeling:labeler_detail", args=[labeler2.pk]),
        reverse("labeling:adjudicate", args=[solution.pk]),
    ):
        assert client.get(url).status_code == 403, url
    response = client.post(
        reverse("labeling:labeler_state", args=[labeler2.pk]), {"state": "paused"}
    )
    assert response.status_code == 403
    assert not LabelerRecord.objects.filter(
        user=labeler2, state=LabelerRecord.State.PAUSED
    ).exists()


def test_counters_follow_finishes_and_undo(labeler, labeler2):
    batch = make_batch(overlap=2, gold_rate=0)
    make_solutions(batch, 2)
    claim_and_label(labeler, [1, 0, 1])
    last = claim_and_label(labeler, [1, -1])
    claim_and_label(labeler2, [1, 1, 1])
    row = BatchLabelerStats.objects.get(batch=batch, labeler=labeler)
    assert (row.labelings, row.steps, row.pos, row.neu, row.neg) == (2, 5, 3, 1, 1)
    assert (row.fin_solution, row.fin_found_error, row.time_ms) == (1, 1, 5000)
    hour = BatchHourStats.objects.get(batch=batch)
    assert (hour.labelings, hour.steps, hour.solutions_done) == (3, 8, 1)
    rating.undo_last(labeling_id=last.pk, user=labeler)  # reopen: counters give it back
    row.refresh_from_db()
    hour.refresh_from_db()
    assert (row.labelings, row.steps, row.neg, row.fin_found_error) == (1, 3, 0, 0)
    assert (hour.labelings, hour.solutions_done) == (2, 1)


def test_batch_dashboard_shows_the_figures_and_htmx_gets_only_the_live_fragment(
    client, lead, labeler
):
    batch = make_batch("Gen 7", overlap=1, gold_rate=0)
    make_solutions(batch, 4)
    claim_and_label(labeler, [1, 0, 1])
    claim_and_label(labeler, [-1])
    next_labeling(labeler)
    client.force_login(lead)
    page = client.get(reverse("labeling:batch_dashboard", args=[batch.pk])).content.decode()
    assert "Gen 7" in page and 'hx-trigger="every 5s"' in page and "chart.umd.min.js" in page
    assert '<span class="kpi-value" id="kpi-done">2</span>' in page
    assert '<span class="kpi-value" id="kpi-progress">1</span>' in page
    assert "lena" in page
    fragment = client.get(
        reverse("labeling:batch_dashboard", args=[batch.pk]), HTTP_HX_REQUEST="true"
    )
    body = fragment.content.decode()
    assert body.lstrip().startswith('<div id="live"') and "<html" not in body
    data = json.loads(
        body.split('id="chart-data" type="application/json">')[1].split("</script>")[0]
    )
    assert data["ratings"] == [2, 1, 1] and data["finish"] == [1, 1, 0, 0]
    assert sum(h["labelings"] for h in data["hours"]) == 2


def _grow(batch, labelers, solutions):
    make_solutions(batch, solutions)
    for user in labelers:
        claim_and_label(user, [1, 1, 1])


def test_dashboard_query_count_does_not_grow_with_labels(
    client, lead, django_assert_max_num_queries
):
    batch = make_batch(overlap=2, gold_rate=0)
    users = [make_user(f"q{i}", "labeler") for i in range(6)]
    _grow(batch, users, 6)
    _grow(batch, users, 6)
    client.force_login(lead)
    url = reverse("labeling:batch_dashboard", args=[batch.pk])
    with django_assert_max_num_queries(14):
        assert client.get(url, HTTP_HX_REQUEST="true").status_code == 200
    with django_assert_max_num_queries(14):
        assert client.get(url).status_code == 200
    with django_assert_max_num_queries(12):
        assert client.get(reverse("labeling:lead_home")).status_code == 200


def test_queue_page_query_count_is_bounded(client, labeler, django_assert_max_num_queries):
    for _ in range(3):
        make_solutions(make_batch(gold_rate=0), 5)
    for _ in range(4):
        claim_and_label(labeler, [1, 1, 1])
    client.force_login(labeler)
    with django_assert_max_num_queries(12):
        page = client.get(reverse("labeling:queue"))
    assert page.status_code == 200 and "4 solutions, 12 steps rated" in page.content.decode()


def test_a_lead_creates_a_batch_with_labelers_and_solutions_from_another_batch(
    client, lead, labeler
):
    source = make_batch("old", gold_rate=0)
    make_solutions(source, 5)
    started = next_labeling(labeler, batch=source).solution  # a started one stays behind
    client.force_login(lead)
    response = client.post(
        reverse("labeling:batch_new"),
        {
            "name": "Gen 2",
            "generation": 2,
            "overlap": 3,
            "priority": 4,
            "is_active": "on",
            "gold_rate": "0.2",
            "labelers": [labeler.pk],
            "take_from": source.pk,
            "take_limit": 3,
        },
    )
    batch = Batch.objects.get(name="Gen 2")
    assert response.status_code == 302 and response["Location"].endswith(
        f"/lead/batches/{batch.pk}/"
    )
    assert (batch.overlap, batch.priority, batch.gold_rate, batch.created_by) == (3, 4, 0.2, lead)
    assert list(batch.labelers.all()) == [labeler]
    assert batch.solutions.count() == 3 and not batch.solutions.filter(pk=started.pk).exists()


def test_a_lead_uploads_samples_into_a_new_batch_and_edits_it(client, lead):
    from labeling.services.demo import SAMPLE_DIR
    from labeling.services.importing import import_math

    import_math(SAMPLE_DIR / "problems.jsonl")
    lines = (SAMPLE_DIR / "solutions.jsonl").read_text().splitlines()[:4]
    upload = io.BytesIO("\n".join(lines).encode())
    upload.name = "samples.jsonl"
    client.force_login(lead)
    client.post(
        reverse("labeling:batch_new"),
        {"name": "Uploaded", "overlap": 1, "priority": 0, "upload": upload},
    )
    batch = Batch.objects.get(name="Uploaded")
    assert batch.solutions.count() == 4
    client.post(
        reverse("labeling:batch_edit", args=[batch.pk]),
        {"name": "Uploaded", "overlap": 2, "priority": 9},
    )
    batch.refresh_from_db()
    assert (batch.overlap, batch.priority, batch.is_active) == (2, 9, False)


def test_invalid_overlap_is_refused(client, lead):
    client.force_login(lead)
    response = client.post(
        reverse("labeling:batch_new"), {"name": "bad", "overlap": 0, "priority": 0}
    )
    assert response.status_code == 200 and not Batch.objects.filter(name="bad").exists()


def test_guidelines_open_from_the_labeling_page_and_leads_edit_versions(client, labeler, lead):
    make_solution(make_batch(gold_rate=0))
    labeling = next_labeling(labeler)
    client.force_login(labeler)
    page = client.get(reverse("labeling:labeling", args=[labeling.pk])).content.decode()
    assert reverse("labeling:guidelines") in page and "<kbd>?</kbd>" in page
    default = client.get(reverse("labeling:guidelines")).content.decode()
    assert "<h2>The three ratings</h2>" in default and "$|2x - 5| = 9$" in default
    client.force_login(lead)
    client.post(
        reverse("labeling:guidelines_edit"),
        {"text": "# Rules\n- +1 is good <script>x</script>", "action": "publish"},
    )
    client.post(
        reverse("labeling:guidelines_edit"), {"text": "# Rules v2\n$x^2$", "action": "publish"}
    )
    assert list(Guidelines.objects.values_list("version", flat=True)) == [2, 1]
    client.force_login(labeler)
    shown = client.get(reverse("labeling:guidelines")).content.decode()
    assert "<h2>Rules v2</h2>" in shown and "version 2" in shown
    first = Guidelines.objects.get(version=1)
    from labeling.templatetags.stepwise import plain_markup

    assert "&lt;script&gt;" in plain_markup(first.text) and "<script>" not in plain_markup(
        first.text
    )


def test_expire_leases_task_returns_claims_to_the_pool(settings, labeler):
    settings.STEPWISE_LEASE_SECONDS_MIN = 0
    settings.STEPWISE_LEASE_SECONDS_MAX = 0
    batch = make_batch(gold_rate=0)
    for _ in range(2):  # one to claim and expire, another for the old name's sweep
        make_solution(batch)
    solution = next_labeling(labeler).solution
    assert expire_leases.apply().result == 1
    solution.refresh_from_db()
    assert solution.active_count == 0
    beat = {e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "labeling.tasks.expire_leases" in beat
    # A beat message queued under the task's old name during an upgrade is still taken.
    assert next_labeling(labeler) is not None
    assert registered_task("labeling.expire_leases").apply().result == 1


def test_per_batch_lease_bounds_apply(labeler):
    batch = make_batch(gold_rate=0, lease_seconds_min=30, lease_seconds_max=30)
    make_solution(batch)
    labeling = next_labeling(labeler)
    seconds = (labeling.lease_expires_at - labeling.started_at).total_seconds()
    assert 29 <= seconds <= 31


def _stats(batch):
    fields = ("labeler_id", "last_finished_at", *BatchLabelerStats.TALLY_FIELDS)
    per_labeler = sorted(BatchLabelerStats.objects.filter(batch=batch).values_list(*fields))
    per_hour = sorted(
        BatchHourStats.objects.filter(batch=batch).values_list("hour", *BatchHourStats.TALLY_FIELDS)
    )
    return per_labeler, per_hour


def test_a_rebuild_recounts_exactly_what_the_live_counters_hold(labeler, labeler2):
    batch = make_batch(overlap=2, gold_rate=0)
    make_solutions(batch, 3)
    claim_and_label(labeler, [1, 0, 1])
    claim_and_label(labeler, [1, -1])
    claim_and_label(labeler2, [1, 1, 1])
    claim_and_label(labeler2, [0, 1, -1])
    live = _stats(batch)
    assert live[0] and live[1]
    assert counters.rebuild_batch_stats(batch) == 4
    assert _stats(batch) == live
    BatchLabelerStats.objects.filter(batch=batch).update(steps=999)  # damaged by hand
    counters.rebuild_batch_stats(batch)
    assert _stats(batch) == live


def _labeled_again(line: str, labeler: str, timestamp: str) -> str:
    """The same solution as `line`, labeled by someone else at another time."""
    record = json.loads(line)
    record["labeler"], record["timestamp"] = labeler, timestamp
    return json.dumps(record)


def test_an_import_into_a_batch_with_work_adds_what_a_recount_would_find(
    labeler, labeler2, shared_data, tmp_path
):
    from labeling.services.importing import import_prm800k

    batch = make_batch(overlap=2, gold_rate=0)
    make_solutions(batch, 2)
    claim_and_label(labeler, [1, 0, 1])
    claim_and_label(labeler2, [1, -1])
    lines = (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines()
    phase2 = lines[1]  # labeled at 2022-11-22T16:51 by its labeler

    def imported(name: str, content: list[str]):
        path = tmp_path / name
        path.write_text("\n".join(content) + "\n")
        import_prm800k(path, batch=batch)
        counted = _stats(batch)
        counters.rebuild_batch_stats(batch)
        assert counted == _stats(batch), name  # as a recount of the whole batch finds them
        return counted

    imported("samples.jsonl", lines)
    # A second labeling of the phase-2 solution, an hour later: it reaches N = 2 at 18:00.
    late = "00000000-0000-4000-8000-00000000000a"
    imported("late.jsonl", [_labeled_again(phase2, late, "2022-11-22T18:05:00")])
    # A third one, at 17:10, comes before it: the solution reached N then, not at 18:00.
    _, per_hour = imported(
        "early.jsonl",
        [_labeled_again(phase2, "00000000-0000-4000-8000-00000000000b", "2022-11-22T17:10:00")],
    )
    done = {
        hour.hour: row[-1] for hour, *row in per_hour if hour.date().isoformat() == "2022-11-22"
    }
    assert done == {16: 0, 17: 1, 18: 0}
    late_user = Labeler.objects.get(public_id=late).user_id
    assert BatchLabelerStats.objects.get(batch=batch, labeler_id=late_user).solutions_done == 0
    # The live labelings are still there, beside the imported ones.
    assert BatchLabelerStats.objects.get(batch=batch, labeler=labeler).steps == 3


def test_imported_labelings_show_on_the_dashboard(shared_data, capsys):
    from django.core.management import call_command

    from labeling.services.importing import import_prm800k

    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    batches = Batch.objects.filter(origin=Batch.Origin.IMPORT)
    counted = sum(row.labelings + row.surplus for b in batches for row in b.labeler_stats.all())
    assert counted == 6 - sum(b.solutions.filter(is_quality_control=True).count() for b in batches)
    assert sum(h.steps for b in batches for h in b.hour_stats.all()) > 0
    call_command("rebuild_stats")
    assert "labelings counted" in capsys.readouterr().out


def test_a_rejected_upload_on_the_batch_page_writes_nothing_and_shows_why(client, lead):
    from labeling.services.demo import SAMPLE_DIR
    from labeling.services.importing import import_math

    import_math(SAMPLE_DIR / "problems.jsonl")
    good = (SAMPLE_DIR / "solutions.jsonl").read_text().splitlines()[0]
    client.force_login(lead)
    for name, content, why in (
        ("binary.jsonl", b"\xff\xfe\x00 not text", "not UTF-8 text: byte 0xff at column 1"),
        ("bad.jsonl", f'{good}\n{{"steps": []}}\n'.encode(), "line 2"),
    ):
        upload = io.BytesIO(content)
        upload.name = name
        response = client.post(
            reverse("labeling:batch_new"),
            {"name": "Rejected", "overlap": 1, "priority": 0, "upload": upload},
        )
        assert response.status_code == 400 and why in response.content.decode()
        assert not Batch.objects.filter(name="Rejected").exists()
    assert not Solution.objects.filter(source_id__startswith="demo-").exists()


@pytest.mark.parametrize(
    "back", ["javascript:alert(1)", "https://evil.example/phish", "//evil.example/x", "data:,x"]
)
def test_the_guidelines_back_link_never_points_off_site_or_at_a_script(client, labeler, back):
    client.force_login(labeler)
    page = client.get(reverse("labeling:guidelines"), {"back": back}).content.decode()
    assert "Back to labeling" not in page
    assert "evil.example" not in page and "javascript:" not in page


def test_the_guidelines_back_link_returns_to_a_page_of_this_site(client, labeler):
    client.force_login(labeler)
    page = client.get(
        reverse("labeling:guidelines"), {"back": "/p/default/label/7/"}
    ).content.decode()
    assert 'href="/p/default/label/7/">Back to labeling' in page


@pytest.mark.parametrize(
    "next_url", ["https://evil.example/", "javascript:alert(1)", "//evil.example"]
)
def test_the_labeler_state_form_redirects_only_within_the_site(client, lead, labeler, next_url):
    client.force_login(lead)
    response = client.post(
        reverse("labeling:labeler_state", args=[labeler.pk]), {"state": "paused", "next": next_url}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("labeling:labeler_detail", args=[labeler.pk])
    assert record_of(labeler).state == "paused"  # the action itself went through


def test_the_labeler_state_form_honours_a_next_page_of_this_site(client, lead, labeler):
    client.force_login(lead)
    response = client.post(
        reverse("labeling:labeler_state", args=[labeler.pk]),
        {"state": "paused", "next": reverse("labeling:labelers")},
    )
    assert response["Location"] == reverse("labeling:labelers")


def test_a_lease_ceiling_below_its_floor_is_refused_and_nothing_is_saved(client, lead):
    client.force_login(lead)
    response = client.post(
        reverse("labeling:batch_new"),
        {
            "name": "upside down",
            "overlap": 1,
            "priority": 0,
            "lease_seconds_min": 7000,
            "lease_seconds_max": 10,
        },
    )
    assert response.status_code == 200
    assert "The lease ceiling (10 s) is below its floor (7,000 s)" in response.content.decode()
    assert not Batch.objects.filter(name="upside down").exists()


@pytest.mark.parametrize(
    "field, value",
    [
        ("labelers", [2**70]),
        ("take_limit", 2**70),
        ("take_from", 9223372036854775808),
        ("problems", f"{2**70}"),
        ("problems", f"1-{2**63}"),
        ("priority", 2**70),
    ],
)
def test_numbers_past_their_column_on_the_batch_form_are_refused_and_nothing_is_saved(
    client, lead, field, value
):
    source = make_batch("source", gold_rate=0)
    make_solutions(source, 2)
    protocol = "alternatives" if field == "problems" else "steps"
    data = {"name": "huge", "overlap": 1, "priority": 0, "protocol": protocol, field: value}
    if field == "take_limit":
        data["take_from"] = source.pk
    client.force_login(lead)
    response = client.post(reverse("labeling:batch_new"), data)
    assert response.status_code == 200  # the form again, with the field's error
    assert response.context["form"].errors[field]
    assert not Batch.objects.filter(name="huge").exists() and source.solutions.count() == 2


def test_counters_after_finishes_undos_and_refinishes_through_the_page_match_a_rebuild(
    client, labeler, labeler2
):
    """The finishing rating's upserts (first row of a labeler and an hour, then additions) and
    undo's take-backs leave exactly what a recount finds."""
    batch = make_batch(overlap=2, gold_rate=0)
    make_solutions(batch, 3)
    for user, ratings in ((labeler, [1, 0, 1]), (labeler2, [1, -1]), (labeler, [0, 1, 1])):
        client.force_login(user)
        client.post(reverse("labeling:claim"))
        labeling = Labeling.objects.get(labeler=user, status=Labeling.Status.IN_PROGRESS)
        url = reverse("labeling:rate", args=[labeling.pk])
        for index, value in enumerate(ratings):
            data = {"step_index": index, "rating": value, "flagged": "1" if index == 0 else ""}
            assert client.post(url, data, HTTP_HX_REQUEST="true").status_code == 200
        if user == labeler2:  # undo the finished labeling, then end it differently
            client.post(reverse("labeling:undo", args=[labeling.pk]), HTTP_HX_REQUEST="true")
            client.post(url, {"step_index": 1, "rating": 1}, HTTP_HX_REQUEST="true")
            client.post(url, {"step_index": 2, "rating": 0}, HTTP_HX_REQUEST="true")
    live = _stats(batch)
    per_labeler = {row[0]: row for row in live[0]}
    assert per_labeler[labeler2.pk][2:4] == (1, 0)  # one labeling, not surplus
    assert sum(row[4] for row in live[0]) == 9  # steps: 3 + 3 + 3
    assert counters.rebuild_batch_stats(batch) == 3
    assert _stats(batch) == live
