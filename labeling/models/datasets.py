"""What surrounds the labels: the guidelines' versions, export snapshots and API tokens."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone
from knox.models import AbstractAuthToken

from stepwise.queued import QueuedWork

from .projects import default_project_id


class Guidelines(models.Model):
    """Labeling guidelines, versioned: every edit adds a row; the highest version is shown."""

    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    version = models.PositiveIntegerField()
    text = models.TextField(help_text="Plain text: '# ' headings, '- ' bullets, $LaTeX$.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "guidelines"
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "version"], name="guidelines_version_per_project"
            ),
        ]


# --- snapshots


class Snapshot(QueuedWork):
    """An export written once to a file and never changed: its sha256 says so.

    Created pending by `labeling.services.snapshots.snapshot_create`, written by a Celery task through
    `snapshot_run`. There is no update path: the only writes are the claim, progress while
    running, and the final done/failed transition, all conditional on the current status.
    """

    class Format(models.TextChoices):
        PRM800K = "prm800k", "PRM800K JSONL (release format)"
        STEPWISE_JSONL = "stepwise_jsonl", "stepwise supervision, JSONL"
        STEPWISE_PARQUET = "stepwise_parquet", "stepwise supervision, Parquet"

    class Status(models.TextChoices):
        PENDING = "pending", "waiting for a worker"
        RUNNING = "running", "writing"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    # Queued work's states as a snapshot (and its API) has always said them.
    WAITING = Status.PENDING
    SUCCEEDED = Status.DONE

    project = models.ForeignKey(
        "labeling.Project", on_delete=models.PROTECT, default=default_project_id, related_name="+"
    )
    format = models.CharField(max_length=24, choices=Format.choices, default=Format.PRM800K)
    filters = models.JSONField(default=dict, blank=True)
    options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    total = models.PositiveIntegerField(null=True, blank=True, help_text="Labelings to export.")
    processed = models.PositiveIntegerField(default=0)
    row_count = models.PositiveIntegerField(null=True, blank=True)
    step_label_count = models.PositiveIntegerField(null=True, blank=True)
    size_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    file_path = models.CharField(max_length=500, blank=True, help_text="Relative to MEDIA_ROOT.")
    # Database time when the export started reading: "changes since" this snapshot means
    # labelings whose updated_at is later.
    cutoff_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="snapshots"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"snapshot {self.pk} ({self.format}, {self.status})"

    @classmethod
    def stale_after(cls) -> timedelta:
        return timedelta(seconds=settings.STEPWISE_SNAPSHOT_STALE_SECONDS)

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def progress_percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        if not self.total:
            return 0
        return min(99, int(100 * self.processed / self.total))


class ApiToken(AbstractAuthToken):
    """A user's API token (django-rest-knox's model, swapped in by KNOX_TOKEN_MODEL): only the
    key's first characters (token_key, for the lookup) and its SHA-512 digest are stored, never
    the key. Named by its owner; last_used is written at most once a minute
    (labeling.authentication)."""

    # Annotated by hand: knox has no type information, so the base class is Any to mypy.
    name: "models.CharField[str, str]" = models.CharField(max_length=100)
    last_used: "models.DateTimeField[datetime | None, datetime | None]" = models.DateTimeField(
        null=True, blank=True
    )

    class Meta:
        verbose_name = "API token"
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    @property
    def is_expired(self) -> bool:
        return self.expiry is not None and self.expiry <= timezone.now()
