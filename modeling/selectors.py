"""Reads of the modeling app that span apps."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from labeling.models import Labeling
from modeling.training.data import LabeledSolution
from modeling.training.simulation import oracle_lookup


def oracle_ratings(
    examples: Sequence[LabeledSolution], *, default: int = 1
) -> Callable[[int], list[int]]:
    """ratings_for(labeling_id) for the simulated labelers (`simulation.HttpLabeler`): the
    claimed solution's steps looked up in an oracle; unknown steps get `default`. Reads the
    database, so the client runs beside the server (benchmarks, tests)."""
    ratings = oracle_lookup(examples, default=default)

    def ratings_for(labeling_id: int) -> list[int]:
        solution = Labeling.objects.select_related("solution__problem").get(pk=labeling_id).solution
        return ratings(solution.problem.text, solution.steps)

    return ratings_for
