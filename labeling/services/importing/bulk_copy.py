"""Rows in bulk for the importers: COPY on PostgreSQL, with ids taken from the table's
sequence first; `bulk_create` (or a plain query) on other databases."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, models
from django.utils import timezone

from labeling.models import Completion, StepLabel
from labeling.parsing import PreparedLine


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    found = model._meta.get_field(name)
    assert isinstance(found, models.Field)
    return found


def rows_with_hashes(
    model: type[models.Model],
    column: str,
    hashes: Iterable[str],
    *fields: str,
    project_id: int | None = None,
    project_field: str = "project",
) -> list[tuple[Any, ...]]:
    """`fields` of the rows (of one project, where named) whose `column` holds one of `hashes`
    (hex digests). `project_field` leads to the project: a foreign key of the model, or one
    foreign key away ("solution__project"). On PostgreSQL as one comma-joined text parameter:
    an IN list of a chunk's 2,000 hashes, or an array parameter, cost more to build and send
    than the query cost to run."""
    in_project = {} if project_id is None else {f"{project_field}_id": project_id}
    if connection.vendor != "postgresql":
        rows = model._default_manager.filter(**{f"{column}__in": hashes}, **in_project)
        return list(rows.values_list(*fields))
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    selected = ", ".join(f"{table}.{quote(_field(model, name).column)}" for name in fields)
    params: list[Any] = [",".join(hashes)]
    joined = and_project = ""
    if project_id is not None:
        hop, _, project_key = project_field.rpartition("__")
        holder, holder_model = table, model
        if hop:  # one foreign key away: join the row that holds the project
            holder_model = _field(model, hop).related_model  # type: ignore[assignment]
            holder = quote(holder_model._meta.db_table)
            joined = (
                f" JOIN {holder} ON {holder}.{quote(holder_model._meta.pk.column)}"
                f" = {table}.{quote(_field(model, hop).column)}"
            )
        and_project = f" AND {holder}.{quote(_field(holder_model, project_key).column)} = %s"
        params.append(project_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {selected} FROM {table}{joined}"
            f" WHERE {table}.{quote(_field(model, column).column)}"
            f" = ANY(string_to_array(%s, ',')){and_project}",
            params,
        )
        return cursor.fetchall()


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
    per_row = [
        f
        for f in rest
        if f.has_default() and callable(f.default) and not _takes_now(f) and not f.is_relation
    ]
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


def prefer_lz4_compression() -> None:
    """PostgreSQL: the stored lines (3 KB each) go to TOAST compressed; lz4 where the server has
    it compresses them several times faster than the default pglz. Till the transaction ends."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_settings"
                " WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
            )


_COPY_FLUSH = 1 << 20  # characters of COPY text sent to the server at a time


def copy_steps(labeling_ids: list[int], lines: list[PreparedLine]) -> tuple[int, int]:
    """PostgreSQL: steps and completions with COPY, step ids taken from the sequence first.

    Same rows as `label_lines._bulk_create_steps` (the ORM path): the worker formatted each row's COPY text but for the
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
