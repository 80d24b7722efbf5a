"""Importers: MATH problems, PRM800K label lines, generator samples.

Each reads its JSONL file line by line and writes in chunks with bulk inserts, so memory
stays flat on the full PRM800K release. A bad line raises LineError naming file, line and
field; by default the whole file is one transaction, so nothing of it is written. With
`skip_invalid` bad lines are reported and the rest is written, chunk by chunk. Re-importing
a file adds nothing twice (problems by text hash or unique_id, solutions by content hash,
labelings by the line's hash).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
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
from labeling.services.counters import rebuild_batch_stats

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


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def problem_hash(text: str) -> str:
    return sha256_text(text)


def _read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    # Bytes that are not UTF-8 come through as lone surrogates; decode_line names them.
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line.rstrip("\n").rstrip("\r")


# A byte that is not UTF-8 (read with surrogateescape).
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
# What may hide a value no column can store: a long digit run (an integer past 64 bits), an
# escaped NUL, an escaped surrogate (a lone one cannot be stored). Only such lines are walked.
_SUSPECT = re.compile(r"\d{19}|\\u0000|\\u[dD][89abAB]")


def decode_line(line: str, number: int) -> Any:
    """One JSONL line decoded; RecordError says where it stops being JSON or UTF-8 text, or
    which field holds a value no column can store."""
    bad_byte = _NOT_UTF8.search(line)
    if bad_byte:
        byte = ord(bad_byte.group()) - 0xDC00
        raise prm800k.RecordError(
            "line", f"not UTF-8 text: byte 0x{byte:02x} at column {bad_byte.start() + 1}"
        )
    try:
        obj = json.loads(line)
    except RecursionError:
        raise prm800k.RecordError("line", "not valid JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        if number == 1 and line.strip() in ("{", "["):
            message = (
                f"not valid JSON: the file starts with a lone {line.strip()!r} line, so it looks "
                "pretty-printed; one JSON object per line (JSONL) is expected"
            )
        else:  # a JSONL line is one text line: its column is the position that matters
            at = "" if exc.msg.endswith(" at") else " at"  # "Unterminated string starting at"
            message = f"not valid JSON: {exc.msg}{at} column {exc.colno}"
        raise prm800k.RecordError("line", message) from None
    if _SUSPECT.search(line):
        try:
            unstorable = _unstorable_value(obj, "")
        except RecursionError:
            raise prm800k.RecordError("line", "not valid JSON: nested too deeply") from None
        if unstorable:
            raise prm800k.RecordError(*unstorable)
    return obj


def _unstorable_value(value: Any, path: str) -> tuple[str, str] | None:
    """(field, why) of the first value no database column can hold, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -prm800k.INT64_MAX - 1 <= value <= prm800k.INT64_MAX:
        return path or "line", "integer beyond the 64-bit range"
    if isinstance(value, str):
        if "\x00" in value:
            return path or "line", "text holds a NUL character (\\u0000)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return (
                path or "line",
                "text holds a lone surrogate (an unpaired \\ud800-\\udfff escape)",
            )
        return None
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = (
            (f"{path}.{key}" if path else str(key), item) for key, item in value.items()
        )
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    for child_path, child in items:
        found = _unstorable_value(child, child_path)
        if found:
            return found
    return None


def _run_import(
    path: str | Path,
    parse: Callable[[Any, str], Item],
    write_chunk: Callable[[list[tuple[int, str, Item]], ImportReport], None],
    *,
    skip_invalid: bool,
    chunk_size: int | None = None,
) -> ImportReport:
    """Parse every line, write valid ones in chunks; all-or-nothing unless skip_invalid."""
    require_records(path)
    chunk_size = chunk_size or settings.STEPWISE_IMPORT_CHUNK
    report = ImportReport(path=str(path))
    whole_file = contextlib.nullcontext() if skip_invalid else transaction.atomic()

    def flush(chunk: list[tuple[int, str, Item]]) -> None:
        if chunk:
            with transaction.atomic():
                write_chunk(chunk, report)

    with whole_file:
        chunk: list[tuple[int, str, Item]] = []
        for number, line in _read_lines(path):
            report.lines += 1
            try:
                try:
                    item = parse(decode_line(line, number), line)
                except prm800k.RecordError as exc:
                    raise LineError(str(path), number, exc.field, exc.message) from None
            except LineError as error:
                if not skip_invalid:
                    raise
                report.errors.append(error)
                continue
            chunk.append((number, line, item))
            if len(chunk) >= chunk_size:
                flush(chunk)
                chunk = []
        flush(chunk)
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

