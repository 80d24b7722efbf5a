"""The alternatives protocol through the pages: a lead sets a batch up with problems, a labeler
rates, continues and writes through htmx requests; bad requests change nothing."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from labeling import selectors
from labeling.models import Batch, Completion, Labeling, ProposedSteps, Solution
from labeling.prm800k import is_final_step
from labeling.services import alternatives, rating
from tests.factories import make_batch, make_problem, make_solution
from tests.labeling.helpers import next_labeling

pytestmark = pytest.mark.django_db


def htmx_post(client, url, data):
    return client.post(url, data, HTTP_HX_REQUEST="true")


def poll(client, page_url: str, shown: int = 0):
    """The page's poll for candidates being written (templates/labeling/_candidates.html)."""
    return client.get(f"{page_url}?part=candidates&shown={shown}", HTTP_HX_REQUEST="true")


def writes(captured: CaptureQueriesContext) -> list[str]:
    """The statements that changed or locked rows."""
    return [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].split()[0].upper() in ("INSERT", "UPDATE", "DELETE")
        or " FOR UPDATE" in q["sql"]
        or " FOR NO KEY UPDATE" in q["sql"]
    ]


def test_a_lead_creates_an_alternatives_batch_from_problem_ids(client, lead):
    first, second = make_problem("What is $1+1$?", answer="2"), make_problem(answer="3")
    client.force_login(lead)
    response = client.post(
        reverse("labeling:batch_new"),
        {
            "name": "Phase 1",
            "overlap": 2,
            "priority": 1,
            "is_active": "on",
            "protocol": "alternatives",
            "alternatives_k": 4,
            "problems": f"{first.pk}-{second.pk}, {first.pk}",
        },
    )
    batch = Batch.objects.get(name="Phase 1")
    assert response.status_code == 302
    assert (batch.protocol, batch.alternatives_k) == ("alternatives", 4)
    solutions = Solution.objects.filter(batch=batch)
    assert sorted(s.problem_id for s in solutions) == [first.pk, second.pk]
    assert all(s.format == Solution.Format.PHASE1 and s.steps == [] for s in solutions)
    assert selectors.solution_counts([batch.pk]) == {batch.pk: 2}  # now cached
    third = make_problem(answer="5")
    client.post(
        reverse("labeling:batch_edit", args=[batch.pk]),
        {
            "name": "Phase 1",
            "overlap": 2,
            "priority": 1,
            "problems": f"{listed(client, batch)}, {third.pk}",
        },
    )
    assert selectors.solution_counts([batch.pk]) == {batch.pk: 3}  # not the cached 2


def listed(client, batch: Batch) -> str:
    """The problems field of the batch's edit page, as the lead sees it."""
    page = client.get(reverse("labeling:batch_edit", args=[batch.pk])).content.decode()
    field = re.search(r'<input type="text" name="problems"(?: value="([^"]*)")?', page)
    assert field is not None
    return field.group(1) or ""


