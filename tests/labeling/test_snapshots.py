"""Snapshots: the service, the task (eager and through a real worker), the researchers' page."""

import hashlib
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from labeling import tasks
from labeling.models import Batch, Snapshot
from labeling.services import snapshots
from labeling.services.exporting import ExportFilters, StepwiseOptions
from tests.helpers.users import make_user

pytestmark = pytest.mark.django_db


def _create(user=None, fmt="prm800k", enqueue=False, **filters) -> Snapshot:
    return snapshots.snapshot_create(
        user=user,
        fmt=fmt,
        filters=ExportFilters(**filters),
        options=StepwiseOptions(),
        enqueue=enqueue,
    )


def test_snapshot_run_writes_a_byte_exact_file_and_records_it(samples, media_root, researcher):
    snapshot = _create(researcher)
    assert snapshot.status == Snapshot.Status.PENDING
    done = snapshots.snapshot_run(snapshot_id=snapshot.pk)
    assert done.status == Snapshot.Status.DONE
    path = snapshots.snapshot_file(done)
    assert path.read_bytes() == samples.read_bytes()
    assert (done.row_count, done.step_label_count, done.total, done.processed) == (6, 46, 6, 6)
    assert done.sha256 == hashlib.sha256(samples.read_bytes()).hexdigest()
    assert done.size_bytes == len(samples.read_bytes()) and done.cutoff_at and done.finished_at
    assert done.created_by == researcher and done.progress_percent == 100
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


def test_stepwise_snapshot_records_the_labels_in_its_file(samples, media_root):
    import pyarrow.parquet as pq

    done = snapshots.snapshot_run(snapshot_id=_create(fmt="stepwise_parquet").pk)
    labels = pq.read_table(snapshots.snapshot_file(done)).column("labels").to_pylist()
    assert done.row_count == len(labels) == 36
    assert done.step_label_count == sum(len(row) for row in labels) != 46  # not the source steps


def test_running_the_task_twice_is_a_no_op(samples, media_root):
    snapshot = _create()
    assert tasks.run_snapshot(snapshot.pk) == "done"
    first = Snapshot.objects.get(pk=snapshot.pk)
    mtime = (Path(media_root) / first.file_path).stat().st_mtime_ns
    assert tasks.run_snapshot(snapshot.pk) == "done"
    again = Snapshot.objects.get(pk=snapshot.pk)
    assert (again.finished_at, again.sha256) == (first.finished_at, first.sha256)
    assert (Path(media_root) / first.file_path).stat().st_mtime_ns == mtime


def test_a_stale_running_snapshot_is_taken_over(samples, media_root):
    from django.utils import timezone

    snapshot = _create()
    Snapshot.objects.filter(pk=snapshot.pk).update(
        status=Snapshot.Status.RUNNING,
        heartbeat_at=timezone.now()
        - timedelta(seconds=settings.STEPWISE_SNAPSHOT_STALE_SECONDS * 2),
    )
    assert snapshots.snapshot_run(snapshot_id=snapshot.pk).status == Snapshot.Status.DONE
    live = _create()
    Snapshot.objects.filter(pk=live.pk).update(
        status=Snapshot.Status.RUNNING, heartbeat_at=timezone.now()
    )
    assert snapshots.snapshot_run(snapshot_id=live.pk).status == Snapshot.Status.RUNNING


def test_snapshots_whose_task_was_lost_or_died_are_sent_again_and_written(
    samples, media_root, eager_tasks, settings
):
    """A Redis restart loses a pending snapshot's message; a killed worker leaves one running
    with a stale heartbeat. The beat sweeper sends each again after its bound, once, and the
    task writes it; a snapshot its worker is still writing is left alone."""
    settings.STEPWISE_RESEND_AFTER_SECONDS = 900
    settings.STEPWISE_SNAPSHOT_STALE_SECONDS = 600
    lost = _create()
    died = _create()
    long_ago = timezone.now() - timedelta(seconds=1000)
    Snapshot.objects.filter(pk=died.pk).update(
        status=Snapshot.Status.RUNNING, heartbeat_at=long_ago, sent_at=long_ago
    )
    alive = _create()
    Snapshot.objects.filter(pk=alive.pk).update(
        status=Snapshot.Status.RUNNING, heartbeat_at=timezone.now(), sent_at=long_ago
    )

    with eager_tasks():
        assert snapshots.snapshots_resend() == 1  # the dead worker's; `lost` is not due yet
    assert Snapshot.objects.get(pk=died.pk).status == Snapshot.Status.DONE
    assert Snapshot.objects.get(pk=lost.pk).status == Snapshot.Status.PENDING

    later = timezone.now() + timedelta(seconds=901)
    Snapshot.objects.filter(pk=alive.pk).update(heartbeat_at=later)  # its worker still reports
    with eager_tasks():
        assert snapshots.snapshots_resend(now=later) == 1
    assert Snapshot.objects.get(pk=lost.pk).status == Snapshot.Status.DONE
    assert Snapshot.objects.get(pk=alive.pk).status == Snapshot.Status.RUNNING
    assert snapshots.snapshots_resend(now=later) == 0


