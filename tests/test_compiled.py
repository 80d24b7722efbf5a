"""A queryset compiled once per connection (stepwise.compiled) reads what the ORM reads."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.models.sql.compiler import SQLCompiler
from django.test.utils import CaptureQueriesContext

from labeling.models import Labeling
from labeling.services.rating import _locked_rating_read, rate_step
from stepwise.compiled import CompiledQuery
from tests.factories import make_batch, make_solution
from tests.labeling.helpers import next_labeling

pytestmark = pytest.mark.django_db


def _same(compiled: Labeling, orm: Labeling) -> None:
    fields = [f.attname for f in Labeling._meta.concrete_fields]
    assert [getattr(compiled, f) for f in fields] == [getattr(orm, f) for f in fields]
    # select_related: the solution, its batch and problem come with it, as the ORM's do.
    assert compiled.solution.steps == orm.solution.steps
    assert compiled.solution.batch.overlap == orm.solution.batch.overlap
    assert compiled.solution.problem.text == orm.solution.problem.text
    for name in ("rated_count", "labeler_state", "labeler_public_id"):
        assert getattr(compiled, name) == getattr(orm, name)


def test_the_compiled_rating_read_gives_the_orms_rows_compiled_once(labeler, labeler2, monkeypatch):
    make_solution(make_batch(overlap=3), steps=["Let $x = 2$.", "So $x^2 = 4$.", "# Answer\n\n4"])
    other_batch = make_batch(name="other", overlap=2)
    make_solution(other_batch, steps=["One.", "Two."])
    first = next_labeling(labeler)
    second = next_labeling(labeler2)
    rate_step(labeling_id=first.pk, user=labeler, step_index=0, rating=1, elapsed_ms=10)
    compiles = []
    original = SQLCompiler.as_sql
    monkeypatch.setattr(
        SQLCompiler, "as_sql", lambda self, *a, **k: compiles.append(1) or original(self, *a, **k)
    )
    reads = CompiledQuery(_locked_rating_read, "labeling_id")
    with transaction.atomic():
        for labeling in (first, second, first):
            with CaptureQueriesContext(connection) as captured:
                compiled = reads.first(labeling_id=labeling.pk)
            assert len(captured.captured_queries) == 1
            assert compiled is not None
            _same(compiled, _locked_rating_read(labeling.pk).first())
        compiles_before = len(compiles)
        assert reads.first(labeling_id=second.pk).rated_count == 0
        assert reads.first(labeling_id=first.pk).rated_count == 1
        assert len(compiles) == compiles_before, "compiled again"
        assert reads.first(labeling_id=10**12) is None


def test_a_placeholder_missing_from_the_query_is_refused(labeler):
    reads = CompiledQuery(lambda labeling_id: Labeling.objects.all(), "labeling_id")
    with pytest.raises(ValueError, match="placeholders not found"):
        reads.first(labeling_id=1)


def test_all_and_rows_give_what_the_orm_gives_on_every_call(labeler, labeler2):
    """`all()` builds every instance (select_related too); `rows()` gives a values_list's tuples
    in the order named, annotations and their converters (a JSON subquery, an Exists)
    included, as Django's iterable does."""
    from django.db.models import Exists, JSONField, OuterRef, Subquery

    from labeling.models import Completion, SolutionAgreement
    from labeling.services.rating import RATED_STEPS
    from tests.labeling.helpers import claim_and_label

    solution = make_solution(make_batch(overlap=2, gold_rate=0), steps=["A.", "B.", "C."])
    claim_and_label(labeler, [1, 0, 1])
    claim_and_label(labeler2, [1, -1])
    for labeling in Labeling.objects.order_by("id"):
        orm = list(
            Completion.objects.filter(step__labeling_id=labeling.pk)
            .select_related("step")
            .order_by("step__index", "index")
        )
        compiled = RATED_STEPS.all(labeling_id=labeling.pk)
        assert [(c.pk, c.rating, c.step.index, c.step.labeling_id) for c in compiled] == [
            (c.pk, c.rating, c.step.index, c.step.labeling_id) for c in orm
        ]

    def read(solution_id):
        agreement = SolutionAgreement.objects.filter(solution_id=OuterRef("solution_id"))
        return (
            Labeling.objects.filter(solution_id=solution_id)
            .annotate(
                contribution=Subquery(
                    agreement.values("contribution")[:1], output_field=JSONField()
                ),
                has_steps=Exists(Completion.objects.filter(step__labeling_id=OuterRef("pk"))),
            )
            .order_by("id")
            # An annotation named before a field: the SQL has them the other way round.
            .values_list("has_steps", "id", "contribution", "finish_reason")
        )

    rows = CompiledQuery(read, "solution_id")
    for _ in range(2):
        assert rows.rows(solution_id=solution.pk) == list(read(solution.pk))
    first = rows.rows(solution_id=solution.pk)[0]
    assert first[0] is True and isinstance(first[2], dict) and first[3] == "solution"
    assert rows.rows(solution_id=10**12) == []
    with pytest.raises(TypeError, match="values_list"):
        RATED_STEPS.rows(labeling_id=1)
