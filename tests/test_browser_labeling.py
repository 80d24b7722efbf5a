"""End to end in Debian's chromium: sign in, label a whole solution with the keyboard, check the rows."""

import pytest

from labeling.models import Labeling
from tests.conftest import make_user
from tests.factories import make_batch, make_problem, make_solution

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
    page.wait_for_url(f"{live_server.url}/")
    page.wait_for_selector("#start")


def open_first_solution(page):
    """Enter on the queue page, then wait until the labeling page's keys act (a new page)."""
    page.keyboard.press("Enter")
    page.wait_for_selector("#labeling .step.current")
    keys_ready(page)


def keys_ready(page):
    page.wait_for_selector("html[data-keys=ready]", state="attached")


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
    labeler = make_user("ana", "labeler")
    make_solution(make_batch(), steps=STEPS)
    sign_in(page, live_server, "ana")
    open_first_solution(page)
    page.keyboard.press("1")
    page.wait_for_selector('.step.rated[data-step="0"]')
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
    page.wait_for_selector("#net-error:has-text('Press R or click here to retry')")
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

    def outage(route):
        if not answers:
            route.fetch()  # the server saves the rating, and the answer never arrives
            answers.append(502)
            route.fulfill(status=502, body="Bad gateway")
        elif len(answers) == 1:
            answers.append(503)
            route.fulfill(status=503, body="The database cannot be reached right now.")
        else:
            answers.append(200)
            route.continue_()

    page.route("**/rate/", outage)
    page.keyboard.press("1")
    page.wait_for_selector("html[data-retrying]", state="attached")
    assert "Not saved yet" in page.inner_text("#net-error")
    page.keyboard.press("0")  # pressed while the page retries: kept for the next step
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