def test_the_edit_form_lists_a_step_by_step_batchs_problems_and_adds_to_them(client, lead):
    batch = make_batch("Phase 1", protocol=Batch.Protocol.ALTERNATIVES)
    problems = [make_problem(answer=str(n)) for n in range(5)]
    alternatives.add_problems(
        batch=batch, problem_ids=[p.pk for p in problems[:3]] + [problems[4].pk]
    )
    client.force_login(lead)
    shown = listed(client, batch)
    assert shown == f"{problems[0].pk}-{problems[2].pk}, {problems[4].pk}"
    edit = reverse("labeling:batch_edit", args=[batch.pk])
    form = {"name": "Phase 1", "overlap": 1, "priority": 0}

    # Saved as shown, with another field changed: nothing added, nothing said about problems.
    form["priority"] = 3
    response = client.post(edit, {**form, "problems": shown}, follow=True)
    assert "problem" not in " ".join(str(m) for m in response.context["messages"])
    assert batch.solutions.count() == 4
    # One more id: one more solution, none twice.
    response = client.post(edit, {**form, "problems": f"{shown}, {problems[3].pk}"}, follow=True)
    assert "Added 1 problem to label step by step." in response.content.decode()
    assert sorted(batch.solutions.values_list("problem_id", flat=True)) == [p.pk for p in problems]
    assert listed(client, batch) == f"{problems[0].pk}-{problems[4].pk}"
    # Taking one out is refused, with the reason, and leaves the batch as it was.
    response = client.post(
        edit, {**form, "priority": 7, "problems": f"{problems[0].pk}-{problems[3].pk}"}
    )
    assert response.status_code == 200
    assert f"keep {problems[4].pk} in the list" in response.content.decode()
    batch.refresh_from_db()
    assert batch.priority == 3 and batch.solutions.count() == 5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"problems": "1-x"}, "is not an id or a range"),
        ({"problems": "999999"}, "No problem with id 999999"),
        ({"problems": "5-1"}, "is not a range"),
        ({"protocol": "steps", "problems": "1"}, "Only a batch with the alternatives protocol"),
        ({"alternatives_k": 40}, "Between 1 and 16"),
    ],
)
def test_a_bad_batch_setup_is_refused_and_saves_nothing(client, lead, extra, message):
    client.force_login(lead)
    data = {"name": "bad", "overlap": 1, "priority": 0, "protocol": "alternatives"}
    data.setdefault("alternatives_k", 5)
    response = client.post(reverse("labeling:batch_new"), {**data, **extra})
    assert response.status_code in (200, 400)
    assert message in response.content.decode()
    assert not Batch.objects.filter(name="bad").exists()


def test_the_protocol_of_a_batch_with_solutions_stays(client, lead):
    batch = make_batch("kept")
    make_solution(batch)
    client.force_login(lead)
    response = client.post(
        reverse("labeling:batch_edit", args=[batch.pk]),
        {"name": "kept", "overlap": 1, "priority": 0, "protocol": "alternatives"},
    )
    batch.refresh_from_db()
    assert "stays as it is" in response.content.decode() and batch.protocol == "steps"


@pytest.fixture
def claimed(client, labeler, seeded_candidates):
    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2, generation=None)
    # A fixed text: the seeded samples depend on the prompt (checked: 2 whole candidates).
    problem = make_problem("What is $1 + 1$?", answer="2")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])
    client.force_login(labeler)
    labeling = next_labeling(labeler)
    assert labeling is not None
    return labeling


def test_the_page_waits_for_candidates_then_the_labeler_rates_continues_and_writes(
    client, claimed, eager_tasks
):
    page_url = reverse("labeling:labeling", args=[claimed.pk])
    with eager_tasks():
        # The claim (here their open labeling, again) asks for the candidates, which the task
        # writes at the block's end.
        assert client.post(reverse("labeling:claim"))["Location"] == page_url
        first = client.get(page_url)
    assert first.status_code == 200
    assert "The model is writing candidates for step 1" in first.content.decode()
    part = client.get(page_url + "?part=candidates", HTTP_HX_REQUEST="true")
    assert part.status_code == 200 and 'class="candidate' in part.content.decode()
    proposal = ProposedSteps.objects.get(prefix=[])
    assert proposal.status == ProposedSteps.Status.READY

    rate = reverse("labeling:rate_candidate", args=[claimed.pk])
    response = htmx_post(client, rate, {"step_index": 0, "candidate_index": 0, "rating": 7})
    assert response.status_code == 400 and "A rating is -1, 0 or +1" in response.content.decode()
    response = htmx_post(client, rate, {"step_index": 2, "candidate_index": 0, "rating": 1})
    assert response.status_code == 409 and "Step 1 is the one" in response.content.decode()
    assert not Completion.objects.exists()
    with eager_tasks():
        response = htmx_post(client, rate, {"step_index": 0, "candidate_index": 0, "rating": 1})
    assert response.status_code == 200 and 'data-rating="1"' in response.content.decode()

    choose = reverse("labeling:choose_candidate", args=[claimed.pk])
    response = htmx_post(
        client, choose, {"step_index": 0, "candidate_index": 0, "elapsed_ms": 1500}
    )
    assert response.status_code == 200
    claimed.refresh_from_db()
    step = claimed.step_labels.get(index=0)
    if is_final_step(proposal.steps[0]):  # the model answered at once: done
        assert claimed.status == Labeling.Status.COMPLETED
        return
    assert step.chosen_completion == 0 and step.time_ms == 1500

    write = reverse("labeling:write_step", args=[claimed.pk])
    response = htmx_post(client, write, {"step_index": 1, "text": "   "})
    assert response.status_code == 400 and "Write the step" in response.content.decode()
    response = client.post(write, {"step_index": 1, "text": "# Answer\n\n2"})  # no htmx
    assert response.status_code == 302 and response["Location"] == page_url
    claimed.refresh_from_db()
    assert claimed.status == Labeling.Status.COMPLETED and claimed.finish_reason == "solution"
    done = client.get(page_url)
    assert "Submitted" in done.content.decode() and "Next solution" in done.content.decode()


