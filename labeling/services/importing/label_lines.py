"""PRM800K label lines: each a labeling with its problem, solution, steps and completions,
written a chunk at a time (the COPY path on PostgreSQL in `bulk_copy`, the ORM elsewhere);
a line imported before is a duplicate (by its hash)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F

from labeling import prm800k
from labeling.models import (
    Batch,
    Completion,
    Labeler,
    Labeling,
    Problem,
    Solution,
    StepLabel,
    default_project_id,
)
from labeling.parsing import PreparedLine, prepare_prm800k_line
from labeling.services.counters import tally_added
from labeling.services.importing.bulk_copy import (
    copy_steps,
    insert_rows,
    prefer_lz4_compression,
    rows_with_hashes,
)
from labeling.services.importing.runner import ImportReport, run_import, solution_bounds


def _batch_for_generation(generation: int | None, cache: dict[Any, Any]) -> Batch:
    if generation not in cache:
        name = "PRM800K phase 1" if generation is None else f"PRM800K generation {generation}"
        cache[generation], _ = Batch.objects.get_or_create(
            project_id=cache["project_id"],
            name=name,
            defaults={"generation": generation, "origin": Batch.Origin.IMPORT, "is_active": False},
        )
    return cache[generation]


def _labeler_users(public_ids: set[str]) -> dict[str, int]:
    """User ids by labeler public id (as text), creating inactive users for new labelers."""
    found = {
        str(public_id): user_id
        for public_id, user_id in Labeler.objects.filter(public_id__in=public_ids).values_list(
            "public_id", "user_id"
        )
    }
    missing = sorted(public_ids - found.keys())
    if missing:
        User = get_user_model()
        users = [User(username=f"prm800k-{pid}", is_active=False) for pid in missing]
        for user in users:
            user.set_unusable_password()
        User.objects.bulk_create(users)
        # bulk_create sets pks on PostgreSQL and SQLite; fetch by username to be backend-proof.
        ids = dict(
            User.objects.filter(username__in=[u.username for u in users]).values_list(
                "username", "id"
            )
        )
        Labeler.objects.bulk_create(
            [Labeler(user_id=ids[f"prm800k-{pid}"], public_id=pid) for pid in missing]
        )
        found.update({pid: ids[f"prm800k-{pid}"] for pid in missing})
    return found


def _question_override(
    problem_answer: str | None, problem_solution: str | None, line: PreparedLine
) -> dict[str, Any] | None:
    """Ground truth as the line showed it, where the shared Problem row may say otherwise."""
    stored = {"ground_truth_answer": problem_answer, "ground_truth_solution": problem_solution}
    shown = {"ground_truth_answer": line.ground_truth_answer}
    if line.is_phase2:
        shown["ground_truth_solution"] = line.ground_truth_solution
    override = {
        key: value for key, value in shown.items() if stored[key] is None or stored[key] != value
    }
    return override or None


_SOLUTION_FIELDS = (
    "problem_id",
    "batch_id",
    "project_id",
    "steps",
    "final_answer",
    "verifier_score",
    "generator",
    "format",
    "generation",
    "is_quality_control",
    "is_screening",
    "content_sha256",
    "question_override",
    "completed_count",
)
_LABELING_FIELDS = (
    "solution_id",
    "labeler_id",
    "status",
    "finish_reason",
    "total_time_ms",
    "started_at",
    "finished_at",
    "source_sha256",
    "release_line",
)


IMPORT_LOCK = 0x5057  # pg_advisory_xact_lock's first key: PRM800K line imports, per project
Line = tuple[str, PreparedLine]  # a line as read, and what the worker made of it
ProblemRow = tuple[int, str | None, str | None]  # id, ground-truth answer and solution


def _write_chunk(
    chunk: list[tuple[int, str, PreparedLine]],
    report: ImportReport,
    *,
    batch: Batch | None,
    batch_cache: dict[Any, Any],
) -> None:
    """A chunk's new lines as rows: problems, solutions, labelings, then their steps and
    completions (COPY on PostgreSQL, the ORM elsewhere), then the lead counters."""
    fresh = _lines_not_imported(chunk, report, batch_cache["project_id"])
    if not fresh:
        return
    problems = _write_problems(fresh, report)
    solution_ids = _write_solutions(fresh, problems, report, batch=batch, batch_cache=batch_cache)
    labeling_ids = _write_labelings(fresh, solution_ids, report)
    if connection.vendor == "postgresql":
        steps_made, completions_made = copy_steps(labeling_ids, [p for _, p in fresh])
    else:
        steps_made, completions_made = _bulk_create_steps(labeling_ids, [line for line, _ in fresh])
    report.created["step labels"] += steps_made
    report.created["completions"] += completions_made
    # Imported labelings bypass the finish that counts them live: counted here, these alone
    # (recounting the whole batch after each import grew with the batch).
    tally_added(labeling_ids)


def _lines_not_imported(
    chunk: list[tuple[int, str, PreparedLine]], report: ImportReport, project_id: int
) -> list[Line]:
    """The chunk's lines that no import wrote into the project before (nor an earlier line of
    the chunk), by the line's hash; the others are counted as duplicates."""
    hashes = [p.source_sha256 for _, _, p in chunk]
    if connection.vendor == "postgresql":
        # Two imports into one project at once: the second waits for the first's chunk, then
        # sees its lines (what the unique hash did before lines were per project). SQLite
        # writes one transaction at a time already.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [IMPORT_LOCK, project_id])
    seen = {
        digest
        for (digest,) in rows_with_hashes(
            Labeling,
            "source_sha256",
            hashes,
            "source_sha256",
            project_id=project_id,
            project_field="solution__project",
        )
    }
    fresh: list[Line] = []
    for _, line, prepared in chunk:
        if prepared.source_sha256 in seen:
            report.duplicates += 1
            continue
        seen.add(prepared.source_sha256)
        fresh.append((line, prepared))
    return fresh


