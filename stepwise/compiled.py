"""A hot path's queryset compiled to SQL once per database connection, then run with new values.

Django compiles a queryset to SQL each time it is evaluated. For the rating's locked read (four
tables and three subqueries) building the queryset took 1.4 ms and compiling it 2.5 ms, against
0.96 ms for the query itself on PostgreSQL (the queue benchmark's database, idle machine): most
of a rating's server time. `CompiledQuery` keeps the SQL, the compiler's column map and its
converters per connection, and builds the instances (select_related and annotations included)
the way Django's `ModelIterable` does. Only the values named as placeholders change between
calls; anything else a query depends on must be fixed when it is first built.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]

M = TypeVar("M", bound=Model)

# Placeholder values: their positions among the compiled query's parameters are where each
# call's values go. Inside a 32-bit column's range (Django turns a comparison with a value out
# of a column's range into no comparison at all), and unlike any constant of a query.
_SENTINEL_BASE = 2_147_480_000


@dataclass
class _Compiled:
    sql: str
    params: list[Any]
    slots: dict[str, list[int]]
    compiler: Any
    converters: dict
    # Model querysets: how a row becomes an instance (select_related and annotations too).
    init_list: list[str]
    model_start: int
    model_end: int
    related_populators: list
    annotation_col_map: dict[str, int]
    # values_list querysets: how many of a row's columns are its values (None: a model's).
    value_count: int | None


class CompiledQuery(Generic[M]):
    """`build(**placeholders)` returns the queryset; `first(**values)` runs it with `values` in
    place of the placeholders and returns its first instance or None, as `.first()` would (the
    queryset must order itself: it is compiled as built, with LIMIT 1); `all(**values)` returns
    every instance, and `rows(**values)` every row of a `values_list` queryset, as tuples."""

    def __init__(self, build: Callable[..., QuerySet[M, Any]], *names: str, using: str = "default"):
        self.build = build
        self.names = names
        self.using = using
        # Per connection, compiled with LIMIT 1 (True) or whole (False).
        self._per_connection: dict[bool, weakref.WeakKeyDictionary[Any, _Compiled]] = {
            True: weakref.WeakKeyDictionary(),
            False: weakref.WeakKeyDictionary(),
        }

    def _compile(self, one: bool) -> _Compiled:
        sentinels = {name: _SENTINEL_BASE + n for n, name in enumerate(self.names)}
        queryset = self.build(**sentinels)
        if one:
            queryset = queryset[:1]
        compiler = queryset.query.get_compiler(using=self.using)
        sql, params = compiler.as_sql()
        params = list(params)
        slots = {
            name: [i for i, value in enumerate(params) if value == sentinel]
            for name, sentinel in sentinels.items()
        }
        missing = [name for name, where in slots.items() if not where]
        if missing:
            raise ValueError(f"placeholders not found in the compiled query: {missing}")
        select, klass_info = compiler.select, compiler.klass_info
        fields = [s[0] for s in select[0 : compiler.col_count]]
        compiled = _Compiled(
            sql=sql,
            params=params,
            slots=slots,
            compiler=compiler,
            converters=compiler.get_converters(fields),
            init_list=[],
            model_start=0,
            model_end=0,
            related_populators=[],
            annotation_col_map=dict(compiler.annotation_col_map),
            value_count=None,
        )
        if queryset.query.values_select:
            # A values_list queryset: Django selects its values in the order named, as the
            # row's first col_count columns (any after them serve the ordering only).
            compiled.value_count = compiler.col_count
            return compiled
        select_fields = klass_info["select_fields"]
        compiled.model_start, compiled.model_end = select_fields[0], select_fields[-1] + 1
        compiled.init_list = [
            f[0].target.attname for f in select[compiled.model_start : compiled.model_end]
        ]
        compiled.related_populators = get_related_populators(klass_info, select, self.using)
        return compiled

    def _run(self, one: bool, values: dict[str, Any]) -> tuple[_Compiled, list[tuple]]:
        connection = connections[self.using]
        per_connection = self._per_connection[one]
        compiled = per_connection.get(connection)
        if compiled is None:
            compiled = per_connection[connection] = self._compile(one)
        params = list(compiled.params)
        for name, value in values.items():
            for i in compiled.slots[name]:
                params[i] = value
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall()
        if compiled.converters and rows:
            rows = list(compiled.compiler.apply_converters(rows, compiled.converters))
        return compiled, rows

    def _instance(self, compiled: _Compiled, row: tuple) -> M:
        model_cls = compiled.compiler.klass_info["model"]
        obj = model_cls.from_db(
            self.using, compiled.init_list, row[compiled.model_start : compiled.model_end]
        )
        for populator in compiled.related_populators:
            populator.populate(row, obj)
        for attr_name, col_pos in compiled.annotation_col_map.items():
            setattr(obj, attr_name, row[col_pos])
        return obj

    def first(self, **values: Any) -> M | None:
        compiled, rows = self._run(True, values)
        return self._instance(compiled, rows[0]) if rows else None

    def all(self, **values: Any) -> list[M]:
        compiled, rows = self._run(False, values)
        return [self._instance(compiled, row) for row in rows]

    def rows(self, **values: Any) -> list[tuple]:
        compiled, rows = self._run(False, values)
        if compiled.value_count is None:
            raise TypeError("rows() reads a values_list queryset; all() gives instances")
        return [tuple(row[: compiled.value_count]) for row in rows]
