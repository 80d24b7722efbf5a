"""Inter-labeler agreement: Krippendorff's alpha from a coincidence matrix, raw pair agreement.

Pure functions, no Django. The coincidence matrix is additive over units, so batch and labeler
pair alphas are kept current by adding each solution's matrix to a stored one (labeling.services.adjudication)
instead of rescanning labels. Reference: K. Krippendorff, "Computing Krippendorff's
Alpha-Reliability" (2011).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

Coincidence = dict[str, float]  # "c,k" -> count; JSON friendly


def _key(c: float, k: float) -> str:
    return f"{c:g},{k:g}"


def coincidence(units: Iterable[Sequence[float | None]]) -> Coincidence:
    """o_ck = sum over units of (ordered c-k value pairs from different coders) / (m_u - 1)."""
    matrix: dict[str, float] = defaultdict(float)
    for unit in units:
        values = [v for v in unit if v is not None]
        m = len(values)
        if m < 2:
            continue  # a unit coded once has no pairable value
        for i, c in enumerate(values):
            for j, k in enumerate(values):
                if i != j:
                    matrix[_key(c, k)] += 1 / (m - 1)
    return dict(matrix)


def add_coincidence(
    total: Mapping[str, float], part: Mapping[str, float], sign: int = 1
) -> Coincidence:
    out = dict(total)
    for key, value in part.items():
        out[key] = out.get(key, 0.0) + sign * value
        if abs(out[key]) < 1e-9:
            del out[key]
    return out


def alpha_from_coincidence(matrix: Mapping[str, float], metric: str = "ordinal") -> float | None:
    """Krippendorff's alpha = 1 - D_o / D_e; None when no pairable values; 1.0 when all agree."""
    if not matrix:
        return None
    values = sorted({float(v) for key in matrix for v in key.split(",")})
    index = {v: i for i, v in enumerate(values)}
    o = np.zeros((len(values), len(values)))
    for key, count in matrix.items():
        c, k = (float(v) for v in key.split(","))
        o[index[c], index[k]] += count
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if n <= 1:
        return None
    delta2 = _distance(values, n_c, metric)
    observed = (o * delta2).sum()
    expected = (np.outer(n_c, n_c) * delta2).sum() / (n - 1)
    if observed == 0:
        return 1.0
    if expected == 0:
        return None
    return float(1 - observed / expected)


def _distance(values: list[float], n_c: np.ndarray, metric: str) -> np.ndarray:
    v = np.array(values)
    if metric == "nominal":
        return 1.0 - np.eye(len(values))
    if metric == "interval":
        return (v[:, None] - v[None, :]) ** 2
    if metric == "ordinal":
        # delta_ck = (sum of n_g for g from c to k) - (n_c + n_k) / 2, squared
        cumulative = np.concatenate([[0.0], np.cumsum(n_c)])
        size = len(values)
        d = np.zeros((size, size))
        for c in range(size):
            for k in range(size):
                lo, hi = min(c, k), max(c, k)
                d[c, k] = (cumulative[hi + 1] - cumulative[lo] - (n_c[c] + n_c[k]) / 2) ** 2
        return d
    raise ValueError(f"unknown metric {metric!r}")


def krippendorff_alpha(
    units: Iterable[Sequence[float | None]], metric: str = "ordinal"
) -> float | None:
    """Alpha for a units x coders table (None = not coded)."""
    return alpha_from_coincidence(coincidence(units), metric)


def first_error(ratings: Sequence[int]) -> int | None:
    return next((i for i, r in enumerate(ratings) if r == -1), None)


@dataclass
class PairResult:
    a: int
    b: int
    compared: int
    same: int
    first_error_same: bool | None
    coincidence: Coincidence


@dataclass
class SolutionResult:
    steps_compared: int
    alpha: float | None
    raw: float | None
    first_error_agree: bool
    coincidence: Coincidence
    pairs: list[PairResult] = field(default_factory=list)


def solution_agreement(
    ratings: Mapping[int, Sequence[int]], reached_verdict: Mapping[int, bool]
) -> SolutionResult:
    """Agreement among labelers of one solution.

    `ratings` maps a labeler id to their step ratings (stopping where they stopped);
    `reached_verdict` says whether that labeling ended at the end or at a -1 (a give-up has no
    first-error position to compare). A step is a unit where at least two labelers rated it.
    """
    ids = sorted(ratings)
    length = max((len(r) for r in ratings.values()), default=0)
    units = [[ratings[i][s] if s < len(ratings[i]) else None for i in ids] for s in range(length)]
    matrix = coincidence(units)
    pairs = []
    for a, b in combinations(ids, 2):
        shared = min(len(ratings[a]), len(ratings[b]))
        same = sum(1 for s in range(shared) if ratings[a][s] == ratings[b][s])
        fe_same = None
        if reached_verdict.get(a) and reached_verdict.get(b):
            fe_same = first_error(ratings[a]) == first_error(ratings[b])
        pair_units = [[ratings[a][s], ratings[b][s]] for s in range(shared)]
        pairs.append(PairResult(a, b, shared, same, fe_same, coincidence(pair_units)))
    compared = sum(p.compared for p in pairs)
    verdicts = {first_error(ratings[i]) for i in ids if reached_verdict.get(i)}
    return SolutionResult(
        steps_compared=sum(1 for u in units if sum(v is not None for v in u) >= 2),
        alpha=alpha_from_coincidence(matrix),
        raw=(sum(p.same for p in pairs) / compared) if compared else None,
        first_error_agree=len(verdicts) <= 1,
        coincidence=matrix,
        pairs=pairs,
    )


# --- machine labels (issue 47) -----------------------------------------------------------------


def audit_sample(solution_ids: Iterable[int], share: float, seed: int) -> set[int]:
    """The solutions whose machine labelings still go to humans: round(share x n) of them (halves
    up), drawn without replacement by a seeded generator from the ids in ascending order, so the
    draw depends only on the ids, the share and the seed."""
    import random

    if not (math.isfinite(share) and 0.0 <= share <= 1.0):
        raise ValueError(f"an audit share must be in [0, 1], got {share!r}")
    ordered = sorted(set(solution_ids))
    k = math.floor(share * len(ordered) + 0.5 + 1e-9)
    return set(random.Random(seed).sample(ordered, k))


def machine_label_correct(machine: Sequence[int | None], human: Sequence[int]) -> bool:
    """Whether a machine labeling is right as the human who audited it says: the same label on
    every step the human rated, up to and including the human's first -1 (where they stop)."""
    for index, rating in enumerate(human):
        label = machine[index] if index < len(machine) else None
        if label != rating:
            return False
        if rating == -1:
            return True
    return True


def wilson_interval(right: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (scipy's binomtest); (0, 1) with no trials."""
    if total == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # type: ignore[import-untyped]

    interval = binomtest(right, total).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)
