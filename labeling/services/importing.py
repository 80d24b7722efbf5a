"""Importers: MATH problems, PRM800K label lines, generator samples.

Each reads its JSONL file line by line and writes in chunks with bulk inserts (COPY on
PostgreSQL), so memory stays flat on the full PRM800K release. PRM800K lines are decoded,
validated and checked byte for byte in worker processes (`labeling.parsing`) while this
process writes the chunks before them. A bad line raises LineError naming file, line and
field; by default the whole file is one transaction, so nothing of it is written. With
`skip_invalid` bad lines are reported and the rest is written, chunk by chunk. Re-importing
a file adds nothing twice (problems by text hash or unique_id, solutions by content hash,
labelings by the line's hash).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import multiprocessing
import os
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, models, transaction
from django.db.models import F
from django.utils import timezone

from labeling import prm800k
from labeling.models import (
    Batch,
    Completion,
    Labeler,
    Labeling,
    Problem,
    Solution,
    StepLabel,
)
from labeling.parsing import (
    Bounds,
    PreparedLine,
    check_steps,
    parse_lines,
    prepare_prm800k_line,
    sha256_text,
    solution_content_hash,
)
from labeling.services.counters import tally_added

Item = TypeVar("Item")


class LineError(Exception):
    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        where = "" if field == "line" else f"{field}: "  # field "line": the line as a whole
        super().__init__(f"{path}, line {line}: {where}{message}")
        self.path = path
        self.line = line
        self.field = field
        self.message = message


class NoRecords(Exception):
    """A file with no record in it (empty, or blank lines only): nothing of it was imported."""

    def __init__(self, path: str | Path, *, empty: bool) -> None:
        self.path = str(path)
        self.empty = empty
        super().__init__(self.describe(self.path))

    def describe(self, name: str) -> str:
        what = "is empty" if self.empty else "has no records (only blank lines)"
        return f"{name} {what}; nothing was imported."


def require_records(path: str | Path) -> None:
    """Raise NoRecords unless the file has a non-blank line: an empty import is a mistake."""
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        if any(line.strip() for line in handle):
            return
    raise NoRecords(path, empty=os.path.getsize(path) == 0)


@dataclass
class ImportReport:
    path: str
    lines: int = 0
    created: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    errors: list[LineError] = field(default_factory=list)

    def summary(self) -> str:
        made = ", ".join(f"{n} {what}" for what, n in self.created.items() if n) or "nothing new"
        text = f"{self.path}: {self.lines} lines read; created {made}; {self.duplicates} already present"
        if self.errors:
            text += f"; {len(self.errors)} invalid lines skipped"
        return text


def solution_bounds() -> Bounds:
    """The settings' bound on a solution's size, for the parsers (which read no settings)."""
    return Bounds(
        max_steps=settings.STEPWISE_MAX_STEPS_PER_SOLUTION,
        max_step_chars=settings.STEPWISE_MAX_STEP_CHARS,
    )


def problem_hash(text: str) -> str:
    return sha256_text(text)


def _read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    # Bytes that are not UTF-8 come through as lone surrogates; decode_line names them.
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line.rstrip("\n").rstrip("\r")


def _read_chunks(path: str | Path, size: int) -> Iterator[list[tuple[int, str]]]:
    lines = _read_lines(path)
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def _parsed_chunks(
    path: str | Path, parse: Callable[[Any, str], Item], *, chunk_size: int, workers: int
) -> Generator[list[tuple[int, str, Item | prm800k.RecordError]], None, None]:
    """The file's lines in chunks, in file order, each line with what `parse` made of it (or
    its RecordError).

    With `workers` and more than one chunk, spawned worker processes parse while the caller
    writes; at most `workers + 1` chunks are in flight, so memory stays flat however long the
    file. `parse` must then be importable without Django (see labeling.parsing)."""
    chunks = _read_chunks(path, chunk_size)
    head = list(itertools.islice(chunks, 2))
    # A daemonic process (a multiprocessing pool's worker) may not start processes of its own.
    if len(head) < 2 or workers < 1 or multiprocessing.current_process().daemon:
        for chunk in itertools.chain(head, chunks):
            yield _zip_parsed(chunk, parse_lines(parse, chunk))
        return
    # Spawned, not forked: a fork of a process with threads and database connections may
    # inherit a held lock. Spawning starts a fresh interpreter, which runs the parent's
    # __main__ script again unless it is guarded by `if __name__ == "__main__"`.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        pending: deque[tuple[list[tuple[int, str]], Future[list[Any]]]] = deque()
        rest = itertools.chain(head[1:], chunks)
        for chunk in itertools.islice(rest, workers):
            pending.append((chunk, pool.submit(parse_lines, parse, chunk)))
        # This process parses the first chunk while the workers start (a second or so).
        yield _zip_parsed(head[0], parse_lines(parse, head[0]))
        for chunk in rest:
            pending.append((chunk, pool.submit(parse_lines, parse, chunk)))
            done, future = pending.popleft()
            yield _zip_parsed(done, future.result())
        while pending:
            done, future = pending.popleft()
            yield _zip_parsed(done, future.result())
    finally:  # also when the caller stops early (a bad line): nothing more is parsed
        pool.shutdown(wait=True, cancel_futures=True)


def _zip_parsed(
    chunk: list[tuple[int, str]], parsed: list[Item | prm800k.RecordError]
) -> list[tuple[int, str, Item | prm800k.RecordError]]:
    return [(number, line, item) for (number, line), item in zip(chunk, parsed, strict=True)]


def _run_import(
    path: str | Path,
    parse: Callable[[Any, str], Item],
    write_chunk: Callable[[list[tuple[int, str, Item]], ImportReport], None],
    *,
    skip_invalid: bool,
    chunk_size: int | None = None,
    workers: int = 0,
) -> ImportReport:
    """Parse every line, write valid ones in chunks; all-or-nothing unless skip_invalid.

    `workers` > 0 parses in that many worker processes (see _parsed_chunks)."""
    require_records(path)
    chunk_size = chunk_size or settings.STEPWISE_IMPORT_CHUNK
    report = ImportReport(path=str(path))
    whole_file = contextlib.nullcontext() if skip_invalid else transaction.atomic()
    chunks = _parsed_chunks(path, parse, chunk_size=chunk_size, workers=workers)
    with whole_file, contextlib.closing(chunks):  # a bad line stops the workers at once
        for parsed in chunks:
            report.lines += len(parsed)
            chunk: list[tuple[int, str, Item]] = []
            for number, line, item in parsed:
                if isinstance(item, prm800k.RecordError):
                    error = LineError(str(path), number, item.field, item.message)
                    if not skip_invalid:
                        raise error
                    report.errors.append(error)
                else:
                    chunk.append((number, line, item))
            if chunk:
                with transaction.atomic():
                    write_chunk(chunk, report)
    if report.lines >= ANALYZE_AFTER_LINES:
        refresh_planner_statistics()
    return report


ANALYZE_AFTER_LINES = 10_000


def refresh_planner_statistics() -> None:
    """ANALYZE after a bulk load: with the row counts of an empty table the planner sorts a
    whole batch for every claim (11 ms) instead of walking the queue index (0.2 ms), until
    autovacuum gets round to it."""
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute(
                "ANALYZE labeling_problem, labeling_solution, labeling_labeling, labeling_steplabel"
            )


def _problems_by_hash(hashes: Iterable[str]) -> dict[str, Problem]:
    return {p.text_sha256: p for p in Problem.objects.filter(text_sha256__in=set(hashes))}


# --- MATH problems -------------------------------------------------------------------------


@dataclass(slots=True)
class MathProblem:
    problem: str
    solution: str | None
    answer: str | None
    subject: str
    level: int | None
    unique_id: str | None


def _optional_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise prm800k.RecordError(key, f"expected a string, got {type(value).__name__}")
    return value


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
        solution=_optional_str(obj, "solution"),
        answer=_optional_str(obj, "answer"),
        subject=_optional_str(obj, "subject") or obj.get("type") or "",
        level=level,
        unique_id=_optional_str(obj, "unique_id"),
    )


def _write_math_chunk(chunk: list[tuple[int, str, MathProblem]], report: ImportReport) -> None:
    by_hash = _problems_by_hash(problem_hash(item.problem) for _, _, item in chunk)
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
    return _run_import(path, parse_math_problem, _write_math_chunk, skip_invalid=skip_invalid)


# --- PRM800K labels ------------------------------------------------------------------------


def _batch_for_generation(generation: int | None, cache: dict[Any, Batch]) -> Batch:
    if generation not in cache:
        name = "PRM800K phase 1" if generation is None else f"PRM800K generation {generation}"
        cache[generation], _ = Batch.objects.get_or_create(
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


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    found = model._meta.get_field(name)
    assert isinstance(found, models.Field)
    return found


def _rows_with_hashes(
    model: type[models.Model], column: str, hashes: Iterable[str], *fields: str
) -> list[tuple[Any, ...]]:
    """`fields` of the rows whose `column` holds one of `hashes` (hex digests). On PostgreSQL
    as one comma-joined text parameter: an IN list of a chunk's 2,000 hashes, or an array
    parameter, cost more to build and send than the query cost to run."""
    if connection.vendor != "postgresql":
        rows = model._default_manager.filter(**{f"{column}__in": hashes}).values_list(*fields)
        return list(rows)
    quote = connection.ops.quote_name
    selected = ", ".join(quote(_field(model, name).column) for name in fields)
    where = quote(_field(model, column).column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {selected} FROM {quote(model._meta.db_table)}"
            f" WHERE {where} = ANY(string_to_array(%s, ','))",
            [",".join(hashes)],
        )
        return cursor.fetchall()


def _write_prm800k_chunk(
    chunk: list[tuple[int, str, PreparedLine]],
    report: ImportReport,
    *,
    batch: Batch | None,
    batch_cache: dict[Any, Batch],
) -> None:
    hashes = [p.source_sha256 for _, _, p in chunk]
    seen = {
        digest
        for (digest,) in _rows_with_hashes(Labeling, "source_sha256", hashes, "source_sha256")
    }
    fresh: list[tuple[str, PreparedLine]] = []
    for _, line, prepared in chunk:
        if prepared.source_sha256 in seen:
            report.duplicates += 1
            continue
        seen.add(prepared.source_sha256)
        fresh.append((line, prepared))
    if not fresh:
        return

    # Problems: matched by text, created from the line when new. Kept as (id, ground truth).
    problems: dict[str, tuple[int, str | None, str | None]] = {
        digest: (pk, answer, solution)
        for digest, pk, answer, solution in _rows_with_hashes(
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

    # Solutions: the pre-generated one (phase 2) or the path the labeler chose (phase 1),
    # each counting the labelings of it in this chunk (its completed_count once written).
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
    existing = dict(
        _rows_with_hashes(Solution, "content_sha256", solutions, "content_sha256", "id")
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

    users = _labeler_users({p.labeler for _, p in fresh})
    if connection.vendor == "postgresql":
        # The stored lines (3 KB each) go to TOAST compressed; lz4 where the server has it
        # compresses them several times faster than the default pglz. Till the transaction ends.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_settings"
                " WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
            )
    completed = Labeling.Status.COMPLETED
    labeling_ids = insert_rows(
        Labeling,
        _LABELING_FIELDS,
        [
            (
                solution_ids[digest],
                users[p.labeler],
                completed,
                p.finish_reason,
                p.total_time,
                p.timestamp,
                p.timestamp,
                p.source_sha256,
                line,
            )
            for (line, p), digest in zip(fresh, solution_of, strict=True)
        ],
    )
    report.created["labelings"] += len(labeling_ids)
    # Lines our columns cannot reproduce (unknown keys, other formatting) export as imported.
    report.created["lines kept verbatim"] += sum(1 for _, p in fresh if not p.exact)

    if connection.vendor == "postgresql":
        steps_made, completions_made = _copy_steps(labeling_ids, [p for _, p in fresh])
    else:
        steps_made, completions_made = _bulk_create_steps(labeling_ids, [line for line, _ in fresh])
    report.created["step labels"] += steps_made
    report.created["completions"] += completions_made
    # Imported labelings bypass the finish that counts them live: counted here, these alone
    # (recounting the whole batch after each import grew with the batch).
    tally_added(labeling_ids)


def _reserve_ids(table: str, count: int) -> list[int]:
    """`count` ids from the table's sequence, as other sessions' inserts would take them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        (sequence,) = cursor.fetchone()
        # The sequence as a constant (a per-row lookup made this 9x slower), and the ids back
        # as runs of consecutive values rather than one row each: one run unless another
        # session took ids from the same sequence meanwhile.
        cursor.execute(
            "WITH ids AS MATERIALIZED ("
            " SELECT nextval(%s::regclass) AS id FROM generate_series(1, %s))"
            " SELECT min(id), max(id) FROM"
            " (SELECT id, id - row_number() OVER (ORDER BY id) AS run FROM ids) AS numbered"
            " GROUP BY run ORDER BY 1",
            [sequence, count],
        )
        runs = cursor.fetchall()
    return [pk for first, last in runs for pk in range(first, last + 1)]