def _write_problems(fresh: list[Line], report: ImportReport) -> dict[str, ProblemRow]:
    """Problems: matched by text, created from the line when new. Kept as (id, ground truth),
    by the text's hash."""
    problems: dict[str, ProblemRow] = {
        digest: (pk, answer, solution)
        for digest, pk, answer, solution in rows_with_hashes(
            Problem,
            "text_sha256",
            {p.problem_sha256 for _, p in fresh},
            "text_sha256",
            "id",
            "ground_truth_answer",
            "ground_truth_solution",
        )
    }
    new_problems: dict[str, tuple[str, str, str | None, str | None]] = {}
    for _, p in fresh:
        if p.problem_sha256 not in problems and p.problem_sha256 not in new_problems:
            new_problems[p.problem_sha256] = (
                p.problem,
                p.problem_sha256,
                p.ground_truth_answer,
                p.ground_truth_solution,
            )
    fields = ("text", "text_sha256", "ground_truth_answer", "ground_truth_solution")
    new_ids = insert_rows(Problem, fields, list(new_problems.values()))
    for (_, digest, answer, truth), pk in zip(new_problems.values(), new_ids, strict=True):
        problems[digest] = (pk, answer, truth)
    report.created["problems"] += len(new_problems)
    return problems


def _write_solutions(
    fresh: list[Line],
    problems: dict[str, ProblemRow],
    report: ImportReport,
    *,
    batch: Batch | None,
    batch_cache: dict[Any, Any],
) -> list[int]:
    """Solutions: the pre-generated one (phase 2) or the path the labeler chose (phase 1),
    each counting the labelings of it in this chunk (its completed_count once written).
    Returns each line's solution id."""
    solutions: dict[str, list[Any]] = {}
    solution_of: list[str] = []
    for _, p in fresh:
        problem_id, answer, truth = problems[p.problem_sha256]
        override = _question_override(answer, truth, p)
        digest = p.solution_sha256
        if override is not None:
            digest = p.content_hash(override)
        solution_of.append(digest)
        solution = solutions.get(digest)
        if solution is None:
            solutions[digest] = solution = [
                problem_id,
                (batch or _batch_for_generation(p.generation, batch_cache)).pk,
                batch_cache["project_id"],
                p.solution_steps,
                p.final_answer,
                p.verifier_score,
                "prm800k",
                p.solution_format,
                p.generation,
                p.is_quality_control,
                p.is_screening,
                digest,
                override,
                0,
            ]
        solution[-1] += 1
    existing: dict[str, int] = dict(
        rows_with_hashes(
            Solution,
            "content_sha256",
            solutions,
            "content_sha256",
            "id",
            project_id=batch_cache["project_id"],
        )
    )
    new_digests = [digest for digest in solutions if digest not in existing]
    new_ids = insert_rows(Solution, _SOLUTION_FIELDS, [solutions[d] for d in new_digests])
    solution_ids = {**existing, **dict(zip(new_digests, new_ids, strict=True))}
    report.created["solutions"] += len(new_digests)
    # Labelings of solutions an earlier chunk or import wrote: their counters move up.
    increments: dict[int, list[int]] = {}
    for digest, pk in existing.items():
        increments.setdefault(solutions[digest][-1], []).append(pk)
    for increment, ids in increments.items():
        Solution.objects.filter(pk__in=ids).update(completed_count=F("completed_count") + increment)
    return [solution_ids[digest] for digest in solution_of]


