"""Queued work: the one shape of a row that waits for a task, and its rules.

Snapshots, training runs, generations and sampling runs subclass `QueuedWork`, and so does any
new row a task fills (pre-label runs, exports). A row is created waiting (QUEUED; a snapshot
says "pending"), and its task is sent once the transaction commits (`stepwise.celery.send_row`
records `sent_at`). A worker takes it with `claim`, a conditional UPDATE of which exactly one of
two racing workers wins; it writes `heartbeat` while it works and ends it with `mark_succeeded`
or `mark_failed`. A row whose task will not come by itself is `waiting_too_long` (the app's
sweeper sends it again: `stepwise.celery.resend_rows`); a RUNNING row whose heartbeat is older
than `stale_after()` has lost its worker (`stale`), and `claim` takes it over where the model
allows. A retry or a resume `requeue`s it.

A failure's reason is written once, in one way (`failure_text`): a message as given, an
exception as its class and message (the traceback is the worker's log's), its start kept
within the error column's length.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar, Self, cast

from django.conf import settings
from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from stepwise.celery import UNSENT

ERROR_CHARS = 10_000  # QueuedWork.error's length: a reason's start is kept, the rest cut


class QueuedStatus(models.TextChoices):
    """The life of queued work (a snapshot names two of them its own way: Snapshot.Status)."""

    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


def failure_text(reason: str | BaseException) -> str:
    """What a row says of a failure: a message as given, an exception as its class and message
    (no traceback: the worker's log has it), cut to ERROR_CHARS keeping its start."""
    if isinstance(reason, BaseException):
        reason = f"{type(reason).__name__}: {reason}"
    return reason[:ERROR_CHARS]


class QueuedWorkQuerySet(models.QuerySet):
    """The rules that select or move many rows at once (sweepers, pages' warnings)."""

    model: type[QueuedWork]

    def waiting_too_long(self, now: datetime | None = None) -> Self:
        """Rows still waiting whose task will not come by itself: marked UNSENT (the broker was
        unreachable), or sent (or, never sent, created) more than STEPWISE_RESEND_AFTER_SECONDS
        ago: what the sweepers send again and pages warn of."""
        now = now or timezone.now()
        before = now - timedelta(seconds=settings.STEPWISE_RESEND_AFTER_SECONDS)
        not_sent_since = Q(sent_at__lt=before) | Q(sent_at__isnull=True, created_at__lt=before)
        return self.filter(Q(error=UNSENT) | not_sent_since, status=self.model.WAITING)

    def stale(self, now: datetime | None = None) -> Self:
        """RUNNING rows whose worker is gone: no heartbeat for the model's `stale_after()`."""
        return self.filter(status=self.model.RUNNING, heartbeat_at__lt=self.model.stale_before(now))

    def claimable(self, now: datetime | None = None) -> Self:
        """What `claim` may take: waiting rows, and stale ones where the model takes them over."""
        waiting = self.filter(status=self.model.WAITING)
        return waiting | self.stale(now) if self.model.TAKES_OVER_STALE else waiting

    def requeue(self, **fields: Any) -> int:
        """Back to waiting for a task (a retry, a resume), with `fields`: no error, not finished."""
        return self.update(status=self.model.WAITING, error="", finished_at=None, **fields)

    def mark_failed(self, reason: str | BaseException, **fields: Any) -> int:
        """FAILED with `reason` (`failure_text`) and `fields`: a sweeper's verdict on rows whose
        worker is gone."""
        return self.update(**self.model.ending(self.model.FAILED, failure_text(reason), fields))


class QueuedWork(models.Model):
    """A row that waits for a task, is claimed by one worker, reports a heartbeat while it
    works, and ends succeeded or failed with a reason. Subclasses add their own fields and
    states (a run's cancel, a generation's steps) and set the class attributes below."""

    # The states the rules move a row between, as the subclass's status spells them.
    WAITING: ClassVar[str] = QueuedStatus.QUEUED
    RUNNING: ClassVar[str] = QueuedStatus.RUNNING
    SUCCEEDED: ClassVar[str] = QueuedStatus.SUCCEEDED
    FAILED: ClassVar[str] = QueuedStatus.FAILED
    # Whether `claim` takes over a stale RUNNING row (its worker died and the task came back),
    # rather than leaving it to a sweeper that fails it.
    TAKES_OVER_STALE: ClassVar[bool] = True
    # Whether the worker's heartbeat and end land whatever the row's status is now. Otherwise
    # (the default) only while it is still RUNNING: a cancel, a sweeper or a worker that took it
    # over meanwhile keeps it.
    WORKER_HAS_LAST_WORD: ClassVar[bool] = False

    status = models.CharField(
        max_length=16, choices=QueuedStatus.choices, default=QueuedStatus.QUEUED, db_index=True
    )
    error = models.TextField(blank=True, max_length=ERROR_CHARS)
    attempts = models.PositiveSmallIntegerField(
        default=0, help_text="How many times a worker took it."
    )
    created_at = models.DateTimeField(default=timezone.now)
    # When its task was last sent to the broker (null: never, or the broker was unreachable); a
    # waiting row not taken long after is sent again (`waiting_too_long`).
    sent_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = QueuedWorkQuerySet.as_manager()

    class Meta:
        abstract = True

    @classmethod
    def stale_after(cls) -> timedelta:
        """How long a RUNNING row may go without a heartbeat before its worker counts as gone."""
        return timedelta(seconds=settings.STEPWISE_RUN_STALE_SECONDS)

    @classmethod
    def stale_before(cls, now: datetime | None = None) -> datetime:
        return (now or timezone.now()) - cls.stale_after()

    @classmethod
    def claim(cls, pk: int, *, where: Q | None = None, **fields: Any) -> Self | None:
        """Take row `pk` for this worker (and match `where`): a conditional UPDATE from waiting
        (or stale, `claimable`) to RUNNING, so of two workers exactly one wins and a redelivered
        task finds nothing to do. Counts the attempt, clears the error, keeps the first
        `started_at` unless `fields` set it. Returns the claimed row, or None."""
        now = timezone.now()
        values: dict[str, Any] = {
            "status": cls.RUNNING,
            "started_at": Coalesce(F("started_at"), Value(now)),
            "heartbeat_at": now,
            "attempts": F("attempts") + 1,
            "error": "",
            **fields,
        }
        rows = cls._default_manager.claimable(now).filter(where or Q(), pk=pk)
        if not rows.update(**values):
            return None
        return cast(Self, cls._default_manager.get(pk=pk))

    def heartbeat(self, **fields: Any) -> bool:
        """The worker is alive, with `fields` (its progress); False when the row is no longer
        its (see WORKER_HAS_LAST_WORD)."""
        values = {"heartbeat_at": timezone.now(), **fields}
        return self._written(self._own().update(**values), values)

    def mark_succeeded(self, **fields: Any) -> bool:
        """SUCCEEDED, finished now, with `fields` (its results); False when no longer its."""
        return self._end(self.SUCCEEDED, "", fields)

    def mark_failed(self, reason: str | BaseException, **fields: Any) -> bool:
        """FAILED with `reason` (`failure_text`), finished now, with `fields`; False when the
        row is no longer this worker's."""
        return self._end(self.FAILED, failure_text(reason), fields)

    @classmethod
    def ending(cls, status: str, error: str, fields: dict[str, Any]) -> dict[str, Any]:
        """What an end writes: `status`, `error`, finished now (unless `fields` say when), and
        `fields`."""
        return {"status": status, "error": error, "finished_at": timezone.now(), **fields}

    def _end(self, status: str, error: str, fields: dict[str, Any]) -> bool:
        values = self.ending(status, error, fields)
        return self._written(self._own().update(**values), values)

    def _own(self) -> QueuedWorkQuerySet:
        """This row while it is this worker's to write (WORKER_HAS_LAST_WORD): RUNNING under the
        claim this instance holds (each claim counts an attempt), so a worker whose stale row
        another took over writes nothing more."""
        row = type(self)._default_manager.filter(pk=self.pk)
        if self.WORKER_HAS_LAST_WORD:
            return row
        return row.filter(status=self.RUNNING, attempts=self.attempts)

    def _written(self, count: int, values: dict[str, Any]) -> bool:
        """Whether the update wrote the row; if so the instance says what it wrote (an
        expression, such as a counter's F() + n, is left for refresh_from_db)."""
        if count:
            for name, value in values.items():
                if not hasattr(value, "resolve_expression"):
                    setattr(self, name, value)
        return bool(count)