def _takes_now(f: models.Field[Any, Any]) -> bool:
    return (
        getattr(f, "auto_now", False)
        or getattr(f, "auto_now_add", False)
        or f.default is timezone.now
    )


def insert_rows(
    model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence[Any]]
) -> list[int]:
    """Insert rows given as values of `fields` (attnames); returns their new pks, in order.

    Every other field takes its default as bulk_create would give it (a default, auto_now,
    auto_now_add; those that take the time share one moment); no save() or signals. COPY on
    PostgreSQL, with ids taken from the table's sequence first; else bulk_create.
    """
    if not rows:
        return []
    if connection.vendor != "postgresql":
        objs = [model(**dict(zip(fields, row, strict=True))) for row in rows]
        model._default_manager.bulk_create(objs)
        return [obj.pk for obj in objs]
    meta = model._meta
    now = timezone.now()
    given = [_field(model, name) for name in fields]
    rest = [f for f in meta.concrete_fields if not f.primary_key and f.attname not in fields]
    # A callable default (uuid4, say) gives each row its own value.
    per_row = [f for f in rest if f.has_default() and callable(f.default) and not _takes_now(f)]
    fixed = [f for f in rest if f not in per_row]
    defaults = [now if _takes_now(f) else f.get_default() for f in fixed]
    # psycopg adapts plain values itself; only JSON needs Django's wrapping.
    fixed_values = tuple(
        f.get_db_prep_save(value, connection) if isinstance(f, models.JSONField) else value
        for f, value in zip(fixed, defaults, strict=True)
    )
    json_at = [i for i, f in enumerate(given) if isinstance(f, models.JSONField)]
    columns = ", ".join(
        connection.ops.quote_name(f.column) for f in [meta.pk, *given, *fixed, *per_row]
    )
    ids = _reserve_ids(meta.db_table, len(rows))
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {meta.db_table} ({columns}) FROM STDIN") as copy,
    ):
        for pk, row in zip(ids, rows, strict=True):
            if json_at:
                row = list(row)
                for i in json_at:
                    row[i] = given[i].get_db_prep_save(row[i], connection)
            copy.write_row((pk, *row, *fixed_values, *(f.get_default() for f in per_row)))
    return ids


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


