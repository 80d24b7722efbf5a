"""A model version as a Hugging Face checkpoint zip (modeling/training/export.py's layout), built
by a task and downloaded once it is done.

`export_start` (the page's button, the API's POST) returns the version's export: the one
waiting or running (one at a time per version: a partial unique constraint), the finished one
whose zip is still on disk, or a new one sent to a worker (`modeling.tasks.export_model`, on the
default queue). `export_run` (the task) claims the row, builds the checkpoint with
`python -m modeling.training.cli export` in a child process, so that neither the default
worker nor the embedded default's web process ever loads torch, reports the child's phases and
a heartbeat into the row, zips the folder under a temporary name and renames it, and ends the
row succeeded (the archive's path and size) or failed (one line saying why). A worker that
died mid-export leaves its row RUNNING with an old heartbeat: `exports_resend` sends it again
and the claim takes it over, starting the export afresh. A download reads only the zip that an
export of this row wrote (`export_archive`), never a file of the model's folder: an imported
model's folder holds what its uploader put there.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from modeling.models import ModelExport, ModelVersion
from modeling.services import torchrun
from stepwise.celery import model_tasks_in_thread, resend_rows, start_on_commit
from stepwise.paths import shown_path, without_roots
from stepwise.queued import QueuedWorkQuerySet

log = logging.getLogger(__name__)

EXPORT_TASK = "modeling.tasks.export_model"
EXPORT_DIR = "hf-export"  # the folder inside the zip (the model card's snippet names it)
POLL_S = 2.0  # how often the task reads the child's phase and writes the heartbeat
STDERR_TAIL_CHARS = 2000


class ExportFailed(RuntimeError):
    """The version's model could not be exported; the message is the row's one-line reason."""


class ExportUnavailable(Exception):
    """No zip to download (yet): `status` is the answer's HTTP status, the message says why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


# --- the web side: start, follow, download --------------------------------------------------


def export_start(*, version: ModelVersion, user: User | AnonymousUser | None = None) -> ModelExport:
    """The version's export: the open one (sent again if its task will not come by itself),
    the finished one whose zip is on disk, or a new one, sent once the transaction commits."""
    found = reusable_export(version)
    if found is not None:
        if found.is_open:
            _send_again_if_lost(found)
        return found
    created_by = user if user is not None and user.is_authenticated else None
    try:
        with transaction.atomic():
            export = ModelExport.objects.create(version=version, created_by=created_by)
            start_on_commit(EXPORT_TASK, export.pk, row=ModelExport)
    except IntegrityError:  # a concurrent request made it first: the open one is theirs
        return ModelExport.objects.get(version=version, status__in=ModelExport.OPEN)
    return export


def latest_export(version: ModelVersion) -> ModelExport | None:
    return version.exports.first()


def reusable_export(version: ModelVersion) -> ModelExport | None:
    """The export a new request gets: the open one, or the last one if it succeeded and its zip
    is still on disk."""
    latest = latest_export(version)
    if latest is not None and (latest.is_open or latest.archive is not None):
        return latest
    return None


def _send_again_if_lost(export: ModelExport) -> None:
    """An open export whose task will not come (a lost message, a worker or a process that
    died) is sent again; its claim takes a stale one over."""
    lost = _lost(ModelExport.objects.filter(pk=export.pk))
    if not model_tasks_in_thread():
        resend_rows(lost, EXPORT_TASK)
    elif lost.exists():  # the embedded default's thread died with its process
        with transaction.atomic():
            start_on_commit(EXPORT_TASK, export.pk, row=ModelExport)


def exports_resend(now=None) -> int:
    """The sweeper: send again the exports whose task will not come by itself (UNSENT, or sent
    long ago and never taken) and the running ones whose worker died (no heartbeat for
    `stale_after`); their claim takes them over. Returns how many."""
    if model_tasks_in_thread():
        return 0  # no broker: exports run in threads of the process that started them
    now = now or timezone.now()
    return resend_rows(_lost(ModelExport.objects.all(), now), EXPORT_TASK, now=now)


def _lost(rows: QueuedWorkQuerySet, now: datetime | None = None) -> QueuedWorkQuerySet:
    """Exports whose task will not come by itself: waiting too long, or running with no
    heartbeat for `stale_after` (their worker died) and not sent again since."""
    return rows.waiting_too_long(now) | rows.stale(now).filter(
        sent_at__lt=ModelExport.stale_before(now)
    )


def export_archive(version: ModelVersion) -> Path:
    """The zip of the version's finished export, or ExportUnavailable saying why there is none
    (404: never exported, failed or gone; 409: still being built)."""
    export = latest_export(version)
    if export is None:
        raise ExportUnavailable(
            f"{version.name} has not been exported yet: press “Export to Hugging Face” on its "
            "page, or POST to its /api/models/<id>/export/.",
            404,
        )
    if export.is_open:
        doing = f", {export.phase}" if export.status == ModelExport.Status.RUNNING else ""
        raise ExportUnavailable(
            f"The export of {version.name} is {export.status}{doing}: the zip can be downloaded "
            "once it has succeeded.",
            409,
        )
    if export.status == ModelExport.Status.FAILED:
        raise ExportUnavailable(
            f"The export of {version.name} failed: {without_roots(export.error)} Export it again "
            "on its page.",
            404,
        )
    archive = export.archive
    if archive is None:
        raise ExportUnavailable(
            f"The zip of {version.name}'s export is no longer on this server: export it again.",
            410,
        )
    return archive


