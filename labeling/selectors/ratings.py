"""What labelers rated, as exports read it: each labeling's step ratings, a solution's
final ratings (adjudication, single labeling or majority), and one labeling as its
PRM800K release record."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from labeling import prm800k
from labeling.models import Adjudication, Completion, Labeling, Solution, StepLabel

# --- one labeling as a PRM800K record ------------------------------------------------------


def release_record(labeling_id: int) -> prm800k.LabelRecord:
    """One labeling as the release's record: what `prm800k.render_record` turns into its line.

    Four queries, plain ORM on any database (`exporting.render_release_lines` reads many
    labelings' records three queries at a time).
    """
    labeling = Labeling.objects.select_related("solution__problem", "labeler__labeler").get(
        pk=labeling_id
    )
    completions = Completion.objects.filter(step__labeling_id=labeling_id).order_by(
        "step_id", "index"
    )
    profile = getattr(labeling.labeler, "labeler", None)  # a user without a Labeler row
    return label_record(
        labeling,
        public_id=str(profile.public_id) if profile else str(labeling.labeler_id),
        steps=list(StepLabel.objects.filter(labeling_id=labeling_id).order_by("index")),
        completions=list(completions),
    )


def label_record(
    labeling: Labeling, *, public_id: str, steps: list[StepLabel], completions: list[Completion]
) -> prm800k.LabelRecord:
    """The release record of a labeling (its solution and problem loaded) from its steps in
    order and their completions in (step, index) order: what `release_record` reads, or what the
    finishing rating has read already."""
    solution, problem = labeling.solution, labeling.solution.problem
    question = prm800k.question_record(
        is_phase2=solution.format != Solution.Format.PHASE1,
        problem=problem.text,
        ground_truth_answer=problem.ground_truth_answer,
        ground_truth_solution=problem.ground_truth_solution,
        steps=solution.steps,
        answer=solution.final_answer,
        verifier_score=solution.verifier_score,
        override=solution.question_override,
    )
    rated: dict[int, list[prm800k.CompletionRecord]] = {}
    human: dict[int, prm800k.HumanCompletionRecord] = {}
    for c in completions:
        if c.is_human:
            human[c.step_id] = prm800k.HumanCompletionRecord(
                c.text, c.rating, c.source or "human", c.flagged
            )
        else:
            rated.setdefault(c.step_id, []).append(
                prm800k.CompletionRecord(c.text, c.rating, c.flagged)
            )
    return prm800k.LabelRecord(
        labeler=public_id,
        timestamp=prm800k.export_timestamp(labeling.finished_at or labeling.started_at),
        generation=solution.generation,
        is_quality_control_question=solution.is_quality_control,
        is_initial_screening_question=solution.is_screening,
        question=question,
        steps=[
            prm800k.StepRecord(
                completions=rated.get(step.pk, []) if step.has_completions else None,
                human_completion=human.get(step.pk),
                chosen_completion=step.chosen_completion,
            )
            for step in steps
        ],
        total_time=labeling.total_time_ms or 0,
        finish_reason=labeling.finish_reason or "give_up",
    )


# --- final ratings (what exports use by default) --------------------------------------------


@dataclass(frozen=True)
class FinalRatings:
    ratings: list[int]  # one per step, stopping at the first -1 (or where labelers stopped)
    source: str  # "adjudication" | "single" | "majority" | "none"
    labeling_ids: list[int] = field(default_factory=list)


def labeling_step_ratings(labeling_ids: list[int]) -> dict[int, list[int]]:
    """Step ratings (completion 0) of each labeling, in step order; one query."""
    out: dict[int, list[int]] = {i: [] for i in labeling_ids}
    rows = (
        Completion.objects.filter(step__labeling_id__in=labeling_ids, index=0)
        .order_by("step__labeling_id", "step__index")
        .values_list("step__labeling_id", "rating")
    )
    for labeling_id, rating in rows:
        out[labeling_id].append(cast(int, rating))  # a rated step's first completion has one
    return out


def final_step_ratings(solution: Solution) -> FinalRatings:
    """The ratings to export for a solution.

    A lead's Adjudication if there is one; else the single completed, non-surplus labeling;
    else a per-step majority of those labelings (each step among the labelings that rated it;
    a tie takes the lower rating, so a disputed step is never called better than a labeler
    called it), cut at the first -1.
    """
    adjudication = Adjudication.objects.filter(solution=solution).first()
    if adjudication is not None:
        return FinalRatings(list(adjudication.ratings), "adjudication")
    ids = list(
        Labeling.objects.filter(
            solution=solution, status=Labeling.Status.COMPLETED, is_surplus=False
        )
        .order_by("id")
        .values_list("id", flat=True)
    )
    if not ids:
        return FinalRatings([], "none")
    per_labeling = labeling_step_ratings(ids)
    if len(ids) == 1:
        return FinalRatings(per_labeling[ids[0]], "single", ids)
    final: list[int] = []
    for step in range(max(len(r) for r in per_labeling.values())):
        votes = Counter(r[step] for r in per_labeling.values() if step < len(r))
        top = max(votes.values())
        choice = min(v for v, n in votes.items() if n == top)
        final.append(choice)
        if choice == -1:
            break
    return FinalRatings(final, "majority", ids)