_COPY_FLUSH = 1 << 20  # characters of COPY text sent to the server at a time


def _copy_steps(labeling_ids: list[int], lines: list[PreparedLine]) -> tuple[int, int]:
    """PostgreSQL: steps and completions with COPY, step ids taken from the sequence first.

    Same rows as `_bulk_create_steps`: the worker formatted each row's COPY text but for the
    ids, which go in front here. Sent a block at a time, so the server stores one block while
    the next is put together. Inside the chunk's transaction: a failure writes nothing.
    """
    step_count = sum(len(prepared.steps) for prepared in lines)
    if not step_count:
        return 0, 0
    step_table, completion_table = StepLabel._meta.db_table, Completion._meta.db_table
    now = timezone.now().isoformat()
    step_ids = _reserve_ids(step_table, step_count)
    completion_count = 0
    with connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper
        with raw.copy(
            f"COPY {step_table} (id, labeling_id, created_at, index, chosen_completion,"
            " has_completions) FROM STDIN"
        ) as copy:
            ids = iter(step_ids)
            block: list[str] = []
            for labeling_id, prepared in zip(labeling_ids, lines, strict=True):
                for step, _ in prepared.steps:
                    block.append(f"{next(ids)}\t{labeling_id}\t{now}\t{step}")
                if len(block) > _COPY_FLUSH // 32:
                    copy.write("".join(block))
                    block = []
            copy.write("".join(block))
        with raw.copy(
            f"COPY {completion_table} (step_id, index, text, rating, flagged, is_human, source)"
            " FROM STDIN"
        ) as copy:
            ids = iter(step_ids)
            block, size = [], 0
            for prepared in lines:
                for _, completions in prepared.steps:
                    prefix = f"{next(ids)}\t"
                    for completion in completions:
                        block.append(prefix + completion)
                        size += len(completion)
                    completion_count += len(completions)
                if size > _COPY_FLUSH:
                    copy.write("".join(block))
                    block, size = [], 0
            copy.write("".join(block))
    return step_count, completion_count


