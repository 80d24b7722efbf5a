"""The lead's item browser: a batch's solutions filtered as one queryset, a page's rows
with their labelings, an item's history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet

from labeling import extensions
from labeling.models import Batch, Completion, Labeling, Note, RatingEvent, Solution
from labeling.selectors.ratings import labeling_step_ratings


class ItemState:
    """Where a solution stands, as the item browser filters it."""

    WAITING = "waiting"
    IN_PROGRESS = "in_progress"
    PARTIAL = "partial"
    COMPLETE = "complete"
    NEEDS_ADJUDICATION = "needs_adjudication"
    ADJUDICATED = "adjudicated"
    CHOICES = (
        (WAITING, "waiting for a labeler"),
        (IN_PROGRESS, "being labeled now"),
        (PARTIAL, "fewer labels than wanted"),
        (COMPLETE, "all labels in"),
        (NEEDS_ADJUDICATION, "waiting for adjudication"),
        (ADJUDICATED, "adjudicated"),
    )


@dataclass(frozen=True)
class ItemFilters:
    """The item browser's filters (parsed by `forms.ItemFilterForm`); empty means any."""

    q: str = ""  # words of the problem text
    state: str = ""
    finish_reason: str = ""
    labeler_id: int | None = None
    agreement: str = ""  # "disagree" | "agree" | "none"
    flagged: str = ""  # "yes" | "no"
    gold: str = ""  # "yes" | "no"
    notes: str = ""  # "yes" | "no"
    model: str = ""  # "disagree": the active PRM disagrees with a labeler (modeling's hook)


MODEL_DISAGREES_AT = 0.8  # as the model-assisted review marks a step


def model_disagreement_ids(batch: Batch) -> list[int] | None:
    """Solutions of the batch where the active PRM disagrees with a labeler by at least
    MODEL_DISAGREES_AT (modeling provides it through labeling.extensions); None when no app
    provides it or no model is active."""
    return extensions.model_disagreement(batch, MODEL_DISAGREES_AT)


def _yes_no(query: QuerySet[Solution], value: str, condition: Q | Exists) -> QuerySet[Solution]:
    if value == "yes":
        return query.filter(condition)
    if value == "no":
        return query.exclude(condition)
    return query


def batch_items(batch: Batch, filters: ItemFilters) -> QuerySet[Solution]:
    """The batch's solutions that pass the filters, in id order: one query the page slices
    (a paginator's count and one page), never all rows in memory. `has_flag` and `note_count`
    are annotated for the rows; the agreement and adjudication come with a join."""
    done = Labeling.objects.filter(solution_id=OuterRef("pk"), status=Labeling.Status.COMPLETED)
    flagged = Exists(
        Completion.objects.filter(step__labeling__solution_id=OuterRef("pk"), flagged=True)
    )
    noted = Exists(Note.objects.filter(solution_id=OuterRef("pk")))
    query: QuerySet[Solution] = (
        Solution.objects.filter(batch=batch)
        .select_related("problem", "batch", "agreement", "adjudication")
        .annotate(has_flag=flagged, has_notes=noted)
        .order_by("pk")
    )
    if filters.q:
        for word in filters.q.split()[:8]:
            query = query.filter(problem__text__icontains=word)
    state = filters.state
    if state == ItemState.WAITING:
        query = query.filter(completed_count=0, active_count=0)
    elif state == ItemState.IN_PROGRESS:
        query = query.filter(active_count__gt=0)
    elif state == ItemState.PARTIAL:
        query = query.filter(completed_count__gt=0, completed_count__lt=batch.overlap)
    elif state == ItemState.COMPLETE:
        query = query.filter(completed_count__gte=batch.overlap)
    elif state == ItemState.NEEDS_ADJUDICATION:
        query = query.filter(agreement__needs_adjudication=True, adjudication__isnull=True)
    elif state == ItemState.ADJUDICATED:
        query = query.filter(adjudication__isnull=False)
    if filters.finish_reason:
        query = query.filter(Exists(done.filter(finish_reason=filters.finish_reason)))
    if filters.labeler_id is not None:
        by_labeler = Labeling.objects.filter(
            solution_id=OuterRef("pk"), labeler_id=filters.labeler_id
        )
        query = query.filter(Exists(by_labeler))
    # Disagreement as the adjudication queue judges it, whether a lead has decided it since.
    disagree = Q(agreement__first_error_agree=False) | Q(
        agreement__raw__lt=settings.STEPWISE_ADJUDICATE_BELOW
    )
    if filters.agreement == "disagree":
        query = query.filter(disagree)
    elif filters.agreement == "agree":
        query = query.filter(agreement__isnull=False).exclude(disagree)
    elif filters.agreement == "none":
        query = query.filter(agreement__isnull=True)
    query = _yes_no(query, filters.flagged, flagged)
    query = _yes_no(query, filters.notes, noted)
    query = _yes_no(query, filters.gold, Q(is_quality_control=True))
    if filters.model == "disagree":
        query = query.filter(pk__in=model_disagreement_ids(batch) or [])
    return query


