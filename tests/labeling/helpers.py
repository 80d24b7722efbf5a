"""Shared steps of the labeling tests: claim as the queue's button does, label with given ratings."""

from labeling.models import LabelerRecord, Labeling
from labeling.models.projects import in_project
from labeling.services import queue
from labeling.services.rating import rate_step


def next_labeling(user, *, batch=None) -> Labeling | None:
    """The labeling `queue.claim` hands the user (what the queue's button opens), or None."""
    found = queue.claim(user, batch=batch)
    return None if found is None else found.labeling


def label(labeling: Labeling, ratings: list[int], *, elapsed_ms: int = 1000) -> Labeling:
    for step, rating in enumerate(ratings):
        labeling = rate_step(
            labeling_id=labeling.pk,
            user=labeling.labeler,
            step_index=step,
            rating=rating,
            elapsed_ms=elapsed_ms,
        ).labeling
    labeling.refresh_from_db()
    return labeling


def claim_and_label(user, ratings: list[int], **kwargs) -> Labeling:
    labeling = next_labeling(user, **kwargs)
    assert labeling is not None, f"{user} got nothing to label"
    return label(labeling, ratings)


def record_of(user, project=None) -> LabelerRecord:
    """The user's labeler record in `project` (the Default project when none is named)."""
    return LabelerRecord.objects.get(user=user, **in_project(getattr(project, "pk", project)))
