"""A lead watches the dashboard; a labeling arrives and shows up without a reload."""

import os
import re

import pytest

from tests.factories import make_batch, make_solution, make_solutions
from tests.helpers.users import make_user
from tests.labeling.helpers import claim_and_label, next_labeling

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain sync.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def login(page, live_server, username):
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-pw")
    page.click("button[type=submit]")
    page.wait_for_load_state()


def test_lead_sees_a_new_labeling_arrive_without_reloading(page, live_server, artifacts_dir):
    make_user("lea", "lead", "labeler")
    workers = [make_user(name, "labeler") for name in ("lena", "lars", "luca")]
    batch = make_batch("Generation 3 · algebra", overlap=2, gold_rate=0)
    make_solutions(batch, 12)
    for i, user in enumerate(workers):
        for _ in range(2 + i):
            claim_and_label(user, [1, 1, 0] if i != 1 else [1, -1])
    login(page, live_server, "lea")
    page.goto(f"{live_server.url}/p/default/label/lead/batches/{batch.pk}/")
    done = page.locator("#kpi-done")
    before = int(done.inner_text())
    page.evaluate("window.__marker = 'same page'")
    claim_and_label(workers[0], [1, 0, 1])  # a labeling arrives
    page.wait_for_function(
        f"document.getElementById('kpi-done').textContent.trim() === '{before + 1}'"
    )
    assert page.evaluate("window.__marker") == "same page"  # no reload happened
    assert page.locator("#labeler-table").inner_text().count("lena") == 1
    page.screenshot(path=str(artifacts_dir / "lead-dashboard.png"), full_page=True)


def test_adjudication_page_by_keyboard(page, live_server, artifacts_dir):
    make_user("lea", "lead", "labeler")
    a, b = make_user("lena", "labeler"), make_user("lars", "labeler")
    solution = make_solution(
        make_batch(overlap=2, gold_rate=0),
        steps=[
            "Since $x^2 = 9$, we have $x = 3$ or $x = -3$.",
            "So $x + 5$ is $8$ or $2$.",
            "The product of the two values is $8 \\cdot 2 = 18$.",
            "# Answer\n\n18",
        ],
    )
    claim_and_label(a, [1, 1, 1, 1])
    claim_and_label(b, [1, 0, -1])
    login(page, live_server, "lea")
    page.goto(f"{live_server.url}/p/default/label/lead/adjudication/{solution.pk}/")
    page.wait_for_selector(".katex")
    page.screenshot(path=str(artifacts_dir / "adjudication.png"), full_page=True)
    # focus starts on the first disagreement (step 2); 0 sets it, - sets step 3 and ends
    page.keyboard.press("0")
    page.keyboard.press("-")
    page.keyboard.press("Enter")
    page.wait_for_url("**/label/lead/adjudication/")
    from labeling.selectors import final_step_ratings

    assert final_step_ratings(solution).ratings == [1, 0, -1]
    assert re.search(r"Final ratings saved", page.content())
    assert next_labeling(a) is None


def test_adjudication_keys_decide_only_the_steps_the_lead_sets(page, live_server):
    """1, ↓, 0 skips a step: it stays unset, saving stops and names it, and nothing is stored
    until the lead sets it; then the stored final is exactly what the lead chose."""
    from playwright.sync_api import expect

    from labeling.models import Adjudication, RatingEvent

    make_user("lea", "lead", "labeler")
    a, b = make_user("lena", "labeler"), make_user("lars", "labeler")
    solution = make_solution(make_batch(overlap=2, gold_rate=0), steps=["a", "b", "c", "d"])
    claim_and_label(a, [1, 1, 1, 1])
    claim_and_label(b, [1, -1])  # the majority (ties take the lower) ends at step 2's -1
    login(page, live_server, "lea")
    page.goto(f"{live_server.url}/p/default/label/lead/adjudication/{solution.pk}/")
    finals = page.locator(".adj-step select")
    expect(page.locator(".adj-step.focused")).to_have_attribute("data-step", "1")
    expect(finals.nth(2)).to_have_value("")
    page.keyboard.press("1")  # step 2: +1, focus moves to step 3
    page.keyboard.press("ArrowDown")  # step 4, step 3 untouched
    page.keyboard.press("0")  # step 4: 0
    expect(finals.nth(3)).to_have_value("0")
    expect(finals.nth(2)).to_have_value("")  # no +1 filled in for the skipped step
    page.keyboard.press("Enter")
    expect(page.locator("#adjudication-error")).to_contain_text("Step 3 has no final rating")
    expect(page.locator(".adj-step.focused")).to_have_attribute("data-step", "2")
    assert not Adjudication.objects.exists()
    assert not RatingEvent.objects.filter(reason="adjudication").exists()

    page.keyboard.press("0")  # the lead now decides step 3
    page.keyboard.press("Enter")
    page.wait_for_url("**/label/lead/adjudication/")
    assert Adjudication.objects.get(solution=solution).ratings == [1, 1, 0, 0]
    events = {
        (e.labeling.labeler.username, e.step_index, e.old_rating, e.new_rating)
        for e in RatingEvent.objects.filter(reason="adjudication").select_related(
            "labeling__labeler"
        )
    }
    assert events == {
        ("lena", 2, 1, 0),
        ("lena", 3, 1, 0),
        ("lars", 1, -1, 1),
        ("lars", 2, None, 0),
        ("lars", 3, None, 0),
    }
