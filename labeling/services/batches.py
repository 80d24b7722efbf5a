"""Leads' writes on batches and guidelines."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef

from labeling import selectors
from labeling.models import (
    Batch,
    Guidelines,
    Labeling,
    Solution,
)
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


def guidelines_save(*, text: str, user: User) -> Guidelines:
    """A new version of the guidelines; earlier versions stay."""
    if not text.strip():
        raise LabelingError("The guidelines cannot be empty.")
    with transaction.atomic():
        last = Guidelines.objects.select_for_update().order_by("-version").first()
        return Guidelines.objects.create(
            version=(last.version + 1) if last else 1, text=text, created_by=user
        )
