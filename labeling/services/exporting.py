"""Exports: one selector for what to export, and streamed writers for every format.

`select_labelings(filters)` is the only place filters become a query; the CLI, the web page,
the API and snapshots all call it. `iter_export_items(labelings)` walks the result with a
server-side cursor (PostgreSQL), so memory stays flat. Each labeling comes out as its PRM800K
release line: the stored `release_line` (the imported line, or the line rendered when the
labeling was submitted), else, for labelings edited since, built from the columns exactly as
`labeling.prm800k.record_to_dict` lays it out (a fixed number of queries per chunk). An
imported file exports byte for byte either way.

Formats (see docs/export.md):
- `prm800k`: the release's JSONL, byte exact.
- `stepwise_jsonl` / `stepwise_parquet`: TRL stepwise supervision rows built by
  `labeling.prm800k.stepwise_rows`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.text import slugify

from labeling import prm800k
from labeling.models import Batch, Completion, Labeling, Snapshot, Solution, StepLabel
from labeling.selectors import final_step_ratings

CHUNK = 2000
PARQUET_ROWS_PER_GROUP = 20_000
DENSE_STEP_IDS = 4  # completions by step-id range when the ids are this dense, else by join

Progress = Callable[[int], None]  # called with the number of labelings just written


class ExportFormat:
    PRM800K = "prm800k"
    STEPWISE_JSONL = "stepwise_jsonl"
    STEPWISE_PARQUET = "stepwise_parquet"
    ALL = (PRM800K, STEPWISE_JSONL, STEPWISE_PARQUET)


# What a file's extension says it holds; other extensions say nothing.
_FORMATS_OF_SUFFIX = {
    ".parquet": (ExportFormat.STEPWISE_PARQUET,),
    ".jsonl": (ExportFormat.PRM800K, ExportFormat.STEPWISE_JSONL),
    ".json": (ExportFormat.PRM800K, ExportFormat.STEPWISE_JSONL),
    ".ndjson": (ExportFormat.PRM800K, ExportFormat.STEPWISE_JSONL),
}


def export_format_for(path: str | os.PathLike[str] | None, requested: str | None) -> str:
    """The format to write `path` in: `requested` if given, else the first its extension
    allows (.parquet: stepwise_parquet), else prm800k. ValueError when the extension says
    otherwise (prm800k into x.parquet, stepwise_parquet into x.jsonl)."""
    suffix = Path(path).suffix.lower() if path else ""
    allowed = _FORMATS_OF_SUFFIX.get(suffix)
    if requested is None:
        return allowed[0] if allowed else ExportFormat.PRM800K
    if allowed and requested not in allowed:
        raise ValueError(f"a {suffix} file holds {' or '.join(allowed)}, not {requested}")
    return requested


EXTENSIONS = {
    ExportFormat.PRM800K: "jsonl",
    ExportFormat.STEPWISE_JSONL: "jsonl",
    ExportFormat.STEPWISE_PARQUET: "parquet",
}
NAME_MAX = 60  # characters of the part before the format: a batch name can be 200
NAMED_BATCH_IDS = 4  # "batches-3-7-9-12-and-5-more" past this many


def export_filename(
    *, fmt: str, on: date, batches: list[int] | None = None, snapshot_id: int | None = None
) -> str:
    """The name an export downloads as, `{what}-{format}-{date}.{ext}`, plain ASCII:
    `snapshot-12-prm800k-2026-11-23.jsonl` for a snapshot (dated when it was created),
    `<batch-name>-prm800k-2026-11-23.jsonl` for a direct export of one batch,
    `batches-3-7-…` for several, `stepwise-…` for all. Used by every download path."""
    if snapshot_id is not None:
        what = f"snapshot-{snapshot_id}"
    elif not batches:
        what = "stepwise"
    elif len(batches) == 1:
        name = Batch.objects.filter(pk=batches[0]).values_list("name", flat=True).first()
        # A name with no ASCII letters or digits (Greek, Chinese, only quotes) slugifies to "".
        what = slugify(name or "")[:NAME_MAX].strip("-_") or f"batch-{batches[0]}"
    else:
        ids = sorted(batches)
        what = "batches-" + "-".join(str(pk) for pk in ids[:NAMED_BATCH_IDS])
        if len(ids) > NAMED_BATCH_IDS:
            what += f"-and-{len(ids) - NAMED_BATCH_IDS}-more"
    return f"{what}-{slugify(fmt)}-{on.isoformat()}.{EXTENSIONS[fmt]}"


def snapshot_filename(snapshot: Snapshot) -> str:
    """A snapshot's file name, on disk and when downloaded."""
    return export_filename(
        fmt=snapshot.format, on=timezone.localdate(snapshot.created_at), snapshot_id=snapshot.pk
    )


