"""The alternatives protocol in Debian's chromium, against the local SmolLM2 generator: a
labeler builds a whole solution with the keyboard (rates every candidate, continues with one,
writes the last step), and the export is a phase-1 line of the release's shape. A note on a
rated step, by keyboard, in both themes with axe (candidates given: no generator)."""

from __future__ import annotations

import json

import pytest

from labeling import prm800k, selectors
from labeling.models import Batch, Labeling, Note, ProposedSteps, RatingEvent
from labeling.services import alternatives
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.users import make_user
from tests.labeling.test_items_browser import THEMES, no_axe_violations
from tests.labeling.test_notes import CANDIDATES, ready_candidates
from tests.test_accessibility_browser import open_as
from tests.test_browser_labeling import focus_reaches, keys_ready, open_first_solution, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def generator_in_thread(settings, seeded_candidates):
    """As on the embedded default: candidates are generated in a thread of the web process."""
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True


# The local SmolLM2 loads and writes three candidates in a few seconds on an idle machine; a
# loaded CI machine (both passes beside other work) once took 63 s for the first one.
GENERATION_TIMEOUT_MS = 240_000


def wait_for_candidates(page, step_index: int) -> int:
    """The step's candidates, all of them: they show one by one as the model writes them."""
    page.wait_for_selector(
        f'#labeling[data-step-index="{step_index}"] .candidate.focused',
        timeout=GENERATION_TIMEOUT_MS,
    )
    page.wait_for_selector("#candidates:not([data-waiting])", timeout=GENERATION_TIMEOUT_MS)
    keys_ready(page)
    return page.locator("#labeling .candidate").count()


def rate_each(page, ratings: list[str]) -> None:
    """Rate the candidates in order: the selection moves to the next unrated one by itself."""
    for index, key in enumerate(ratings):
        page.wait_for_selector(f'.candidate.focused[data-candidate="{index}"]')
        page.keyboard.press(key)
        page.wait_for_selector(f'.candidate[data-candidate="{index}"][data-rating]')


def test_a_labeler_builds_a_solution_from_candidates_with_the_keyboard(
    page, live_server, generator_in_thread, artifacts_dir
):
    labeler = make_user("mia", "labeler")
    batch = make_batch(
        name="Phase 1", protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=3, generation=None
    )
    problem = make_problem("What is $2 + 3$?", answer="5")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])

    sign_in(page, live_server, "mia")
    page.keyboard.press("Enter")  # claim: the first step's candidates are asked for at once
    page.wait_for_selector("#labeling.alternatives")
    count = wait_for_candidates(page, 0)
    texts = ProposedSteps.objects.get(prefix=[]).steps
    assert 1 <= count == len(texts) <= 3
    page.screenshot(path=str(artifacts_dir / "alternatives-candidates.png"), full_page=True)

    # Step 1: +1 for the first candidate that does not end the solution, -1 for the others.
    going_on = [i for i, text in enumerate(texts) if not prm800k.is_final_step(text)]
    chosen = going_on[0] if going_on else None
    rate_each(page, ["1" if i == chosen else "-" for i in range(count)])
    if chosen is None:  # every candidate answered at once: the labeler writes step 1
        page.keyboard.press("w")
        page.keyboard.type("I add the two numbers.")
        page.keyboard.press("Control+Enter")
    else:
        # Every candidate rated: the selection is back on the +1; j/k move it, Enter continues.
        page.wait_for_selector(f'.candidate.focused[data-candidate="{chosen}"]')
        if count > 1:
            page.keyboard.press("j")
            page.keyboard.press("k")
            page.wait_for_selector(f'.candidate.focused[data-candidate="{chosen}"]')
        page.keyboard.press("Enter")
        page.wait_for_selector('#labeling .path .step[data-step="0"]')
        page.keyboard.press("u")  # back a step: the ratings stay, the choice is taken back
        page.wait_for_selector('#labeling[data-step-index="0"] .candidate.focused[data-rating="1"]')
        page.keyboard.press("Enter")  # and continue with it again
    page.wait_for_selector('#labeling .path .step[data-step="0"]')

    # Step 2: the candidates were asked for when the +1 was given (ahead of the choice).
    count = wait_for_candidates(page, 1)
    rate_each(page, ["0"] * count)
    page.keyboard.press("w")  # none is good enough: write the last step, with its answer
    page.wait_for_selector("#write-step textarea:focus")
    page.keyboard.type("# Answer")
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    page.keyboard.type("$5$")
    page.wait_for_selector("#write-preview .katex")  # the live preview renders the math
    page.screenshot(path=str(artifacts_dir / "alternatives-write.png"), full_page=True)
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#labeling .done")
    assert "solution" in page.inner_text("#labeling .done").lower()
    page.screenshot(path=str(artifacts_dir / "alternatives-done.png"), full_page=True)

    labeling = Labeling.objects.get(labeler=labeler)
    assert labeling.status == Labeling.Status.COMPLETED and labeling.finish_reason == "solution"
    line = json.loads(prm800k.render_record(selectors.release_record(labeling.pk)))
    step1, step2 = line["label"]["steps"]
    assert [c["text"] for c in step1["completions"]] == texts
    if chosen is not None:
        assert step1["chosen_completion"] == chosen and step1["human_completion"] is None
        assert [c["rating"] for c in step1["completions"]] == [
            1 if i == chosen else -1 for i in range(len(texts))
        ]
    assert [c["rating"] for c in step2["completions"]] == [0] * count
    assert step2["chosen_completion"] is None
    assert step2["human_completion"]["text"] == "# Answer\n\n$5$"
    assert line["question"] == {"problem": "What is $2 + 3$?", "ground_truth_answer": "5"}
    assert all(s.time_ms is not None for s in labeling.step_labels.all())
    assert RatingEvent.objects.filter(labeling=labeling, reason="rate").count() >= 4


