"""Choosing which generated solutions humans label next (active learning).

Following "Let's Verify Step by Step", we surface *convincing wrong-answer* solutions: ones the
current PRM scores highly although their final answer is wrong. Most of a batch is those; the
rest is the most convincing of the remaining solutions, whatever their answer. A uniform random
baseline with the same exclusions and caps lets a simulation measure what the strategy buys.

Pure functions over `Candidate`s: no database, no Django.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Literal

Rule = Literal["convincing_wrong", "convincing", "uniform"]
Scope = Literal["pool", "per_problem"]


@dataclass(frozen=True)
class Candidate:
    solution_id: int
    problem_id: int
    score: float  # the PRM's score of the whole solution; higher = more convincing
    correct: bool | None  # None: ungradable (no ground truth or no extractable answer)


@dataclass(frozen=True)
class Selection:
    solution_id: int
    problem_id: int
    score: float
    rank: int  # 1-based position within the returned selection
    rule: Rule  # which share picked it


def select_generation(
    candidates: Iterable[Candidate],
    *,
    k: int,
    convincing_wrong_fraction: float = 0.8,
    per_problem_cap: int | None = None,
    exclude_ids: Collection[int] = frozenset(),
    scope: Scope = "pool",
    per_problem_k: int | None = None,
    seed: int = 0,
) -> list[Selection]:
    """Pick up to k solutions: the top round(k * fraction) wrong-answer ones by score
    ("convincing_wrong"), then the highest-scoring of all the rest ("convincing").

    - Candidates in exclude_ids never appear.
    - Ungradable candidates (correct is None) are not known to be wrong, so they are only
      eligible for the "convincing" share.
    - Too few wrong answers: the "convincing" share grows so the selection still has k items
      when the pool allows.
    - per_problem_cap limits how many solutions of one problem the whole selection holds.
    - scope="per_problem": the same rule runs inside each problem with per_problem_k picks
      (round(per_problem_k * fraction) of them wrong); the per-problem lists are interleaved
      by their rank (every problem's first pick, best score first, then every second pick, ...)
      and cut at k, so a small budget is spread over problems rather than spent on a few.
    - round() rounds halves up. Ties in score go to the lower solution_id, so the result
      depends only on the candidates, never on their order. `seed` does not change this
      ranking; it is accepted so callers can swap this function and `select_uniform`.
    """
    _check_common_arguments(k, per_problem_cap)
    if not 0.0 <= convincing_wrong_fraction <= 1.0:
        raise ValueError(
            f"convincing_wrong_fraction must be in [0, 1], got {convincing_wrong_fraction}"
        )
    pool = _eligible(candidates, exclude_ids)

    if scope == "pool":
        if per_problem_k is not None:
            raise ValueError("per_problem_k only applies to scope='per_problem'")
        picks = _pick(pool, k, _half_up(k * convincing_wrong_fraction), per_problem_cap)
        return _ranked(picks)

    if scope == "per_problem":
        if per_problem_k is None or per_problem_k < 0:
            raise ValueError("scope='per_problem' needs per_problem_k >= 0")
        per_problem_wrong = _half_up(per_problem_k * convincing_wrong_fraction)
        per_problem = [
            _pick(problem_pool, per_problem_k, per_problem_wrong, per_problem_cap)
            for problem_pool in _by_problem(pool).values()
        ]
        return _ranked(_interleave(per_problem)[:k])

    raise ValueError(f"scope must be 'pool' or 'per_problem', got {scope!r}")


def select_uniform(
    candidates: Iterable[Candidate],
    *,
    k: int,
    exclude_ids: Collection[int] = frozenset(),
    per_problem_cap: int | None = None,
    seed: int = 0,
) -> list[Selection]:
    """The uniform baseline: k solutions drawn at random (seeded), with the same exclusions
    and per-problem cap as select_generation. Every pick has rule "uniform"."""
    _check_common_arguments(k, per_problem_cap)
    # Sort first so the draw depends on the seed and the candidate set, not their order.
    shuffled = sorted(_eligible(candidates, exclude_ids), key=lambda c: c.solution_id)
    random.Random(seed).shuffle(shuffled)
    picks = _take(shuffled, k, per_problem_cap, Counter(), "uniform")
    return _ranked(picks)


# --- helpers -----------------------------------------------------------------------------------

_Pick = tuple[Candidate, Rule]


def _check_common_arguments(k: int, per_problem_cap: int | None) -> None:
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if per_problem_cap is not None and per_problem_cap < 1:
        raise ValueError(f"per_problem_cap must be >= 1 or None, got {per_problem_cap}")


def _eligible(candidates: Iterable[Candidate], exclude_ids: Collection[int]) -> list[Candidate]:
    pool = [c for c in candidates if c.solution_id not in exclude_ids]
    if any(math.isnan(c.score) for c in pool):
        raise ValueError("candidate scores must not be NaN (they cannot be ranked)")
    duplicates = [sid for sid, n in Counter(c.solution_id for c in pool).items() if n > 1]
    if duplicates:
        # Two scores for one solution is a caller bug; picking either would hide it.
        raise ValueError(f"duplicate solution ids among candidates: {sorted(duplicates)[:10]}")
    return pool


def _half_up(x: float) -> int:
    # Python's round() sends 2.5 to 2; a batch of 5 at 50% should hold 3 wrong answers.
    # The epsilon absorbs float noise such as 0.7 * 5 = 3.4999999999999996.
    return math.floor(x + 0.5 + 1e-9)


def _by_score(candidates: Iterable[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (-c.score, c.solution_id))


def _pick(pool: Sequence[Candidate], k: int, wrong_target: int, cap: int | None) -> list[_Pick]:
    """The two-share greedy pick; both shares count against the same per-problem cap."""
    per_problem: Counter[int] = Counter()
    wrong = _by_score(c for c in pool if c.correct is False)
    picks = _take(wrong, min(wrong_target, k), cap, per_problem, "convincing_wrong")
    chosen = {c.solution_id for c, _ in picks}
    rest = _by_score(c for c in pool if c.solution_id not in chosen)
    return picks + _take(rest, k - len(picks), cap, per_problem, "convincing")


def _take(
    ordered: Iterable[Candidate], n: int, cap: int | None, per_problem: Counter[int], rule: Rule
) -> list[_Pick]:
    """Up to n candidates in the given order, skipping problems already at their cap."""
    picks: list[_Pick] = []
    for candidate in ordered:
        if len(picks) >= n:
            break
        if cap is not None and per_problem[candidate.problem_id] >= cap:
            continue
        per_problem[candidate.problem_id] += 1
        picks.append((candidate, rule))
    return picks


def _by_problem(pool: Iterable[Candidate]) -> dict[int, list[Candidate]]:
    groups: defaultdict[int, list[Candidate]] = defaultdict(list)
    for candidate in pool:
        groups[candidate.problem_id].append(candidate)
    return groups


def _interleave(per_problem: Sequence[list[_Pick]]) -> list[_Pick]:
    """Round-robin over problems: all first picks, then all second picks, ...; within a
    round the higher score goes first (then the lower solution_id)."""
    merged: list[_Pick] = []
    for round_picks in zip_longest(*per_problem):
        present = [pick for pick in round_picks if pick is not None]
        merged.extend(sorted(present, key=lambda p: (-p[0].score, p[0].solution_id)))
    return merged


def _ranked(picks: Sequence[_Pick]) -> list[Selection]:
    return [
        Selection(c.solution_id, c.problem_id, c.score, rank=i, rule=rule)
        for i, (c, rule) in enumerate(picks, start=1)
    ]
