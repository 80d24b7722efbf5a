"""The adjudication queue and a disputed solution's labelings side by side."""

from __future__ import annotations

from dataclasses import dataclass, field

from labeling.models import Batch, Labeling, Note, Solution, SolutionAgreement
from labeling.selectors.notes import notes_by_step
from labeling.selectors.ratings import FinalRatings, final_step_ratings, labeling_step_ratings


def adjudication_queue(batch: Batch | None = None, limit: int = 100) -> list[SolutionAgreement]:
    rows = SolutionAgreement.objects.filter(needs_adjudication=True).select_related(
        "solution__problem", "batch"
    )
    if batch is not None:
        rows = rows.filter(batch=batch)
    return list(rows.order_by("computed_at")[:limit])


@dataclass
class AdjudicationStep:
    index: int
    text: str
    ratings: list[int | None]  # one per labeling, None where that labeler had stopped
    final: int | None
    disagree: bool
    notes: list[Note] = field(default_factory=list)  # the step's notes, oldest first


def adjudication_view(
    solution: Solution,
) -> tuple[list[Labeling], list[AdjudicationStep], FinalRatings]:
    labelings = list(
        Labeling.objects.filter(solution=solution, status=Labeling.Status.COMPLETED)
        .select_related("labeler")
        .order_by("id")
    )
    return labelings, side_by_side(solution, labelings), final_step_ratings(solution)


def side_by_side(solution: Solution, labelings: list[Labeling]) -> list[AdjudicationStep]:
    """Per step of the solution: each labeling's rating (in the given order), the final
    rating, whether they disagree, and the notes on the step. Three queries."""
    per = labeling_step_ratings([lab.pk for lab in labelings])
    final = final_step_ratings(solution)
    notes = notes_by_step(solution)
    steps = []
    for index, text in enumerate(solution.steps):
        ratings = [per[lab.pk][index] if index < len(per[lab.pk]) else None for lab in labelings]
        given = {r for r in ratings if r is not None}
        steps.append(
            AdjudicationStep(
                index=index,
                text=text,
                ratings=ratings,
                final=final.ratings[index] if index < len(final.ratings) else None,
                disagree=len(given) > 1 or (len(given) == 1 and None in ratings),
                notes=notes.get(index, []),
            )
        )
    return steps
