"""In chromium: a lead starts a generation (eager Celery, tiny model) and sees the selected
solutions arrive in the labeling queue with their reasons."""

from __future__ import annotations

import pytest

from labeling.models import Batch
from modeling.models import GenerationRun
from tests.helpers.users import make_user
from tests.modeling.loop_helpers import load_pool_and_labels, make_tiny_backbone, tiny_train_config

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def eager_celery(settings):
    from stepwise.celery import app

    settings.CELERY_TASK_ALWAYS_EAGER = True
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_lead_runs_a_generation_from_the_browser(
    page,
    live_server,
    artifacts_dir,
    shared_data,
    tmp_path,
    settings,
    eager_celery,
    open_evaluation_gate,
):
    load_pool_and_labels(shared_data)
    settings.STEPWISE_GENERATION_TRAIN_CONFIG = tiny_train_config(
        make_tiny_backbone(tmp_path / "tiny")
    )
    settings.MEDIA_ROOT = str(tmp_path / "media")
    make_user("lea", "lead", "labeler")

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "lea")
    page.fill("input[name=password]", "lea-pw")
    page.click("button[type=submit]")
    page.click("nav >> text=Generations")
    page.wait_for_selector("#start-generation")
    assert "63" in page.inner_text(".stats")  # the graded pool
    page.fill("input[name=k]", "8")
    page.fill("input[name=per_problem_cap]", "1")
    page.screenshot(path=str(artifacts_dir / "generations-page.png"), full_page=True)
    page.click("#start-generation")  # eager: every step runs before the redirect answers

    page.wait_for_selector("#selections")
    run = GenerationRun.objects.get()
    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    assert page.inner_text("#run-status") == "succeeded"
    rows = page.locator("#selections tbody tr")
    assert rows.count() == 8
    text = page.inner_text("#selections")
    assert (
        text.count("convincing wrong") == 6
        and "wrong" in text
        and f"Generation {run.generation}" in text
    )
    page.screenshot(path=str(artifacts_dir / "generation-page.png"), full_page=True)

    page.click("#batch-link")
    page.wait_for_selector("#start")
    queue = page.inner_text("table.grid")
    assert f"Generation {run.generation}" in queue
    batch = Batch.objects.get(name=f"Generation {run.generation}")
    assert batch.origin == Batch.Origin.ACTIVE_LEARNING and batch.solutions.count() == 8
    page.screenshot(path=str(artifacts_dir / "generation-queue.png"), full_page=True)
