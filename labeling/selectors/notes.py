"""Notes: a labeler's on their rated steps, a lead's replies on an item, and the replies a
labeler has not seen yet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from django.db.models import Count, Exists, OuterRef, Q, Subquery, Window

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


@dataclass(frozen=True)
class UnreadReplies:
    total: int
    # The newest first, each with `open_on`: the labeler's labeling whose page shows it (their
    # note on the solution is there), and its author and solution's problem loaded.
    newest: list[Note]


def unread_replies(user, *, limit: int) -> UnreadReplies:
    """Leads' replies to the user's notes that they have not seen yet, in one query: each a reply
    on a solution they wrote a note on, written after that note, by someone else, and newer than
    the newest reply their labeling's page has shown them (`Labeling.replies_seen_at`)."""
    noted = Note.objects.filter(author_id=user.pk, labeling__labeler_id=user.pk)
    their_labeling = (
        Labeling.objects.filter(labeler_id=user.pk, solution_id=OuterRef("solution_id"))
        .filter(
            Exists(Note.objects.filter(labeling_id=OuterRef("pk"), pk__lt=OuterRef(OuterRef("pk"))))
        )
        .filter(Q(replies_seen_at__isnull=True) | Q(replies_seen_at__lt=OuterRef("created_at")))
        .order_by("-pk")
        .values("pk")[:1]
    )
    rows: list[Note] = list(
        Note.objects.filter(labeling__isnull=True, solution_id__in=noted.values("solution_id"))
        .exclude(author_id=user.pk)
        .annotate(open_on=Subquery(their_labeling))
        .filter(open_on__isnull=False)
        .annotate(total=Window(Count("pk")))  # every unread reply, counted before the limit
        .select_related("author", "solution__problem")
        .order_by("-created_at", "-pk")[:limit]
    )
    return UnreadReplies(total=cast(Any, rows[0]).total if rows else 0, newest=rows)
