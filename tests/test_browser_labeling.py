"""End to end in Debian's chromium: sign in, label a whole solution with the keyboard, check the rows."""

import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from labeling.models import Labeling
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.users import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEPS = [
    "I notice that $x^2 - 5x + 6$ factors as $(x-2)(x-3)$.",
    "So the roots are $x = 2$ and $x = 3$, and their sum is $\\frac{10}{2} = 5$.",
    "I could also use Vieta: the sum is $-\\frac{b}{a} = 5$.",
    "# Answer\n\n5",
]


def sign_in(page, live_server, username):
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/p/default/")
    page.wait_for_selector("#start")


def open_first_solution(page):
    """Enter on the queue page, then wait until the labeling page's keys act (a new page)."""
    page.keyboard.press("Enter")
    page.wait_for_selector("#labeling .step.current")
    keys_ready(page)


def first_step_rated(page, live_server, username: str):
    """A new labeler with one solution waiting, signed in, who opens it and rates its first step
    +1 by key; returns the labeler."""
    labeler = make_user(username, "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, username)
    open_first_solution(page)
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="0"]')
    return labeler


def pump_until(page, condition, timeout_s: float = 60) -> None:
    """Waits for `condition()`, a state of the test's own (a held route). Playwright runs route
    handlers only while the test is inside one of its calls, so the wait is made of short ones."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come about"
        page.wait_for_timeout(20)


def page_state(page) -> dict:
    """What a labeling page was doing, for a failure's message: its keys, retries, banner and
    the rate button that key 1 clicks (the report adds what the page saw: tests/conftest.py)."""
    return page.evaluate(
        """() => {
          const button = document.querySelector(
            '#labeling [data-key-action="rate-pos"]:not([data-scope="step"])');
          return {
            keys: document.documentElement.dataset.keys || null,
            retrying: document.documentElement.dataset.retrying || null,
            banner: document.getElementById('net-error')?.textContent || null,
            rate_button: button ? (button.disabled ? 'disabled' : button.className) : null,
            focus: document.activeElement?.tagName || null,
          };
        }"""
    )


def keys_ready(page):
    page.wait_for_selector("html[data-keys=ready]", state="attached")


def focus_reaches(page, element_id: str) -> None:
    """Wait for the element to take the focus: a key pressed while a rating's answer settles is
    kept and acted on after it (labeling.js's pending keys), not at the press."""
    page.wait_for_function(
        "id => document.activeElement && document.activeElement.id === id", arg=element_id
    )


def test_labeler_labels_a_whole_solution_with_the_keyboard(page, live_server, artifacts_dir):
    labeler = make_user("kim", "labeler")
    problem = make_problem("What is the sum of the roots of $x^2 - 5x + 6 = 0$?", answer="5")
    make_solution(make_batch(name="Generation 1"), steps=STEPS, problem=problem)

    sign_in(page, live_server, "kim")
    open_first_solution(page)  # Enter starts labeling
    page.wait_for_selector(
        ".problem .katex"
    )  # the math rendered offline (KaTeX runs after the swap)

    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="0"]')
    page.keyboard.press("f")  # flag step 2 as unsure, then rate it +1
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="1"]')
    page.keyboard.press("0")
    page.wait_for_selector('.step.rated[data-step="2"]')
    page.screenshot(path=str(artifacts_dir / "labeling-page.png"), full_page=True)
    page.keyboard.press("u")  # undo the neutral, then rate it again
    page.wait_for_selector('.step.current[data-step="2"]')
    page.keyboard.press("0")
    page.wait_for_selector('.step.rated[data-step="2"]')
    page.keyboard.press("1")
    page.wait_for_selector("#labeling .done")
    assert "reached the end" in page.inner_text("#labeling .done")
    page.screenshot(path=str(artifacts_dir / "labeling-done.png"), full_page=True)

    labeling = Labeling.objects.get(labeler=labeler)
    assert labeling.status == "completed" and labeling.finish_reason == "solution"
    ratings = [
        (s.index, s.completions.get().rating, s.completions.get().flagged)
        for s in labeling.step_labels.order_by("index")
    ]
    assert ratings == [(0, 1, False), (1, 1, True), (2, 0, False), (3, 1, False)]
    assert all(s.time_ms is not None for s in labeling.step_labels.all())
    assert labeling.events.filter(reason="undo").count() == 1