# --- what to export ---------------------------------------------------------------------------


@dataclass
class ExportFilters:
    """Which labelings an export holds. Empty lists mean "any".

    `complete_only` (the default) keeps labelings with status `completed`: the labeler
    finished the pass (any finish reason) or it was imported as a finished PRM800K line.
    Without it, passes still in progress or whose lease expired come too, with the steps
    rated so far and finish_reason `give_up`; skipped ones never do.
    `quality_control` / `screening`: "include" (default), "exclude" or "only".
    `finished_after` is inclusive, `finished_before` exclusive.
    `since_cutoff`: only labelings created or changed (updated_at) after this time, the
    cutoff of the snapshot named by `since_snapshot`.
    """

    batches: list[int] = field(default_factory=list)
    generations: list[int] = field(default_factory=list)
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    labeler_ids: list[int] = field(default_factory=list)  # user ids, resolved by the caller
    labelers: list[str] = field(default_factory=list)  # as the user gave them, for the record
    finish_reasons: list[str] = field(default_factory=list)
    quality_control: str = "include"
    screening: str = "include"
    complete_only: bool = True
    since_snapshot: int | None = None
    since_cutoff: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("finished_after", "finished_before", "since_cutoff"):
            if data[key] is not None:
                data[key] = data[key].isoformat()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExportFilters:
        data = dict(data)
        for key in ("finished_after", "finished_before", "since_cutoff"):
            if data.get(key):
                data[key] = datetime.fromisoformat(data[key])
        return cls(**data)


LABEL_CHOICES = ("final", "every")


@dataclass
class StepwiseOptions:
    """How PRM800K labels become stepwise rows; see `labeling.prm800k.stepwise_rows`.

    `labels`: "final" (default) gives a solution that a lead adjudicated or that several
    labelers labeled one row with its final ratings (`selectors.final_step_ratings`: the
    lead's, else the per-step majority); "every" gives every labeling's own rows.
    """

    neutral: str = "positive"  # positive | negative | drop
    alternatives: bool = True
    test_fraction: float = 0.0
    seed: int = 0
    labels: str = "final"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _three_way(value: str, flag: str) -> Q:
    if value == "exclude":
        return Q(**{f"solution__{flag}": False})
    if value == "only":
        return Q(**{f"solution__{flag}": True})
    return Q()


def select_labelings(filters: ExportFilters) -> QuerySet[Labeling]:
    """The labelings an export with these filters holds (unordered; exporters order by id)."""
    query = Labeling.objects.all()
    if filters.complete_only:
        query = query.filter(status=Labeling.Status.COMPLETED)
    else:  # a skip leaves no label, not even a partial one
        query = query.exclude(status=Labeling.Status.SKIPPED)
    if filters.batches:
        query = query.filter(solution__batch_id__in=filters.batches)
    if filters.generations:
        query = query.filter(solution__generation__in=filters.generations)
    if filters.finished_after:
        query = query.filter(finished_at__gte=filters.finished_after)
    if filters.finished_before:
        query = query.filter(finished_at__lt=filters.finished_before)
    if filters.labeler_ids:
        query = query.filter(labeler_id__in=filters.labeler_ids)
    if filters.finish_reasons:
        query = query.filter(finish_reason__in=filters.finish_reasons)
    query = query.filter(_three_way(filters.quality_control, "is_quality_control"))
    query = query.filter(_three_way(filters.screening, "is_screening"))
    if filters.since_cutoff:
        query = query.filter(updated_at__gt=filters.since_cutoff)
    return query


# --- reading, chunk by chunk -----------------------------------------------------------------


@dataclass(slots=True)
class ExportItem:
    labeling_id: int
    problem_sha256: str
    step_count: int
    line: str  # the release line, without newline

    def as_line(self) -> str:
        return self.line

    def as_dict(self) -> dict[str, Any]:
        return json.loads(self.line)


