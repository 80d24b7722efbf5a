"""Notes: a labeler's on their rated steps, a lead's replies on an item."""

from __future__ import annotations

from django.db.models import Q

from labeling.models import Labeling, Note, Solution


def solution_notes(solution: Solution) -> list[Note]:
    """Every note on a solution, oldest first, with its author and labeling's labeler."""
    return list(
        Note.objects.filter(solution=solution)
        .select_related("author", "labeling")
        .order_by("created_at", "id")
    )


def notes_by_step(solution: Solution) -> dict[int | None, list[Note]]:
    """The solution's notes keyed by step index (None: about the whole solution)."""
    grouped: dict[int | None, list[Note]] = {}
    for note in solution_notes(solution):
        grouped.setdefault(note.step_index, []).append(note)
    return grouped


def labeling_notes(labeling: Labeling) -> list[Note]:
    """A labeling's own notes and the leads' replies on its solution, oldest first (what its
    labeler sees on the labeling page)."""
    return list(
        Note.objects.filter(
            Q(labeling=labeling) | Q(solution_id=labeling.solution_id, labeling__isnull=True)
        )
        .select_related("author")
        .order_by("created_at", "id")
    )
