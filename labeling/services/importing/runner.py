"""An import's run: a file's lines read, parsed (in worker processes for long files) and
handed to a writer in chunks, all or nothing unless invalid lines are skipped; the report,
the errors, and what the writers share (bounds, problem lookups by hash)."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, transaction

from labeling import prm800k
from labeling.models import Problem
from labeling.parsing import Bounds, parse_lines, sha256_text

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


def run_import(
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


def problems_by_hash(hashes: Iterable[str]) -> dict[str, Problem]:
    return {p.text_sha256: p for p in Problem.objects.filter(text_sha256__in=set(hashes))}


def optional_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise prm800k.RecordError(key, f"expected a string, got {type(value).__name__}")
    return value