_LABELING_COLUMNS = (
    "id",
    "solution_id",
    "labeler_id",
    "labeler__labeler__public_id",
    "finish_reason",
    "total_time_ms",
    "started_at",
    "finished_at",
)
_SOLUTION_COLUMNS = (
    "id",
    "format",
    "steps",
    "final_answer",
    "verifier_score",
    "generation",
    "is_quality_control",
    "is_screening",
    "question_override",
    "problem__text",
    "problem__ground_truth_answer",
    "problem__ground_truth_solution",
    "problem__text_sha256",
)


def _question(row: tuple) -> dict[str, Any]:
    """The release's `question` object, as `selectors.release_record` builds it."""
    (_, fmt, steps, final_answer, score, _, _, _, override, text, answer, solution, _) = row
    return prm800k.question_to_dict(
        prm800k.question_record(
            is_phase2=fmt != Solution.Format.PHASE1,
            problem=text,
            ground_truth_answer=answer,
            ground_truth_solution=solution,
            steps=steps,
            answer=final_answer,
            verifier_score=score,
            override=override,
        )
    )


def _chunk_sql(quote: Callable[[str], str]) -> tuple[str, str, str]:
    """The three range queries of `_chunk_steps`, identifiers quoted for this connection
    (`index` is a reserved word in SQLite and MySQL)."""
    steps, completions = quote(StepLabel._meta.db_table), quote(Completion._meta.db_table)
    index, step_id, labeling_id = quote("index"), quote("step_id"), quote("labeling_id")
    columns = [
        quote(name)
        for name in ("step_id", "text", "rating", "flagged", "is_human", "source", "index")
    ]
    by_step_range = (
        f"SELECT {', '.join(columns)} FROM {completions} WHERE {step_id} BETWEEN %s AND %s"
    )
    steps_sql = (
        f"SELECT {labeling_id}, {quote('id')}, {quote('chosen_completion')}, {quote('has_completions')}"
        f" FROM {steps} WHERE {labeling_id} BETWEEN %s AND %s ORDER BY {labeling_id}, {index}"
    )
    # When the chunk's step ids are spread out (steps written long after their labeling
    # started), probe completions through the steps' labeling ids instead.
    by_labeling = (
        f"SELECT {', '.join('c.' + column for column in columns)}"
        f" FROM {completions} c JOIN {steps} s ON s.{quote('id')} = c.{step_id}"
        f" WHERE s.{labeling_id} BETWEEN %s AND %s"
    )
    return steps_sql, by_step_range, by_labeling


_RATING = {None: "null", 1: "1", 0: "0", -1: "-1"}
_FLAG = {None: "null", True: "true", False: "false"}
_str = json.encoder.encode_basestring_ascii  # what json.dumps does to a str, in C


def _chunk_steps(labeling_ids: list[int]) -> dict[int, tuple[str, int]]:
    """Per labeling, its `label.steps` rendered as json.dumps would, and the step count.

    Two range queries per chunk (steps by labeling id, completions by step id); rows outside
    the chunk that fall in the ranges are skipped here.
    """
    if not labeling_ids:
        return {}
    wanted = set(labeling_ids)
    steps_sql, completions_by_step_range, completions_by_labeling = _chunk_sql(
        connection.ops.quote_name
    )
    with connection.cursor() as cursor:
        cursor.execute(steps_sql, [min(labeling_ids), max(labeling_ids)])
        steps = [row for row in cursor.fetchall() if row[0] in wanted]
        if not steps:
            return {}
        low, high = min(r[1] for r in steps), max(r[1] for r in steps)
        if high - low < DENSE_STEP_IDS * len(steps):
            # Completions by a range of step ids: an index range scan, not one probe per step.
            cursor.execute(completions_by_step_range, [low, high])
        else:
            cursor.execute(completions_by_labeling, [min(labeling_ids), max(labeling_ids)])
        completions = cursor.fetchall()
    # Sorted here, not in SQL: a sort of this size spills to disk at PostgreSQL's default
    # work_mem. The human completion (index -1) goes after the rated ones, as in the release.
    completions.sort(key=lambda row: (row[0], row[4], row[6]))
    rt, fl = _RATING, _FLAG
    rated: dict[int, list[str]] = {}
    human: dict[int, str] = {}
    for step_id, text, rating, flagged, is_human, source, _ in completions:
        if is_human:
            human[step_id] = (
                f'{{"text": {_str(text)}, "rating": {rt[rating]}, "source": {_str(source or "human")},'
                f' "flagged": {fl[flagged]}}}'
            )
        else:
            rated.setdefault(step_id, []).append(
                f'{{"text": {_str(text)}, "rating": {rt[rating]}, "flagged": {fl[flagged]}}}'
            )
    parts: dict[int, list[str]] = {}
    for labeling_id, step_id, chosen, has_completions in steps:
        listed = f"[{', '.join(rated.get(step_id, ()))}]" if has_completions else "null"
        parts.setdefault(labeling_id, []).append(
            f'{{"completions": {listed}, "human_completion": {human.get(step_id, "null")},'
            f' "chosen_completion": {"null" if chosen is None else chosen}}}'
        )
    return {lid: (f"[{', '.join(items)}]", len(items)) for lid, items in parts.items()}


