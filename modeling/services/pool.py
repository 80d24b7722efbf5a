"""The candidate pool and the selection from it into the next generation's batch.

The pool is imported solutions with no batch, each graded against its problem's ground truth
(a PoolEntry). A generation's select step ranks the selectable ones by its model's scores with
the rule it was started with (`modeling.training.selection`) and records a SelectionReason each;
its enqueue step moves them into a new active-learning batch, in one transaction.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from labeling.models import Batch, Labeling, PreLabel, Solution
from labeling.models.projects import in_project
from labeling.roles import may_add_to_batch
from labeling.services import importing
from modeling.grading import grade_solution, is_equivalent
from modeling.models import GenerationRun, PoolEntry, SelectionReason, SolutionScore
from modeling.services.loop import (
    StepFailed,
    check_rule,
    ensemble_heads,
    needs_uncertainty,
    with_defaults,
)
from modeling.training.selection import Candidate, judge_disagreement, select_by_rule

# The PRM calls a step wrong at P(-1) >= this (the prm judge's default threshold).
PRM_WRONG_AT = 0.5

# --- the candidate pool ----------------------------------------------------------------------


def _grade(
    sample: importing.SampleLine, ground_truth: str | None
) -> tuple[str | None, bool | None]:
    """The line's own `answer` when given (the generator's final answer), else the steps'."""
    if sample.answer and sample.answer.strip():
        if not ground_truth or not ground_truth.strip():
            return sample.answer, None
        return sample.answer, is_equivalent(sample.answer, ground_truth)
    result = grade_solution(sample.steps, ground_truth)
    return result.answer, result.correct


def _grade_pool_solution(sample: importing.SampleLine, solution: Solution) -> PoolEntry:
    answer, correct = _grade(sample, solution.problem.ground_truth_answer)
    solution.answer_correct = correct
    return PoolEntry(extracted_answer=answer)


def _write_pool_entries(
    created: list[tuple[Solution, PoolEntry]], report: importing.ImportReport
) -> None:
    for solution, entry in created:
        entry.solution_id = solution.pk
        entry.source = Path(report.path).name
    PoolEntry.objects.bulk_create([entry for _, entry in created])
    report.created["graded correct"] += sum(s.answer_correct is True for s, _ in created)
    report.created["graded wrong"] += sum(s.answer_correct is False for s, _ in created)


def import_pool(
    path: str | Path, *, skip_invalid: bool = False, project_id: int | None = None
) -> importing.ImportReport:
    """Import candidate solutions (JSONL, one per line: `unique_id` or `problem`, `steps`, and
    optionally `answer`, `generator`, `source_id`, `score`) into the pool, grading each against
    its problem's ground truth. Streamed in chunks; all-or-nothing unless skip_invalid;
    re-importing adds nothing twice (solutions by content hash). Into the project's pool (the
    Default project's where None is named)."""
    return importing.import_solutions(
        path,
        batch=None,
        create_problems=False,
        skip_invalid=skip_invalid,
        counted_as="pool solutions",
        prepare=_grade_pool_solution,
        after_create=_write_pool_entries,
        project_id=project_id,
    )


def pool_solutions(project_id: int | None = None) -> QuerySet[Solution]:
    """The project's candidate pool (the Default project's where None is named)."""
    return Solution.objects.filter(pool_entry__isnull=False, **in_project(project_id))


def selectable_pool(project_id: int | None = None) -> QuerySet[Solution]:
    """The project's pool solutions not yet queued (no batch) and never labeled (no labeling of
    any status)."""
    labeled = Labeling.objects.filter(solution_id=OuterRef("pk"))
    return pool_solutions(project_id).filter(batch__isnull=True).exclude(Exists(labeled))


def pool_stats(project_id: int | None = None) -> dict[str, int]:
    pool = pool_solutions(project_id)
    return {
        "total": pool.count(),
        "selectable": selectable_pool(project_id).count(),
        "wrong": pool.filter(answer_correct=False).count(),
        "correct": pool.filter(answer_correct=True).count(),
        "ungraded": pool.filter(answer_correct__isnull=True).count(),
    }


# --- selection into a batch ------------------------------------------------------------------