def test_the_claim_asks_for_the_first_candidates_and_the_page_and_its_poll_write_nothing(
    client, labeler, django_capture_on_commit_callbacks
):
    """The claim (a POST) asks for the first step's candidates and, ahead, the next solution's,
    so the page's first paint finds them asked for; a second claim (a double submit, another
    tab) asks nothing twice. Showing the page, its panel and its poll writes no row and sends no
    task."""
    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2, generation=None)
    problems = [make_problem("What is $1 + 1$?", answer="2"), make_problem(answer="4")]
    alternatives.add_problems(batch=batch, problem_ids=[p.pk for p in problems])
    client.force_login(labeler)
    with django_capture_on_commit_callbacks() as sent:
        claimed = client.post(reverse("labeling:claim"))
        again = client.post(reverse("labeling:claim"))
    labeling = Labeling.objects.get(labeler=labeler)
    page_url = reverse("labeling:labeling", args=[labeling.pk])
    assert claimed["Location"] == again["Location"] == page_url
    asked = ProposedSteps.objects.filter(prefix=[])
    assert sorted(asked.values_list("problem_id", flat=True)) == [p.pk for p in problems]
    assert all(row.requested_by_id == labeler.pk and row.sent_at for row in asked)
    assert len(sent) == 2  # one task for each

    rows = list(ProposedSteps.objects.values())
    with (
        CaptureQueriesContext(connection) as captured,
        django_capture_on_commit_callbacks() as sent,
    ):
        page = client.get(page_url)
        panel = client.get(page_url, HTTP_HX_REQUEST="true")
        polled = poll(client, page_url)
    assert page.status_code == panel.status_code == 200
    assert "The model is writing candidates for step 1" in page.content.decode()
    assert polled.status_code == 204  # nothing new yet
    assert writes(captured) == [] and sent == []
    assert list(ProposedSteps.objects.values()) == rows


