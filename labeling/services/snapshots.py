"""Snapshot services: create one, write it (from the Celery task or the CLI), open it verified.

A snapshot is written once. `snapshot_run` claims a pending row with a conditional UPDATE
(a redelivered task finds nothing to claim and returns), writes the file under a temporary
name, renames it into place and records rows, step labels, size and sha256 in the same
conditional UPDATE that marks it done. Nothing updates a done snapshot afterwards, and a
download re-hashes the file against the recorded sha256.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from labeling.models import Snapshot, default_project_id
from labeling.services.exporting import (
    ExportFilters,
    Progress,
    StepwiseOptions,
    file_sha256,
    select_labelings,
    snapshot_filename,
    write_export_file,
)
from stepwise.celery import resend_rows, send_row

log = logging.getLogger(__name__)

RUN_TASK = "labeling.tasks.run_snapshot"


class SnapshotError(Exception):
    """A snapshot cannot be served (missing file, sha256 mismatch, not done)."""


def database_now():
    """The database's clock: a cutoff compared with updated_at must use the same clock."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()


def snapshot_create(
    *,
    user: User | None,
    fmt: str,
    filters: ExportFilters,
    options: StepwiseOptions,
    enqueue: bool = True,
) -> Snapshot:
    """A pending snapshot; its task is enqueued when the transaction commits.

    `enqueue=False` leaves it for the caller to run (the CLI writes it in-process).
    """
    with transaction.atomic():
        snapshot = Snapshot.objects.create(
            project_id=default_project_id() if filters.project is None else filters.project,
            format=fmt,
            filters=filters.as_json(),
            options=options.as_json() if fmt != Snapshot.Format.PRM800K else {},
            created_by=user if user is not None and user.is_authenticated else None,
        )
        if enqueue:
            _send(snapshot.pk)
    return snapshot


def _send(snapshot_id: int) -> None:
    send_row(Snapshot, snapshot_id, RUN_TASK)


def snapshots_resend(now=None) -> int:
    """Send again the snapshots whose task will not come by itself; returns how many.

    - pending, marked UNSENT: the broker was unreachable when it was queued;
    - pending, sent more than STEPWISE_RESEND_AFTER_SECONDS ago: the message was lost (a broker
      without persistence restarted) or waits behind a long queue (a duplicate is harmless:
      the task claims the row with a conditional UPDATE);
    - running, no heartbeat for STEPWISE_SNAPSHOT_STALE_SECONDS: its worker died, and its
      unacknowledged message would come back only after the broker's visibility timeout."""
    now = now or timezone.now()
    died = Snapshot.objects.stale(now).filter(sent_at__lt=Snapshot.stale_before(now))
    return resend_rows(Snapshot.objects.waiting_too_long(now) | died, RUN_TASK, now=now)


@dataclass
class _Reporter:
    snapshot: Snapshot
    extra: Progress | None = None

    def __call__(self, count: int) -> None:
        self.snapshot.heartbeat(processed=F("processed") + count)
        if self.extra:
            self.extra(count)


def snapshot_run(*, snapshot_id: int, progress: Progress | None = None, on_total=None) -> Snapshot:
    """Write a pending snapshot's file. Safe to call twice: the second call is a no-op."""
    # A stale one taken over starts its file again.
    snapshot = Snapshot.claim(snapshot_id, started_at=timezone.now(), processed=0)
    if snapshot is None:
        log.info("snapshot %s: not pending, nothing to do", snapshot_id)
        return Snapshot.objects.get(pk=snapshot_id)
    relative = f"snapshots/{snapshot_filename(snapshot)}"
    target = Path(settings.MEDIA_ROOT) / relative
    try:
        filters = ExportFilters.from_json(snapshot.filters)
        options = StepwiseOptions(**snapshot.options)
        cutoff = database_now()
        labelings = select_labelings(filters)
        total = labelings.count()
        Snapshot.objects.filter(pk=snapshot_id).update(total=total, cutoff_at=cutoff)
        if on_total:
            on_total(total)
        result = write_export_file(
            target,
            snapshot.format,
            labelings,
            options=options,
            progress=_Reporter(snapshot, progress),
        )
    except Exception as exc:
        log.exception("snapshot %s failed", snapshot_id)
        snapshot.mark_failed(exc)
        return Snapshot.objects.get(pk=snapshot_id)
    done = snapshot.mark_succeeded(
        processed=result.labelings,
        row_count=result.rows,
        step_label_count=result.step_labels,
        size_bytes=result.size_bytes,
        sha256=result.sha256,
        file_path=relative,
    )
    if not done:  # taken over as stale meanwhile: the other run owns the row and the file
        log.warning("snapshot %s changed hands while writing; leaving it", snapshot_id)
    return Snapshot.objects.get(pk=snapshot_id)


def snapshot_file(snapshot: Snapshot, *, verify: bool = True) -> Path:
    """The snapshot's file, checked against its recorded sha256."""
    if snapshot.status != Snapshot.Status.DONE or not snapshot.file_path:
        raise SnapshotError(
            f"Snapshot {snapshot.pk} is {snapshot.status}; nothing to download yet."
        )
    path = Path(settings.MEDIA_ROOT) / snapshot.file_path
    if not path.is_file():
        raise SnapshotError(f"Snapshot {snapshot.pk}'s file is missing.")
    if verify and file_sha256(path) != snapshot.sha256:
        raise SnapshotError(
            f"Snapshot {snapshot.pk}'s file does not match its sha256; refusing to serve it."
        )
    return path
