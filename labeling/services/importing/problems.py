"""MATH problems (JSONL, one problem a line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeling import prm800k
from labeling.models import Problem
from labeling.services.importing.runner import (
    ImportReport,
    optional_str,
    problem_hash,
    problems_by_hash,
    run_import,
)


@dataclass(slots=True)
class MathProblem:
    problem: str
    solution: str | None
    answer: str | None
    subject: str
    level: int | None
    unique_id: str | None


def parse_math_problem(obj: Any, line: str = "") -> MathProblem:
    if not isinstance(obj, dict):
        raise prm800k.RecordError("line", "expected a JSON object")
    text = obj.get("problem")
    if not isinstance(text, str) or not text.strip():
        raise prm800k.RecordError("problem", "missing or empty")
    level = obj.get("level")
    if isinstance(level, str) and level.startswith("Level "):  # the original MATH files
        level = level.removeprefix("Level ")
        level = int(level) if level.isdigit() else None
    if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
        raise prm800k.RecordError("level", f"expected an integer, got {json.dumps(level)}")
    if level is not None:
        prm800k.within(level, "level", 0, prm800k.SMALLINT_MAX)
    return MathProblem(
        problem=text,
        solution=optional_str(obj, "solution"),
        answer=optional_str(obj, "answer"),
        subject=optional_str(obj, "subject") or obj.get("type") or "",
        level=level,
        unique_id=optional_str(obj, "unique_id"),
    )


def _write_math_chunk(chunk: list[tuple[int, str, MathProblem]], report: ImportReport) -> None:
    by_hash = problems_by_hash(problem_hash(item.problem) for _, _, item in chunk)
    by_uid = {
        p.unique_id: p
        for p in Problem.objects.filter(
            unique_id__in=[i.unique_id for _, _, i in chunk if i.unique_id]
        )
    }
    new: dict[str, Problem] = {}
    for _, _, item in chunk:
        digest = problem_hash(item.problem)
        existing = by_hash.get(digest) or (by_uid.get(item.unique_id) if item.unique_id else None)
        if existing is None and digest not in new:
            new[digest] = Problem(
                text=item.problem,
                text_sha256=digest,
                ground_truth_answer=item.answer,
                ground_truth_solution=item.solution,
                subject=item.subject,
                level=item.level,
                unique_id=item.unique_id,
            )
            continue
        report.duplicates += 1
        if existing is not None:
            # Fill what an earlier import (e.g. of PRM800K labels) could not know; never overwrite.
            known = {
                "ground_truth_answer": item.answer,
                "ground_truth_solution": item.solution,
                "subject": item.subject,
                "level": item.level,
                "unique_id": item.unique_id,
            }
            changed = [
                name
                for name, value in known.items()
                if value not in (None, "") and getattr(existing, name) in (None, "")
            ]
            for name in changed:
                setattr(existing, name, known[name])
            if changed:
                existing.save(update_fields=changed)
    Problem.objects.bulk_create(new.values())
    report.created["problems"] += len(new)


def import_math(path: str | Path, *, skip_invalid: bool = False) -> ImportReport:
    return run_import(path, parse_math_problem, _write_math_chunk, skip_invalid=skip_invalid)