def test_reload_resumes_and_a_minus_one_ends_the_solution(page, live_server):
    labeler = first_step_rated(page, live_server, "ana")
    page.reload()
    page.wait_for_selector('.step.current[data-step="1"]')  # exactly where the labeler was
    keys_ready(page)
    page.keyboard.press("-")
    page.wait_for_selector("#labeling .done")
    labeling = Labeling.objects.get(labeler=labeler)
    assert labeling.finish_reason == "found_error" and labeling.step_labels.count() == 2


def test_a_rating_that_cannot_be_saved_is_retried_then_left_to_the_labeler(page, live_server):
    """The connection drops on every try: the page retries by itself, then says it could not
    save and keeps the choice; R sends it once the server is reachable."""
    labeler = make_user("noa", "labeler")
    make_solution(make_batch(), steps=STEPS)
    page.add_init_script("window.STEPWISE_RETRY_DELAYS_MS = [10, 10];")  # two quick retries
    sign_in(page, live_server, "noa")
    open_first_solution(page)
    tries = []
    page.route("**/rate/", lambda route: (tries.append(1), route.abort()))  # the line is down
    page.keyboard.press("1")
    try:
        page.wait_for_selector("#net-error:has-text('Press R or click here to retry')")
    except PlaywrightTimeoutError:
        # Seen once in a loaded CI run, not reproduced since: say what the page was doing.
        raise AssertionError(
            f"no give-up banner after {len(tries)} tries; page: {page_state(page)}"
        ) from None
    assert len(tries) == 3  # the click and two retries
    assert "Not saved: the server could not be reached." in page.inner_text("#net-error")
    assert Labeling.objects.get(labeler=labeler).step_labels.count() == 0
    page.unroute("**/rate/")
    page.keyboard.press("r")  # retry the same rating
    page.wait_for_selector('.step.rated[data-step="0"]')
    assert page.locator("#net-error").is_hidden()
    assert Labeling.objects.get(labeler=labeler).step_labels.get().completions.get().rating == 1


def test_a_server_outage_mid_labeling_is_ridden_out_and_nothing_is_saved_twice(page, live_server):
    """A restart of the database or a web worker: the first try is saved but its answer is lost
    (502), the second gets a 503, the third gets through. The page retries by itself, keeps the
    key pressed meanwhile, and the server keeps one row per step."""
    labeler = make_user("ivo", "labeler")
    make_solution(make_batch(), steps=STEPS)
    page.add_init_script("window.STEPWISE_RETRY_DELAYS_MS = [200, 200, 200];")
    sign_in(page, live_server, "ivo")
    open_first_solution(page)
    answers = []
    held = []
    calls = []

    def outage(route):
        calls.append(route.request.post_data)  # reached the route, whatever comes of it
        if not answers:
            route.fetch()  # the server saves the rating, and the answer never arrives
            answers.append(502)
            route.fulfill(status=502, body="Bad gateway")
        elif len(answers) == 1:
            held.append(route)  # the retry hangs: the page is seen retrying, however slow
        else:
            answers.append(200)
            route.continue_()

    page.route("**/rate/", outage)
    page.keyboard.press("1")
    try:
        page.wait_for_selector("html[data-retrying]", state="attached")
    except PlaywrightTimeoutError:
        # Seen once in a loaded CI run, not in 50 runs since: say where the page stood.
        raise AssertionError(
            f"the page is not retrying; requests {calls}, answers {answers}, "
            f"page: {page_state(page)}"
        ) from None
    assert "Not saved yet" in page.inner_text("#net-error")
    page.keyboard.press("0")  # pressed while the page retries: kept for the next step
    pump_until(page, lambda: held)
    answers.append(503)
    held[0].fulfill(status=503, body="The database cannot be reached right now.")
    page.wait_for_selector('.step.rated[data-step="1"]')
    assert page.locator("#net-error").is_hidden()
    assert answers[:3] == [502, 503, 200]
    labeling = Labeling.objects.get(labeler=labeler)
    ratings = [
        (s.index, s.completions.get().rating) for s in labeling.step_labels.order_by("index")
    ]
    assert ratings == [(0, 1), (1, 0)]  # one row per step, though step 1 was sent three times
    assert labeling.events.filter(reason="rate").count() == 2


