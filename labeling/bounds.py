"""The range of every integer a request carries, checked before it reaches a query or a row.

A number past its column's range is the request's fault (400), not the database's: PostgreSQL
refuses it in a parameter, SQLite's driver raises OverflowError, and Python slices a query with
it. One validator for forms and serializers alike (DRF runs Django validators too); labeling
and modeling both use it (labeling never imports modeling, so it lives here).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

from labeling.prm800k import INT32_MAX, INT64_MAX


@deconstructible
class IntRange:
    """A validator: the value lies in [low, high] (None passes: a field's `required` decides)."""

    def __init__(self, low: int, high: int, what: str = "a number") -> None:
        self.low, self.high, self.what = low, high, what

    def __call__(self, value: Any) -> None:
        if value is not None and not self.low <= value <= self.high:
            raise ValidationError(
                f"Out of range: {self.what} runs from {self.low:,} to {self.high:,}.",
                code="out_of_range",
            )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntRange) and (self.low, self.high) == (other.low, other.high)

    def __hash__(self) -> int:
        return hash((self.low, self.high))


ROW_ID = IntRange(1, INT64_MAX, "an id")  # every primary key is a 64-bit auto field
INT32 = IntRange(-INT32_MAX - 1, INT32_MAX)  # an IntegerField column (generation, priority)
COUNT = IntRange(1, INT32_MAX, "a count")  # how many rows to take: a LIMIT, a slice
SEED = IntRange(0, 2**32 - 1, "a seed")  # numpy's and torch's seeds are 32-bit unsigned
