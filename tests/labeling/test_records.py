"""A labeler's record is per project: screening, the gold check's pause, a lead's decision,
gold accuracy and agreement are those of the project the work belongs to. Project A is the
Default project, B "Phase 2"; lena labels in both."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from labeling import selectors
from labeling.models import LabelerRecord, Labeling, Project
from labeling.services import projects, quality, queue
from stepwise.links import project_reverse
from tests.factories import make_batch, make_solution, make_solutions
from tests.helpers.users import grant, make_user
from tests.labeling.helpers import label, record_of

pytestmark = pytest.mark.django_db

B_SLUG = "phase-2"
GOLD_ACCURACY = 'Gold accuracy</span><span class="kpi-value">'


@pytest.fixture
def b(db) -> Project:
    return Project.objects.create(name="Phase 2", slug=B_SLUG)


@pytest.fixture
def lena(b):
    user = make_user("lena")
    for project in (Project.objects.get(slug="default"), b):
        projects.member_add(project=project, user=user, role="labeler")
    return user


def make_gold(batch, ratings, *, screening=False):
    """A gold solution of the batch's project (gold sits outside its batch's regular pool)."""
    solution = make_solution(batch)
    quality.gold_label_set(solution=solution, ratings=ratings, screening=screening)
    return solution


def claim_in(user, project) -> Labeling | None:
    found = queue.claim(user, project=project)
    return None if found is None else found.labeling


def test_becoming_a_labeler_member_makes_the_record_and_a_first_claim_makes_a_missing_one(b):
    nina = make_user("nina")
    projects.member_add(project=b, user=nina, role="labeler")
    assert record_of(nina, b).state == LabelerRecord.State.SCREENING
    assert nina.labeler.public_id  # the identity exports carry, made with it
    projects.member_add(project=b, user=make_user("rhea"), role="researcher")
    assert LabelerRecord.objects.count() == 1  # other roles have none
    # A membership made another way (the admin's pages): the first claim there makes it.
    otto = make_user("otto")
    grant(otto, "labeler", project=b)
    solution = make_solution(make_batch(project=b, gold_rate=0))
    assert claim_in(otto, b).solution == solution
    # No screening set in B: a new labeler starts regular work there at once.
    assert record_of(otto, b).state == LabelerRecord.State.ACTIVE
    assert not LabelerRecord.objects.filter(user=otto).exclude(project=b).exists()


def test_a_labeler_paused_by_gold_in_a_still_claims_in_b_and_not_regular_work_in_a(
    settings, lena, b
):
    settings.STEPWISE_GOLD_MIN_RESULTS = 1
    settings.STEPWISE_PAUSE_BELOW = 0.7
    in_a = make_batch(gold_rate=1.0)
    make_solutions(in_a, 2)
    gold = make_gold(in_a, [1, 1, -1])
    in_b = make_batch(project=b, gold_rate=0)
    regular_b = make_solutions(in_b, 2)
    for project in (in_a.project, b):  # admitted in both (no screening set)
        quality.labeler_set_state(record=record_of(lena, project), state="active")

    first = claim_in(lena, in_a.project)
    assert first.solution == gold  # gold is due at rate 1
    label(first, [-1])  # wrong at step 1: 0 of 1
    in_a_record = record_of(lena, in_a.project)
    assert in_a_record.state == "paused" and in_a_record.paused_by_gold
    assert in_a_record.gold_labelings == 1 and in_a_record.gold_steps_exact == 0

    assert claim_in(lena, in_a.project) is None  # nothing in A, not even regular work
    in_b_labeling = claim_in(lena, b)
    assert in_b_labeling.solution in regular_b
    label(in_b_labeling, [1, 1, 1])
    in_b_record = record_of(lena, b)
    assert in_b_record.state == "active" and in_b_record.gold_labelings == 0
    assert in_b_record.claims_since_gold == 1  # B's count; A's was reset by its gold
    assert record_of(lena, in_a.project).claims_since_gold == 0


def test_screening_passed_in_a_leaves_them_screening_in_b(settings, lena, b):
    settings.STEPWISE_SCREENING_SIZE = 1
    settings.STEPWISE_SCREENING_PASS = 0.8
    in_a, in_b = make_batch(gold_rate=0), make_batch(project=b, gold_rate=0)
    make_solutions(in_a, 1)
    make_solutions(in_b, 1)
    screening_a = make_gold(in_a, [1, 1, 1], screening=True)
    screening_b = make_gold(in_b, [1, 1, 1], screening=True)

    first = claim_in(lena, in_a.project)
    assert first.solution == screening_a
    label(first, [1, 1, 1])
    passed = record_of(lena, in_a.project)
    assert (passed.state, passed.screening_passed, passed.screening_score) == ("active", True, 1.0)

    in_b_record = record_of(lena, b)
    assert in_b_record.state == "screening" and in_b_record.screening_passed is None
    assert claim_in(lena, b).solution == screening_b  # B's screening, not its regular work


def test_a_lead_sees_their_projects_record_only(client, settings, lena, b):
    """Gold accuracy, state and attention on the lead's pages count the lead's project alone; a
    lead of B gets 404 for A's pages."""
    settings.STEPWISE_GOLD_MIN_RESULTS = 10  # no pause here
    lea = make_user("lea", "lead")  # a lead of A
    lou = make_user("lou", "lead", project=b)  # a lead of B only
    in_a, in_b = make_batch(gold_rate=1.0), make_batch(project=b, gold_rate=1.0)
    make_solutions(in_a, 1)
    make_solutions(in_b, 1)
    make_gold(in_a, [1, 1, 1])
    make_gold(in_b, [1, 1, 1])
    for project in (in_a.project, b):
        quality.labeler_set_state(record=record_of(lena, project), state="active")
    label(claim_in(lena, in_a.project), [1, 1, 1])  # 3 of 3 in A
    label(claim_in(lena, b), [1, 0, 0])  # 1 of 3 in B
    quality.labeler_set_state(
        record=record_of(lena, b), state="paused", reason="paused in B by lou", actor=lou
    )

    client.force_login(lea)
    page = client.get(reverse("labeling:labeler_detail", args=[lena.pk])).content.decode()
    assert 'id="state">active<' in page and "paused in B" not in page
    assert f"{GOLD_ACCURACY}100%<" in page and "3 steps, exact rating" in page
    roster = client.get(reverse("labeling:labelers")).content.decode()
    assert "state-active" in roster and "state-paused" not in roster
    assert selectors.lead_cockpit(project=in_a.project).attention == []

    client.force_login(lou)
    detail = project_reverse(B_SLUG, "labeling:labeler_detail", lena.pk)
    page = client.get(detail).content.decode()
    assert 'id="state">paused<' in page and "paused in B by lou" in page
    assert f"{GOLD_ACCURACY}33%<" in page and "3 steps, exact rating" in page
    roster = client.get(project_reverse(B_SLUG, "labeling:labelers")).content.decode()
    assert "state-paused" in roster and "state-active" not in roster
    assert [r.user_id for r in selectors.lead_cockpit(project=b).attention] == [lena.pk]
    assert client.get(reverse("labeling:labeler_detail", args=[lena.pk])).status_code == 404