def test_keys_pressed_faster_than_the_server_answers_are_all_kept(page, live_server):
    labeler = make_user("ben", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "ben")
    open_first_solution(page)
    for key in ["1", "0", "1", "1"]:  # no waiting between keys: each lands mid-request or mid-swap
        page.keyboard.press(key)
    page.wait_for_selector("#labeling .done")
    labeling = Labeling.objects.get(labeler=labeler)
    ratings = [s.completions.get().rating for s in labeling.step_labels.order_by("index")]
    assert ratings == [1, 0, 1, 1] and labeling.finish_reason == "solution"


def test_a_key_pressed_before_the_page_has_loaded_its_scripts_is_kept(page, live_server):
    """A labeler who types as soon as the solution shows loses nothing: the key waits until
    htmx has wired the panel. htmx is held back here, so the key lands before that, always."""
    labeler = make_user("eve", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "eve")
    held = []
    page.route("**/htmx.min.js", lambda route: held.append(route))
    page.keyboard.press("Enter")
    page.wait_for_selector("#labeling .step.current")
    page.keyboard.press("1")
    assert held and page.get_attribute("html", "data-keys") is None  # not wired yet
    held[0].continue_()
    page.wait_for_selector('.step.rated[data-step="0"]')
    rated = Labeling.objects.get(labeler=labeler).step_labels.get()
    assert rated.index == 0 and rated.completions.get().rating == 1


def test_the_page_warns_before_the_claim_runs_out_and_activity_keeps_it(page, live_server):
    from datetime import timedelta

    from django.utils import timezone

    labeler = make_user("lea", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "lea")
    page.keyboard.press("Enter")
    page.wait_for_selector("#labeling .step.current")
    labeling = Labeling.objects.get(labeler=labeler)
    soon = timezone.now() + timedelta(seconds=90)  # the labeler was idle: 90 s left
    Labeling.objects.filter(pk=labeling.pk).update(lease_expires_at=soon)
    page.reload()
    keys_ready(page)
    page.wait_for_selector("#lease-warning:has-text('2 minutes left on this solution')")
    page.mouse.wheel(0, 10)  # activity, not a rating: the page extends the claim
    page.wait_for_selector("#lease-warning", state="hidden")
    assert Labeling.objects.get(pk=labeling.pk).lease_expires_at > soon + timedelta(minutes=5)
    page.keyboard.press("1")  # and labeling goes on as before
    page.wait_for_selector('.step.rated[data-step="0"]')


def test_an_escaped_dollar_is_a_dollar_sign_not_the_start_of_math(page, live_server):
    """MATH problems write money as \\$5; KaTeX's auto-render alone took it for a delimiter and
    set the words up to the next dollar as math."""
    make_user("max", "labeler")
    problem = make_problem(
        "A pen costs \\$5 and a book costs \\$7. If $x = 5 + 7$, what is $\\$x$ in total?"
    )
    make_solution(make_batch(), steps=STEPS, problem=problem)
    sign_in(page, live_server, "max")
    open_first_solution(page)
    page.wait_for_selector(".problem-text .katex")
    text = page.inner_text(".problem-text")
    assert "A pen costs $5 and a book costs $7." in text  # plain text, dollar signs shown
    assert page.locator(".problem-text .katex").count() == 2  # exactly the two formulas
    assert page.locator(".problem-text .katex-error").count() == 0
    sources = page.eval_on_selector_all(
        ".problem-text annotation", "nodes => nodes.map(n => n.textContent)"
    )
    assert sources == ["x = 5 + 7", "\\$x"]


