"""How much labeling a selection rule saves: an arm's learning curve against uniform's.

Data-efficiency ratio: the solutions uniform needs to reach active's final AUROC (linear
interpolation between uniform's first two points that bracket it) divided by the solutions
active labeled; the same on step labels. When uniform never reaches it the ratio is a lower
bound (">"), when uniform's first point already does, an upper bound ("<="). Over the runs
(fold x seed): the mean and a percentile-bootstrap 95% interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

AXES = ("solutions", "labels")


@dataclass
class Point:
    arm: str
    fold: int
    seed: int
    generation: int
    solutions: int
    labels: int
    wrong_share: float  # share of this generation's picks the oracle calls wrong
    auroc: float
    accuracy: float
    n_eval: int
    best_of_n: float | None = None
    # Routing with machine labels (issue 47): solutions trained on the judges' labels (no human
    # cost), how many accepted ones humans audited, and the share of those the judges had right.
    machine_solutions: int = 0
    machine_audited: int = 0
    machine_precision: float | None = None


@dataclass
class Ratio:
    """An arm's data-efficiency ratio over the runs (fold x seed): mean, 95% interval."""

    arm: str
    axis: str
    values: list[float]
    bounds: list[str]  # per run: "=", ">" (uniform never got there), "<=" (its first point did)
    mean: float
    low: float
    high: float

    def text(self) -> str:
        return f"{self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"


def efficiency_ratio(
    active: Sequence[Point], uniform: Sequence[Point], axis: str = "solutions"
) -> tuple[float | None, str, float | None]:
    """(uniform's `axis` needed for active's final AUROC / active's, bound, uniform's amount).

    axis "solutions" (labeled solutions, the paper's unit) or "labels" (step labels)."""
    if not active or not uniform or math.isnan(active[-1].auroc):
        return None, "n/a", None
    target, used = active[-1].auroc, getattr(active[-1], axis)
    curve = sorted((getattr(p, axis), p.auroc) for p in uniform if not math.isnan(p.auroc))
    if not curve:
        return None, "n/a", None
    if curve[0][1] >= target:
        return curve[0][0] / used, "<=", float(curve[0][0])
    for (l0, a0), (l1, a1) in zip(curve, curve[1:], strict=False):
        if a0 < target <= a1:
            labels = l0 + (target - a0) / (a1 - a0) * (l1 - l0)
            return labels / used, "=", labels
    return curve[-1][0] / used, ">", None


def summarize_ratios(points: Sequence[Point], arm: str, axis: str) -> Ratio:
    """The ratio of every run (fold, seed) against uniform in the same run, their mean and a
    95% percentile-bootstrap interval of the mean. A bounded run counts at its bound."""
    values, bounds = [], []
    runs = sorted({(p.fold, p.seed) for p in points if p.arm == arm})
    for run in runs:
        mine = [p for p in points if p.arm == arm and (p.fold, p.seed) == run]
        uniform = [p for p in points if p.arm == "uniform" and (p.fold, p.seed) == run]
        ratio, bound, _ = efficiency_ratio(mine, uniform, axis)
        if ratio is not None:
            values.append(ratio)
            bounds.append(bound)
    if not values:
        return Ratio(arm, axis, [], [], math.nan, math.nan, math.nan)
    means = np.random.default_rng(0).choice(values, (10_000, len(values))).mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Ratio(arm, axis, values, bounds, float(np.mean(values)), float(low), float(high))