@dataclass(frozen=True)
class ItemLabeling:
    labeling: Labeling
    ratings: list[int]  # per rated step, in order


@dataclass(frozen=True)
class ItemRow:
    solution: Solution
    labelings: list[ItemLabeling]  # completed and in progress, oldest first

    @property
    def state(self) -> str:
        solution = self.solution
        adjudication = getattr(solution, "adjudication", None)
        agreement = getattr(solution, "agreement", None)
        overlap = solution.batch.overlap if solution.batch else 1
        if adjudication is not None:
            return "adjudicated"
        if agreement is not None and agreement.needs_adjudication:
            return "needs adjudication"
        if solution.completed_count >= overlap:
            return "complete"
        if solution.active_count:
            return "in progress"
        if solution.completed_count:
            return "partial"
        return "waiting"


def item_rows(solutions: list[Solution]) -> list[ItemRow]:
    """A page of the browser: each solution with its labelings (completed and in progress)
    and their ratings. Two queries for the page, whatever its length."""
    labelings = list(
        Labeling.objects.filter(
            solution_id__in=[s.pk for s in solutions],
            status__in=[Labeling.Status.COMPLETED, Labeling.Status.IN_PROGRESS],
        )
        .select_related("labeler")
        .order_by("pk")
    )
    ratings = labeling_step_ratings([lab.pk for lab in labelings])
    by_solution: dict[int, list[ItemLabeling]] = {}
    for labeling in labelings:
        by_solution.setdefault(labeling.solution_id, []).append(
            ItemLabeling(labeling, ratings[labeling.pk])
        )
    return [ItemRow(s, by_solution.get(s.pk, [])) for s in solutions]


@dataclass(frozen=True)
class HistoryEntry:
    at: datetime
    actor: str
    what: str  # "rated", "undone", … , "note"
    step_index: int | None
    old_rating: int | None
    new_rating: int | None
    detail: str
    labeler: str  # whose labeling it is about ("" for a lead's note on the item)


def item_history(solution: Solution) -> list[HistoryEntry]:
    """Everything that happened to a solution, oldest first: every rating event of each of its
    labelings (rate, undo, edit, adjudication, finish) and every note."""
    entries = [
        HistoryEntry(
            e.created_at,
            e.actor.username if e.actor else "—",
            e.get_reason_display(),
            e.step_index,
            e.old_rating,
            e.new_rating,
            e.detail,
            e.labeling.labeler.username,
        )
        for e in RatingEvent.objects.filter(labeling__solution=solution).select_related(
            "actor", "labeling__labeler"
        )
    ]
    entries += [
        HistoryEntry(
            n.created_at,
            n.author.username if n.author else "—",
            "note",
            n.step_index,
            None,
            None,
            n.text,
            n.labeling.labeler.username if n.labeling else "",
        )
        for n in Note.objects.filter(solution=solution).select_related(
            "author", "labeling__labeler"
        )
    ]
    entries.sort(key=lambda entry: entry.at)
    return entries