def _write_labelings(fresh: list[Line], solution_ids: list[int], report: ImportReport) -> list[int]:
    """A completed labeling per line, by its labeler (created when new), the line stored as
    the release line. Returns their ids, in line order."""
    users = _labeler_users({p.labeler for _, p in fresh})
    prefer_lz4_compression()
    completed = Labeling.Status.COMPLETED
    labeling_ids = insert_rows(
        Labeling,
        _LABELING_FIELDS,
        [
            (
                solution_id,
                users[p.labeler],
                completed,
                p.finish_reason,
                p.total_time,
                p.timestamp,
                p.timestamp,
                p.source_sha256,
                line,
            )
            for (line, p), solution_id in zip(fresh, solution_ids, strict=True)
        ],
    )
    report.created["labelings"] += len(labeling_ids)
    # Lines our columns cannot reproduce (unknown keys, other formatting) export as imported.
    report.created["lines kept verbatim"] += sum(1 for _, p in fresh if not p.exact)
    return labeling_ids


def _bulk_create_steps(labeling_ids: list[int], lines: list[str]) -> tuple[int, int]:
    """Steps and completions through the ORM (SQLite): the records are read from the lines
    again, the worker having prepared COPY text for PostgreSQL only."""
    records = [prm800k.parse_record(json.loads(line)) for line in lines]
    steps = [step for record in records for step in record.steps]
    step_labels = [
        StepLabel(
            labeling_id=labeling_id,
            index=index,
            chosen_completion=step.chosen_completion,
            has_completions=step.completions is not None,
        )
        for labeling_id, record in zip(labeling_ids, records, strict=True)
        for index, step in enumerate(record.steps)
    ]
    StepLabel.objects.bulk_create(step_labels, batch_size=5000)
    completions = []
    for step_label, step in zip(step_labels, steps, strict=True):
        for index, item in enumerate(step.completions or ()):
            completions.append(
                Completion(
                    step_id=step_label.pk,
                    index=index,
                    text=item.text,
                    rating=item.rating,
                    flagged=item.flagged,
                )
            )
        human = step.human_completion
        if human is not None:
            completions.append(
                Completion(
                    step_id=step_label.pk,
                    index=-1,
                    text=human.text,
                    rating=human.rating,
                    flagged=human.flagged,
                    is_human=True,
                    source=human.source,
                )
            )
    Completion.objects.bulk_create(completions, batch_size=5000)
    return len(step_labels), len(completions)


def import_prm800k(
    path: str | Path,
    *,
    skip_invalid: bool = False,
    batch: Batch | None = None,
    workers: int | None = None,
    project_id: int | None = None,
) -> ImportReport:
    """PRM800K label lines, into `batch` or a batch per generation of the project (the batch's,
    else `project_id`, else the Default project). `workers` parse in worker processes (default
    the setting STEPWISE_IMPORT_WORKERS; 0 parses in this process, as a file of one chunk
    always is)."""
    if batch is not None:
        project_id = batch.project_id
    cache: dict[Any, Any] = {
        "project_id": default_project_id() if project_id is None else project_id
    }
    return run_import(
        path,
        functools.partial(prepare_prm800k_line, bounds=solution_bounds()),
        lambda chunk, report: _write_chunk(chunk, report, batch=batch, batch_cache=cache),
        skip_invalid=skip_invalid,
        workers=settings.STEPWISE_IMPORT_WORKERS if workers is None else workers,
    )