def stream_chunks(labelings: QuerySet[Labeling]) -> Iterator[list[tuple]]:
    """Labeling rows in id order, CHUNK at a time, through a server-side cursor."""
    rows = labelings.order_by("pk").values_list(*_LABELING_COLUMNS).iterator(chunk_size=CHUNK)
    chunk: list[tuple] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def iter_export_items(labelings: QuerySet[Labeling] | None = None) -> Iterator[ExportItem]:
    """Each labeling of the queryset (default: all completed) as its release line, in id order.

    Stored release lines stream from one column through a server-side cursor; the few
    labelings without one (edited since they were submitted) are rendered from their columns.
    """
    if labelings is None:
        labelings = Labeling.objects.filter(status=Labeling.Status.COMPLETED)
    rows = (
        labelings.order_by("pk")
        .values_list("id", "release_line", "solution__problem__text_sha256")
        .iterator(chunk_size=CHUNK)
    )
    chunk: list[tuple[int, str | None, str]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK:
            yield from _items_of(chunk)
            chunk = []
    yield from _items_of(chunk)


# A key, not text: inside a JSON string the quotes around it would be escaped.
_STEP_KEY = '"chosen_completion": '


def _items_of(chunk: list[tuple[int, str | None, str]]) -> Iterator[ExportItem]:
    missing = [lid for lid, line, _ in chunk if line is None]
    rendered = (
        {
            item.labeling_id: item
            for item in render_from_columns(Labeling.objects.filter(pk__in=missing))
        }
        if missing
        else {}
    )
    for lid, line, problem_sha in chunk:
        if line is None:
            yield rendered[lid]
        else:
            yield ExportItem(lid, problem_sha, line.count(_STEP_KEY), line)


def store_release_lines(labelings: QuerySet[Labeling] | None = None, *, progress=None) -> int:
    """Render and store the line of completed labelings that have none (edited, or older data).

    Returns how many were stored; `progress(done, total)` is called after each chunk.
    """
    base = labelings if labelings is not None else Labeling.objects.all()
    ids = list(
        base.filter(status=Labeling.Status.COMPLETED, release_line__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for start in range(0, len(ids), CHUNK):
        part = ids[start : start + CHUNK]
        rows = [
            Labeling(pk=item.labeling_id, release_line=item.line)
            for item in render_from_columns(Labeling.objects.filter(pk__in=part))
        ]
        Labeling.objects.bulk_update(rows, ["release_line"], batch_size=500)
        if progress:
            progress(start + len(part), len(ids))
    return len(ids)


def render_release_line(labeling_id: int) -> str:
    """One labeling rendered from its columns (what `Labeling.release_line` stores)."""
    return next(render_from_columns(Labeling.objects.filter(pk=labeling_id))).line


def render_from_columns(labelings: QuerySet[Labeling]) -> Iterator[ExportItem]:
    """Labelings without a stored release line, rendered from their columns, in id order.

    Per chunk: the labeling rows from the cursor, one query for their solutions, two for
    their steps and completions. The line is assembled from pre-rendered pieces with the
    same encoder json.dumps uses, in the key order of `prm800k.record_to_dict`.
    """
    dumps = json.dumps
    for chunk in stream_chunks(labelings):
        solutions = {
            row[0]: row
            for row in Solution.objects.filter(pk__in={r[1] for r in chunk}).values_list(
                *_SOLUTION_COLUMNS
            )
        }
        # The part of a line shared by every labeling of a solution, rendered once a chunk.
        shared: dict[int, str] = {}
        steps = _chunk_steps([r[0] for r in chunk])
        for lid, sid, user_id, public_id, reason, total_ms, started, finished in chunk:
            solution = solutions[sid]
            middle = shared.get(sid)
            if middle is None:
                middle = shared[sid] = (
                    f', "generation": {dumps(solution[5])},'
                    f' "is_quality_control_question": {dumps(solution[6])},'
                    f' "is_initial_screening_question": {dumps(solution[7])},'
                    f' "question": {dumps(_question(solution))}, "label": {{"steps": '
                )
            steps_text, count = steps.get(lid, ("[]", 0))
            labeler = str(public_id) if public_id else str(user_id)
            line = (
                f'{{"labeler": {_str(labeler)}, "timestamp": '
                f'"{prm800k.export_timestamp(finished or started).isoformat()}"{middle}{steps_text},'
                f' "total_time": {total_ms or 0}, "finish_reason": {_str(reason or "give_up")}}}}}'
            )
            yield ExportItem(lid, solution[12], count, line)


def iter_prm800k_lines(labelings: QuerySet[Labeling] | None = None) -> Iterator[str]:
    """Each labeling as one release line (no newline), in id order."""
    for item in iter_export_items(labelings):
        yield item.as_line()


def write_prm800k(out: IO[str], labelings: QuerySet[Labeling] | None = None) -> int:
    """Write lines to a text stream; returns the number written."""
    count = 0
    for line in iter_prm800k_lines(labelings):
        out.write(line)
        out.write("\n")
        count += 1
    return count


# --- stepwise rows --------------------------------------------------------------------------


def split_of(problem_sha256: str, test_fraction: float, seed: int) -> str:
    """ "train" or "test" for every labeling of a problem alike: a seeded hash, no state."""
    if test_fraction <= 0:
        return "train"
    digest = hashlib.sha256(f"{seed}:{problem_sha256}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < test_fraction else "train"


def final_rows(
    labelings: QuerySet[Labeling], options: StepwiseOptions
) -> dict[int, list[dict[str, Any]]]:
    """labels="final": the rows of solutions with a final verdict, keyed by labeling id.

    A solution a lead adjudicated or with several counted labelings gets one row, the
    solution's steps up to the end of its final ratings, carried by its first exported
    labeling; its other labelings map to no rows. Labelings not in the map keep their own.
    """
    if options.labels != "final":
        return {}
    first_labeling: dict[int, int] = {}
    solution_of: dict[int, int] = {}
    for labeling_id, solution_id in labelings.order_by("id").values_list("id", "solution_id"):
        first_labeling.setdefault(solution_id, labeling_id)
        solution_of[labeling_id] = solution_id
    verdicts = Solution.objects.filter(pk__in=labelings.values("solution_id")).filter(
        Q(completed_count__gt=1) | Q(adjudication__isnull=False)
    )
    by_solution: dict[int, list[dict[str, Any]]] = {}
    for solution in verdicts.select_related("problem").iterator(chunk_size=1000):
        ratings = final_step_ratings(solution).ratings
        texts, labels = [], []
        for text, rating in zip(solution.steps, ratings, strict=False):
            label = prm800k.step_label(rating, options.neutral)
            if label is None:  # neutral="drop": the row ends before its first neutral step
                break
            texts.append(text)
            labels.append(label)
        prompt = solution.question_override or solution.problem.text
        by_solution[solution.pk] = (
            [{"prompt": prompt, "completions": texts, "labels": labels}] if texts else []
        )
    return {
        labeling_id: (
            by_solution[solution_id] if first_labeling[solution_id] == labeling_id else []
        )
        for labeling_id, solution_id in solution_of.items()
        if solution_id in by_solution
    }


def iter_stepwise_rows(
    items: Iterable[ExportItem],
    options: StepwiseOptions,
    finals: dict[int, list[dict[str, Any]]] | None = None,
) -> Iterator[tuple[ExportItem, list[dict[str, Any]]]]:
    """Per labeling, its stepwise rows (possibly none), with split and provenance columns.
    `finals` (from `final_rows`) replaces the rows of labelings of solutions with a verdict."""
    finals = finals or {}
    for item in items:
        split = split_of(item.problem_sha256, options.test_fraction, options.seed)
        if item.labeling_id in finals:
            rows = [dict(row) for row in finals[item.labeling_id]]
        else:
            rows = prm800k.stepwise_rows(
                item.as_dict(), neutral=options.neutral, alternatives=options.alternatives
            )
        for row in rows:
            row["split"] = split
            row["problem_sha256"] = item.problem_sha256
            row["labeling_id"] = item.labeling_id
        yield item, rows


# --- writing files --------------------------------------------------------------------------


@dataclass
class ExportResult:
    rows: int = 0
    labelings: int = 0
    step_labels: int = 0  # in the file: PRM800K steps, or the stepwise rows' labels
    size_bytes: int = 0
    sha256: str = ""


class _HashingWriter:
    """A binary sink that hashes and counts what passes through."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    closed = False

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.raw.write(data)

    # pyarrow wraps any object with these as an output stream.
    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.raw.flush()


def _stepwise_schema():
    import pyarrow as pa  # heavy and only for Parquet: loaded when a Parquet export runs

    return pa.schema(
        [
            ("prompt", pa.string()),
            ("completions", pa.list_(pa.string())),
            ("labels", pa.list_(pa.bool_())),
            ("split", pa.string()),
            ("problem_sha256", pa.string()),
            ("labeling_id", pa.int64()),
        ]
    )


def write_export(
    out: IO[bytes],
    fmt: str,
    labelings: QuerySet[Labeling],
    *,
    options: StepwiseOptions | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Stream an export into a binary file object; hashing and counting as it goes."""
    options = options or StepwiseOptions()
    result = ExportResult()
    sink = _HashingWriter(out)
    items = iter_export_items(labelings)

    def counted(source: Iterable[ExportItem]) -> Iterator[ExportItem]:
        pending = 0
        for item in source:
            result.labelings += 1
            pending += 1
            if progress and pending >= CHUNK:
                progress(pending)
                pending = 0
            yield item
        if progress and pending:
            progress(pending)

    if fmt == ExportFormat.PRM800K:
        buffer: list[str] = []
        for item in counted(items):
            result.step_labels += item.step_count
            buffer.append(item.as_line())
            if len(buffer) >= 256:
                sink.write(("\n".join(buffer) + "\n").encode())
                buffer.clear()
        if buffer:
            sink.write(("\n".join(buffer) + "\n").encode())
        result.rows = result.labelings
    elif fmt == ExportFormat.STEPWISE_JSONL:
        for _, rows in iter_stepwise_rows(counted(items), options, final_rows(labelings, options)):
            if rows:
                sink.write("".join(json.dumps(row) + "\n" for row in rows).encode())
                result.rows += len(rows)
                result.step_labels += sum(len(row["labels"]) for row in rows)
    elif fmt == ExportFormat.STEPWISE_PARQUET:
        import pyarrow as pa  # heavy and only for Parquet: loaded when a Parquet export runs
        import pyarrow.parquet as pq

        schema = _stepwise_schema()
        columns: dict[str, list] = {name: [] for name in schema.names}
        with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema) as writer:

            def flush() -> None:
                writer.write_table(pa.Table.from_pydict(columns, schema=schema))
                for values in columns.values():
                    values.clear()

            for _, rows in iter_stepwise_rows(
                counted(items), options, final_rows(labelings, options)
            ):
                for row in rows:
                    for name in schema.names:
                        columns[name].append(row[name])
                result.rows += len(rows)
                result.step_labels += sum(len(row["labels"]) for row in rows)
                if len(columns["prompt"]) >= PARQUET_ROWS_PER_GROUP:
                    flush()
            if columns["prompt"] or result.rows == 0:
                flush()
    else:
        raise ValueError(f"unknown export format {fmt!r}")
    result.size_bytes = sink.size
    result.sha256 = sink.digest.hexdigest()
    return result


def write_export_file(
    path: str | os.PathLike[str],
    fmt: str,
    labelings: QuerySet[Labeling],
    *,
    options: StepwiseOptions | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Write to a temporary name beside `path`, then rename: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        dir=path.parent,
        prefix=f".{path.name}.",
        suffix=f".{uuid.uuid4().hex[:8]}.tmp",
        delete=False,
    )
    try:
        with handle:
            result = write_export(handle, fmt, labelings, options=options, progress=progress)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return result


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