PRM800K_NAMESPACE = uuid.UUID("6f1c2a8e-4a57-4b4e-9a53-3f0cbf5e8d11")


@dataclass(slots=True)
class ParsedLine:
    record: prm800k.LabelRecord
    source_sha256: str
    labeler_uuid: uuid.UUID
    timestamp: datetime  # aware, UTC
    exact: bool  # our columns reproduce the line byte for byte
    line: str


def labeler_uuid(labeler: str) -> uuid.UUID:
    try:
        return uuid.UUID(labeler)
    except ValueError:
        return uuid.uuid5(PRM800K_NAMESPACE, labeler)


def parse_prm800k_line(obj: Any, line: str) -> ParsedLine:
    record = prm800k.parse_record(obj)
    public_id = labeler_uuid(record.labeler)
    timestamp = prm800k.as_utc(record.timestamp)
    # Render the line as the exporter will from our columns; if that differs, keep the line.
    stored = dataclasses.replace(
        record, labeler=str(public_id), timestamp=prm800k.export_timestamp(timestamp)
    )
    return ParsedLine(
        record=record,
        source_sha256=sha256_text(line),
        labeler_uuid=public_id,
        timestamp=timestamp,
        exact=prm800k.render_record(stored) == line,
        line=line,
    )


def _batch_for_generation(generation: int | None, cache: dict[Any, Batch]) -> Batch:
    if generation not in cache:
        name = "PRM800K phase 1" if generation is None else f"PRM800K generation {generation}"
        cache[generation], _ = Batch.objects.get_or_create(
            name=name,
            defaults={"generation": generation, "origin": Batch.Origin.IMPORT, "is_active": False},
        )
    return cache[generation]


def _labeler_users(public_ids: set[uuid.UUID]) -> dict[uuid.UUID, int]:
    found = dict(
        Labeler.objects.filter(public_id__in=public_ids).values_list("public_id", "user_id")
    )
    missing = sorted(public_ids - found.keys(), key=str)
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


def _question_override(problem: Problem, question: prm800k.QuestionRecord) -> dict[str, Any] | None:
    """Ground truth as the line showed it, where the shared Problem row may say otherwise."""
    shown = {"ground_truth_answer": question.ground_truth_answer}
    if question.is_phase2:
        shown["ground_truth_solution"] = question.ground_truth_solution
    override = {
        key: value
        for key, value in shown.items()
        if getattr(problem, key) is None or getattr(problem, key) != value
    }
    return override or None


def solution_content_hash(
    *,
    problem_sha256: str,
    fmt: str,
    steps: list[str],
    final_answer: str | None,
    verifier_score: float | None,
    generation: int | None,
    is_quality_control: bool,
    is_screening: bool,
    question_override: dict[str, Any] | None,
    generator: str = "",
) -> str:
    key = [
        problem_sha256,
        fmt,
        steps,
        final_answer,
        verifier_score,
        generation,
        is_quality_control,
        is_screening,
        question_override,
        generator,
    ]
    return sha256_text(json.dumps(key, sort_keys=True))