def test_a_step_nobody_is_writing_offers_to_ask_and_only_the_labelers_post_asks(
    client, claimed, lead, django_capture_on_commit_callbacks
):
    """Rare: the claim's request was lost (claimed here without one, as by a process that died
    before sending it), or its task was. The page and its poll say so and offer "Ask the
    model" (R) without asking; the labeler's POST asks."""
    page_url = reverse("labeling:labeling", args=[claimed.pk])
    with (
        CaptureQueriesContext(connection) as captured,
        django_capture_on_commit_callbacks() as sent,
    ):
        html = client.get(page_url).content.decode()
        polled = poll(client, page_url)
    assert "The model is not writing candidates for step 1." in html
    assert 'data-key-action="retry"' in html and "Ask the model" in html
    assert polled.status_code == 200 and 'id="not-asked"' in polled.content.decode()
    assert writes(captured) == [] and sent == []
    assert not ProposedSteps.objects.exists()
    client.force_login(lead)  # reading it: told, with nothing to press
    html = client.get(page_url).content.decode()
    assert "The model is not writing candidates for step 1." in html and "Ask the model" not in html
    client.force_login(claimed.labeler)

    ask = reverse("labeling:ask_again", args=[claimed.pk])
    with django_capture_on_commit_callbacks() as sent:
        response = htmx_post(client, ask, {})
    assert "The model is writing candidates for step 1" in response.content.decode()
    proposal = ProposedSteps.objects.get()
    assert len(sent) == 1 and proposal.sent_at is not None

    # Its task died with a candidate written: open past the task's time limit.
    long_ago = timezone.now() - selectors.PROPOSAL_STALE - timedelta(seconds=1)
    ProposedSteps.objects.filter(pk=proposal.pk).update(
        status=ProposedSteps.Status.RUNNING, steps=["I add."], sent_at=long_ago
    )
    with (
        CaptureQueriesContext(connection) as captured,
        django_capture_on_commit_callbacks() as sent,
    ):
        polled = poll(client, page_url, shown=1)  # the page's last poll: swapped, not a 204
    assert polled.status_code == 200 and "data-waiting" not in polled.content.decode()
    assert "not writing candidates for step 1: it stopped after 1 of 2" in polled.content.decode()
    assert writes(captured) == [] and sent == []
    with django_capture_on_commit_callbacks() as sent:
        htmx_post(client, ask, {})
    proposal.refresh_from_db()
    assert len(sent) == 1 and proposal.status == ProposedSteps.Status.PENDING
    assert proposal.sent_at > long_ago and proposal.steps == ["I add."]  # kept, added to


def test_the_minus_one_asks_for_the_alternatives_and_the_done_page_and_its_poll_write_nothing(
    client, labeler, django_capture_on_commit_callbacks
):
    """PRM800K phase 2: the −1 (a POST) asks for the alternatives to the wrong step; the done
    page and its poll only read. A request lost since is offered, not made, by the page."""
    batch = make_batch(alternatives_after_error=True, alternatives_k=2)
    problem = make_problem("What is $2 + 3$?", answer="5")
    make_solution(batch, steps=["I write $2 + 3 = 6$.", "# Answer\n\n6"], problem=problem)
    labeling = next_labeling(labeler)
    client.force_login(labeler)
    page_url = reverse("labeling:labeling", args=[labeling.pk])
    with django_capture_on_commit_callbacks() as sent:
        response = htmx_post(
            client, reverse("labeling:rate", args=[labeling.pk]), {"step_index": 0, "rating": -1}
        )
    assert "The model is writing alternatives to step 1" in response.content.decode()
    proposal = ProposedSteps.objects.get()
    assert (proposal.prefix, proposal.requested_by_id, len(sent)) == ([], labeler.pk, 1)

    rows = list(ProposedSteps.objects.values())
    with (
        CaptureQueriesContext(connection) as captured,
        django_capture_on_commit_callbacks() as sent,
    ):
        page = client.get(page_url)
        polled = poll(client, page_url)
    assert "The model is writing alternatives to step 1" in page.content.decode()
    assert polled.status_code == 204
    assert writes(captured) == [] and sent == []
    assert list(ProposedSteps.objects.values()) == rows

    ProposedSteps.objects.all().delete()  # lost
    with (
        CaptureQueriesContext(connection) as captured,
        django_capture_on_commit_callbacks() as sent,
    ):
        html = client.get(page_url).content.decode()
    assert "The model is not writing alternatives to step 1." in html and "Ask the model" in html
    assert writes(captured) == [] and sent == [] and not ProposedSteps.objects.exists()
    with django_capture_on_commit_callbacks() as sent:
        htmx_post(client, reverse("labeling:ask_again_after_error", args=[labeling.pk]), {})
    assert ProposedSteps.objects.get().sent_at is not None and len(sent) == 1


