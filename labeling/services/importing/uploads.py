"""Uploaded files (API and lead page): a size limit, every bad line reported, all or nothing."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction

from labeling.services.importing.label_lines import import_prm800k
from labeling.services.importing.runner import ImportReport, LineError, NoRecords
from labeling.services.importing.solutions import import_samples


class UploadRejected(Exception):
    """An uploaded file that was not imported: nothing of it was written."""

    def __init__(self, message: str, errors: list[LineError] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or []


class _Rollback(Exception):
    pass


def import_uploaded(
    uploaded: Any, run: Callable[[str], ImportReport], *, max_bytes: int, max_errors: int = 100
) -> ImportReport:
    """Import an uploaded JSONL file all-or-nothing, reporting every bad line (up to max_errors).

    `run(path)` is an importer called with skip_invalid=True inside one transaction, so all
    bad lines are found in one pass; if there is any, the transaction is rolled back.
    """
    name = getattr(uploaded, "name", "upload")
    if uploaded.size > max_bytes:
        raise UploadRejected(f"{name} is {uploaded.size:,} bytes; the limit is {max_bytes:,}.")
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as handle:
        for block in uploaded.chunks():
            handle.write(block)
        handle.flush()
        report: ImportReport | None = None
        try:
            with transaction.atomic():
                report = run(handle.name)
                if report.errors:
                    raise _Rollback
        except _Rollback:
            assert report is not None
            errors = [
                LineError(name, e.line, e.field, e.message) for e in report.errors[:max_errors]
            ]
            more = len(report.errors) - len(errors)
            raise UploadRejected(
                f"{len(report.errors)} invalid line(s) in {name}; nothing was imported"
                + (f" ({more} more not shown)" if more > 0 else "")
                + ".",
                errors,
            ) from None
        except LineError as error:
            raise UploadRejected(
                f"Invalid line in {name}; nothing was imported.",
                [LineError(name, error.line, error.field, error.message)],
            ) from None
        except NoRecords as error:
            raise UploadRejected(error.describe(name)) from None
    report.path = name
    return report


def samples_upload(
    uploaded: Any,
    *,
    batch_name: str,
    overlap: int = 1,
    generation: int | None = None,
    project_id: int | None = None,
) -> ImportReport:
    """Uploaded generator samples into a batch: size limit, all or nothing (API and lead page)."""
    return import_uploaded(
        uploaded,
        lambda path: import_samples(
            path,
            batch_name=batch_name,
            overlap=overlap,
            generation=generation,
            skip_invalid=True,
            project_id=project_id,
        ),
        max_bytes=settings.STEPWISE_UPLOAD_MAX_BYTES,
    )


def prm800k_upload(uploaded: Any) -> ImportReport:
    """Uploaded PRM800K label lines: size limit, all or nothing."""
    return import_uploaded(
        uploaded,
        lambda path: import_prm800k(path, skip_invalid=True),
        max_bytes=settings.STEPWISE_UPLOAD_MAX_BYTES,
    )
