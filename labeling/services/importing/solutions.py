"""Generator samples (JSONL) into a batch, and solutions made in the app into the candidate
pool: problems by text or unique_id, no duplicate by content hash."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from django.db import transaction

from labeling import prm800k
from labeling.models import Batch, Problem, Solution, default_project_id
from labeling.parsing import check_steps, solution_content_hash
from labeling.services.importing.runner import (
    ImportReport,
    LineError,
    optional_str,
    problem_hash,
    problems_by_hash,
    require_records,
    run_import,
    solution_bounds,
)


@dataclass(slots=True)
class SampleLine:
    problem_text: str | None
    unique_id: str | None
    ground_truth_answer: str | None
    steps: list[str]
    answer: str | None
    generator: str
    source_id: str
    score: float | None


def parse_sample_line(obj: Any, line: str = "") -> SampleLine:
    if not isinstance(obj, dict):
        raise prm800k.RecordError("line", "expected a JSON object")
    text, uid = obj.get("problem"), obj.get("unique_id")
    if not (isinstance(text, str) and text.strip()) and not (isinstance(uid, str) and uid):
        raise prm800k.RecordError("problem", "give the problem text or its unique_id")
    steps = obj.get("steps")
    if not isinstance(steps, list) or not steps:
        raise prm800k.RecordError("steps", "expected a non-empty list of strings")
    for i, step in enumerate(steps):
        if not isinstance(step, str) or not step.strip():
            raise prm800k.RecordError(f"steps[{i}]", "expected a non-empty string")
    check_steps(steps, "steps", solution_bounds())
    score = obj.get("score")
    if score is not None:
        score = prm800k.finite_number(score, "score")
    return SampleLine(
        problem_text=text if isinstance(text, str) and text.strip() else None,
        unique_id=uid if isinstance(uid, str) and uid else None,
        ground_truth_answer=optional_str(obj, "ground_truth_answer"),
        steps=steps,
        answer=optional_str(obj, "answer"),
        generator=optional_str(obj, "generator") or "",
        source_id=str(obj.get("source_id") or obj.get("id") or ""),
        score=score,
    )


PrepareSolution = Callable[[SampleLine, Solution], Any]
AfterCreate = Callable[[list[tuple[Solution, Any]], ImportReport], None]


def _write_solutions_chunk(
    chunk: list[tuple[int, str, SampleLine]],
    report: ImportReport,
    *,
    batch: Batch | None,
    create_problems: bool,
    counted_as: str,
    prepare: PrepareSolution | None,
    after_create: AfterCreate | None,
    project_id: int | None = None,
) -> None:
    by_uid = {
        p.unique_id: p
        for p in Problem.objects.filter(
            unique_id__in={s.unique_id for _, _, s in chunk if s.unique_id}
        )
    }
    by_hash = problems_by_hash(problem_hash(s.problem_text) for _, _, s in chunk if s.problem_text)
    generation = batch.generation if batch is not None else None
    # The batch's project; a pool solution's is the caller's (the Default project by default).
    in_project: int = (
        cast(int, batch.project_id)
        if batch is not None
        else (default_project_id() if project_id is None else project_id)
    )
    solutions: dict[str, tuple[Solution, Any]] = {}
    for number, _, sample in chunk:
        problem = by_uid.get(sample.unique_id) if sample.unique_id else None
        if problem is None and sample.problem_text:
            digest = problem_hash(sample.problem_text)
            problem = by_hash.get(digest)
            if problem is None and create_problems:
                problem = Problem.objects.create(
                    text=sample.problem_text,
                    text_sha256=digest,
                    ground_truth_answer=sample.ground_truth_answer,
                    unique_id=sample.unique_id,
                )
                by_hash[digest] = problem
                report.created["problems"] += 1
        if problem is None and create_problems:
            raise LineError(
                report.path,
                number,
                "unique_id",
                f"no problem {sample.unique_id!r}; import it first",
            )
        if problem is None:
            raise LineError(
                report.path,
                number,
                "unique_id" if sample.unique_id else "problem",
                "no such problem; import the problems (import_math) first",
            )
        digest = solution_content_hash(
            problem_sha256=problem.text_sha256,
            fmt=Solution.Format.PHASE2,
            steps=sample.steps,
            final_answer=sample.answer,
            verifier_score=sample.score,
            generation=generation,
            is_quality_control=False,
            is_screening=False,
            question_override=None,
            generator=sample.generator,
        )
        if digest in solutions:
            continue
        solution = Solution(
            project_id=in_project,
            problem=problem,
            batch=batch,
            steps=sample.steps,
            final_answer=sample.answer,
            verifier_score=sample.score,
            generator=sample.generator,
            source_id=sample.source_id,
            format=Solution.Format.PHASE2,
            generation=generation,
            content_sha256=digest,
        )
        solutions[digest] = (solution, prepare(sample, solution) if prepare else None)
    existing = set(
        Solution.objects.filter(project_id=in_project, content_sha256__in=solutions).values_list(
            "content_sha256", flat=True
        )
    )
    report.duplicates += len(chunk) - len(solutions) + len(existing)
    new = [pair for digest, pair in solutions.items() if digest not in existing]
    Solution.objects.bulk_create([solution for solution, _ in new])
    report.created[counted_as] += len(new)
    if after_create is not None:
        after_create(new, report)


def write_solutions(
    samples: list[SampleLine],
    report: ImportReport,
    *,
    counted_as: str = "solutions",
    prepare: PrepareSolution | None = None,
    after_create: AfterCreate | None = None,
    project_id: int | None = None,
) -> None:
    """Solutions made in the app (a generator's samples) into the pool of `project_id` (the
    Default project's by default), through the same writer as a file's lines: problems by text,
    no duplicate by content hash. The caller's transaction holds the write."""
    numbered = [(number, "", sample) for number, sample in enumerate(samples, 1)]
    _write_solutions_chunk(
        numbered,
        report,
        batch=None,
        create_problems=False,
        counted_as=counted_as,
        prepare=prepare,
        after_create=after_create,
        project_id=project_id,
    )


def import_solutions(
    path: str | Path,
    *,
    batch: Batch | None = None,
    create_problems: bool = True,
    skip_invalid: bool = False,
    counted_as: str = "solutions",
    prepare: PrepareSolution | None = None,
    after_create: AfterCreate | None = None,
    project_id: int | None = None,
) -> ImportReport:
    """Solutions from generator samples (JSONL: `unique_id` or `problem`, `steps`, optionally
    `answer`, `generator`, `source_id`, `score`), in chunks; all-or-nothing unless skip_invalid;
    re-importing adds nothing twice (solutions by content hash).

    `batch` None leaves them outside any batch (the candidate pool of `project_id`, the Default
    project's by default; a batch's solutions are in its project). With `create_problems` a
    problem given by unknown text is created, else such a line is an error. `prepare(sample,
    solution)` runs once per solution before it is written (may set fields) and its result is
    handed with the written solution to `after_create(pairs, report)` (rows pointing at them).
    """
    return run_import(
        path,
        parse_sample_line,
        lambda chunk, report: _write_solutions_chunk(
            chunk,
            report,
            batch=batch,
            create_problems=create_problems,
            counted_as=counted_as,
            prepare=prepare,
            after_create=after_create,
            project_id=project_id,
        ),
        skip_invalid=skip_invalid,
    )


def import_samples(
    path: str | Path,
    *,
    batch_name: str,
    overlap: int = 1,
    generation: int | None = None,
    skip_invalid: bool = False,
    project_id: int | None = None,
) -> ImportReport:
    """Samples into the batch named `batch_name` of the project (the Default project by
    default), made when there is none."""
    require_records(path)  # before the batch is created: an empty file leaves nothing behind
    with contextlib.nullcontext() if skip_invalid else transaction.atomic():
        batch, _ = Batch.objects.get_or_create(
            project_id=default_project_id() if project_id is None else project_id,
            name=batch_name,
            defaults={"overlap": overlap, "generation": generation, "origin": Batch.Origin.SAMPLES},
        )
        return import_solutions(path, batch=batch, skip_invalid=skip_invalid)