def completion_ratings(labeling) -> list[int]:
    return [s.completions.get().rating for s in labeling.step_labels.order_by("index")]


def test_the_header_shows_the_step_and_moves_on_after_a_rating(page, live_server):
    make_user("ida", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "ida")
    open_first_solution(page)
    header = page.locator("#labeling .step-of")
    assert header.inner_text() == "Step 1 of 4"
    assert "Solution 1 today" in page.inner_text("#labeling .panel-head")
    bar = page.locator('#labeling [role="progressbar"]')
    assert (bar.get_attribute("aria-valuenow"), bar.get_attribute("aria-valuemax")) == ("0", "4")
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="0"]')
    assert header.inner_text() == "Step 2 of 4"
    assert bar.get_attribute("aria-valuenow") == "1"
    cells = page.locator("#labeling .step-map .map-cell")
    assert cells.count() == 4
    assert cells.nth(0).inner_text() == "+1" and "rated +1" in cells.nth(0).get_attribute(
        "aria-label"
    )
    assert cells.nth(1).get_attribute("aria-current") == "step"
    assert cells.nth(2).inner_text() == "" and "not shown yet" in cells.nth(2).get_attribute(
        "aria-label"
    )
    assert page.locator("#labeling .step").count() == 2  # later steps stay hidden


def test_a_rated_step_picked_in_the_map_changes_from_plus_one_to_zero(page, live_server):
    labeler = make_user("jan", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "jan")
    open_first_solution(page)
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="0"]')
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="1"]')
    page.click('#labeling .map-cell[data-select-step="0"]')
    page.wait_for_selector('.step.selected[data-step="0"] .revisit', state="visible")
    page.keyboard.press("0")  # acts on the selected step, not on the current one
    page.wait_for_selector('.step.rated.rating-0[data-step="0"]')
    assert page.locator('#labeling .map-cell[data-select-step="0"]').inner_text() == "0"
    labeling = Labeling.objects.get(labeler=labeler)
    assert completion_ratings(labeling) == [0, 1]  # step 3 was not rated by the 0
    edit = labeling.events.get(reason="edit")
    assert (edit.step_index, edit.old_rating, edit.new_rating) == (0, 1, 0)
    # The new panel is back at the current step: 1 rates it.
    assert page.locator("#labeling .step.selected").count() == 0
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="2"]')
    assert completion_ratings(labeling) == [0, 1, 1]


def test_rate_again_from_a_step_takes_back_the_later_ratings(page, live_server):
    labeler = make_user("kai", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "kai")
    open_first_solution(page)
    for step in range(3):
        page.keyboard.press("1")
        page.wait_for_selector(f'.step.rated[data-step="{step}"]')
    questions = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.keyboard.press("[")  # the last rated step (3)
    page.wait_for_selector('.step.selected[data-step="2"]')
    page.keyboard.press("Escape")  # back to the current step
    page.wait_for_selector("#labeling .step.selected", state="detached")
    page.keyboard.press("[")  # step 3 again, then step 2
    page.wait_for_selector('.step.selected[data-step="2"]')
    page.keyboard.press("[")
    page.wait_for_selector('.step.selected[data-step="1"]')
    page.keyboard.press("a")
    page.wait_for_selector('.step.current[data-step="1"]')
    assert questions == ["Take back 2 ratings (step 2 to 3) and rate again from step 2?"]
    labeling = Labeling.objects.get(labeler=labeler)
    assert list(labeling.step_labels.values_list("index", flat=True)) == [0]
    undone = labeling.events.filter(reason="undo").order_by("pk")
    assert [(e.step_index, e.old_rating) for e in undone] == [(2, 1), (1, 1)]
    assert labeling.events.filter(reason="rate").count() == 3  # nothing lost from the history
    assert page.locator("#labeling .step-of").inner_text() == "Step 2 of 4"