def test_candidates_show_as_they_come_and_fewer_than_k_says_why(client, claimed):
    Batch.objects.filter(pk=claimed.solution.batch_id).update(alternatives_k=3)
    proposal = ProposedSteps.objects.create(  # as the generate task leaves it, one sample in
        problem=claimed.solution.problem,
        prefix=[],
        prefix_sha256=selectors.prefix_hash([]),
        k=3,
        status=ProposedSteps.Status.RUNNING,
        steps=["I add $1 + 1$."],
        generator="test",
    )
    page_url = reverse("labeling:labeling", args=[claimed.pk])
    html = client.get(page_url).content.decode()
    assert "The model is writing 2 more candidates" in html
    assert 'data-candidate="0"' in html

    assert (
        poll(client, page_url, 1).status_code == 204
    )  # nothing new: the page stays as the labeler has it
    rate = reverse("labeling:rate_candidate", args=[claimed.pk])
    response = htmx_post(client, rate, {"step_index": 0, "candidate_index": 0, "rating": 1})
    assert response.status_code == 200 and 'data-rating="1"' in response.content.decode()
    assert "The other candidates are still being written" in response.content.decode()
    choose = reverse("labeling:choose_candidate", args=[claimed.pk])
    response = htmx_post(client, choose, {"step_index": 0, "candidate_index": 0})
    assert response.status_code == 409 and "still writing" in response.content.decode()

    ProposedSteps.objects.filter(pk=proposal.pk).update(steps=["I add $1 + 1$.", "I count."])
    html = poll(client, page_url, 1).content.decode()
    assert 'data-candidate="1"' in html and "writing 1 more candidate…" in html
    assert 'data-candidate="0" data-rating="1"' in " ".join(html.split())  # kept
    ProposedSteps.objects.filter(pk=proposal.pk).update(
        status=ProposedSteps.Status.READY, dropped={"duplicate": 1}
    )
    html = poll(client, page_url, 2).content.decode()
    assert "The model is writing" not in html
    assert "2 of 3: 1 was a duplicate of another." in html
    response = htmx_post(client, choose, {"step_index": 0, "candidate_index": 0})
    assert response.status_code == 200
    assert claimed.step_labels.get(index=0).chosen_completion == 0


def test_a_request_that_gave_no_candidate_says_why(client, claimed):
    ProposedSteps.objects.create(
        problem=claimed.solution.problem,
        prefix=[],
        prefix_sha256=selectors.prefix_hash([]),
        k=2,
        status=ProposedSteps.Status.FAILED,
        error="The generator gave no step.",
        dropped={"cut": 1, "empty": 1},
    )
    html = client.get(reverse("labeling:labeling", args=[claimed.pk])).content.decode()
    assert (
        "The generator gave no step. (0 of 2: 1 was cut off at the token cap, 1 was empty)" in html
    )


def test_a_written_step_with_text_then_its_answer_ends_the_solution_on_the_page(client, claimed):
    page_url = reverse("labeling:labeling", args=[claimed.pk])
    write = reverse("labeling:write_step", args=[claimed.pk])
    # A plain form post, as a browser sends it: CRLF line ends.
    text = "I add: $1 + 1 = 2$.\r\n\r\n# Answer\r\n\r\n2"
    response = client.post(write, {"step_index": 0, "text": text})
    assert response.status_code == 302 and response["Location"] == page_url
    claimed.refresh_from_db()
    assert claimed.status == Labeling.Status.COMPLETED and claimed.finish_reason == "solution"
    human = Completion.objects.get(step__labeling=claimed, index=-1)
    assert human.text == "I add: $1 + 1 = 2$.\n\n# Answer\n\n2"  # as the release writes it
    assert not ProposedSteps.objects.exists()  # no candidates asked for a step 2

    html = client.get(page_url).content.decode()
    assert "Submitted" in html and "Done after 1 step" in html
    assert "The model is writing" not in html
    assert '<span class="answer-label">Answer</span> 2' in html  # the badge on the path
    assert not ProposedSteps.objects.exists()


