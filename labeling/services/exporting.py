"""Exports: one selector for what to export, and streamed writers for every format.

`select_labelings(filters)` is the only place filters become a query; the CLI, the web page,
the API and snapshots all call it. `iter_export_items(labelings)` walks the result with a
server-side cursor (PostgreSQL), so memory stays flat. Each labeling comes out as its PRM800K
release line, stored when it was imported, finished or edited (`labeling.prm800k.render_record`
is the one renderer). An imported file exports byte for byte.

Formats (see docs/export.md):
- `prm800k`: the release's JSONL, byte exact.
- `stepwise_jsonl` / `stepwise_parquet`: TRL stepwise supervision rows built by
  `labeling.prm800k.stepwise_rows`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.text import slugify

from labeling import prm800k
from labeling.models import (
    Batch,
    Completion,
    Labeling,
    Note,
    Snapshot,
    Solution,
    StepLabel,
)
from labeling.models.projects import DEFAULT_SLUG
from labeling.selectors import final_step_ratings, label_record

CHUNK = 2000
PARQUET_ROWS_PER_GROUP = 20_000

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
    `machine_labels`: include the judges' machine labelings (off by default: exports and
    training hold human labels only unless asked).
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
    # The project exported (its id); None: the Default project, as before projects.
    project: int | None = None
    # Machine labelings (issue 47: the judges', not a person's) are left out unless asked for.
    machine_labels: bool = False

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
    if filters.project is None:
        query = Labeling.objects.filter(solution__project__slug=DEFAULT_SLUG)
    else:
        query = Labeling.objects.filter(solution__project_id=filters.project)
    if not filters.machine_labels:
        query = query.filter(source=Labeling.Source.HUMAN)
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


def iter_export_items(labelings: QuerySet[Labeling] | None = None) -> Iterator[ExportItem]:
    """Each labeling of the queryset (default: all completed human ones) as its release line, in
    id order.

    Stored release lines stream from one column through a server-side cursor. Every finish and
    edit stores the line and the `store_release_lines` command stores it for older rows, so a
    labeling without one predates both or was written around the services (raw SQL, a
    fixture); it is rendered through `prm800k.render_record` like any other, three queries per
    chunk.
    """
    if labelings is None:
        labelings = Labeling.objects.filter(
            status=Labeling.Status.COMPLETED, source=Labeling.Source.HUMAN
        )
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
    rendered = dict(render_release_lines(missing)) if missing else {}
    for lid, line, problem_sha in chunk:
        line = rendered[lid] if line is None else line
        yield ExportItem(lid, problem_sha, line.count(_STEP_KEY), line)


def render_release_lines(labeling_ids: list[int]) -> Iterator[tuple[int, str]]:
    """(id, release line) of each labeling, rendered by `prm800k.render_record` from the
    records `selectors.label_record` builds: what a submit stores, read three queries at a
    time (labelings, steps, completions) instead of four per labeling."""
    labelings = Labeling.objects.select_related("solution__problem", "labeler__labeler").in_bulk(
        labeling_ids
    )
    steps: dict[int, list[StepLabel]] = {}
    for step in StepLabel.objects.filter(labeling_id__in=labeling_ids).order_by("index"):
        steps.setdefault(step.labeling_id, []).append(step)
    by_step: dict[int, list[Completion]] = {}
    for completion in Completion.objects.filter(step__labeling_id__in=labeling_ids).order_by(
        "step_id", "index"
    ):
        by_step.setdefault(completion.step_id, []).append(completion)
    for lid in labeling_ids:
        labeling = labelings[lid]
        profile = getattr(labeling.labeler, "labeler", None)  # a user without a Labeler row
        record = label_record(
            labeling,
            public_id=str(profile.public_id) if profile else str(labeling.labeler_id),
            steps=steps.get(lid, []),
            completions=[c for step in steps.get(lid, []) for c in by_step.get(step.pk, [])],
        )
        yield lid, prm800k.render_record(record)


def store_release_lines(labelings: QuerySet[Labeling] | None = None, *, progress=None) -> int:
    """Render and store the line of completed labelings that have none (rows from before the
    stored line, or written around the services): the `store_release_lines` command, run after
    an upgrade (no migration runs it).

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
        rows = [Labeling(pk=lid, release_line=line) for lid, line in render_release_lines(part)]
        Labeling.objects.bulk_update(rows, ["release_line"], batch_size=500)
        if progress:
            progress(start + len(part), len(ids))
    return len(ids)


