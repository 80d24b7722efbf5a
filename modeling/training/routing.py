"""Judges in the simulation (issue 47): simulated judges with a set agreement with the oracle,
their verdicts on the oracle's candidates, and which candidates they agree on (machine labels).

A simulated judge labels every oracle-rated step: with probability rho the oracle's own rating,
else a rating drawn from the oracle's marginal distribution of ratings (independently per step).
Under that model Cohen's kappa against the oracle is rho in expectation; `simulated_judge`
calibrates rho by bisection on the run's own random draws so that the realised kappa (scikit-learn's
`cohen_kappa_score` over every rated step) matches the target, and reports the realised one.
Steps the oracle did not rate (human-written) get no label. Each judge's verdict on a candidate
follows PRM800K's stop rule: its labels up to and including its first -1.

No Django, no torch: plain numpy and scikit-learn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .oracle import OracleCandidate

StepKey = tuple[int, int]  # (example index, slot), as the feature cache's keys
LABELS = (-1, 0, 1)


@dataclass
class SimulatedJudge:
    """One judge's label for every oracle-rated step, and its agreement with the oracle."""

    labels: dict[StepKey, int]
    target_kappa: float
    kappa: float  # realised, over every rated step
    rho: float  # the share of steps answered with the oracle's own rating before replacement


def oracle_steps(candidates: Sequence[OracleCandidate]) -> dict[StepKey, int]:
    """Every rated step of the candidates, once, with the oracle's rating."""
    steps: dict[StepKey, int] = {}
    for cand in candidates:
        for slot, rating in zip(cand.slots, cand.ratings, strict=True):
            if rating is not None:
                steps[(cand.example, slot)] = rating
    return steps


def cohen_kappa(truth: Sequence[int] | np.ndarray, labels: Sequence[int] | np.ndarray) -> float:
    from sklearn.metrics import cohen_kappa_score

    return float(cohen_kappa_score(truth, labels, labels=list(LABELS)))


def simulated_judge(
    steps: Mapping[StepKey, int], kappa: float, *, seed: int, tolerance: float = 0.005
) -> SimulatedJudge:
    """A judge whose Cohen's kappa against the oracle's `steps` is `kappa` (within tolerance
    where the steps allow; the realised value is what it reports)."""
    if not 0.0 <= kappa <= 1.0:
        raise ValueError(f"a judge's kappa must be in [0, 1], got {kappa}")
    keys = sorted(steps)
    truth = np.array([steps[key] for key in keys])
    if truth.size == 0:
        raise ValueError("the oracle has no rated step to judge")
    rng = np.random.default_rng(seed)
    keep_draw = rng.random(truth.size)
    values, counts = np.unique(truth, return_counts=True)
    replacement = rng.choice(values, size=truth.size, p=counts / counts.sum())

    def labels_at(rho: float) -> np.ndarray:
        return np.where(keep_draw < rho, truth, replacement)

    low, high = 0.0, 1.0
    rho = kappa
    realised = cohen_kappa(truth, labels_at(rho))
    for _ in range(40):  # realised kappa rises with rho: bisect until it is close enough
        if abs(realised - kappa) <= tolerance:
            break
        if realised < kappa:
            low = rho
        else:
            high = rho
        rho = (low + high) / 2
        realised = cohen_kappa(truth, labels_at(rho))
    labels = labels_at(rho)
    return SimulatedJudge(
        {key: int(label) for key, label in zip(keys, labels, strict=True)}, kappa, realised, rho
    )


def verdict(judge: SimulatedJudge, cand: OracleCandidate) -> list[int | None]:
    """The judge's labels on the candidate's steps, stopped after its first -1 (None there and
    on steps the oracle did not rate)."""
    out: list[int | None] = []
    stopped = False
    for slot in cand.slots:
        label = None if stopped else judge.labels.get((cand.example, slot))
        out.append(label)
        stopped = stopped or label == -1
    return out


def first_error(labels: Sequence[int | None]) -> int | None:
    return next((i for i, label in enumerate(labels) if label == -1), None)


def agreed_labels(verdicts: Sequence[Sequence[int | None]]) -> list[int | None] | None:
    """The labels every judge gives alike (machine labels), or None when any two differ on a
    step or none labels anything."""
    if not verdicts:
        return None
    first = list(verdicts[0])
    if any(list(v) != first for v in verdicts[1:]) or all(label is None for label in first):
        return None
    return first


def machine_precision(machine: Sequence[int | None], oracle: Sequence[int | None]) -> bool:
    """Whether a machine labeling is right as a human would check it: the same label on every
    step the human rated up to and including their first -1 (where labeling stops)."""
    for label, truth in zip(machine, oracle, strict=True):
        if truth is None:
            continue
        if label != truth:
            return False
        if truth == -1:
            return True
    return True
