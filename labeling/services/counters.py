"""Lead counters: per batch and labeler (BatchLabelerStats) and per batch and hour
(BatchHourStats), updated in the transaction that finishes a labeling so dashboards never
scan labels; `rebuild_batch_stats` recounts them from the labelings.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from django.db import connection, transaction
from django.db.models import Count, F, Field, Model, Q
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
    """Add deltas to a counter row, creating it if needed: one statement, INSERT ... ON CONFLICT
    (its unique key) DO UPDATE adding to each column (PostgreSQL, and SQLite since 3.24). Django's
    own upsert (bulk_create with update_conflicts) can only overwrite a column, not add to it."""
    if any(value < 0 for value in deltas.values()):
        # Taking back what was added: the row is there. (An upsert's new row would fail the
        # columns' >= 0 checks on PostgreSQL before the conflict is seen.)
        taken = {name: F(name) + value for name, value in deltas.items() if value}
        model._default_manager.filter(**keys).update(**taken, **extra)
        return
    meta = model._meta
    row = model(**keys, **deltas, **extra)
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    key_columns = [cast(Field, meta.get_field(name)).column for name in keys]

    def quote(name: str | None) -> str:
        return connection.ops.quote_name(cast(str, name))

    table = quote(meta.db_table)
    changes = [
        f"{quote(f.column)} = {table}.{quote(f.column)} + excluded.{quote(f.column)}"
        for f in fields
        if f.name in deltas
    ] + [f"{quote(f.column)} = excluded.{quote(f.column)}" for f in fields if f.name in extra]
    sql = (
        f"INSERT INTO {table} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) "
        f"ON CONFLICT ({', '.join(quote(c) for c in key_columns)}) "
        f"DO UPDATE SET {', '.join(changes)}"
    )
    values = [f.get_db_prep_save(f.pre_save(row, add=True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)


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


def rebuild_batch_stats(batch: Batch) -> int:
    """Recount a batch's lead counters from its completed labelings; returns labelings counted.

    The counters normally grow as labelings finish (`tally`); labelings imported from PRM800K
    files never pass through that, and a repair may be wanted. This recomputes both tables in
    one transaction. A labeling finished while it runs is counted by the next rebuild.
    """
    index0 = selectors.TALLIED_STEP
    rows = (
        selectors.tallied_labelings()
        .filter(solution__batch=batch)
        .order_by("finished_at", "id")
        .values(
            "labeler_id",
            "solution_id",
            "is_surplus",
            "total_time_ms",
            "finish_reason",
            "finished_at",
        )
        .annotate(
            steps=Count("step_labels__completions", filter=index0),
            pos=Count(
                "step_labels__completions", filter=index0 & Q(step_labels__completions__rating=1)
            ),
            neu=Count(
                "step_labels__completions", filter=index0 & Q(step_labels__completions__rating=0)
            ),
            neg=Count(
                "step_labels__completions", filter=index0 & Q(step_labels__completions__rating=-1)
            ),
            flagged=Count(
                "step_labels__completions",
                filter=index0 & Q(step_labels__completions__flagged=True),
            ),
        )
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
            "labelings": kept,
            "surplus": 1 - kept,
            "steps": row["steps"],
            "time_ms": row["total_time_ms"] or 0,
            "pos": row["pos"],
            "neu": row["neu"],
            "neg": row["neg"],
            "flagged": row["flagged"],
            f"fin_{row['finish_reason'] or 'give_up'}": 1,
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
