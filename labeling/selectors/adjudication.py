"""The adjudication queue and a disputed solution's labelings side by side (a step-by-step
solution's: each labeler's own path, with its notes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labeling.models import Batch, Labeling, Note, Solution, SolutionAgreement, StepLabel
from labeling.selectors.notes import notes_by_step
from labeling.selectors.ratings import FinalRatings, final_step_ratings, labeling_step_ratings


def adjudication_queue(
    batch: Batch | None = None, limit: int = 100, project: Any = None
) -> list[SolutionAgreement]:
    rows = SolutionAgreement.objects.filter(needs_adjudication=True).select_related(
        "solution__problem", "batch"
    )
    if batch is not None:
        rows = rows.filter(batch=batch)
    if project is not None:
        rows = rows.filter(solution__project_id=project.pk)
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


@dataclass
class PathRow:
    """One step of a labeler's own path (the alternatives protocol)."""

    index: int
    text: str  # the candidate continued with, or the labeler's own; "" while still choosing
    rating: int | None  # the chosen candidate's; None for the labeler's own step
    written: bool
    candidates_rated: int
    notes: list[Note] = field(default_factory=list)  # its labeler's notes on it, oldest first

    @property
    def open(self) -> bool:
        return not self.text


@dataclass
class LabelingPath:
    labeling: Labeling
    steps: list[PathRow]
    # Notes on a step the path no longer has (taken back with "back a step").
    taken_back_notes: list[Note] = field(default_factory=list)


def labeling_paths(labelings: list[Labeling]) -> list[LabelingPath]:
    """Step by step (PRM800K phase 1) each labeler builds their own path, so a solution has no
    common steps to set side by side: per labeling (in the given order), its path, the step
    still being chosen included, with its labeler's notes under their step. Three queries."""
    ids = [labeling.pk for labeling in labelings]
    rows: dict[int, list[PathRow]] = {pk: [] for pk in ids}
    steps = (
        StepLabel.objects.filter(labeling_id__in=ids)
        .prefetch_related("completions")
        .order_by("labeling_id", "index")
    )
    for step in steps:
        completions = {c.index: c for c in step.completions.all()}
        rated = sum(1 for i, c in completions.items() if i >= 0 and c.rating is not None)
        chosen = (
            completions.get(step.chosen_completion) if step.chosen_completion is not None else None
        )
        own = completions.get(-1)
        text = chosen.text if chosen else own.text if own else ""
        rating = chosen.rating if chosen else None
        row = PathRow(step.index, text, rating, own is not None and chosen is None, rated)
        rows[step.labeling_id].append(row)
    notes: dict[int | None, list[Note]] = {}  # by labeling (all set: filtered on it)
    for note in (
        Note.objects.filter(labeling_id__in=ids)
        .select_related("author")
        .order_by("created_at", "id")
    ):
        notes.setdefault(note.labeling_id, []).append(note)
    paths = []
    for labeling in labelings:
        at = {row.index: row for row in rows[labeling.pk]}
        path = LabelingPath(labeling, rows[labeling.pk])
        for note in notes.get(labeling.pk, []):
            under = at.get(note.step_index) if note.step_index is not None else None
            (under.notes if under else path.taken_back_notes).append(note)
        paths.append(path)
    return paths