def _write_prm800k_chunk(
    chunk: list[tuple[int, str, ParsedLine]],
    report: ImportReport,
    *,
    batch: Batch | None,
    batch_cache: dict[Any, Batch],
) -> None:
    seen = set(
        Labeling.objects.filter(
            source_sha256__in=[p.source_sha256 for _, _, p in chunk]
        ).values_list("source_sha256", flat=True)
    )
    fresh: list[ParsedLine] = []
    for _, _, parsed in chunk:
        if parsed.source_sha256 in seen:
            report.duplicates += 1
            continue
        seen.add(parsed.source_sha256)
        fresh.append(parsed)
    if not fresh:
        return

    # Problems: matched by text, created from the line when new.
    problems = _problems_by_hash(problem_hash(p.record.question.problem) for p in fresh)
    new_problems: dict[str, Problem] = {}
    for parsed in fresh:
        q = parsed.record.question
        digest = problem_hash(q.problem)
        if digest not in problems and digest not in new_problems:
            new_problems[digest] = Problem(
                text=q.problem,
                text_sha256=digest,
                ground_truth_answer=q.ground_truth_answer,
                ground_truth_solution=q.ground_truth_solution,
            )
    create_rows(list(new_problems.values()))
    report.created["problems"] += len(new_problems)
    problems.update(_problems_by_hash(new_problems))

    # Solutions: the pre-generated one (phase 2) or the path the labeler chose (phase 1).
    solution_rows: dict[str, Solution] = {}
    solution_key_of: list[str] = []
    for parsed in fresh:
        record, q = parsed.record, parsed.record.question
        problem = problems[problem_hash(q.problem)]
        override = _question_override(problem, q)
        fmt = Solution.Format.PHASE2 if q.is_phase2 else Solution.Format.PHASE1
        if q.is_phase2:
            assert q.pre_generated_steps is not None  # parsing a phase-2 question requires them
            steps = q.pre_generated_steps
        else:
            steps = prm800k.chosen_path(record)
        digest = solution_content_hash(
            problem_sha256=problem.text_sha256,
            fmt=fmt,
            steps=steps,
            final_answer=q.pre_generated_answer,
            verifier_score=q.pre_generated_verifier_score,
            generation=record.generation,
            is_quality_control=record.is_quality_control_question,
            is_screening=record.is_initial_screening_question,
            question_override=override,
        )
        solution_key_of.append(digest)
        if digest not in solution_rows:
            solution_rows[digest] = Solution(
                problem=problem,
                batch=batch or _batch_for_generation(record.generation, batch_cache),
                steps=steps,
                final_answer=q.pre_generated_answer,
                verifier_score=q.pre_generated_verifier_score,
                generator="prm800k",
                format=fmt,
                generation=record.generation,
                is_quality_control=record.is_quality_control_question,
                is_screening=record.is_initial_screening_question,
                content_sha256=digest,
                question_override=override,
            )
    existing = {
        s.content_sha256: s.pk
        for s in Solution.objects.filter(content_sha256__in=solution_rows).only(
            "id", "content_sha256"
        )
    }
    to_create = [s for digest, s in solution_rows.items() if digest not in existing]
    create_rows(to_create)
    report.created["solutions"] += len(to_create)
    solution_ids = {**existing, **{s.content_sha256: s.pk for s in to_create}}

    users = _labeler_users({p.labeler_uuid for p in fresh})
    labelings = [
        Labeling(
            solution_id=solution_ids[digest],
            labeler_id=users[parsed.labeler_uuid],
            status=Labeling.Status.COMPLETED,
            finish_reason=parsed.record.finish_reason,
            total_time_ms=parsed.record.total_time,
            started_at=parsed.timestamp,
            finished_at=parsed.timestamp,
            source_sha256=parsed.source_sha256,
            release_line=parsed.line,
        )
        for parsed, digest in zip(fresh, solution_key_of, strict=True)
    ]
    create_rows(labelings)
    report.created["labelings"] += len(labelings)
    # Lines our columns cannot reproduce (unknown keys, other formatting) export as imported.
    report.created["lines kept verbatim"] += sum(1 for parsed in fresh if not parsed.exact)

    if connection.vendor == "postgresql":
        steps_made, completions_made = _copy_steps(labelings, fresh)
    else:
        steps_made, completions_made = _bulk_create_steps(labelings, fresh)
    report.created["step labels"] += steps_made
    report.created["completions"] += completions_made

    per_solution = Counter(solution_ids[d] for d in solution_key_of)
    for increment in set(per_solution.values()):
        ids = [sid for sid, n in per_solution.items() if n == increment]
        Solution.objects.filter(pk__in=ids).update(completed_count=F("completed_count") + increment)


def _reserve_ids(table: str, count: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [table, count],
        )
        return [row[0] for row in cursor.fetchall()]


def create_rows(objs: list[Any]) -> None:
    """Insert new model instances and set their pks: COPY on PostgreSQL, else bulk_create.

    Like bulk_create, no save() or signals; field defaults and pre_save (auto_now) apply.
    """
    if not objs:
        return
    model = type(objs[0])
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs)
        return
    meta = model._meta
    fields = list(meta.concrete_fields)
    for obj, pk in zip(objs, _reserve_ids(meta.db_table, len(objs)), strict=True):
        obj.pk = pk
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    # psycopg adapts plain values itself; only JSON needs Django's wrapping and only auto_now
    # fields need pre_save. Skipping the rest keeps this loop cheap.
    special = [
        isinstance(f, models.JSONField)
        or getattr(f, "auto_now", False)
        or getattr(f, "auto_now_add", False)
        for f in fields
    ]
    plan = list(zip(fields, special, strict=True))
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {meta.db_table} ({columns}) FROM STDIN") as copy,
    ):
        for obj in objs:
            copy.write_row(
                [
                    f.get_db_prep_save(f.pre_save(obj, True), connection)
                    if slow
                    else getattr(obj, f.attname)
                    for f, slow in plan
                ]
            )
    for obj in objs:
        obj._state.adding = False
        obj._state.db = "default"