def test_a_leads_decision_changes_the_record_of_their_project_only(client, lena, b):
    lou = make_user("lou", "lead", project=b)
    client.force_login(lou)
    url = project_reverse(B_SLUG, "labeling:labeler_state", lena.pk)
    assert client.post(url, {"state": "rejected"}).status_code == 302
    assert record_of(lena, b).state == "rejected"
    assert record_of(lena).state == "screening"  # A's, as membership made it


def test_paused_in_a_with_as_labeling_open_they_get_b_work_once_it_lapses(lena, b, lead):
    """They hold one open labeling at most, in all projects: A's, which the pause stops, holds
    B's claim back until its lease lapses; then B hands out work and A's stays unresumed."""
    in_a, in_b = make_batch(gold_rate=0), make_batch(project=b, gold_rate=0)
    make_solutions(in_a, 1)
    regular_b = make_solutions(in_b, 1)
    for project in (in_a.project, b):
        quality.labeler_set_state(record=record_of(lena, project), state="active")
    opened = claim_in(lena, in_a.project)
    label(opened, [1])  # one step rated: a claim would take it back once it lapses
    quality.labeler_set_state(record=record_of(lena), state="paused", actor=lead)
    assert claim_in(lena, b) is None
    Labeling.objects.filter(pk=opened.pk).update(
        lease_expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert queue.expire_stale_leases() == 1
    assert claim_in(lena, b).solution in regular_b
    assert Labeling.objects.get(pk=opened.pk).status == Labeling.Status.EXPIRED


def test_a_labeler_taken_off_a_project_changes_nothing_there_through_any_projects_link(
    client, lena, b
):
    """Removed from B with B's labeling open: rating and extending it are refused, under B's
    link (403, saying why) and under the link of a project they still label in (404 there:
    not that project's labeling); nothing is saved."""
    solution = make_solution(make_batch(project=b, gold_rate=0), steps=["a", "b"])
    labeling = claim_in(lena, b)
    assert labeling.solution == solution
    projects.member_remove(project=b, user=lena, role="labeler")
    labeling.refresh_from_db()  # back to the pool: another labeler of B may take its place
    assert labeling.status == Labeling.Status.EXPIRED
    assert labeling.solution.__class__.objects.get(pk=solution.pk).active_count == 0
    client.force_login(lena)
    for slug, status in ((B_SLUG, 403), ("default", 404)):
        rate = client.post(
            f"/p/{slug}/label/{labeling.pk}/rate/",
            {"step_index": 0, "rating": 1},
            HTTP_HX_REQUEST="true",
        )
        assert rate.status_code == status, slug
        assert client.post(f"/p/{slug}/label/{labeling.pk}/extend/").status_code == 403
    assert (
        "no longer a labeler in this labeling"
        in client.post(
            f"/p/{B_SLUG}/label/{labeling.pk}/rate/",
            {"step_index": 0, "rating": 1},
            HTTP_HX_REQUEST="true",
        ).content.decode()
    )
    labeling.refresh_from_db()
    assert labeling.status == Labeling.Status.EXPIRED and not labeling.step_labels.exists()
    # Nothing of B holds their one open labeling: the other project's work comes at once.
    elsewhere = make_solution(make_batch(project=Project.objects.get(slug="default"), gold_rate=0))
    assert claim_in(lena, Project.objects.get(slug="default")).solution == elsewhere


def test_a_batch_page_shows_labelers_who_have_no_record_in_its_project(client, shared_data, lead):
    """PRM800K's labelers come with their labelings, not as members: the batch page lists
    them, with no state, rather than failing."""
    from labeling.models import Batch
    from labeling.services.importing import import_prm800k
    from tests.labeling.test_importing import samples_path

    import_prm800k(samples_path(shared_data))
    batch = Batch.objects.filter(project__slug="default").first()
    assert not LabelerRecord.objects.exists()
    client.force_login(lead)
    page = client.get(f"/p/default/label/lead/batches/{batch.pk}/")
    assert page.status_code == 200
    assert page.content.decode().count('href="/p/default/label/lead/labelers/') >= 1
