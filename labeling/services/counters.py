"""Lead counters: per batch and labeler (BatchLabelerStats) and per batch and hour
(BatchHourStats), updated in the transaction that finishes a labeling so dashboards never
scan labels; an import adds what it wrote (`tally_added`); `rebuild_batch_stats` recounts them
from the labelings.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast

from django.db import connection, transaction
from django.db.models import Count, F, Field, Model, Q, QuerySet, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from labeling import selectors
from labeling.models import (
    Batch,
    BatchHourStats,
    BatchLabelerStats,
    Labeling,
    Tally,
)


def hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def bump(model: type[Model], keys: dict, deltas: dict, **extra) -> None:
    """Add deltas to a counter row, creating it if needed: one statement (see `bump_rows`)."""
    if any(value < 0 for value in deltas.values()):
        # Taking back what was added: the row is there. (An upsert's new row would fail the
        # columns' >= 0 checks on PostgreSQL before the conflict is seen.)
        taken = {name: F(name) + value for name, value in deltas.items() if value}
        model._default_manager.filter(**keys).update(**taken, **extra)
        return
    bump_rows(model, list(keys), [({**keys, **deltas, **extra})], deltas=list(deltas))


UPSERT_ROWS = 500  # rows per statement: 20 columns x 500 stays under SQLite's 32,766 parameters


def bump_rows(
    model: type[Model],
    keys: list[str],
    rows: list[dict],
    *,
    deltas: list[str],
    latest: tuple[str, ...] = (),
) -> None:
    """Add to many counter rows at once, creating those missing: INSERT ... ON CONFLICT (the
    unique `keys`) DO UPDATE adding each of `deltas` (PostgreSQL, and SQLite since 3.24), one
    statement per UPSERT_ROWS rows. Django's own upsert (bulk_create with update_conflicts) can
    only overwrite a column, not add to it. A row's other fields are overwritten, but those in
    `latest` (datetimes) keep the later of the two values. Each row gives every key and delta;
    deltas must be >= 0 (see `bump`), and no two rows share their keys."""
    if not rows:
        return
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    key_columns = [cast(Field, meta.get_field(name)).column for name in keys]
    given = set(rows[0])
    later = "GREATEST" if connection.vendor == "postgresql" else "MAX"

    def quote(name: str | None) -> str:
        return connection.ops.quote_name(cast(str, name))

    table = quote(meta.db_table)
    changes = []
    for f in fields:
        column, new = quote(f.column), f"excluded.{quote(f.column)}"
        if f.name in deltas:
            changes.append(f"{column} = {table}.{column} + {new}")
        elif f.name in latest:
            changes.append(
                f"{column} = COALESCE({later}({table}.{column}, {new}), {table}.{column}, {new})"
            )
        elif {f.name, f.attname} & given and not {f.name, f.attname} & set(keys):
            changes.append(f"{column} = {new}")
    row_sql = f"({', '.join(['%s'] * len(fields))})"
    head = f"INSERT INTO {table} ({', '.join(quote(f.column) for f in fields)}) VALUES "
    tail = (
        f" ON CONFLICT ({', '.join(quote(c) for c in key_columns)})"
        f" DO UPDATE SET {', '.join(changes)}"
    )
    with connection.cursor() as cursor:
        for start in range(0, len(rows), UPSERT_ROWS):
            part = rows[start : start + UPSERT_ROWS]
            values = []
            for given_row in part:
                row = model(**given_row)
                values += [
                    f.get_db_prep_save(f.pre_save(row, add=True), connection) for f in fields
                ]
            cursor.execute(head + ", ".join([row_sql] * len(part)) + tail, values)


def tally(labeling: Labeling, batch: Batch, ratings, *, sign: int, solutions_done: int) -> None:
    """Add (sign=1) or take back (sign=-1) one finished labeling in the batch counters."""
    values = [r for r, _ in ratings]
    surplus = labeling.is_surplus
    deltas = {
        "labelings": sign * (0 if surplus else 1),
        "surplus": sign * (1 if surplus else 0),
        "steps": sign * len(values),
        "time_ms": sign * (labeling.total_time_ms or 0),
        "pos": sign * values.count(1),
        "neu": sign * values.count(0),
        "neg": sign * values.count(-1),
        "flagged": sign * sum(1 for _, f in ratings if f),
        f"fin_{labeling.finish_reason}": sign,
        "solutions_done": sign * solutions_done,
    }
    extra = {"last_finished_at": labeling.finished_at} if sign > 0 else {}
    bump(BatchLabelerStats, {"batch": batch, "labeler_id": labeling.labeler_id}, deltas, **extra)
    assert labeling.finished_at is not None, "only a finished labeling is tallied"
    bump(BatchHourStats, {"batch": batch, "hour": hour_start(labeling.finished_at)}, deltas)


def _labeling_figures(labelings: QuerySet[Labeling]) -> QuerySet:
    """Per labeling, what the counters add for it: its labeler, solution, surplus, time,
    finish, and its rated steps by rating (one query)."""
    index0 = selectors.TALLIED_STEP
    rating = "step_labels__completions__rating"
    return labelings.values(
        "labeler_id",
        "solution_id",
        "is_surplus",
        "total_time_ms",
        "finish_reason",
        "finished_at",
    ).annotate(
        steps=Count("step_labels__completions", filter=index0),
        pos=Count("step_labels__completions", filter=index0 & Q(**{rating: 1})),
        neu=Count("step_labels__completions", filter=index0 & Q(**{rating: 0})),
        neg=Count("step_labels__completions", filter=index0 & Q(**{rating: -1})),
        flagged=Count(
            "step_labels__completions",
            filter=index0 & Q(step_labels__completions__flagged=True),
        ),
    )


def _figures_deltas(row: dict) -> dict[str, int]:
    kept = 0 if row["is_surplus"] else 1
    return {
        "labelings": kept,
        "surplus": 1 - kept,
        "steps": row["steps"],
        "time_ms": row["total_time_ms"] or 0,
        "pos": row["pos"],
        "neu": row["neu"],
        "neg": row["neg"],
        "flagged": row["flagged"],
        f"fin_{row['finish_reason'] or 'give_up'}": 1,
    }


def tally_added(labeling_ids: Sequence[int]) -> None:
    """Add labelings that were written finished (an import) to the lead counters: these alone,
    not their whole batch, in the caller's transaction; `rebuild_batch_stats` after it would
    find the same figures. A solution is done where `rebuild_batch_stats` says so, its N-th kept
    labeling in (finished_at, id) order: when an added labeling comes before the one that was
    N-th, the solution moves to it (and that is taken back from the other)."""
    if not labeling_ids:
        return
    added = set(labeling_ids)
    figures = list(
        _labeling_figures(selectors.tallied_labelings().filter(pk__in=labeling_ids)).annotate(
            batch_id=F("solution__batch_id")
        )
    )
    if not figures:
        return
    per_labeler: dict[tuple[int, int], dict] = {}
    per_hour: dict[tuple[int, datetime], dict] = {}

    def add(batch_id: int, labeler_id: int, finished: datetime, deltas: dict[str, int]) -> None:
        for totals in (
            per_labeler.setdefault((batch_id, labeler_id), dict.fromkeys(Tally.TALLY_FIELDS, 0)),
            per_hour.setdefault(
                (batch_id, hour_start(finished)), dict.fromkeys(Tally.TALLY_FIELDS, 0)
            ),
        ):
            for name, value in deltas.items():
                totals[name] += value

    latest: dict[tuple[int, int], datetime] = {}
    for row in figures:
        finished = row["finished_at"] or timezone.now()
        add(row["batch_id"], row["labeler_id"], finished, _figures_deltas(row))
        key = (row["batch_id"], row["labeler_id"])
        latest[key] = max(latest.get(key, finished), finished)
    # Which labeling brings each touched solution to its N, without the added ones and with.
    kept = (
        selectors.tallied_labelings()
        .filter(solution_id__in={row["solution_id"] for row in figures}, is_surplus=False)
        .order_by("solution_id", "finished_at", "id")
        .values_list(
            "id",
            "solution_id",
            "solution__batch_id",
            "solution__batch__overlap",
            "labeler_id",
            "finished_at",
        )
    )
    by_solution: dict[int, list[tuple]] = {}
    for row in kept:
        by_solution.setdefault(row[1], []).append(row)
    taken_back: list[tuple[int, int, datetime]] = []
    for rows in by_solution.values():
        overlap = rows[0][3]
        before = [row for row in rows if row[0] not in added]
        was = before[overlap - 1] if len(before) >= overlap else None
        now = rows[overlap - 1] if len(rows) >= overlap else None
        if was == now:
            continue
        if was is not None:
            _id, _solution, batch_id, _overlap, labeler_id, finished = was
            taken_back.append((batch_id, labeler_id, finished or timezone.now()))
        if now is not None:
            _id, _solution, batch_id, _overlap, labeler_id, finished = now
            add(batch_id, labeler_id, finished or timezone.now(), {"solutions_done": 1})
    for batch_id, labeler_id, finished in taken_back:
        add(batch_id, labeler_id, finished, {"solutions_done": -1})
    _bump_totals(BatchLabelerStats, ("batch_id", "labeler_id"), per_labeler, latest)
    _bump_totals(BatchHourStats, ("batch_id", "hour"), per_hour, {})


def _bump_totals(model: type[Model], keys: tuple[str, str], totals: dict, latest: dict) -> None:
    """Totals per key pair into `model`'s rows, in key order (as live finishes lock them, one
    at a time); a row losing more than it gains (a solution's N moved away) is updated alone."""
    rows: list[dict] = []
    losing: list[dict] = []
    for key in sorted(totals):
        row = {**dict(zip(keys, key, strict=True)), **totals[key]}
        if key in latest:
            row["last_finished_at"] = latest[key]
        (losing if any(v < 0 for v in totals[key].values()) else rows).append(row)
    bump_rows(
        model, list(keys), rows, deltas=list(Tally.TALLY_FIELDS), latest=("last_finished_at",)
    )
    for row in losing:  # counted there before: the row is there
        changes: dict = {name: F(name) + row[name] for name in Tally.TALLY_FIELDS if row[name]}
        if "last_finished_at" in row:
            when = Value(row["last_finished_at"])
            changes["last_finished_at"] = Coalesce(Greatest(F("last_finished_at"), when), when)
        model._default_manager.filter(**{name: row[name] for name in keys}).update(**changes)


def rebuild_batch_stats(batch: Batch) -> int:
    """Recount a batch's lead counters from its completed labelings; returns labelings counted.

    The counters normally grow as labelings finish (`tally`); labelings imported from PRM800K
    files never pass through that, and a repair may be wanted. This recomputes both tables in
    one transaction. A labeling finished while it runs is counted by the next rebuild.
    """
    rows = _labeling_figures(selectors.tallied_labelings().filter(solution__batch=batch)).order_by(
        "finished_at", "id"
    )
    per_labeler: dict[int, dict] = {}
    per_hour: dict[datetime, dict] = {}
    kept_per_solution: dict[int, int] = {}
    counted = 0
    for row in rows.iterator(chunk_size=5000):
        counted += 1
        kept = 0 if row["is_surplus"] else 1
        kept_per_solution[row["solution_id"]] = kept_per_solution.get(row["solution_id"], 0) + kept
        deltas = {
            **_figures_deltas(row),
            "solutions_done": int(kept and kept_per_solution[row["solution_id"]] == batch.overlap),
        }
        finished = row["finished_at"] or timezone.now()
        for totals in (
            per_labeler.setdefault(row["labeler_id"], dict.fromkeys(Tally.TALLY_FIELDS, 0)),
            per_hour.setdefault(hour_start(finished), dict.fromkeys(Tally.TALLY_FIELDS, 0)),
        ):
            for name, value in deltas.items():
                totals[name] += value
        per_labeler[row["labeler_id"]]["last_finished_at"] = finished
    with transaction.atomic():
        BatchLabelerStats.objects.filter(batch=batch).delete()
        BatchHourStats.objects.filter(batch=batch).delete()
        BatchLabelerStats.objects.bulk_create(
            BatchLabelerStats(batch=batch, labeler_id=labeler_id, **totals)
            for labeler_id, totals in per_labeler.items()
        )
        BatchHourStats.objects.bulk_create(
            BatchHourStats(batch=batch, hour=hour, **totals) for hour, totals in per_hour.items()
        )
    return counted
