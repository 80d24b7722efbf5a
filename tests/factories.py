"""Small builders for rows the tests need; names say what they make."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Any

from django.db.models import Max
from django.utils import timezone

from labeling import models as lm
from labeling.models import Batch, Problem, Solution
from labeling.services import tokens
from modeling import models as mm
from tests.helpers.users import make_user

_counter = itertools.count(1)


def make_problem(text: str | None = None, answer: str = "42") -> Problem:
    text = text or f"What is problem {next(_counter)}?"
    return Problem.objects.create(
        text=text, text_sha256=hashlib.sha256(text.encode()).hexdigest(), ground_truth_answer=answer
    )


def make_batch(
    name: str | None = None, *, overlap: int = 1, generation: int | None = 1, **extra
) -> Batch:
    return Batch.objects.create(
        name=name or f"batch {next(_counter)}", overlap=overlap, generation=generation, **extra
    )


def make_solution(
    batch: Batch | None = None, *, steps: list[str] | None = None, problem: Problem | None = None
) -> Solution:
    problem = problem or make_problem()
    steps = steps or [
        "I add $1 + 1 = 2$.",
        "Then $2 \\times 21 = 42$.",
        "So the answer is 42.\n\n# Answer\n\n42",
    ]
    n = next(_counter)
    in_project = {"project_id": batch.project_id} if batch is not None else {}
    return Solution.objects.create(
        **in_project,
        problem=problem,
        batch=batch,
        steps=steps,
        final_answer="42",
        generation=batch.generation if batch else None,
        content_sha256=hashlib.sha256(f"solution {n}".encode()).hexdigest(),
    )


def make_solutions(batch: Batch, count: int) -> list[Solution]:
    return [make_solution(batch) for _ in range(count)]


@dataclass
class OneOfEach:
    """The rows `make_one_of_each` wrote that pages and routes are opened on."""

    batch: Batch
    solution: Solution
    labeler: Any
    labeling: lm.Labeling
    guidelines: lm.Guidelines
    snapshot: lm.Snapshot
    token: lm.ApiToken
    run: mm.TrainingRun
    model: mm.ModelVersion
    evaluation_set: mm.EvaluationSet
    sampling_run: mm.SamplingRun
    generation: mm.GenerationRun
    comparison: mm.BestOfNComparison
    prelabel_run: mm.PreLabelRun


def make_one_of_each(*, lead: Any) -> OneOfEach:
    """One row of every model of both apps, written directly (the pages that show them only
    read them); `lead` adjudicated the solution. The labeler is lena, her labeling completed."""
    batch = make_batch()
    solution = make_solution(batch, problem=make_problem())
    lena, lars = make_user("lena", "labeler"), make_user("lars", "labeler")
    lm.Labeler.objects.create(user=lena)
    lm.LabelerRecord.objects.create(user=lena, project_id=batch.project_id)
    labeling = lm.Labeling.objects.create(
        solution=solution, labeler=lena, status="completed", finish_reason="solution"
    )
    step = lm.StepLabel.objects.create(labeling=labeling, index=0, chosen_completion=0)
    lm.Completion.objects.create(step=step, index=0, text="I add.", rating=1)
    lm.RatingEvent.objects.create(labeling=labeling, step_index=0, new_rating=1, reason="rate")
    lm.Note.objects.create(
        solution=solution, labeling=labeling, step_index=0, author=lena, text="Why +1."
    )
    lm.GoldLabel.objects.create(solution=solution, ratings=[1, 1, 1])
    lm.PreLabel.objects.create(
        solution=solution, kind="prm", judge="prm: v1", run_id=1, labels=[1, 1, 1], scores=[1, 1, 1]
    )
    lm.GoldResult.objects.create(labeling=labeling, labeler=lena, solution=solution)
    lm.BatchLabelerStats.objects.create(batch=batch, labeler=lena, labelings=1)
    lm.BatchHourStats.objects.create(batch=batch, hour=timezone.now(), labelings=1)
    lm.SolutionAgreement.objects.create(solution=solution, batch=batch, labelings=2)
    lm.BatchAgreement.objects.create(batch=batch, solutions=1)
    lm.PairAgreement.objects.create(labeler_a=lena, labeler_b=lars, solutions=1)
    lm.Adjudication.objects.create(solution=solution, ratings=[1, 1, 1], lead=lead)
    version = (lm.Guidelines.objects.aggregate(v=Max("version"))["v"] or 0) + 1
    guidelines = lm.Guidelines.objects.create(version=version, text="# Rate every step")
    snapshot = lm.Snapshot.objects.create(status="done", sha256="0" * 64, row_count=1)
    token, _ = tokens.token_create(user=lena, name="lena's script", expires_in=None)
    run = mm.TrainingRun.objects.create(name="first", config={})
    model = mm.ModelVersion.objects.create(
        run=run, name="prm-1", backbone="tiny", artifact_path="/x"
    )
    mm.SolutionScore.objects.create(
        solution=solution, model_version=model, score=0.5, step_probs=[[0.1, 0.2, 0.7]]
    )
    mm.PoolEntry.objects.create(solution=make_solution(), extracted_answer="42")
    mm.ModelExport.objects.create(version=model, status="failed", error="no files")
    evaluation_set = mm.EvaluationSet.objects.create(
        version=1, problem_ids=[solution.problem_id], file_path="e.jsonl", sha256="0" * 64
    )
    lm.ProposedSteps.objects.create(
        problem=solution.problem, prefix=[], prefix_sha256="0" * 64, k=2, steps=["I add."]
    )
    sampling_run = mm.SamplingRun.objects.create(
        samples=2, sampling={}, problem_ids=[solution.problem_id]
    )
    generation = mm.GenerationRun.objects.create(generation=1, batch=batch)
    comparison = mm.BestOfNComparison.objects.create(
        model_ids=[model.pk], sampling_run=sampling_run, created_by=lead, status="failed",
        error="refused: the models are not on equal footing",
    )  # fmt: skip
    mm.SelectionReason.objects.create(
        generation_run=generation, solution=solution, score=0.5, rank=1, rule="convincing_wrong"
    )
    prelabel_run = mm.PreLabelRun.objects.create(
        batch=batch, kind="mc", options={"k": 2}, solution_ids=[solution.pk], total=1, done=1
    )
    return OneOfEach(
        batch=batch,
        solution=solution,
        labeler=lena,
        labeling=labeling,
        guidelines=guidelines,
        snapshot=snapshot,
        token=token,
        run=run,
        model=model,
        evaluation_set=evaluation_set,
        sampling_run=sampling_run,
        generation=generation,
        comparison=comparison,
        prelabel_run=prelabel_run,
    )


def make_prelabel(
    solution: Solution,
    *,
    labels: list[int | None],
    scores: list[float | None] | None = None,
    kind: str = "prm",
    judge: str = "prm: v1 (run 1)",
    run_id: int | None = None,
) -> lm.PreLabel:
    """A judge's pre-label for the solution (as the judges' runs write them)."""
    first_error = labels.index(-1) if -1 in labels else None
    return lm.PreLabel.objects.create(
        solution=solution,
        kind=kind,
        judge=judge,
        run_id=run_id if run_id is not None else next(_counter),
        labels=labels,
        scores=scores if scores is not None else [None if v is None else 0.9 for v in labels],
        first_error=first_error,
    )
