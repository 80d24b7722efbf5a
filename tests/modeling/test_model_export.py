"""A model version's Hugging Face export as queued work: the model's page starts it (a POST), a
task builds it in a child process and reports its phases, the page and the API follow it, and the
download is the zip or a plain non-200 answer saying why, never a page in its place."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from modeling.models import ModelExport, ModelVersion
from modeling.services import exporting
from tests.helpers.threads import background_threads
from tests.helpers.tiny_models import save_tiny_llama
from tests.modeling.test_runs import wait_for
from tests.modeling.training.test_export import save_model

METRICS = {"auroc": 0.8123, "held_out": {"n": 52, "n_negative": 12, "auroc_negative": 0.8123}}


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def version_at(path: str, name: str = "tiny #1") -> ModelVersion:
    return ModelVersion.objects.create(
        name=name,
        backbone="tiny",
        artifact_path=path,
        dataset_version="d" * 64,
        metrics=METRICS,
        passed_evaluation=True,
    )


def trained_version(tmp_path) -> ModelVersion:
    return version_at(save_model(save_tiny_llama(tmp_path / "llama"), "lora", tmp_path))


def zip_of(response) -> zipfile.ZipFile:
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith("attachment; ")
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def assert_a_trained_models_checkpoint(archive: zipfile.ZipFile) -> None:
    assert {
        "hf-export/config.json",
        "hf-export/model.safetensors",
        "hf-export/tokenizer.json",
        "hf-export/README.md",
    } <= set(archive.namelist())
    config = json.loads(archive.read("hf-export/config.json"))
    assert config["id2label"] == {"0": "-1", "1": "0", "2": "+1"}
    assert config["step_separator"] == "\n\n"
    card = archive.read("hf-export/README.md").decode()
    assert "| auroc_negative | 0.8123 |" in card and "d" * 64 in card


@pytest.mark.django_db
def test_the_button_queues_the_export_a_task_builds_it_and_the_page_offers_its_zip(
    client, researcher, media, tmp_path, eager_tasks
):
    version = trained_version(tmp_path)
    client.force_login(researcher)
    page = reverse("modeling_runs:model", args=[version.pk])
    listed = client.get(reverse("modeling_runs:models")).content.decode()
    assert f'href="{page}#export" id="export-page-{version.pk}"' in listed  # no zip to offer yet
    assert 'id="export-start"' in client.get(page).content.decode()

    with eager_tasks() as sent:
        answer = client.post(reverse("modeling_runs:export_start", args=[version.pk]))
    assert answer.status_code == 302 and len(sent) == 1  # the task, run here by eager Celery

    export = ModelExport.objects.get()
    assert export.status == ModelExport.Status.SUCCEEDED, export.error
    assert export.created_by == researcher and export.attempts == 1 and export.phase == "done"
    archive = media / export.archive_path
    assert archive.parent == media / "exports" / f"export-{export.pk}"
    assert export.size_bytes == archive.stat().st_size
    assert {p.name for p in archive.parent.iterdir()} == {
        f"tiny-1-{version.pk}-hf.zip",
        "metrics.json",
        "progress.jsonl",
        "stderr.txt",
    }  # the unzipped folder is gone, no temporary file is left
    phases = [json.loads(line)["phase"] for line in (archive.parent / "progress.jsonl").open()]
    assert phases == ["loading", "writing weights", "tokenizer", "card"]

    shown = client.get(page).content.decode()
    download = reverse("modeling_runs:export", args=[version.pk])
    assert f'id="export-download" href="{download}"' in shown and 'id="export-start"' not in shown
    assert (
        f'id="export-{version.pk}" href="{download}"'
        in client.get(reverse("modeling_runs:models")).content.decode()
    )
    response = client.get(download)
    assert response["Content-Disposition"] == f'attachment; filename="tiny-1-{version.pk}-hf.zip"'
    assert_a_trained_models_checkpoint(zip_of(response))

    # Asked again: the finished zip is reused, nothing is sent or built.
    with eager_tasks() as again:
        client.post(reverse("modeling_runs:export_start", args=[version.pk]))
    assert again == [] and ModelExport.objects.count() == 1
    assert ModelVersion.objects.get(pk=version.pk).metrics == METRICS


@pytest.mark.django_db
def test_the_download_before_the_zip_is_ready_is_a_plain_non_200_answer_that_says_why(
    client, lead, media, tmp_path
):
    version = trained_version(tmp_path)
    client.force_login(lead)
    url = reverse("modeling_runs:export", args=[version.pk])

    def answer() -> tuple[int, str]:
        response = client.get(url)
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert not response.get("Content-Disposition")
        return response.status_code, response.content.decode()

    assert answer() == (
        404,
        "tiny #1 has not been exported yet: press “Export to Hugging Face” on its page, or "
        "POST to its /api/models/<id>/export/.\n",
    )
    export = exporting.export_start(version=version, user=lead)  # not sent: outside on_commit
    assert answer() == (
        409,
        "The export of tiny #1 is queued: the zip can be downloaded once it has succeeded.\n",
    )
    ModelExport.objects.filter(pk=export.pk).update(status="running", phase="writing weights")
    assert answer()[0] == 409 and "is running, writing weights:" in answer()[1]
    page = reverse("modeling_runs:model", args=[version.pk])
    fragment = client.get(page, headers={"HX-Request": "true"}).text
    assert '<span id="export-phase">writing weights</span>' in fragment
    assert f'hx-get="{page}" hx-trigger="every 2s"' in fragment  # the page follows it
    assert 'id="export-start"' not in fragment and 'id="export-download"' not in fragment
    ModelExport.objects.filter(pk=export.pk).update(
        status="succeeded", archive_path="exports/gone.zip"
    )
    assert answer() == (
        410,
        "The zip of tiny #1's export is no longer on this server: export it again.\n",
    )
    assert not (media / "exports").exists()  # the GETs built nothing


@pytest.mark.django_db
def test_a_failed_export_shows_its_reason_and_a_retry_makes_a_new_one(
    client, lead, media, tmp_path, eager_tasks
):
    version = version_at(str(tmp_path / "gone"))
    client.force_login(lead)
    start = reverse("modeling_runs:export_start", args=[version.pk])
    with eager_tasks():
        client.post(start)
    failed = ModelExport.objects.get()
    assert failed.status == ModelExport.Status.FAILED
    assert failed.error.startswith("the files of tiny #1 are not on this server (")
    page = client.get(reverse("modeling_runs:model", args=[version.pk])).content.decode()
    assert "are not on this server" in page and "Export again" in page
    download = client.get(reverse("modeling_runs:export", args=[version.pk]))
    assert download.status_code == 404 and "failed: the files of tiny #1" in download.text
    assert not (media / "exports" / f"export-{failed.pk}").exists()

    with eager_tasks():
        client.post(start)
    assert ModelExport.objects.count() == 2  # the failure stays as it was, a new one ran


@pytest.mark.django_db
def test_asking_twice_while_one_waits_gives_the_same_export_and_sends_one_task(
    client, researcher, media, tmp_path, django_capture_on_commit_callbacks
):
    version = version_at(str(tmp_path))
    client.force_login(researcher)
    url = f"/p/default/api/models/{version.pk}/export/"
    with django_capture_on_commit_callbacks() as sent:  # sent, not run: it stays queued
        first = client.post(url)
        second = client.post(url)
        page = client.post(reverse("modeling_runs:export_start", args=[version.pk]))
    assert first.status_code == second.status_code == 202 and page.status_code == 302
    assert first.json()["id"] == second.json()["id"] == ModelExport.objects.get().pk
    assert first.json()["status"] == "queued" and first.json()["download_url"] is None
    assert len(sent) == 1


@pytest.mark.django_db
def test_the_api_follows_the_export_to_its_download_url(
    client, researcher, media, tmp_path, eager_tasks
):
    version = trained_version(tmp_path)
    client.force_login(researcher)
    url = f"/p/default/api/models/{version.pk}/export/"
    missing = client.get(url)
    assert missing.status_code == 404 and "has not been exported yet" in missing.json()["detail"]

    with eager_tasks():
        started = client.post(url)
    assert started.status_code == 202  # answered after the eager task ran: already done here
    status = client.get(url)
    assert status.status_code == 200
    body = status.json()
    assert body["status"] == "succeeded" and body["phase"] == "done" and body["error"] == ""
    assert body["created_by"] == "rhea" and body["size_bytes"] > 0
    assert (
        body["download_url"]
        == f"http://testserver/p/default/modeling/models/{version.pk}/export.zip"
    )
    assert_a_trained_models_checkpoint(zip_of(client.get(body["download_url"])))


@pytest.mark.django_db
def test_labelers_may_neither_export_nor_download_nor_read_the_state(
    client, labeler, media, tmp_path, django_capture_on_commit_callbacks
):
    version = version_at(str(tmp_path))
    client.force_login(labeler)
    with django_capture_on_commit_callbacks() as sent:
        assert (
            client.post(reverse("modeling_runs:export_start", args=[version.pk])).status_code == 403
        )
        assert client.post(f"/p/default/api/models/{version.pk}/export/").status_code == 403
    assert client.get(f"/p/default/api/models/{version.pk}/export/").status_code == 403
    assert client.get(reverse("modeling_runs:model", args=[version.pk])).status_code == 403
    assert client.get(reverse("modeling_runs:export", args=[version.pk])).status_code == 403
    assert sent == [] and not ModelExport.objects.exists()


@pytest.mark.django_db
def test_an_export_whose_worker_died_is_sent_again_and_taken_over_and_a_live_one_is_left(
    media, tmp_path, settings, django_capture_on_commit_callbacks, eager_tasks
):
    """A worker killed mid-export leaves its row RUNNING: while its heartbeat is recent the row
    is its worker's (nothing is sent, a redelivered task claims nothing); once it is older than
    `stale_after` the sweeper sends it again and the task takes it over and builds it."""
    version = trained_version(tmp_path)
    with django_capture_on_commit_callbacks():
        export = exporting.export_start(version=version)
    claimed = ModelExport.claim(export.pk)  # the worker that is then killed
    assert claimed is not None and claimed.status == ModelExport.Status.RUNNING
    (claimed.folder / "hf-export").mkdir(parents=True)  # its half-written work

    assert exporting.export_run(export.pk).attempts == 1  # a redelivery finds it held
    with eager_tasks() as sent:
        assert exporting.exports_resend() == 0
    assert sent == []

    long_ago = timezone.now() - ModelExport.stale_after() - timedelta(seconds=1)
    ModelExport.objects.filter(pk=export.pk).update(heartbeat_at=long_ago, sent_at=long_ago)
    with eager_tasks() as sent:
        assert exporting.exports_resend() == 1
    assert len(sent) == 1
    export.refresh_from_db()
    assert export.status == ModelExport.Status.SUCCEEDED, export.error
    assert export.attempts == 2
    assert_a_trained_models_checkpoint(zipfile.ZipFile(media / export.archive_path))


@pytest.mark.django_db(transaction=True)
def test_the_embedded_default_exports_in_a_thread_and_the_page_answers_at_once(
    client, researcher, media, tmp_path, settings
):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # what the demo does (no broker, no worker)
    threads = background_threads()
    version = trained_version(tmp_path)
    client.force_login(researcher)
    answer = client.post(
        reverse("modeling_runs:export_start", args=[version.pk]), headers={"HX-Request": "true"}
    )
    assert answer.status_code == 200 and 'id="export"' in answer.text
    # Wait for the thread itself (an in-memory SQLite test database is locked while it writes).
    [thread] = threads
    thread.join(timeout=300)
    assert not thread.is_alive()
    export = ModelExport.objects.get()
    assert export.status == ModelExport.Status.SUCCEEDED, export.error
    fragment = client.get(
        reverse("modeling_runs:model", args=[version.pk]), headers={"HX-Request": "true"}
    ).text
    assert 'id="export-download"' in fragment and "hx-trigger" not in fragment  # polling ends
    assert_a_trained_models_checkpoint(
        zip_of(client.get(reverse("modeling_runs:export", args=[version.pk])))
    )


@pytest.mark.redis
@pytest.mark.postgres
def test_a_real_worker_exports_a_trained_and_an_imported_model_to_zips(
    client, researcher, tmp_path, settings, celery_worker_process, celery_live
):
    """Through Redis to a real worker (the default queue's task, its child process): the trained
    model's zip and the imported TRL classifier's, which is saved again by transformers."""
    from django.core.management import call_command

    from tests.modeling.test_import_prm import save_token_classifier

    settings.MEDIA_ROOT = tmp_path / "media"  # the worker's (its STEPWISE_VAR_DIR is tmp_path)
    trained = version_at(save_model(save_tiny_llama(tmp_path / "llama"), "lora", tmp_path))
    call_command(
        "import_prm", str(save_token_classifier(tmp_path / "trl")), "--step-separator", "\n",
        stdout=io.StringIO(),
    )  # fmt: skip
    imported = ModelVersion.objects.get(kind=ModelVersion.Kind.TOKEN_CLASSIFICATION)
    client.force_login(researcher)
    for version in (trained, imported):
        assert client.post(f"/p/default/api/models/{version.pk}/export/").status_code == 202

    def finished() -> bool:
        return not ModelExport.objects.filter(status__in=ModelExport.OPEN).exists()

    try:
        wait_for(finished, 240, "both exports to end")
    finally:
        log = (tmp_path / "worker.log").read_text()
    for export in ModelExport.objects.all():
        assert export.status == ModelExport.Status.SUCCEEDED, f"{export.error}\n{log[-3000:]}"
    assert "modeling.tasks.export_model" in log
    assert_a_trained_models_checkpoint(
        zip_of(client.get(reverse("modeling_runs:export", args=[trained.pk])))
    )
    archive = zip_of(client.get(reverse("modeling_runs:export", args=[imported.pk])))
    config = json.loads(archive.read("hf-export/config.json"))
    assert config["architectures"] == ["LlamaForTokenClassification"]
    assert config["step_separator"] == "\n" and config["stepwise"]["layout"] == "trl"
    assert "external.json" not in {name.rsplit("/", 1)[-1] for name in archive.namelist()}


def test_the_models_list_offers_the_zip_only_when_the_latest_export_made_one(client, lead):
    version = version_at("/nowhere")
    listed = lambda: client.get(reverse("modeling_runs:models")).content.decode()  # noqa: E731
    client.force_login(lead)
    old = ModelExport.objects.create(version=version, status=ModelExport.Status.SUCCEEDED)
    assert f'id="export-{version.pk}"' in listed()
    ModelExport.objects.create(
        version=version,
        status=ModelExport.Status.FAILED,
        created_at=old.created_at + timedelta(seconds=1),
    )  # the download serves the latest: a failed one has no zip
    assert f'id="export-{version.pk}"' not in listed()