def import_prm800k(
    path: str | Path,
    *,
    skip_invalid: bool = False,
    batch: Batch | None = None,
    workers: int | None = None,
) -> ImportReport:
    """PRM800K label lines. `workers` parse in worker processes (default the setting
    STEPWISE_IMPORT_WORKERS; 0 parses in this process, as a file of one chunk always is)."""
    cache: dict[Any, Batch] = {}
    return _run_import(
        path,
        functools.partial(prepare_prm800k_line, bounds=solution_bounds()),
        lambda chunk, report: _write_prm800k_chunk(chunk, report, batch=batch, batch_cache=cache),
        skip_invalid=skip_invalid,
        workers=settings.STEPWISE_IMPORT_WORKERS if workers is None else workers,
    )


# --- generator samples ---------------------------------------------------------------------


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
        ground_truth_answer=_optional_str(obj, "ground_truth_answer"),
        steps=steps,
        answer=_optional_str(obj, "answer"),
        generator=_optional_str(obj, "generator") or "",
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
) -> None:
    by_uid = {
        p.unique_id: p
        for p in Problem.objects.filter(
            unique_id__in={s.unique_id for _, _, s in chunk if s.unique_id}
        )
    }
    by_hash = _problems_by_hash(problem_hash(s.problem_text) for _, _, s in chunk if s.problem_text)
    generation = batch.generation if batch is not None else None
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
        Solution.objects.filter(content_sha256__in=solutions).values_list(
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
) -> None:
    """Solutions made in the app (a generator's samples) into the pool, through the same writer
    as a file's lines: problems by text, no duplicate by content hash. The caller's transaction
    holds the write."""
    numbered = [(number, "", sample) for number, sample in enumerate(samples, 1)]
    _write_solutions_chunk(
        numbered,
        report,
        batch=None,
        create_problems=False,
        counted_as=counted_as,
        prepare=prepare,
        after_create=after_create,
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
) -> ImportReport:
    """Solutions from generator samples (JSONL: `unique_id` or `problem`, `steps`, optionally
    `answer`, `generator`, `source_id`, `score`), in chunks; all-or-nothing unless skip_invalid;
    re-importing adds nothing twice (solutions by content hash).

    `batch` None leaves them outside any batch (the candidate pool). With `create_problems` a
    problem given by unknown text is created, else such a line is an error. `prepare(sample,
    solution)` runs once per solution before it is written (may set fields) and its result is
    handed with the written solution to `after_create(pairs, report)` (rows pointing at them).
    """
    return _run_import(
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
) -> ImportReport:
    require_records(path)  # before the batch is created: an empty file leaves nothing behind
    with contextlib.nullcontext() if skip_invalid else transaction.atomic():
        batch, _ = Batch.objects.get_or_create(
            name=batch_name,
            defaults={"overlap": overlap, "generation": generation, "origin": Batch.Origin.SAMPLES},
        )
        return import_solutions(path, batch=batch, skip_invalid=skip_invalid)