def test_a_written_step_with_a_nul_character_is_refused_and_writes_nothing(client, claimed):
    write = reverse("labeling:write_step", args=[claimed.pk])
    response = htmx_post(client, write, {"step_index": 0, "text": "I add \x00 $1 + 1$."})
    assert response.status_code == 400
    # stepwise.middleware refuses it before the view, naming the field
    assert "The form field &#x27;text&#x27; holds a NUL character" in response.content.decode()
    assert not Completion.objects.exists() and not ProposedSteps.objects.exists()


def test_another_labeler_cannot_act_on_the_labeling(client, claimed, labeler2):
    client.force_login(labeler2)
    response = htmx_post(
        client,
        reverse("labeling:rate_candidate", args=[claimed.pk]),
        {"step_index": 0, "candidate_index": 0, "rating": 1},
    )
    assert response.status_code == 403 and not Completion.objects.exists()


def test_leads_add_problems_to_an_alternatives_batch_through_the_api(client, lead, labeler):
    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES, generation=None)
    problem = make_problem(answer="4")
    url = reverse("batch-problems", args=[batch.pk])
    client.force_login(labeler)
    assert (
        client.post(url, {"problems": [problem.pk]}, content_type="application/json").status_code
        == 403
    )
    client.force_login(lead)
    response = client.post(url, {"problems": [problem.pk]}, content_type="application/json")
    assert response.status_code == 200 and response.json() == {"added": 1}
    again = client.post(url, {"problems": [problem.pk]}, content_type="application/json")
    assert again.json() == {"added": 0}  # idempotent
    unknown = client.post(url, {"problems": [999999]}, content_type="application/json")
    assert unknown.status_code == 400 and "No problem with id 999999" in unknown.json()["detail"]
    bad = client.post(url, {"problems": "x"}, content_type="application/json")
    assert bad.status_code == 400 and "problems" in bad.json()
    steps = make_batch()
    refused = client.post(
        reverse("batch-problems", args=[steps.pk]),
        {"problems": [problem.pk]},
        content_type="application/json",
    )
    assert refused.status_code == 400 and "alternatives protocol" in refused.json()["detail"]
    assert Solution.objects.filter(batch=batch).count() == 1
    assert client.get(reverse("batch-detail", args=[batch.pk])).json()["protocol"] == "alternatives"


def test_write_and_back_cycles_leave_at_most_the_cap_of_candidate_sets_wanted_and_queued(
    client, claimed, labeler, labeler2, settings, django_capture_on_commit_callbacks
):
    """An attacker's cycles of "write my own step" then "back a step" (200 in 6 s queued 215
    tasks), each asking for the candidates after a new path: at most the cap of the labeler's
    sets stay wanted and at most the cap of tasks go out for them (none is taken here: a busy
    worker); another labeler's request still goes out at once."""
    cap = settings.STEPWISE_CANDIDATE_SETS_PER_LABELER
    write = reverse("labeling:write_step", args=[claimed.pk])
    back = reverse("labeling:step_back", args=[claimed.pk])
    with django_capture_on_commit_callbacks() as sent:
        for cycle in range(8 * cap):
            response = htmx_post(client, write, {"step_index": 0, "text": f"I try ${cycle}$."})
            assert response.status_code == 200
            assert htmx_post(client, back, {}).status_code == 200
    assert ProposedSteps.objects.count() == 8 * cap + 1  # each path asked for, and step 1's
    wanted = ProposedSteps.objects.filter(
        status__in=(ProposedSteps.Status.PENDING, ProposedSteps.Status.RUNNING)
    )
    assert wanted.count() <= cap
    assert list(wanted.values_list("prefix", flat=True)) == [[]]  # the step being labeled
    assert len(sent) <= cap
    assert ProposedSteps.objects.filter(sent_at__isnull=False).count() == len(sent)
    assert set(ProposedSteps.objects.values_list("requested_by", flat=True)) == {labeler.pk}
    # "Ask again" on someone else's labeling sends nothing; their own claim asks at once.
    client.force_login(labeler2)
    other = reverse("labeling:ask_again", args=[claimed.pk])
    with django_capture_on_commit_callbacks() as sent:
        assert htmx_post(client, other, {}).status_code in (403, 404)
    assert not sent and not ProposedSteps.objects.filter(requested_by=labeler2).exists()
    problem = make_problem("What is $2 + 2$?", answer="4")
    alternatives.add_problems(batch=claimed.solution.batch, problem_ids=[problem.pk])
    with django_capture_on_commit_callbacks() as sent:
        assert client.post(reverse("labeling:claim")).status_code == 302
    assert Labeling.objects.get(labeler=labeler2).solution.problem_id == problem.pk
    asked = ProposedSteps.objects.get(problem=problem)
    assert asked.requested_by == labeler2 and asked.sent_at is not None and len(sent) == 1