def select_for_run(run: GenerationRun) -> list[SelectionReason]:
    """Replace this run's selection with a fresh one from its model's scores (idempotent)."""
    if run.model_version_id is None:
        raise StepFailed("no model version is pinned: the score step has not run")
    params = with_defaults(run.params)
    heads = ensemble_heads(params) if needs_uncertainty(params) else None
    routing = params["rule"] == "disagreement"
    scored = SolutionScore.objects.filter(
        model_version_id=run.model_version_id, solution__in=selectable_pool(run.project_id)
    ).values_list(
        "solution_id",
        "solution__problem_id",
        "score",
        "solution__answer_correct",
        "uncertainty",
        "ensemble_heads",
    )
    # A NaN score (no step the model could read) cannot be ranked: such solutions wait. An
    # uncertainty counts only when this run's ensemble size measured it.
    candidates = [
        Candidate(sid, pid, score, correct, uncertainty if measured_by == heads else None)
        for sid, pid, score, correct, uncertainty, measured_by in scored
        if not math.isnan(score)
    ]
    if not candidates:
        raise StepFailed("the pool has no scored, unlabeled, unqueued solution to select")
    if params["rule"] == "uncertainty" and all(c.uncertainty is None for c in candidates):
        raise StepFailed("no pool solution has an uncertainty: the score step measures it")
    if routing:
        found = judge_disagreements(run.model_version_id, selectable_pool(run.project_id))
        candidates = [replace(c, disagreement=found.get(c.solution_id)) for c in candidates]
        if all(c.disagreement is None for c in candidates):
            raise StepFailed(
                "no pool solution has a judge's pre-label beside the PRM's verdict: pre-label "
                "the pool first (manage.py prelabel --pool --judge llm|mc|prm)"
            )
    options: dict[str, Any] = {}
    if params["rule"] == "convincing_wrong":
        options = {
            "convincing_wrong_fraction": float(params["convincing_wrong_fraction"]),
            "scope": params["scope"],
            "per_problem_k": params["per_problem_k"],
        }
    elif params["rule"] == "mix":
        options = {"shares": check_rule("mix", params["shares"])}  # in MIX_RULES order
    picks = select_by_rule(
        params["rule"],
        candidates,
        k=int(params["k"]),
        per_problem_cap=params["per_problem_cap"],
        seed=int(params["seed"]),
        **options,
    )
    correct_of = {c.solution_id: c.correct for c in candidates}
    reasons = [
        SelectionReason(
            generation_run=run,
            solution_id=pick.solution_id,
            model_version_id=run.model_version_id,
            score=pick.score,
            rank=pick.rank,
            rule=pick.rule,
            correct=correct_of[pick.solution_id],
        )
        for pick in picks
    ]
    with transaction.atomic():
        run.selections.all().delete()
        SelectionReason.objects.bulk_create(reasons)
    return reasons


def prm_first_error(step_probs: list[list[float]] | None) -> int | None:
    """The PRM's verdict from a SolutionScore's per-step [P(-1), P(0), P(+1)]: its first step
    with P(-1) >= PRM_WRONG_AT, or None (no step it calls wrong; NaN rows read as not wrong)."""
    for index, probs in enumerate(step_probs or []):
        if probs and probs[0] is not None and probs[0] >= PRM_WRONG_AT:
            return index
    return None


def judge_disagreements(model_version_id: int, solutions: QuerySet[Solution]) -> dict[int, float]:
    """Per solution, how much its judges and the PRM disagree (`selection.judge_disagreement`):
    the verdicts are the newest pre-label of each judge kind (prm, llm, mc) that labels at least
    one step, and the model version's own (its SolutionScore's step probabilities). Solutions
    with fewer than two verdicts are left out. Three queries, each with the solutions as a
    subquery, whatever the pool's size."""
    prelabels: dict[int, list[PreLabel]] = {}
    for row in PreLabel.objects.filter(solution__in=solutions).order_by(
        "solution_id", "-created_at", "-pk"
    ):
        prelabels.setdefault(row.solution_id, []).append(row)
    probs = dict(
        SolutionScore.objects.filter(
            model_version_id=model_version_id, solution__in=solutions
        ).values_list("solution_id", "step_probs")
    )
    steps = dict(solutions.values_list("pk", "steps"))
    solution_ids = list(steps)
    found: dict[int, float] = {}
    for sid in solution_ids:
        n_steps = len(steps.get(sid) or [])
        if n_steps == 0:
            continue
        verdicts: list[int | None] = []
        seen: set[str] = set()
        for prelabel in prelabels.get(sid, []):  # newest first: the first of each kind counts
            if prelabel.kind in seen or all(label is None for label in prelabel.labels):
                continue
            seen.add(prelabel.kind)
            first = prelabel.first_error
            verdicts.append(first if first is not None and 0 <= first < n_steps else None)
        if sid in probs:
            first = prm_first_error(probs[sid])
            verdicts.append(first if first is not None and first < n_steps else None)
        value = judge_disagreement(verdicts, n_steps)
        if value is not None:
            found[sid] = value
    return found


def enqueue_selection(run: GenerationRun) -> Batch:
    """Put the run's selected solutions into a new active batch, generation = run.generation.

    One transaction; a second call finds the batch and moves nothing twice. Solutions queued or
    labeled since selection are skipped (never taken from another batch)."""
    params = with_defaults(run.params)
    with transaction.atomic():
        batch, _ = Batch.objects.get_or_create(
            name=f"Generation {run.generation}",
            project_id=run.project_id,
            defaults={
                "generation": run.generation,
                "origin": Batch.Origin.ACTIVE_LEARNING,
                "overlap": int(params["overlap"]),
                "priority": int(params["priority"]),
                "is_active": True,
                "created_by_id": run.created_by_id,
            },
        )
        if batch.origin != Batch.Origin.ACTIVE_LEARNING or batch.generation != run.generation:
            raise StepFailed(f"a batch named {batch.name!r} exists and is not this generation's")
        if run.created_by is not None and not may_add_to_batch(run.created_by, batch):
            raise StepFailed(f"{run.created_by} may not add to batch {batch.name!r}")
        selected = run.selections.values("solution_id")
        selectable_pool(run.project_id).filter(pk__in=selected).update(
            batch=batch, generation=run.generation
        )
        GenerationRun.objects.filter(pk=run.pk).update(batch=batch)
        run.batch = batch
    return batch
