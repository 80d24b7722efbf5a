"""Choosing which generated solutions humans label next (active learning).

Following "Let's Verify Step by Step", we surface *convincing wrong-answer* solutions: ones the
current PRM scores highly although their final answer is wrong. Most of a batch is those; the
rest is the most convincing of the remaining solutions, whatever their answer. A uniform random
baseline with the same exclusions and caps lets a simulation measure what the strategy buys.

A second rule, "uncertainty", picks the solutions an ensemble of PRM heads disagrees on most
(ActPRM, Duan et al. 2025): the spread across heads of P(step is wrong), up to the first step the
ensemble calls wrong. A third, "disagreement", routes to humans the solutions the machine judges
(issue 46: prm, llm, mc) and the PRM disagree on most, the first-error position counting
(`judge_disagreement`). "mix" splits a batch between rules by shares. A lab chooses among
`RULES`; `select_by_rule` dispatches by name.

Pure functions over `Candidate`s: no database, no Django.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any, Literal

import numpy as np

# The rule that picked one solution ("convincing" is the fill-up share of convincing_wrong).
Rule = Literal["convincing_wrong", "convincing", "uncertainty", "disagreement", "uniform"]
Scope = Literal["pool", "per_problem"]

# The rules a lab chooses among, its default first.
RULES = ("convincing_wrong", "uncertainty", "disagreement", "mix", "uniform")
# The rules a "mix" may split a batch between.
MIX_RULES = ("convincing_wrong", "uncertainty", "uniform")


@dataclass(frozen=True)
class Candidate:
    solution_id: int
    problem_id: int
    score: float  # the PRM's score of the whole solution; higher = more convincing
    correct: bool | None  # None: ungradable (no ground truth or no extractable answer)
    # The ensemble's disagreement on this solution (ensemble_disagreement); None: not measured,
    # so the solution is not eligible for the "uncertainty" rule.
    uncertainty: float | None = None
    # How much the judges and the PRM disagree on it (judge_disagreement); None: fewer than two
    # of them said anything, so the solution is not eligible for the "disagreement" rule.
    disagreement: float | None = None


@dataclass(frozen=True)
class Selection:
    solution_id: int
    problem_id: int
    score: float  # the PRM's score; for "uncertainty"/"disagreement" picks, that measure
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


def ensemble_disagreement(error_probs: Any) -> float:
    """How much an ensemble of PRM heads disagrees on one solution.

    error_probs is a (heads x steps) array-like: each head's P(step is wrong) for each step.
    The disagreement is the largest spread (population standard deviation across heads) over
    the steps up to and including the first one the ensemble mean calls wrong (P > 0.5);
    later steps do not matter to a labeler who stops at the first error (ActPRM). All steps
    count when the ensemble calls none wrong. No steps or no heads: 0.0. Bounded by 0.5.
    """
    probs = np.asarray(error_probs, dtype=np.float64)
    if probs.size == 0:
        return 0.0
    if probs.ndim != 2:
        raise ValueError(f"error_probs must be heads x steps (2-D), got shape {probs.shape}")
    if np.isnan(probs).any():
        raise ValueError("error_probs must not contain NaN")
    called_wrong = np.flatnonzero(probs.mean(axis=0) > 0.5)
    last = int(called_wrong[0]) + 1 if called_wrong.size else probs.shape[1]
    return float(probs[:, :last].std(axis=0).max())


def select_uncertain(
    candidates: Iterable[Candidate],
    *,
    k: int,
    exclude_ids: Collection[int] = frozenset(),
    per_problem_cap: int | None = None,
    seed: int = 0,
) -> list[Selection]:
    """The k candidates the ensemble disagrees on most, with the same exclusions and cap as
    select_generation. Candidates without an uncertainty are not eligible; ties go to the
    lower solution_id. Every pick has rule "uncertainty" and its disagreement as score.
    `seed` does not change the ranking; it is accepted so callers can swap rules."""
    _check_common_arguments(k, per_problem_cap)
    picks = _take(
        _by_uncertainty(_eligible(candidates, exclude_ids)),
        k,
        per_problem_cap,
        Counter(),
        "uncertainty",
    )
    return _ranked(picks)


def judge_disagreement(first_errors: Sequence[int | None], n_steps: int) -> float | None:
    """How much several verdicts on one solution disagree, in [0, 1]; None with fewer than two.

    Each verdict is a voter's first wrong step (0-based index of its first -1) or None for "no
    step is wrong"; the caller leaves out the voters that gave no label. A voter's position is
    its first wrong step, or n_steps (one past the last step) when it calls none wrong. For each
    pair of voters:

        pair = 0.5 * [one calls the solution wrong, the other does not]
             + 0.5 * |position_a - position_b| / n_steps

    and the disagreement is the mean over all pairs. Two voters that both call it right (or the
    same step wrong) score 0; "step 0 is wrong" against "nothing is wrong" scores 1; two voters
    naming different wrong steps score half their normalised distance, since a labeler who stops
    at the first error needs to see where it is. Example, 4 steps, verdicts (1, None, 1): pairs
    0.875, 0.875, 0 -> 0.5833.
    """
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    positions = []
    for first in first_errors:
        if first is not None and not 0 <= first < n_steps:
            raise ValueError(f"a first error must be a step index in [0, {n_steps}), got {first}")
        positions.append(n_steps if first is None else first)
    if len(positions) < 2:
        return None
    pairs = [
        0.5 * ((a == n_steps) != (b == n_steps)) + 0.5 * abs(a - b) / n_steps
        for i, a in enumerate(positions)
        for b in positions[i + 1 :]
    ]
    return math.fsum(pairs) / len(pairs)


def select_disagreement(
    candidates: Iterable[Candidate],
    *,
    k: int,
    exclude_ids: Collection[int] = frozenset(),
    per_problem_cap: int | None = None,
    seed: int = 0,
) -> list[Selection]:
    """The k candidates the judges and the PRM disagree on most (Candidate.disagreement), with
    the same exclusions and cap as select_generation. Candidates without a disagreement are not
    eligible; ties go to the lower solution_id. Every pick has rule "disagreement" and its
    disagreement as score. `seed` does not change the ranking."""
    _check_common_arguments(k, per_problem_cap)
    picks = _take(
        _by_disagreement(_eligible(candidates, exclude_ids)),
        k,
        per_problem_cap,
        Counter(),
        "disagreement",
    )
    return _ranked(picks)


def select_mix(
    candidates: Iterable[Candidate],
    *,
    k: int,
    shares: Mapping[str, float],
    exclude_ids: Collection[int] = frozenset(),
    per_problem_cap: int | None = None,
    seed: int = 0,
) -> list[Selection]:
    """Split a batch between rules, e.g. shares={"convincing_wrong": 0.5, "uncertainty": 0.5}.

    In the mapping's order, each rule picks round(k * share) (halves up) of what the rules
    before it left, within the one per-problem cap; the remainder is filled by the first
    rule, then by the others in order, so the batch holds k items when the pool allows. Each
    pick records the rule that chose it. Inside a mix, "convincing_wrong" takes the wrong
    answers by score and then, when they run out, the most convincing of the rest (recorded
    "convincing"); "uncertainty" takes candidates with an uncertainty, most disputed first;
    "uniform" draws at random (seeded).
    """
    _check_common_arguments(k, per_problem_cap)
    check_shares(shares)
    pool = _eligible(candidates, exclude_ids)
    orders = {rule: _mix_order(rule, pool, seed) for rule in shares}
    per_problem: Counter[int] = Counter()
    picks: list[_Pick] = []
    chosen: set[int] = set()

    def take(rule: str, n: int) -> None:
        for candidate, label in orders[rule]:
            if len(picks) >= k or n <= 0:
                return
            if candidate.solution_id in chosen:
                continue
            if per_problem_cap is not None and per_problem[candidate.problem_id] >= per_problem_cap:
                continue
            per_problem[candidate.problem_id] += 1
            chosen.add(candidate.solution_id)
            picks.append((candidate, label))
            n -= 1

    for rule, share in shares.items():
        take(rule, _half_up(k * share))
    for rule in shares:
        take(rule, k - len(picks))
    return _ranked(picks)


def select_by_rule(
    rule: str,
    candidates: Iterable[Candidate],
    *,
    k: int,
    exclude_ids: Collection[int] = frozenset(),
    per_problem_cap: int | None = None,
    seed: int = 0,
    **rule_options: Any,
) -> list[Selection]:
    """Run the rule a lab chose (one of RULES). rule_options go to that rule: "mix" needs
    shares=...; "convincing_wrong" takes select_generation's convincing_wrong_fraction, scope
    and per_problem_k; "uncertainty", "disagreement" and "uniform" take none."""
    common: dict[str, Any] = {
        "k": k,
        "exclude_ids": exclude_ids,
        "per_problem_cap": per_problem_cap,
        "seed": seed,
    }
    if rule == "convincing_wrong":
        unknown = set(rule_options) - {"convincing_wrong_fraction", "scope", "per_problem_k"}
        _check_no_options(rule, unknown)
        return select_generation(candidates, **common, **rule_options)
    if rule == "mix":
        _check_no_options(rule, set(rule_options) - {"shares"})
        if "shares" not in rule_options:
            raise ValueError(
                "rule 'mix' needs shares, e.g. {'convincing_wrong': 0.5, 'uncertainty': 0.5}"
            )
        return select_mix(candidates, shares=rule_options["shares"], **common)
    if rule == "uncertainty":
        _check_no_options(rule, set(rule_options))
        return select_uncertain(candidates, **common)
    if rule == "disagreement":
        _check_no_options(rule, set(rule_options))
        return select_disagreement(candidates, **common)
    if rule == "uniform":
        _check_no_options(rule, set(rule_options))
        return select_uniform(candidates, **common)
    raise ValueError(f"unknown selection rule {rule!r}; choose one of {', '.join(RULES)}")


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


def _check_no_options(rule: str, unknown: set[str]) -> None:
    if unknown:
        raise ValueError(f"rule {rule!r} takes no option(s) {', '.join(sorted(unknown))}")


def check_shares(shares: Mapping[str, float]) -> None:
    """A ValueError saying what is wrong with a mix's shares (unknown rule, a share outside
    [0, 1], a sum other than 1); forms and the API call it too."""
    if not shares:
        raise ValueError(f"a mix needs shares for at least one of {', '.join(MIX_RULES)}")
    unknown = [rule for rule in shares if rule not in MIX_RULES]
    if unknown:
        raise ValueError(
            f"a mix cannot hold {', '.join(map(repr, unknown))}; choose among {', '.join(MIX_RULES)}"
        )
    for rule, share in shares.items():
        if not (isinstance(share, int | float) and math.isfinite(share) and 0.0 <= share <= 1.0):
            raise ValueError(f"the share of {rule!r} must be a number in [0, 1], got {share!r}")
    total = math.fsum(shares.values())
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"mix shares must sum to 1, got {total:g}")


def _by_uncertainty(pool: Iterable[Candidate]) -> list[Candidate]:
    measured = [c for c in pool if c.uncertainty is not None]
    if any(math.isnan(c.uncertainty) for c in measured):  # type: ignore[arg-type]
        raise ValueError("candidate uncertainties must not be NaN (they cannot be ranked)")
    return sorted(measured, key=lambda c: (-c.uncertainty, c.solution_id))  # type: ignore[operator]


def _by_disagreement(pool: Iterable[Candidate]) -> list[Candidate]:
    measured = [c for c in pool if c.disagreement is not None]
    if any(math.isnan(c.disagreement) for c in measured):  # type: ignore[arg-type]
        raise ValueError("candidate disagreements must not be NaN (they cannot be ranked)")
    return sorted(measured, key=lambda c: (-c.disagreement, c.solution_id))  # type: ignore[operator]


def _mix_order(rule: str, pool: Sequence[Candidate], seed: int) -> list[_Pick]:
    """The order in which one rule of a mix would take candidates, each with its label."""
    if rule == "convincing_wrong":
        wrong = _by_score(c for c in pool if c.correct is False)
        rest = _by_score(c for c in pool if c.correct is not False)
        return [(c, "convincing_wrong") for c in wrong] + [(c, "convincing") for c in rest]
    if rule == "uncertainty":
        return [(c, "uncertainty") for c in _by_uncertainty(pool)]
    shuffled = sorted(pool, key=lambda c: c.solution_id)
    random.Random(seed).shuffle(shuffled)
    return [(c, "uniform") for c in shuffled]


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
        Selection(c.solution_id, c.problem_id, _score_for(c, rule), rank=i, rule=rule)
        for i, (c, rule) in enumerate(picks, start=1)
    ]


def _score_for(candidate: Candidate, rule: Rule) -> float:
    # An uncertainty or disagreement pick was chosen for that measure, so it reports it.
    if rule == "uncertainty" and candidate.uncertainty is not None:
        return candidate.uncertainty
    if rule == "disagreement" and candidate.disagreement is not None:
        return candidate.disagreement
    return candidate.score
