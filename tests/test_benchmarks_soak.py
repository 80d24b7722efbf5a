"""benchmarks/soak.py's per-minute table and its p99 flatness, on fake request logs: nothing
is started."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import soak

START = 1_000_000.0


def request(at: float, kind: str, seconds: float, outcome: str = "200") -> soak.Request:
    return soak.Request(START + at, START + at + seconds, "b0", kind, outcome, 1, 0, 1, 0.01)


def steady(minutes: int, last_claim_s: float = 0.1) -> list[soak.Request]:
    seen = []
    for minute in range(minutes):
        claim_s = last_claim_s if minute == minutes - 1 else 0.1
        for i in range(100):
            at = 60 * minute + 0.5 * i
            seen += [request(at, "claim", claim_s), request(at + 0.1, "rate", 0.05)]
    return seen


def test_one_row_per_minute_from_the_first_to_a_partial_last():
    seen = steady(3) + [request(5, "rate", 9.0, outcome="502"), request(5, "snapshot", 1.0)]
    rows = soak.per_minute(seen, START, START + 150)
    assert [(r["minute"], r["full"], len(r["claim"]), len(r["rate"])) for r in rows] == [
        (1, False, 100, 100),  # the arrivals: not under full load; the 502 left out
        (2, True, 100, 100),
        (3, False, 100, 100),  # cut by the end at 150 s
    ]


def test_p99_is_flat_within_one_and_a_half_times_the_first_full_minute():
    flat, detail = soak.flatness(soak.per_minute(steady(4, 0.14), START, START + 240))
    assert flat is True
    assert "minute 4 over minute 2: claim p99 1.40x, submit p99 1.00x" in detail
    flat, _ = soak.flatness(soak.per_minute(steady(4, 0.2), START, START + 240))
    assert flat is False


def test_flatness_needs_two_full_minutes():
    flat, detail = soak.flatness(soak.per_minute(steady(2), START, START + 120))
    assert flat is None and "two full minutes" in detail


def test_think_takes_min_and_max_seconds():
    assert soak.think_range("2,10") == (2.0, 10.0)
    assert soak.think_range("1,3") == (1.0, 3.0)
    for bad in ("3", "3,1", "-1,2", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            soak.think_range(bad)