def _step_items(step: prm800k.StepRecord) -> list[Any]:
    items: list[Any] = list(step.completions or [])
    if step.human_completion is not None:
        items.append(step.human_completion)
    return items


def _bulk_create_steps(labelings: list[Labeling], fresh: list[ParsedLine]) -> tuple[int, int]:
    step_labels: list[StepLabel] = []
    completions_of: list[list[Any]] = []
    for labeling, parsed in zip(labelings, fresh, strict=True):
        for index, step in enumerate(parsed.record.steps):
            step_labels.append(
                StepLabel(
                    labeling_id=labeling.pk,
                    index=index,
                    chosen_completion=step.chosen_completion,
                    has_completions=step.completions is not None,
                )
            )
            completions_of.append(_step_items(step))
    StepLabel.objects.bulk_create(step_labels, batch_size=5000)
    completions = []
    for step_label, items in zip(step_labels, completions_of, strict=True):
        for index, item in enumerate(items):
            human = isinstance(item, prm800k.HumanCompletionRecord)
            completions.append(
                Completion(
                    step_id=step_label.pk,
                    index=-1 if human else index,
                    text=item.text,
                    rating=item.rating,
                    flagged=item.flagged,
                    is_human=human,
                    source=item.source if human else "",
                )
            )
    Completion.objects.bulk_create(completions, batch_size=5000)
    return len(step_labels), len(completions)


# COPY's text format: backslash, tab, newline and carriage return are escaped; \N is NULL.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_COPY_BOOL = {True: "t", False: "f", None: "\\N"}


def _copy_int(value: int | None) -> str:
    return "\\N" if value is None else str(value)


def _copy_steps(labelings: list[Labeling], fresh: list[ParsedLine]) -> tuple[int, int]:
    """PostgreSQL: steps and completions with COPY, step ids taken from the sequence first.

    Same rows as `_bulk_create_steps`, without building model instances: the rows are
    formatted as COPY text in one block per table (str.translate escapes in C), which is
    several times faster than adapting row by row. Inside the chunk's transaction, so a
    failure still writes nothing.
    """
    step_count = sum(len(parsed.record.steps) for parsed in fresh)
    if not step_count:
        return 0, 0
    step_table, completion_table = StepLabel._meta.db_table, Completion._meta.db_table
    now = timezone.now().isoformat()
    step_ids = iter(_reserve_ids(step_table, step_count))
    escape, as_bool, as_int = _COPY_ESCAPES, _COPY_BOOL, _copy_int
    step_lines: list[str] = []
    completion_lines: list[str] = []
    for labeling, parsed in zip(labelings, fresh, strict=True):
        for index, step in enumerate(parsed.record.steps):
            step_id = next(step_ids)
            has = step.completions is not None
            step_lines.append(
                f"{step_id}\t{labeling.pk}\t{index}\t{as_int(step.chosen_completion)}\t{as_bool[has]}\t{now}\n"
            )
            for c_index, item in enumerate(step.completions or ()):
                completion_lines.append(
                    f"{step_id}\t{c_index}\t{item.text.translate(escape)}\t{as_int(item.rating)}"
                    f"\t{as_bool[item.flagged]}\tf\t\n"
                )
            human = step.human_completion
            if human is not None:
                completion_lines.append(
                    f"{step_id}\t-1\t{human.text.translate(escape)}\t{as_int(human.rating)}"
                    f"\t{as_bool[human.flagged]}\tt\t{human.source.translate(escape)}\n"
                )
    with connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper
        with raw.copy(
            f"COPY {step_table} (id, labeling_id, index, chosen_completion, has_completions, created_at)"
            " FROM STDIN"
        ) as copy:
            copy.write("".join(step_lines))
        with raw.copy(
            f"COPY {completion_table} (step_id, index, text, rating, flagged, is_human, source) FROM STDIN"
        ) as copy:
            copy.write("".join(completion_lines))
    return step_count, len(completion_lines)


def import_prm800k(
    path: str | Path, *, skip_invalid: bool = False, batch: Batch | None = None
) -> ImportReport:
    cache: dict[Any, Batch] = {}
    report = _run_import(
        path,
        parse_prm800k_line,
        lambda chunk, report: _write_prm800k_chunk(chunk, report, batch=batch, batch_cache=cache),
        skip_invalid=skip_invalid,
    )
    if report.created["labelings"]:  # imported labelings bypass the live counters: recount
        for touched in {*cache.values(), *([batch] if batch else [])}:
            rebuild_batch_stats(touched)
    return report


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