@pytest.mark.django_db(transaction=True)
def test_two_tabs_racing_write_and_back_get_every_answer_and_keep_the_cap(
    claimed, labeler, settings
):
    """Two tabs of one labeler send write/back cycles at the same moment: every request is
    answered (a labeler's sets are counted under a lock on their user row, FOR NO KEY UPDATE:
    FOR UPDATE deadlocked with a step back's foreign key check at its commit, in one of four
    runs of this race at four times these cycles), and the cap holds."""
    from modeling.services import sampling

    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # the demo's threads; the model stays busy
    cap = settings.STEPWISE_CANDIDATE_SETS_PER_LABELER
    # The next solutions' first steps are asked ahead, and found ready: nothing to generate.
    more = [make_problem(f"What is ${n} + 3$?", answer=str(n + 3)) for n in range(2)]
    alternatives.add_problems(batch=claimed.solution.batch, problem_ids=[p.pk for p in more])
    for problem in more:
        ProposedSteps.objects.create(
            problem=problem,
            prefix=[],
            prefix_sha256=selectors.prefix_hash([]),
            k=2,
            status=ProposedSteps.Status.READY,
            steps=["I add.", "I count."],
            generator="test",
        )
    write = reverse("labeling:write_step", args=[claimed.pk])
    back = reverse("labeling:step_back", args=[claimed.pk])
    failures: list[object] = []

    def tab(name: str) -> None:
        tab_client = Client()
        tab_client.force_login(labeler)
        try:
            for cycle in range(5 * cap):
                text = {"step_index": 0, "text": f"Tab {name} tries ${cycle}$."}
                answers = {
                    htmx_post(tab_client, write, text).status_code,
                    htmx_post(tab_client, back, {}).status_code,
                }
                if not answers <= {200, 409}:  # 409: the other tab's step came first
                    failures.append(answers)
        except Exception as exc:  # the test client raises what the view raised
            failures.append(exc)
        finally:
            connections.close_all()

    with sampling.generator_from_settings()._lock:
        tabs = [threading.Thread(target=tab, args=(name,)) for name in "AB"]
        for thread in tabs:
            thread.start()
        for thread in tabs:
            thread.join()
        assert failures == []
        wanted = ProposedSteps.objects.filter(
            status__in=(ProposedSteps.Status.PENDING, ProposedSteps.Status.RUNNING)
        )
        assert wanted.count() <= cap
        assert ProposedSteps.objects.filter(sent_at__isnull=False).count() <= cap
        # Given up: nobody waits for step 1's candidates, whose thread ends without the model.
        rating.finish_labeling(labeling_id=claimed.pk, user=labeler, reason="give_up")