def test_a_failed_export_is_recorded_not_raised(samples, media_root, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(snapshots, "write_export_file", broken)
    failed = snapshots.snapshot_run(snapshot_id=_create().pk)
    assert failed.status == Snapshot.Status.FAILED and "disk full" in failed.error
    with pytest.raises(snapshots.SnapshotError, match="failed"):
        snapshots.snapshot_file(failed)


def test_a_tampered_file_is_refused(samples, media_root):
    done = snapshots.snapshot_run(snapshot_id=_create().pk)
    path = Path(media_root) / done.file_path
    path.write_bytes(path.read_bytes().replace(b"pencil", b"pen"))
    with pytest.raises(snapshots.SnapshotError, match="does not match its sha256"):
        snapshots.snapshot_file(done)


def test_create_enqueues_after_commit(
    samples, media_root, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr(
        tasks.run_snapshot, "apply_async", lambda args, **options: sent.extend(args)
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        snapshot = _create(enqueue=True)
        assert sent == []
    for callback in callbacks:
        callback()
    assert sent == [snapshot.pk]


def test_cli_snapshot_records_and_copies_the_file(samples, media_root, tmp_path, capsys):
    call_command("export_prm800k", "--snapshot", "--output", str(tmp_path / "copy.jsonl"))
    snapshot = Snapshot.objects.get()
    assert snapshot.status == Snapshot.Status.DONE and snapshot.created_by is None
    assert (tmp_path / "copy.jsonl").read_bytes() == samples.read_bytes()
    captured = capsys.readouterr()
    assert f"snapshot {snapshot.pk}: 6 rows" in captured.out and "6/6" in captured.err


def test_changes_since_a_snapshot(samples, media_root):
    from labeling.models import Labeling
    from labeling.serializers import ExportRequestSerializer

    first = snapshots.snapshot_run(snapshot_id=_create().pk)
    Labeling.objects.order_by("pk")[1].save(update_fields=["updated_at"])
    request = ExportRequestSerializer(data={"since_snapshot": first.pk})
    assert request.is_valid(), request.errors
    delta = snapshots.snapshot_run(
        snapshot_id=snapshots.snapshot_create(
            user=None,
            fmt="prm800k",
            filters=request.export_filters(),
            options=StepwiseOptions(),
            enqueue=False,
        ).pk
    )
    expected = samples.read_text().splitlines()[1] + "\n"
    assert snapshots.snapshot_file(delta).read_text() == expected
    assert delta.filters["since_snapshot"] == first.pk


# --- the researchers' page --------------------------------------------------------------------


def test_page_lists_snapshots_and_creates_one(samples, media_root, client, researcher, eager_tasks):
    client.force_login(researcher)
    page = client.get(reverse("research:index"))
    assert page.status_code == 200 and b"Create snapshot" in page.content
    with eager_tasks():
        response = client.post(
            reverse("research:create"),
            {
                "format": "prm800k",
                "complete_only": ["false", "true"],
                "alternatives": "false",
                "labeler": "",
            },
        )
    assert response.status_code == 302
    snapshot = Snapshot.objects.get()
    assert snapshot.status == Snapshot.Status.DONE and snapshot.filters["complete_only"] is True
    listing = client.get(reverse("research:snapshots"), HTTP_HX_REQUEST="true")
    assert f'id="snapshot-{snapshot.pk}"'.encode() in listing.content
    assert b"<html" not in listing.content and b"every 1s" not in listing.content  # nothing to poll
    download = client.get(reverse("research:download", args=[snapshot.pk]))
    assert b"".join(download.streaming_content) == samples.read_bytes()
    assert download["X-Checksum-SHA256"] == snapshot.sha256
    assert download["Content-Disposition"] == (
        f'attachment; filename="snapshot-{snapshot.pk}-prm800k-{snapshot.created_at.date()}.jsonl"'
    )


def test_page_polls_while_a_snapshot_runs(samples, client, researcher):
    Snapshot.objects.create(status=Snapshot.Status.RUNNING, total=10, processed=4)
    client.force_login(researcher)
    listing = client.get(reverse("research:snapshots"), HTTP_HX_REQUEST="true")
    assert b'hx-trigger="every 1s"' in listing.content and b'value="40"' in listing.content


def test_page_shows_form_errors_with_400(samples, client, researcher):
    client.force_login(researcher)
    response = client.post(
        reverse("research:create"), {"labeler": "nobody", "format": "csv"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 400
    assert b"Unknown labeler(s): nobody" in response.content and b"format" in response.content
    assert Snapshot.objects.count() == 0


def test_download_now_streams_the_export(samples, client, researcher):
    client.force_login(researcher)
    batches = list(Batch.objects.values_list("pk", flat=True))
    before = timezone.localdate()
    response = client.post(
        reverse("research:export"),
        {"format": "prm800k", "screening": "exclude", "batch": batches},
    )
    after = timezone.localdate()
    assert response.streaming
    ids = "-".join(str(pk) for pk in sorted(batches))
    assert response["Content-Disposition"] in {
        f'attachment; filename="batches-{ids}-prm800k-{day}.jsonl"' for day in (before, after)
    }
    body = b"".join(response.streaming_content)
    assert body.splitlines() == [
        line
        for line in samples.read_bytes().splitlines()
        if b'"is_initial_screening_question": true' not in line
    ]


def test_download_now_is_a_csrf_protected_post(samples, researcher):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    page = client.get(reverse("research:index"))
    form = page.content.decode().split('id="download-now"')[0].rsplit("<form", 1)[1]
    assert 'method="post"' in form and "csrfmiddlewaretoken" in form
    assert 'formmethod="get"' not in page.content.decode()
    url = reverse("research:export")
    assert client.get(url, {"format": "prm800k"}).status_code == 405  # no export by GET
    assert client.post(url, {"format": "prm800k"}).status_code == 403  # no token, no export
    token = page.context["csrf_token"]
    response = client.post(url, {"format": "prm800k", "csrfmiddlewaretoken": str(token)})
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == samples.read_bytes()


def test_download_now_with_bad_filters_shows_the_form_with_400(samples, client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("research:export"), {"labeler": "nobody"})
    assert response.status_code == 400 and b"Unknown labeler(s): nobody" in response.content
    assert b"<html" in response.content and b'id="download-now"' in response.content


@pytest.mark.parametrize("persona", ["labeler", "lead", "outsider"])
def test_only_researchers_and_admins_reach_the_page(samples, media_root, client, persona, request):
    user = request.getfixturevalue(persona)
    done = snapshots.snapshot_run(snapshot_id=_create().pk)
    client.force_login(user)
    refused = 404 if persona == "outsider" else 403  # no role in the project: as if absent
    for url in (reverse("research:index"), reverse("research:download", args=[done.pk])):
        assert client.get(url).status_code == refused
    for url in (reverse("research:create"), reverse("research:export")):
        assert client.post(url, {"format": "prm800k"}).status_code == refused
    admin = make_user("ada", "admin")
    client.force_login(admin)
    assert client.get(reverse("research:index")).status_code == 200


def test_nav_link_only_for_researchers(client, researcher, labeler):
    client.force_login(researcher)
    assert b'href="/p/default/research/"' in client.get(reverse("home")).content
    client.force_login(labeler)
    assert b'href="/p/default/research/"' not in client.get(reverse("labeling:queue")).content


# --- through a real Celery worker -----------------------------------------------------------------


@pytest.mark.redis
@pytest.mark.postgres
def test_snapshot_through_a_real_worker(
    celery_worker_process, celery_live, settings, tmp_path, shared_data
):
    from labeling.services.importing import import_prm800k

    # the worker's MEDIA_ROOT is its STEPWISE_VAR_DIR (tmp_path)/media: read the file there
    settings.MEDIA_ROOT = tmp_path / "media"
    path = shared_data / "prm800k" / "samples.jsonl"
    import_prm800k(path)
    snapshot = _create(make_user("rita", "researcher"), enqueue=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snapshot.refresh_from_db()
        if snapshot.is_finished:
            break
        time.sleep(0.2)
    assert snapshot.status == Snapshot.Status.DONE, (tmp_path / "worker.log").read_text()
    assert snapshots.snapshot_file(snapshot).read_bytes() == path.read_bytes()
    assert "labeling.tasks.run_snapshot" in (tmp_path / "worker.log").read_text()


def test_htmx_create_swaps_the_form_and_the_table(
    samples, media_root, client, researcher, eager_tasks
):
    client.force_login(researcher)
    with eager_tasks():
        response = client.post(
            reverse("research:create"), {"format": "stepwise_jsonl"}, HTTP_HX_REQUEST="true"
        )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="export-form"' in html and 'hx-swap-oob="outerHTML:#snapshots"' in html
    snapshot = Snapshot.objects.get()
    assert f'id="snapshot-{snapshot.pk}"' in html and "<html" not in html
    assert snapshot.status == Snapshot.Status.DONE and snapshot.row_count == 36