def iter_prm800k_lines(labelings: QuerySet[Labeling] | None = None) -> Iterator[str]:
    """Each labeling as one release line (no newline), in id order."""
    for item in iter_export_items(labelings):
        yield item.as_line()


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
    labeling; its other labelings map to no rows. Labelings not in the map keep their own, as
    do all of a step-by-step (phase 1) solution's: each labeler's path is a solution of its own.
    """
    if options.labels != "final":
        return {}
    first_labeling: dict[int, int] = {}
    solution_of: dict[int, int] = {}
    for labeling_id, solution_id in labelings.order_by("id").values_list("id", "solution_id"):
        first_labeling.setdefault(solution_id, labeling_id)
        solution_of[labeling_id] = solution_id
    # Step by step (phase 1) every labeling is its own path: no common steps, so no verdict,
    # and each labeling keeps its own rows (and notes).
    verdicts = (
        Solution.objects.filter(pk__in=labelings.values("solution_id"))
        .filter(Q(completed_count__gt=1) | Q(adjudication__isnull=False))
        .exclude(format=Solution.Format.PHASE1)
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


def note_records(
    labeling_ids: list[int], finals: dict[int, list[dict[str, Any]]]
) -> dict[int, list[dict[str, Any]]]:
    """The notes each labeling's rows carry (two queries for a chunk): its own notes and the
    leads' notes on its solution; a labeling carrying its solution's final row (in `finals`)
    carries every note on the solution. Authors by their labeler public id, as the PRM800K
    line names labelers (never a username)."""
    solution_of = dict(
        Labeling.objects.filter(pk__in=labeling_ids).values_list("id", "solution_id")
    )
    by_solution: dict[int, list[Note]] = {}
    notes = (
        Note.objects.filter(solution_id__in=set(solution_of.values()))
        .select_related("author__labeler")
        .order_by("created_at", "id")
    )
    for note in notes:
        by_solution.setdefault(note.solution_id, []).append(note)
    records: dict[int, list[dict[str, Any]]] = {}
    for labeling_id, solution_id in solution_of.items():
        whole = labeling_id in finals
        kept = [
            note
            for note in by_solution.get(solution_id, [])
            if whole or note.labeling_id in (None, labeling_id)
        ]
        if kept:
            records[labeling_id] = [_note_record(note) for note in kept]
    return records


def _note_record(note: Note) -> dict[str, Any]:
    profile = getattr(note.author, "labeler", None) if note.author else None
    return {
        "step": note.step_index,
        "text": note.text,
        "role": "labeler" if note.labeling_id else "lead",
        "author": str(profile.public_id) if profile else None,
        "created_at": note.created_at.isoformat(),
    }


def provenance_records(labeling_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Per labeling, each rated step's provenance (issue 46), one query for a chunk: whether a
    judge's suggestion was on the page when it was rated, which judge, its label and score, and
    whether the labeler accepted it with the accept key (null where none was shown)."""
    rows = (
        StepLabel.objects.filter(labeling_id__in=labeling_ids)
        .order_by("labeling_id", "index")
        .values_list(
            "labeling_id",
            "index",
            "suggestion_shown",
            "suggestion_judge",
            "suggestion_label",
            "suggestion_score",
            "suggestion_accepted",
        )
    )
    records: dict[int, list[dict[str, Any]]] = {}
    for labeling_id, index, shown, judge, label, score, accepted in rows:
        records.setdefault(labeling_id, []).append(
            {
                "step": index,
                "suggestion_shown": shown,
                "suggestion_judge": judge or None,
                "suggestion_label": label,
                "suggestion_score": score,
                "suggestion_accepted": accepted,
            }
        )
    return records


def iter_stepwise_rows(
    items: Iterable[ExportItem],
    options: StepwiseOptions,
    finals: dict[int, list[dict[str, Any]]] | None = None,
) -> Iterator[tuple[ExportItem, list[dict[str, Any]]]]:
    """Per labeling, its stepwise rows (possibly none), with split, provenance, `notes`
    (`note_records`) and the labeling's per-step suggestion `provenance`
    (`provenance_records`) columns. `finals` (from `final_rows`) replaces the rows of labelings of
    solutions with a verdict."""
    finals = finals or {}
    source = iter(items)
    while chunk := list(itertools.islice(source, CHUNK)):
        notes = note_records([item.labeling_id for item in chunk], finals)
        provenance = provenance_records([item.labeling_id for item in chunk])
        for item in chunk:
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
                row["notes"] = notes.get(item.labeling_id, [])
                row["provenance"] = provenance.get(item.labeling_id, [])
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
            (
                "notes",
                pa.list_(
                    pa.struct(
                        [
                            ("step", pa.int32()),
                            ("text", pa.string()),
                            ("role", pa.string()),
                            ("author", pa.string()),
                            ("created_at", pa.string()),
                        ]
                    )
                ),
            ),
            (
                "provenance",
                pa.list_(
                    pa.struct(
                        [
                            ("step", pa.int32()),
                            ("suggestion_shown", pa.bool_()),
                            ("suggestion_judge", pa.string()),
                            ("suggestion_label", pa.int8()),
                            ("suggestion_score", pa.float64()),
                            ("suggestion_accepted", pa.bool_()),
                        ]
                    )
                ),
            ),
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