def test_a_failed_generator_says_so_and_the_labeler_writes_or_asks_again(
    page, live_server, generator_in_thread, settings
):
    from modeling.services import sampling

    make_user("lev", "labeler")
    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2, generation=None)
    problem = make_problem("What is $1 + 1$?", answer="2")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])
    settings.STEPWISE_GENERATOR_URL = "http://127.0.0.1:9/v1"  # nothing listens there
    settings.STEPWISE_GENERATOR_RETRIES = 0
    sampling.generator_from_settings.cache_clear()
    try:
        sign_in(page, live_server, "lev")
        page.keyboard.press("Enter")
        page.wait_for_selector("#candidates [role=alert]:has-text('could not propose steps')")
        keys_ready(page)
        assert ProposedSteps.objects.get().status == ProposedSteps.Status.FAILED
        settings.STEPWISE_GENERATOR_URL = ""  # the service is back
        sampling.generator_from_settings.cache_clear()
        page.keyboard.press("r")  # ask the model again
        wait_for_candidates(page, 0)
        assert ProposedSteps.objects.get().status == ProposedSteps.Status.READY
    finally:
        sampling.generator_from_settings.cache_clear()


def test_after_a_minus_one_the_labeler_rates_the_alternatives_with_the_keyboard(
    page, live_server, generator_in_thread, artifacts_dir
):
    labeler = make_user("ola", "labeler")
    batch = make_batch(alternatives_after_error=True, alternatives_k=2)
    steps = ["I write $2 + 3 = 6$.", "# Answer\n\n6"]
    make_solution(batch, steps=steps, problem=make_problem("What is $2 + 3$?", answer="5"))

    sign_in(page, live_server, "ola")
    open_first_solution(page)
    page.keyboard.press("-")  # the error: the labeling is submitted, then the alternatives
    page.wait_for_selector(
        "#labeling .done #candidates .candidate.focused", timeout=GENERATION_TIMEOUT_MS
    )
    page.wait_for_selector("#candidates:not([data-waiting])", timeout=GENERATION_TIMEOUT_MS)
    keys_ready(page)
    count = page.locator("#labeling .candidate").count()
    rate_each(page, ["1", "0"][:count])
    page.screenshot(path=str(artifacts_dir / "alternatives-after-error.png"), full_page=True)
    page.keyboard.press("Enter")  # next solution: none is waiting, back to the queue
    page.wait_for_url(f"{live_server.url}/p/default/label/")

    labeling = Labeling.objects.get(labeler=labeler)
    assert labeling.finish_reason == "found_error"
    (wrong,) = json.loads(labeling.release_line)["label"]["steps"]
    texts = ProposedSteps.objects.get(prefix=[]).steps
    assert [c["text"] for c in wrong["completions"]] == [steps[0], *texts]
    assert [c["rating"] for c in wrong["completions"]] == [-1, 1, 0][: count + 1]


