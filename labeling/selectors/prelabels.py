"""Machine pre-labels (issue 46): a solution's latest pre-label of a judge kind, every pre-label
of some solutions, and the suggestion a suggest-mode batch shows, read with the labeling page's
and the rating's own query (annotations, never a statement of their own)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import CharField, F, IntegerField, JSONField, OuterRef, QuerySet, Subquery

from labeling.models import Batch, PreLabel


def latest_prelabel(solution_id: int, kind: str) -> PreLabel | None:
    """The solution's newest pre-label by a judge of `kind` (prm, llm, mc), or None."""
    return (
        PreLabel.objects.filter(solution_id=solution_id, kind=kind)
        .order_by("-created_at", "-pk")
        .first()
    )


def prelabels_for_solutions(solution_ids: Iterable[int]) -> dict[int, list[PreLabel]]:
    """Every pre-label of these solutions, newest first per solution (one query)."""
    found: dict[int, list[PreLabel]] = defaultdict(list)
    rows = PreLabel.objects.filter(solution_id__in=list(solution_ids)).order_by(
        "solution_id", "-created_at", "-pk"
    )
    for row in rows:
        found[row.solution_id].append(row)
    return dict(found)


# The annotations `with_suggestion` adds: the PreLabel a suggest batch shows for the solution.
SUGGESTION_FIELDS = {
    "suggestion_prelabel_id": ("pk", IntegerField()),
    "suggestion_judge": ("judge", CharField()),
    "suggestion_labels": ("labels", JSONField()),
    "suggestion_scores": ("scores", JSONField()),
}


def _shown_prelabels(solution_ref: str) -> QuerySet[PreLabel]:
    """The pre-labels a page may show for the solution at `solution_ref` (an outer field): its
    batch is in suggest mode, they are of the batch's judge kind, and the solution is no gold
    or screening item (those never show a suggestion). Newest first."""
    return PreLabel.objects.filter(
        solution_id=OuterRef(solution_ref),
        solution__batch__prelabel_mode=Batch.PrelabelMode.SUGGEST,
        solution__is_quality_control=False,
        solution__is_screening=False,
        kind=F("solution__batch__prelabel_judge"),
    ).order_by("-created_at", "-pk")


def with_suggestion(queryset: QuerySet[Any], solution_ref: str = "solution_id") -> QuerySet[Any]:
    """`queryset` with the suggestion its rows' solution shows, in the same statement."""
    shown = _shown_prelabels(solution_ref)
    return queryset.annotate(
        **{
            name: Subquery(shown.values(field)[:1], output_field=output)
            for name, (field, output) in SUGGESTION_FIELDS.items()
        }
    )


@dataclass(frozen=True)
class StepSuggestion:
    """The judge's label for one step, as the page shows it and the rating checks it."""

    prelabel_id: int
    judge: str
    label: int
    score: float | None

    @property
    def percent(self) -> int | None:
        return None if self.score is None else round(self.score * 100)


@dataclass(frozen=True)
class Suggestion:
    """A suggest batch's pre-label for one solution (from `with_suggestion`'s annotations)."""

    prelabel_id: int
    judge: str
    labels: list[Any]
    scores: list[Any]

    def at(self, step_index: int) -> StepSuggestion | None:
        """The label for the step, or None where the judge gave none."""
        if not 0 <= step_index < len(self.labels):
            return None
        label = self.labels[step_index]
        if label not in (-1, 0, 1) or isinstance(label, bool):
            return None
        score = self.scores[step_index] if step_index < len(self.scores) else None
        score = float(score) if isinstance(score, int | float) and 0 <= score <= 1 else None
        return StepSuggestion(self.prelabel_id, self.judge, int(label), score)


def suggestion_of(row: Any) -> Suggestion | None:
    """The suggestion annotated on a row by `with_suggestion`; None where none is shown (or
    the row was loaded without the annotations)."""
    prelabel_id = getattr(row, "suggestion_prelabel_id", None)
    labels = getattr(row, "suggestion_labels", None)
    if prelabel_id is None or not isinstance(labels, list):
        return None
    scores = getattr(row, "suggestion_scores", None)
    return Suggestion(
        prelabel_id=prelabel_id,
        judge=row.suggestion_judge or "",
        labels=labels,
        scores=scores if isinstance(scores, list) else [],
    )


__all__ = [
    "SUGGESTION_FIELDS",
    "StepSuggestion",
    "Suggestion",
    "latest_prelabel",
    "prelabels_for_solutions",
    "suggestion_of",
    "with_suggestion",
]
