"""The home page in chromium, under the site's CSP: each role's cockpit, and Enter continues."""

from __future__ import annotations

import pytest
from django.utils import timezone

from labeling.models import Labeling, Snapshot
from modeling.models import GenerationRun, ModelVersion, RunStatus, TrainingRun
from tests.factories import make_batch, make_solutions
from tests.helpers.users import make_user
from tests.labeling.helpers import claim_and_label, label, next_labeling
from tests.test_error_pages import CSP_VIOLATIONS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def sign_in(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/p/default/")


def test_each_role_home_renders_and_enter_continues_the_labeling(
    strict_page, live_server, artifacts_dir
):
    page = strict_page
    page.add_init_script(CSP_VIOLATIONS)
    batch = make_batch(name="Generation 5", overlap=2, gold_rate=0)
    make_solutions(batch, 6)
    for name in ("ana", "ben"):
        claim_and_label(make_user(name, "labeler"), [1, 1, -1])
    kim = make_user("kim", "labeler")
    claim_and_label(kim, [1, 0, 1])
    in_progress = next_labeling(kim)
    label(in_progress, [1])
    run = TrainingRun.objects.create(
        name="gen-5 prm", status=RunStatus.SUCCEEDED, metrics={"auroc": 0.83}
    )
    version = ModelVersion.objects.create(
        run=run,
        name="prm-gen5",
        backbone="Qwen2.5-Math-1.5B",
        artifact_path="x",
        metrics={"auroc": 0.83},
        passed_evaluation=True,
    )
    version.activate()
    TrainingRun.objects.create(
        name="too big",
        status=RunStatus.FAILED,
        error="CUDA out of memory",
        finished_at=timezone.now(),
    )
    GenerationRun.objects.create(generation=5, status=RunStatus.SUCCEEDED, batch=batch)
    Snapshot.objects.create(status=Snapshot.Status.DONE, row_count=3)
    make_user("lea", "lead")
    make_user("rhea", "researcher")

    sign_in(page, live_server, "kim")
    page.wait_for_selector("#in-progress")
    assert "1 of 3 steps rated" in page.inner_text("#in-progress")
    page.screenshot(path=str(artifacts_dir / "home-labeler.png"), full_page=True)
    page.keyboard.press("Enter")  # Continue
    page.wait_for_url(f"{live_server.url}/p/default/label/{in_progress.pk}/")
    page.wait_for_selector('#labeling .step.current[data-step="1"]')
    assert Labeling.objects.get(pk=in_progress.pk).status == Labeling.Status.IN_PROGRESS

    for username, section in (("lea", "#lead-cockpit"), ("rhea", "#research-cockpit")):
        page.context.clear_cookies()
        sign_in(page, live_server, username)
        page.wait_for_selector(section)
        page.screenshot(path=str(artifacts_dir / f"home-{username}.png"), full_page=True)
    assert "Generation 5" in page.inner_text("#research-cockpit #queued")
    assert page.evaluate("window.__csp") == []