# --- uploads (API) --------------------------------------------------------------------------


class UploadRejected(Exception):
    """An uploaded file that was not imported: nothing of it was written."""

    def __init__(self, message: str, errors: list[LineError] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or []


class _Rollback(Exception):
    pass


def import_uploaded(
    uploaded: Any, run: Callable[[str], ImportReport], *, max_bytes: int, max_errors: int = 100
) -> ImportReport:
    """Import an uploaded JSONL file all-or-nothing, reporting every bad line (up to max_errors).

    `run(path)` is an importer called with skip_invalid=True inside one transaction, so all
    bad lines are found in one pass; if there is any, the transaction is rolled back.
    """
    name = getattr(uploaded, "name", "upload")
    if uploaded.size > max_bytes:
        raise UploadRejected(f"{name} is {uploaded.size:,} bytes; the limit is {max_bytes:,}.")
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as handle:
        for block in uploaded.chunks():
            handle.write(block)
        handle.flush()
        report: ImportReport | None = None
        try:
            with transaction.atomic():
                report = run(handle.name)
                if report.errors:
                    raise _Rollback
        except _Rollback:
            assert report is not None
            errors = [
                LineError(name, e.line, e.field, e.message) for e in report.errors[:max_errors]
            ]
            more = len(report.errors) - len(errors)
            raise UploadRejected(
                f"{len(report.errors)} invalid line(s) in {name}; nothing was imported"
                + (f" ({more} more not shown)" if more > 0 else "")
                + ".",
                errors,
            ) from None
        except LineError as error:
            raise UploadRejected(
                f"Invalid line in {name}; nothing was imported.",
                [LineError(name, error.line, error.field, error.message)],
            ) from None
        except NoRecords as error:
            raise UploadRejected(error.describe(name)) from None
    report.path = name
    return report


def samples_upload(
    uploaded: Any, *, batch_name: str, overlap: int = 1, generation: int | None = None
) -> ImportReport:
    """Uploaded generator samples into a batch: size limit, all or nothing (API and lead page)."""
    return import_uploaded(
        uploaded,
        lambda path: import_samples(
            path,
            batch_name=batch_name,
            overlap=overlap,
            generation=generation,
            skip_invalid=True,
        ),
        max_bytes=settings.STEPWISE_UPLOAD_MAX_BYTES,
    )


def prm800k_upload(uploaded: Any) -> ImportReport:
    """Uploaded PRM800K label lines: size limit, all or nothing."""
    return import_uploaded(
        uploaded,
        lambda path: import_prm800k(path, skip_invalid=True),
        max_bytes=settings.STEPWISE_UPLOAD_MAX_BYTES,
    )
