"""In chromium: "Score with the active model" on the review page says what it waits for and
the page refreshes itself when the scores are in (issue 31), in both themes with axe clean.

The scoring runs in a thread of the live server (the embedded default's way). To see the waiting
state for certain, the test holds a lock on the scores table from its own connection: the thread
scores, then waits on its insert until the test lets go."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.db import connections

from labeling.services.importing import import_prm800k
from modeling.models import ModelVersion, SolutionScore
from modeling.services import execution, runs
from tests.factories import make_batch, make_solution
from tests.helpers.users import make_user
from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config
from tests.modeling.test_review import labeled
from tests.test_accessibility_browser import AXE_OPTIONS, describe, open_as

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_review_page_waits_for_the_scores_and_refreshes_itself(
    browser, live_server, shared_data, tmp_path, open_evaluation_gate, settings, artifacts_dir
):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # no worker: a thread of the server scores
    settings.MEDIA_ROOT = tmp_path / "media"
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    config = tiny_train_config(make_tiny_backbone(tmp_path / "tiny"))
    version = execution.execute_training_run(runs.create_training_run(config=config).pk)
    assert version is not None and version == ModelVersion.active()
    labeler = make_user("lena", "labeler")
    batch = make_batch("Generation 1")
    solutions = [make_solution(batch) for _ in range(2)]
    for solution in solutions:
        labeled(solution, labeler, [1, 1, -1])
    make_user("lea", "lead", "labeler")

    blocker = connections.create_connection("default")
    blocker.set_autocommit(False)
    with blocker.cursor() as cursor:  # reads go on; the scores' insert waits
        cursor.execute(f"LOCK TABLE {SolutionScore._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
    try:
        context, page = open_as(browser, live_server, "lea")
        page.goto(f"{live_server.url}/p/default/modeling/review/?batch={batch.pk}")
        page.click("#score-for-review")
        waiting = page.wait_for_selector("#review-waiting")
        assert (
            "Waiting for" in waiting.inner_text() and "2 labeled solutions" in waiting.inner_text()
        )
        assert "refreshes itself" in waiting.inner_text()
        assert page.locator("#score-for-review").count() == 0  # no second click meanwhile
        page.evaluate("window.notReloaded = true")
        page.screenshot(path=str(artifacts_dir / "review-waiting.png"), full_page=True)
        for theme in ("light", "dark"):
            themed_context, themed = open_as(browser, live_server, "lea", color_scheme=theme)
            themed.goto(page.url)
            themed.wait_for_selector("#review-waiting")
            violations = Axe().run(themed, options=AXE_OPTIONS).response["violations"]
            assert not violations, describe(violations)
            themed_context.close()
    finally:
        blocker.rollback()
        blocker.close()

    # The scores are written now; the page swaps them in by itself, with no reload.
    page.wait_for_selector("#review-solutions a:has-text('Solution')")
    assert page.locator("#review-waiting").count() == 0
    assert page.evaluate("window.notReloaded === true")
    assert SolutionScore.objects.filter(model_version=version).count() == 2
    rows = page.locator("#review-solutions tbody tr").count()
    assert rows == 2
    page.screenshot(path=str(artifacts_dir / "review-refreshed.png"), full_page=True)
    context.close()