def test_a_finished_solution_is_revisited_through_an_outage_and_saved_once(page, live_server):
    """Within the undo window a submitted solution's steps can still change between +1 and 0;
    the change is retried by the page through a lost answer, and recorded once."""
    labeler = make_user("max", "labeler")
    make_solution(make_batch(), steps=STEPS)
    page.add_init_script("window.STEPWISE_RETRY_DELAYS_MS = [200, 200, 200];")
    sign_in(page, live_server, "max")
    open_first_solution(page)
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="0"]')
    page.keyboard.press("-")
    page.wait_for_selector("#labeling .done")
    answers = []

    def outage(route):
        if not answers:
            route.fetch()  # saved, and the answer is lost
            answers.append(502)
            route.fulfill(status=502, body="Bad gateway")
        else:
            answers.append(200)
            route.continue_()

    page.route("**/revise/", outage)
    page.click('#labeling .map-cell[data-select-step="0"]')
    page.keyboard.press("0")
    page.wait_for_selector('.step.rated.rating-0[data-step="0"]')
    assert answers == [502, 200]
    labeling = Labeling.objects.get(labeler=labeler)
    assert labeling.status == "completed" and completion_ratings(labeling) == [0, -1]
    assert labeling.events.filter(reason="edit").count() == 1
    assert page.locator("#labeling .done").count() == 1


def test_the_keys_overlay_is_modal_and_gives_focus_back(page, live_server):
    labeler = make_user("liv", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "liv")
    open_first_solution(page)
    page.focus('#labeling [data-key-action="give-up"]')
    page.keyboard.press("?")
    page.wait_for_selector("#key-help[open]")
    assert page.evaluate("document.getElementById('key-help').contains(document.activeElement)")
    listed = page.eval_on_selector_all("#key-help dt", "dts => dts.map(d => d.dataset.action)")
    handled = page.evaluate(
        "Object.values(JSON.parse(document.querySelector('script[data-keys]').dataset.keys))"
    )
    assert set(listed) == set(handled) and {"help", "guidelines", "again"} <= set(listed)
    page.keyboard.press("1")  # does nothing while the overlay is open
    page.keyboard.press("Escape")
    page.wait_for_selector("#key-help", state="hidden")
    assert page.evaluate("document.activeElement.dataset.keyAction") == "give-up"
    # A key that clicked a button would have sent its request at once: none is under way.
    assert page.locator("#labeling.htmx-request").count() == 0
    assert Labeling.objects.get(labeler=labeler).step_labels.count() == 0
    assert labeling_events(labeler) == []
    page.keyboard.press("1")  # and once closed, keys act again
    page.wait_for_selector('.step.rated[data-step="0"]')


# Whether the overlay's last key is in sight (inside its list's box and the window), and whether
# the line saying the list scrolls shows.
LAST_KEY = """() => {
  const list = document.querySelector("#key-help .keys");
  const last = list.lastElementChild.getBoundingClientRect();
  const cue = document.getElementById("key-help-more");
  return {shown: last.bottom <= Math.min(list.getBoundingClientRect().bottom, innerHeight) + 0.5,
          cue: !!cue && !cue.hidden && cue.getBoundingClientRect().height > 0};
}"""