# --- the worker: the task's service -----------------------------------------------------------


class _TakenOver(Exception):
    """The row is no longer this worker's (taken over as stale meanwhile): stop, write nothing."""


def export_run(export_id: int) -> ModelExport:
    """Build the export's zip; a second delivery, or one for a row another worker holds, does
    nothing."""
    export = ModelExport.claim(export_id, phase="")
    if export is None:
        log.info("export %s: not waiting (or not stale), nothing to do", export_id)
        return ModelExport.objects.get(pk=export_id)
    version = export.version
    work = export.folder
    try:
        shutil.rmtree(work, ignore_errors=True)  # a taken-over attempt starts afresh
        work.mkdir(parents=True)
        out = _build(export, version, work)
        export.heartbeat(phase="zipping")
        archive = _zip(out, work / archive_name(version))
        shutil.rmtree(out)
    except _TakenOver:
        log.warning("export %s changed hands while building; leaving it", export_id)
        return ModelExport.objects.get(pk=export_id)
    except Exception as exc:
        log.exception("export %s of model version %s failed", export_id, version.pk)
        shutil.rmtree(work, ignore_errors=True)
        export.mark_failed(str(exc) if isinstance(exc, ExportFailed) else exc)
        return ModelExport.objects.get(pk=export_id)
    relative = archive.relative_to(Path(settings.MEDIA_ROOT)).as_posix()
    done = {"phase": "done", "archive_path": relative, "size_bytes": archive.stat().st_size}
    if not export.mark_succeeded(**done):
        log.warning("export %s changed hands while zipping; leaving it", export_id)
    return ModelExport.objects.get(pk=export_id)


def archive_name(version: ModelVersion) -> str:
    return f"{slugify(version.name) or 'model'}-{version.pk}-hf.zip"


def _build(export: ModelExport, version: ModelVersion, work: Path) -> Path:
    """The checkpoint folder, written by `cli export` in a child process; its phases and this
    worker's heartbeat go to the row every POLL_S seconds."""
    model_dir = Path(version.artifact_path)
    if not model_dir.is_dir():
        raise ExportFailed(
            f"the files of {version.name} are not on this server ({shown_path(model_dir)})"
        )
    out = work / EXPORT_DIR
    progress, stderr_path = work / "progress.jsonl", work / "stderr.txt"
    metrics = work / "metrics.json"  # the model card's figures: the version's, as gated here
    metrics.write_text(json.dumps({**version.metrics, "dataset_version": version.dataset_version}))
    command = [
        *torchrun.cli_command("export"),
        "--model",
        str(model_dir),
        "--format",
        "hf",
        "--output",
        str(out),
        "--metrics",
        str(metrics),
        "--progress-file",
        str(progress),
    ]
    with open(stderr_path, "w") as stderr:
        child = subprocess.Popen(
            command, cwd=torchrun.ROOT, env=torchrun.cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=stderr,
        )  # fmt: skip
        try:
            code = None
            while code is None:
                try:
                    code = child.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
                if not export.heartbeat(phase=_last_phase(progress)):
                    raise _TakenOver
        finally:
            if child.poll() is None:  # a soft time limit, a takeover: the child goes too
                child.kill()
                child.wait()
    if code != 0 or not (out / "config.json").is_file():
        raise ExportFailed(_failure_line(stderr_path.read_text(errors="replace")))
    return out


def _last_phase(progress: Path) -> str:
    try:
        lines = progress.read_text().splitlines()
    except FileNotFoundError:
        return "starting"
    for line in reversed(lines):
        try:
            return str(json.loads(line)["phase"])[:32]
        except (ValueError, KeyError, TypeError):
            continue  # a line still being written
    return "starting"


def _failure_line(stderr: str) -> str:
    """One line: the CLI's own error (`export: error: ...`), else the last line it wrote (a
    traceback's exception), server paths under their roots."""
    lines = [line.strip() for line in stderr[-STDERR_TAIL_CHARS:].splitlines() if line.strip()]
    errors = [line.removeprefix("export: error: ") for line in lines if "export: error:" in line]
    reason = (errors or lines or ["the export process ended without saying why"])[-1]
    return without_roots(f"the export failed: {reason}")


def _zip(folder: Path, archive: Path) -> Path:
    """`folder` zipped as EXPORT_DIR/…, written under a temporary name and renamed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{archive.name}-", suffix=".tmp", dir=archive.parent)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zf:
            for path in sorted(folder.iterdir()):
                # Weights do not compress; the tokenizer and card do.
                method = (
                    zipfile.ZIP_STORED if path.suffix == ".safetensors" else zipfile.ZIP_DEFLATED
                )
                zf.write(path, f"{EXPORT_DIR}/{path.name}", compress_type=method)
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return archive
