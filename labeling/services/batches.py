"""Leads' writes on batches and guidelines."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef

from labeling import selectors
from labeling.models import (
    Batch,
    Guidelines,
    Labeling,
    PreLabel,
    Solution,
    default_project_id,
)
from labeling.roles import require_batch_writer
from labeling.services import importing
from labeling.services.errors import LabelingError


def batch_move_solutions(*, batch: Batch, source: Batch, limit: int | None = None) -> int:
    """Move solutions nobody has started from another batch into this one (regular only)."""
    if source.pk == batch.pk:
        raise LabelingError("Pick a different batch to take solutions from.")
    with transaction.atomic():
        untouched = Solution.objects.filter(
            batch=source, completed_count=0, active_count=0, is_quality_control=False
        ).exclude(Exists(Labeling.objects.filter(solution_id=OuterRef("pk"))))
        ids = list(untouched.order_by("id").values_list("id", flat=True)[:limit])
        moved = Solution.objects.filter(pk__in=ids).update(batch=batch, generation=batch.generation)
    selectors.clear_count_cache(batch.pk, source.pk)
    return moved


def batch_samples_upload(
    uploaded: Any,
    *,
    user: Any,
    batch_name: str,
    overlap: int,
    generation: int | None,
    project_id: int,
) -> importing.ImportReport:
    """Uploaded generator samples into the project's batch named `batch_name`, by a user who
    may add to it (`roles.may_add_to_batch`); a new batch is theirs. All or nothing, a new batch
    included: a refused or rejected upload leaves no row behind (PermissionDenied,
    UploadRejected)."""
    with transaction.atomic():
        batch, _ = Batch.objects.get_or_create(
            project_id=project_id,
            name=batch_name,
            defaults={
                "overlap": overlap,
                "generation": generation,
                "origin": Batch.Origin.SAMPLES,
                "created_by": user,
            },
        )
        require_batch_writer(user, batch)
        return importing.samples_upload(
            uploaded,
            batch_name=batch.name,
            overlap=overlap,
            generation=generation,
            project_id=project_id,
        )


def prelabel_refusal(mode: str, judge: str) -> str | None:
    """Why a batch may not take this pre-label mode and judge; None when it may."""
    if mode not in Batch.PrelabelMode.values:
        return f"The pre-label mode is one of {', '.join(Batch.PrelabelMode.values)}."
    if judge and judge not in PreLabel.Kind.values:
        return f"The judge is one of {', '.join(PreLabel.Kind.values)}."
    if mode == Batch.PrelabelMode.SUGGEST and not judge:
        return "A batch in suggest mode names the judge whose labels it shows."
    return None


def batch_prelabel_set(*, batch: Batch, user: Any, mode: str, judge: str) -> Batch:
    """Switch a batch's machine pre-labels (off, blind, suggest) and the judge a suggest batch
    shows; by a user who may write to it (`roles.may_add_to_batch`). Ratings already made keep
    the provenance they were made with."""
    require_batch_writer(user, batch)
    refusal = prelabel_refusal(mode, judge)
    if refusal:
        raise LabelingError(refusal)
    batch.prelabel_mode = mode
    batch.prelabel_judge = judge
    batch.save(update_fields=["prelabel_mode", "prelabel_judge"])
    return batch


def guidelines_save(*, text: str, user: User, project: Any = None) -> Guidelines:
    """A new version of the project's guidelines (the Default project's when none is named);
    earlier versions stay."""
    if not text.strip():
        raise LabelingError("The guidelines cannot be empty.")
    project_id = default_project_id() if project is None else project.pk
    with transaction.atomic():
        last = (
            Guidelines.objects.select_for_update()
            .filter(project_id=project_id)
            .order_by("-version")
            .first()
        )
        if last is not None and last.text == text:
            raise LabelingError(f"This is version {last.version}'s text: nothing to publish.")
        return Guidelines.objects.create(
            project_id=project_id,
            version=(last.version + 1) if last else 1,
            text=text,
            created_by=user,
        )