@pytest.mark.parametrize(("width", "height"), [(1280, 900), (768, 1024), (768, 560)])
def test_the_keys_overlay_shows_its_last_key_or_says_its_list_scrolls(
    page, live_server, artifacts_dir, width, height
):
    make_user("liv", "labeler")
    make_solution(make_batch(), steps=STEPS)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "liv")
    open_first_solution(page)
    page.keyboard.press("?")
    page.wait_for_selector("#key-help[open]")
    page.screenshot(path=str(artifacts_dir / f"keys-overlay-{width}x{height}.png"))
    if height >= 900:  # a laptop's window and a tablet: every key at once
        assert page.evaluate(LAST_KEY) == {"shown": True, "cue": False}
        return
    assert page.evaluate(LAST_KEY) == {"shown": False, "cue": True}
    page.eval_on_selector("#key-help .keys", "list => { list.scrollTop = list.scrollHeight; }")
    page.wait_for_selector("#key-help-more", state="hidden")
    assert page.evaluate(LAST_KEY) == {"shown": True, "cue": False}


def labeling_events(user) -> list[str]:
    return list(Labeling.objects.get(labeler=user).events.values_list("reason", flat=True))


def test_on_a_tablet_the_rating_buttons_and_the_map_fit_the_screen(page, live_server):
    make_user("mia", "labeler")
    make_solution(make_batch(), steps=STEPS * 5)  # 20 steps: the map wraps
    page.set_viewport_size({"width": 768, "height": 1024})
    sign_in(page, live_server, "mia")
    open_first_solution(page)
    for selector in ['[data-key-action="rate-pos"]', '[data-key-action="rate-neg"]', ".step-map"]:
        box = page.locator(f"#labeling {selector}").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 768, selector
    assert page.evaluate("document.documentElement.scrollWidth") <= 768  # no sideways scroll
    cells = page.locator("#labeling .map-cell")
    assert cells.nth(19).bounding_box()["y"] > cells.nth(0).bounding_box()["y"]  # wrapped


def test_a_solution_skipped_after_rating_a_step_is_skipped_with_its_reason(page, live_server):
    """The skip form stays in the page through the ratings' answers: posted after a rating it
    still passes the CSRF check (it answered 403, and the reason was lost, when an answer
    brought the form without its token)."""
    labeler = first_step_rated(page, live_server, "sol")
    page.locator("#skip > summary").click()
    page.fill("#skip-reason", "Too long for me right now")
    page.locator("#skip-submit").click()
    page.wait_for_selector("#skipped, .messages")
    labeling = Labeling.objects.get(labeler=labeler)
    assert (labeling.status, labeling.skip_reason) == ("skipped", "Too long for me right now")
    assert labeling.step_labels.count() == 1


def test_back_after_a_skip_shows_the_skipped_solution_as_skipped_not_its_buttons(
    page, live_server, artifacts_dir
):
    """Labeling pages are never kept by the browser: Back reloads them from the server, which
    knows the solution was skipped."""
    labeler = make_user("bo", "labeler")
    batch = make_batch(gold_rate=0)
    for _ in range(2):
        make_solution(batch, steps=STEPS)
    sign_in(page, live_server, "bo")
    open_first_solution(page)
    skipped_url = page.url
    page.locator("#skip > summary").click()
    page.fill("#skip-reason", "I cannot judge this subject")
    page.locator("#skip-submit").click()
    page.wait_for_url(lambda url: url != skipped_url)
    page.wait_for_selector("#labeling .step.current")  # the next solution, open to rate

    page.go_back()
    page.wait_for_url(skipped_url)
    page.wait_for_selector("#labeling")
    page.screenshot(path=str(artifacts_dir / "back-after-skip.png"), full_page=True)
    assert page.get_attribute("#labeling", "data-status") == "skipped"
    assert "Skipped: I cannot judge this subject" in page.inner_text("#labeling")
    assert page.locator('#labeling [data-key-action^="rate-"]').count() == 0
    skipped = Labeling.objects.get(labeler=labeler, status="skipped")
    assert skipped.step_labels.count() == 0