@pytest.mark.parametrize("theme", THEMES)
def test_a_labeler_notes_a_rated_step_by_keyboard_step_by_step(
    browser, live_server, artifacts_dir, theme
):
    labeler = make_user("mia", "labeler")
    batch = make_batch(
        name="Phase 1", protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2, generation=None
    )
    problem = make_problem("What is $2 + 3$?", answer="5")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])
    ready_candidates(problem, [], CANDIDATES)  # the model's candidates, as if written already
    ready_candidates(problem, [CANDIDATES[0]], ["# Answer\n\n5", "# Answer\n\n6"])
    context, page = open_as(
        browser, live_server, "mia", color_scheme=theme, viewport={"width": 1280, "height": 900}
    )
    try:
        page.wait_for_selector("#start")
        page.keyboard.press("Enter")  # claim
        page.wait_for_selector("#labeling.alternatives")
        assert wait_for_candidates(page, 0) == 2
        rate_each(page, ["1", "-"])

        page.keyboard.press("n")  # the note box, on the step whose candidates were just rated
        focus_reaches(page, "note-text")
        assert page.input_value("#note-step") == "1"
        page.keyboard.type("candidate 2 multiplies: <b>6</b>, not 5")
        page.keyboard.press("Control+Enter")
        page.wait_for_selector("#notes .note")
        assert "candidate 2 multiplies: <b>6</b>, not 5" in page.inner_text("#notes")  # as typed
        labeling = Labeling.objects.get(labeler=labeler)
        note = Note.objects.get()
        assert (note.labeling_id, note.solution_id, note.step_index, note.author_id) == (
            labeling.pk,
            labeling.solution_id,
            0,
            labeler.pk,
        )
        assert note.text == "candidate 2 multiplies: <b>6</b>, not 5"
        # The panel is as it was: both ratings kept, nothing chosen yet.
        assert page.locator("#labeling .candidate[data-rating]").count() == 2
        assert labeling.step_labels.get().chosen_completion is None
        page.screenshot(path=str(artifacts_dir / f"alternatives-note-{theme}.png"), full_page=True)
        no_axe_violations(page, f"the step-by-step page with a note ({theme})")

        # A step not rated yet: refused with the reason, the draft kept, nothing stored.
        page.fill("#note-step", "2")
        page.focus("#note-text")
        page.keyboard.type("too early")
        page.keyboard.press("Control+Enter")
        page.wait_for_selector("#note-error:not([hidden])")
        assert "Step 2 has no rating of yours yet" in page.inner_text("#note-error")
        assert page.input_value("#note-text") == "too early"
        assert Note.objects.count() == 1
        page.keyboard.press("Escape")  # back to rating: the page's keys act again

        page.keyboard.press("Enter")  # continue with the +1
        assert wait_for_candidates(page, 1) == 2
        page.keyboard.press("n")  # nothing rated at step 2 yet: the last rated step
        assert page.input_value("#note-step") == "1"
        assert page.input_value("#note-text") == "too early"

        # The lead finds the note under step 1 of Mia's path on the item page.
        make_user("lea", "lead")
        lead_context, lead = open_as(
            browser, live_server, "lea", color_scheme=theme, viewport={"width": 1280, "height": 900}
        )
        try:
            lead.goto(f"{live_server.url}/p/default/label/lead/items/{labeling.solution_id}/")
            step_one = lead.locator(f'#item-paths [data-labeling="{labeling.pk}"] [data-step="0"]')
            assert "candidate 2 multiplies: <b>6</b>, not 5" in step_one.inner_text()
            lead.screenshot(
                path=str(artifacts_dir / f"alternatives-note-item-{theme}.png"), full_page=True
            )
            no_axe_violations(lead, f"the item page of a step-by-step solution ({theme})")
        finally:
            lead_context.close()
    finally:
        context.close()
