"""Notes on ratings and items: a labeler's "why −1" or "why flagged" on one of their own rated
steps, and a lead's reply on the item (the solution). Notes are plain user text: stored as
typed (trimmed), escaped wherever shown, bounded by STEPWISE_NOTE_MAX_CHARS, and at most
STEPWISE_NOTES_PER_STEP of one author on one step. A labeler's labeling remembers the newest
reply they have had on screen (`note_replies_seen`): later ones are unread."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from labeling.models import Completion, Labeling, Note, Solution
from labeling.services.errors import LabelingError, NotFound


def _clean_text(text: str) -> str:
    text = (text or "").strip()
    if not text:
        raise LabelingError("A note needs some text.")
    limit = settings.STEPWISE_NOTE_MAX_CHARS
    if len(text) > limit:
        raise LabelingError(
            f"A note holds at most {limit:,} characters; this one has {len(text):,}. "
            "Nothing was saved."
        )
    return text


def _refuse_past_the_cap(*, solution_id: int, step_index: int | None, author: User) -> None:
    """At most STEPWISE_NOTES_PER_STEP notes of one author on one step (or the whole solution)."""
    theirs = Note.objects.filter(solution_id=solution_id, step_index=step_index, author=author)
    # Their notes there, locked: of two posts at the cap, the second counts after the first
    # commits. Below the cap there is nothing to lock and nothing to wait for.
    list(theirs.select_for_update().values_list("pk", flat=True))
    limit = settings.STEPWISE_NOTES_PER_STEP
    if theirs.count() >= limit:
        where = "the whole solution" if step_index is None else f"step {step_index + 1}"
        raise LabelingError(
            f"You have {limit} notes on {where} already, the most one person may write there. "
            "Nothing was saved."
        )


@transaction.atomic
def note_add(*, labeling_id: int, user: User, step_index: int, text: str) -> Note:
    """A labeler's note on a step they rated in their own labeling (open or submitted: a −1
    ends the labeling, and its note comes after). Another user's labeling is NotFound."""
    labeling = Labeling.objects.filter(pk=labeling_id, labeler_id=user.pk).first()
    if labeling is None:
        raise NotFound("No such labeling of yours.")
    rated = Completion.objects.filter(
        step__labeling=labeling, step__index=step_index, rating__isnull=False
    ).exists()
    if not rated:
        raise LabelingError(
            f"Step {step_index + 1} has no rating of yours yet: a note explains a rating."
        )
    text = _clean_text(text)
    _refuse_past_the_cap(solution_id=labeling.solution_id, step_index=step_index, author=user)
    return Note.objects.create(
        solution_id=labeling.solution_id,
        labeling=labeling,
        step_index=step_index,
        author=user,
        text=text,
    )


@transaction.atomic
def note_reply(*, solution: Solution, lead: User, text: str, step_index: int | None = None) -> Note:
    """A lead's note on an item, about one step or the whole solution (views check the role)."""
    if step_index is not None and not 0 <= step_index < len(solution.steps):
        raise LabelingError(
            f"Step {step_index + 1} is not a step of this solution (it has {len(solution.steps)})."
        )
    text = _clean_text(text)
    _refuse_past_the_cap(solution_id=solution.pk, step_index=step_index, author=lead)
    return Note.objects.create(solution=solution, step_index=step_index, author=lead, text=text)


def note_replies_seen(*, labeling: Labeling, user: User, notes: list[Note]) -> None:
    """The labeling's labeler has `notes` (its page's, leads' replies among them) on screen: the
    newest reply is read, and every one before it. Nothing is written when none is new, so an
    ordinary visit to the page costs no statement; a lead's read-only view marks nothing."""
    if labeling.labeler_id != user.pk:
        return
    newest = max((note.created_at for note in notes if note.labeling_id is None), default=None)
    seen = labeling.replies_seen_at
    if newest is None or (seen is not None and seen >= newest):
        return
    Labeling.objects.filter(pk=labeling.pk, labeler_id=user.pk).filter(
        Q(replies_seen_at__isnull=True) | Q(replies_seen_at__lt=newest)
    ).update(replies_seen_at=newest)
    labeling.replies_seen_at = newest
