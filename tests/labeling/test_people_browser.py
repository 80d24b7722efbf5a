"""In chromium, both themes, axe-core finding no WCAG 2 A/AA violation: a labeler picks a batch
and skips a solution; a lead adds a labeler who signs in with the one-time link, is locked out
and signs in again with the lead's reset, then is deactivated and told so; a lead previews the
guidelines' changes and publishes them.

Screenshots of each page go to $STEPWISE_SCREENSHOT_DIR, else the test's temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from playwright.sync_api import expect

from labeling.models import Guidelines, Labeling
from labeling.services import batches, rating
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.users import make_user
from tests.labeling.helpers import next_labeling
from tests.test_accessibility_browser import AXE_OPTIONS, THEMES, describe, open_as, settle

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("STEPWISE_SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Checked:
    """Screenshots and axe runs of the pages a test walks through, failures kept for the end."""

    def __init__(self, page, shots: Path, theme: str) -> None:
        self.page, self.shots, self.theme = page, shots, theme
        self.axe, self.failures = Axe(), []

    def __call__(self, name: str) -> None:
        self.page.wait_for_load_state("load")
        if self.page.locator(".math").count():
            self.page.wait_for_selector(".katex", state="attached")
        self.page.screenshot(path=str(self.shots / f"{name}-{self.theme}.png"), full_page=True)
        violations = self.axe.run(self.page, options=AXE_OPTIONS).response["violations"]
        if violations:
            self.failures.append(f"{name}, {self.theme}:\n{describe(violations)}")

    def assert_clean(self) -> None:
        assert not self.failures, "axe found WCAG 2 A/AA violations:\n" + "\n".join(self.failures)


def sign_in(page, live_server, username: str, password: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state("load")


def area_problem(side: int):
    return make_problem(f"What is the area of a square with side $\\sqrt{{{side}}}$?", str(side))


@pytest.mark.parametrize("theme", THEMES)
def test_a_labeler_picks_a_batch_and_skips_a_solution(browser, live_server, shots, theme):
    lena = make_user("lena", "labeler")
    high = make_batch("Generation 2 · geometry", priority=5, gold_rate=0)
    low = make_batch("Step by step · arithmetic", priority=0, gold_rate=0)
    for side in (7, 11):
        make_solution(high, problem=area_problem(side), steps=[f"It is ${side}$.", "# Answer"])
    for side in (2, 3):
        make_solution(low, problem=area_problem(side), steps=[f"It is ${side}$.", "# Answer"])
    warmed = next_labeling(lena, batch=high)  # a finished one: the home page has figures
    for index in range(2):
        rating.rate_step(labeling_id=warmed.pk, user=lena, step_index=index, rating=1)
    context, page = open_as(
        browser, live_server, "lena", color_scheme=theme, viewport={"width": 1280, "height": 900}
    )
    check = Checked(page, shots, theme)
    try:
        settle(page, f"{live_server.url}/")
        rows = page.locator("#waiting tbody tr")
        expect(rows).to_have_count(2)
        check("labeler-home-batches")
        page.set_viewport_size({"width": 768, "height": 1024})  # a tablet held upright
        width = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert width[0] <= width[1], f"the home page is {width[0]} px wide in {width[1]} px"
        page.screenshot(path=str(shots / f"labeler-home-batches-{theme}-768.png"), full_page=True)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.get_by_role("button", name="Continue in Step by step · arithmetic").click()
        page.wait_for_url("**/label/*/")
        first = Labeling.objects.get(labeler=lena, status="in_progress")
        assert first.solution.batch == low
        page.locator("#skip > summary").click()
        expect(page.locator("#skip-reason")).to_be_visible()
        check("labeling-skip-open")
        page.fill("#skip-reason", "I cannot judge this subject")
        page.locator("#skip-submit").click()
        page.wait_for_url(lambda url: f"/p/default/label/{first.pk}/" not in url)
        second = Labeling.objects.get(labeler=lena, status="in_progress")
        # The choice holds: the next solution comes from the chosen batch too.
        assert second.solution.batch == low and second.solution != first.solution
        first.refresh_from_db()
        assert (first.status, first.skip_reason) == ("skipped", "I cannot judge this subject")
        expect(page.locator(".messages, [role=status]").first).to_be_visible()
        settle(page, f"{live_server.url}/p/default/label/{first.pk}/")
        expect(page.locator("#skipped")).to_contain_text("I cannot judge this subject")
        check("labeling-skipped")
    finally:
        context.close()
    check.assert_clean()


@pytest.mark.parametrize("theme", THEMES)
def test_a_lead_adds_a_labeler_who_signs_in_once_lifts_a_lockout_then_deactivates_them(
    browser, live_server, shots, theme
):
    make_user("lea", "lead", "labeler")
    make_user("lars", "labeler")
    make_solution(make_batch("Generation 1", gold_rate=0))
    context, page = open_as(
        browser, live_server, "lea", color_scheme=theme, viewport={"width": 1280, "height": 900}
    )
    check = Checked(page, shots, theme)
    newcomer = None
    try:
        settle(page, f"{live_server.url}/p/default/label/lead/labelers/")
        check("labelers-add-form")
        page.fill("#id_username", "nina")
        page.get_by_label("a one-time sign-in link").check()
        page.locator("#add-submit").click()
        link = page.locator("#sign-in-link")
        expect(link).to_be_visible()
        check("labeler-added-link")
        url = link.input_value()
        # Nina, in a browser of her own: the link signs her in once, then she sets a password.
        newcomer = browser.new_context(color_scheme=theme, bypass_csp=True)
        newcomer.set_default_timeout(60_000)
        nina = newcomer.new_page()
        nina.goto(url)
        check_nina = Checked(nina, shots, theme)
        check_nina("sign-in-link")
        nina.locator("#sign-in-submit").click()
        nina.wait_for_url("**/account/password/")
        check_nina("password-choose")
        nina.fill("#id_new_password1", "a long new passphrase")
        nina.fill("#id_new_password2", "a long new passphrase")
        nina.locator("#password-submit").click()
        nina.wait_for_url(f"{live_server.url}/p/default/")
        nina.goto(url)
        expect(nina.get_by_role("alert")).to_contain_text("no longer works")
        check_nina("sign-in-link-spent")

        from django.contrib.auth import get_user_model

        user = get_user_model().objects.get(username="nina")
        # Nina forgets her password and is locked out; the lead sees it, and a reset lifts it.
        newcomer.clear_cookies()
        for _ in range(settings.AXES_FAILURE_LIMIT):
            sign_in(nina, live_server, "nina", "not her password")
        expect(nina.locator("#locked-out")).to_contain_text("ask your project lead")
        check_nina("locked-out")
        settle(page, f"{live_server.url}/p/default/label/lead/labelers/")
        expect(page.locator("#labelers")).to_contain_text("locked out")
        check("labelers-locked-out")
        settle(page, f"{live_server.url}/p/default/label/lead/labelers/{user.pk}/")
        expect(page.locator("#locked-out")).to_be_visible()
        check("labeler-account")
        page.locator("#reset-password").click()
        password = page.locator("#temporary-password").input_value()
        check("labeler-reset-password")
        sign_in(nina, live_server, "nina", password)
        nina.wait_for_url(f"{live_server.url}/p/default/")
        settle(page, f"{live_server.url}/p/default/label/lead/labelers/{user.pk}/")
        page.locator("#deactivate").click()
        expect(page.locator("#deactivated")).to_be_visible()
        check("labeler-deactivated")
        user.refresh_from_db()
        assert not user.is_active
        nina.goto(f"{live_server.url}/")
        nina.wait_for_url("**/accounts/login/**")  # her session ended with the account
        sign_in(nina, live_server, "nina", password)
        expect(nina.locator("#sign-in-error")).to_contain_text("This account is deactivated")
        check_nina("sign-in-deactivated")
        check.failures += check_nina.failures
        settle(page, f"{live_server.url}/p/default/label/lead/labelers/")
        expect(page.locator("#labelers tr.deactivated")).to_contain_text("nina")
        check("labelers-deactivated")
    finally:
        if newcomer is not None:
            newcomer.close()
        context.close()
    check.assert_clean()


@pytest.mark.parametrize("theme", THEMES)
def test_a_lead_previews_the_guidelines_diff_then_publishes(browser, live_server, shots, theme):
    lead = make_user("lea", "lead", "labeler")
    batches.guidelines_save(
        text="# Ratings\n- +1: correct\n- 0: neutral\n- -1: wrong\n\n# Flags\nFlag when unsure.",
        user=lead,
    )
    context, page = open_as(
        browser, live_server, "lea", color_scheme=theme, viewport={"width": 1280, "height": 900}
    )
    check = Checked(page, shots, theme)
    try:
        settle(page, f"{live_server.url}/p/default/label/guidelines/edit/")
        expect(page.locator("#publish")).to_have_count(0)  # publishing comes with a preview
        text = page.locator("#id_text")
        text.fill(
            text.input_value().replace("- +1: correct", "- +1: correct and moves forward, $x^2$")
        )
        page.locator("#preview-submit").click()
        diff = page.locator("#preview-diff")
        expect(diff.locator("del")).to_contain_text("- +1: correct")
        expect(diff.locator("ins")).to_contain_text("correct and moves forward")
        check("guidelines-preview")
        assert Guidelines.objects.count() == 1
        page.locator("#publish").click()
        page.wait_for_url("**/label/guidelines/")
        assert Guidelines.objects.count() == 2
        page.get_by_role("link", name="What changed").click()
        page.wait_for_url("**/label/guidelines/versions/2/")
        expect(page.locator("#diff ins")).to_contain_text("correct and moves forward")
        check("guidelines-version")
    finally:
        context.close()
    check.assert_clean()
