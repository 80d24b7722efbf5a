"""In chromium: a lead opens the model-assisted review from the batch page, finds the most
disputed solution first, opens it and goes on to adjudicate it. Screenshots under artifacts."""

from __future__ import annotations

import pytest

from tests.helpers.users import make_user
from tests.modeling.test_browser_runs import log_in
from tests.modeling.test_review import build_scored_batch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_lead_finds_the_disputed_solution_and_opens_adjudication(page, live_server, artifacts_dir):
    batch, _, disputed, _ = build_scored_batch(
        make_user("lena", "labeler"), make_user("lars", "labeler")
    )
    make_user("lea", "lead", "labeler")
    log_in(page, live_server, "lea")
    page.goto(f"{live_server.url}/p/default/label/lead/batches/{batch.pk}/")
    page.click("text=Review with the model")
    page.wait_for_selector("#review-solutions")
    first = page.locator("#review-solutions tbody tr").first
    assert f"Solution {disputed.pk}" in first.inner_text() and "0.95" in first.inner_text()
    labelers = page.inner_text("#review-labelers")
    assert labelers.index("lars") < labelers.index("lena")  # the least agreeing first
    page.screenshot(path=str(artifacts_dir / "review-queue.png"), full_page=True)

    first.locator("a", has_text=f"Solution {disputed.pk}").click()
    page.wait_for_selector("#review-steps")
    page.wait_for_selector("#review-steps .katex")  # the step math rendered
    assert page.locator("#review-steps tr.disagree").count() == 1  # step 1: lars's -1
    page.screenshot(path=str(artifacts_dir / "review-solution.png"), full_page=True)
    page.click("text=Adjudicate this solution")
    page.wait_for_selector("#adjudication-form")


def test_a_researcher_reviews_without_links_to_adjudication(page, live_server, artifacts_dir):
    batch, _, disputed, _ = build_scored_batch(
        make_user("lena", "labeler"), make_user("lars", "labeler")
    )
    make_user("rae", "researcher")
    log_in(page, live_server, "rae")
    page.goto(f"{live_server.url}/p/default/modeling/review/?batch={batch.pk}")
    page.wait_for_selector("#review-solutions")
    page.screenshot(path=str(artifacts_dir / "review-queue-researcher.png"), full_page=True)
    assert page.locator("a", has_text="Adjudicate").count() == 0
    page.click(f"text=Solution {disputed.pk}")
    page.wait_for_selector("#review-steps .katex")
    page.screenshot(path=str(artifacts_dir / "review-solution-researcher.png"), full_page=True)
    assert page.locator("a", has_text="Adjudicate").count() == 0
