"""The benchmarks' seeding SQL writes rows today's schema accepts: it inserts by column, so a new
NOT NULL column without a database default breaks it, and only a benchmark run would notice
(the peers run of 2026-11-25 died at its seed after labeling 0012 added `skip_reason`)."""

from __future__ import annotations

import pytest
from django.db import connection

from benchmarks import export as export_bench
from benchmarks import queue_load
from labeling.models import Labeling, Membership, Solution, StepLabel

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the benchmarks' seeding SQL is PostgreSQL's"
)


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_queue_benchmark_seeds_a_migrated_database():
    with connection.cursor() as cursor:  # the seed's SQL on the migrated test database
        queue_load.fill(cursor, solutions=20, labelers=2)
    assert Labeling.objects.filter(status=Labeling.Status.COMPLETED, skip_reason="").count() == 20
    assert StepLabel.objects.count() == 20 * queue_load.STEPS
    # All of it in its own project (not Default), the labelers and the lead its members.
    assert set(Solution.objects.values_list("project__slug", flat=True)) == {queue_load.PROJECT}
    members = Membership.objects.filter(project__slug=queue_load.PROJECT)
    assert set(members.values_list("user__username", "role")) >= {
        ("b0", "labeler"),
        ("b1", "labeler"),
        ("benchlead", "lead"),
    }


@postgres_only
@pytest.mark.django_db(transaction=True)  # the seed VACUUMs: no test transaction around it
def test_the_export_benchmark_seeds_the_database_it_runs_on():
    export_bench.seed(10 * export_bench.STEPS_PER_LABELING)
    assert Labeling.objects.filter(status=Labeling.Status.COMPLETED, skip_reason="").count() == 10
    assert StepLabel.objects.count() == 10 * export_bench.STEPS_PER_LABELING
