"""Shared steps for the quality-control tests: label a solution with given ratings."""

from labeling.models import Labeling
from labeling.services import queue
from labeling.services.rating import rate_step


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
    labeling = queue.claim_next(user, **kwargs)
    assert labeling is not None, f"{user} got nothing to label"
    return label(labeling, ratings)
