"""Evaluation: step-level metrics, ProcessBench first-error F1, best-of-N vs majority voting."""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from .data import LabeledSolution, Solution
from .model import ProcessRewardModel
from .score import predict_labelled, score_solutions

# ------------------------------------------------------------------ step level


def auroc(scores: ArrayLike, positive: ArrayLike) -> float:
    """Area under the ROC curve: the chance a random positive outscores a random
    negative, ties counting one half (Mann-Whitney U with average ranks). NaN when a
    class is missing."""
    score = np.asarray(scores, dtype=np.float64)
    is_pos = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(is_pos.sum()), int((~is_pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    sorted_scores = score[order]
    ranks = np.empty(len(score), dtype=np.float64)
    start = 0
    while start < len(score):  # average rank over each run of tied scores
        end = start
        while end + 1 < len(score) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    u = ranks[is_pos].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def reliability_bins(
    predicted: ArrayLike, outcome: ArrayLike, n_bins: int = 10
) -> list[dict[str, float]]:
    """Equal-width bins of a predicted probability with the observed frequency in each."""
    prob = np.asarray(predicted, dtype=np.float64)
    happened = np.asarray(outcome, dtype=bool)
    index = np.minimum((prob * n_bins).astype(int), n_bins - 1)
    bins = []
    for b in range(n_bins):
        inside = index == b
        count = int(inside.sum())
        bins.append(
            {
                "low": b / n_bins,
                "high": (b + 1) / n_bins,
                "count": count,
                "mean_predicted": float(prob[inside].mean()) if count else float("nan"),
                "observed": float(happened[inside].mean()) if count else float("nan"),
            }
        )
    return bins


def expected_calibration_error(bins: Sequence[Mapping[str, float]]) -> float:
    total = sum(b["count"] for b in bins)
    if not total:
        return float("nan")
    return float(
        sum(b["count"] * abs(b["mean_predicted"] - b["observed"]) for b in bins if b["count"])
        / total
    )


def step_metrics(probs: np.ndarray, ratings: np.ndarray, n_bins: int = 10) -> dict[str, Any]:
    """Metrics of (N, 3) probabilities against ratings in -1/0/+1.

    auroc_negative: P(-1) against "the human said -1"; accuracy: argmax class; the
    reliability bins and ECE are for P(-1) as a probability of a -1.
    """
    negative = ratings == -1
    bins = reliability_bins(probs[:, 0], negative, n_bins)
    return {
        "n": int(len(ratings)),
        "n_negative": int(negative.sum()),
        "auroc_negative": auroc(probs[:, 0], negative),
        "accuracy": float((probs.argmax(axis=1) - 1 == ratings).mean()) if len(ratings) else 0.0,
        "ece_negative": expected_calibration_error(bins),
        "reliability_negative": bins,
    }


def finite(value: Any) -> Any:
    """JSON (and PostgreSQL's jsonb) has no NaN: undefined metrics become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def report_json(report: Mapping[str, Any]) -> str:
    """A report as strict JSON text: an empty bin's or undefined metric's NaN is null."""
    return json.dumps(finite(report), indent=2, allow_nan=False)


def evaluate_steps(
    model: ProcessRewardModel,
    examples: Sequence[LabeledSolution],
    *,
    max_length: int | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Step metrics of every label the packed rows carry at `max_length` tokens (default the
    model's); `n_dropped` of the examples' `n_labels` lie past it and are not measured."""
    max_length = max_length or model.config.max_length
    probs, ratings = predict_labelled(model, examples, max_length=max_length, **kwargs)
    labels = sum(e.n_labels() for e in examples)
    dropped = {"max_length": max_length, "n_labels": labels, "n_dropped": labels - len(ratings)}
    return {**step_metrics(probs, ratings), **dropped}


def dropped_labels_note(steps: Mapping[str, Any]) -> str:
    """One line on the labels an evaluation could not read (past max_length)."""
    dropped, labels = steps["n_dropped"], steps["n_labels"]
    share = f" ({dropped / labels:.1%})" if labels else ""
    return (
        f"{dropped:,} of {labels:,} step labels{share} dropped: past max_length "
        f"{steps['max_length']:,} tokens (--max-length to change it)"
    )


# ---------------------------------------------------------------- ProcessBench


def read_processbench(path: str | Path) -> list[dict[str, Any]]:
    return json.loads(Path(path).read_text())


def first_error(step_probs: np.ndarray, threshold: float) -> int:
    """Index of the first step whose P(+1) + P(0) is under threshold, -1 if none."""
    ok = step_probs[:, 1] + step_probs[:, 2]
    below = np.flatnonzero(ok < threshold)
    return int(below[0]) if below.size else -1


def processbench_metrics(predicted: ArrayLike, labels: ArrayLike) -> dict[str, float]:
    """Accuracy on erroneous cases (exact first-error step), on correct cases (predicted
    -1), and F1 = their harmonic mean, as ProcessBench reports."""
    first = np.asarray(predicted)
    truth = np.asarray(labels)
    erroneous = truth != -1
    error_acc = float((first[erroneous] == truth[erroneous]).mean()) if erroneous.any() else 0.0
    correct_acc = float((first[~erroneous] == -1).mean()) if (~erroneous).any() else 0.0
    f1 = 0.0
    if error_acc + correct_acc > 0:
        f1 = 2 * error_acc * correct_acc / (error_acc + correct_acc)
    return {
        "n_error": int(erroneous.sum()),
        "n_correct": int((~erroneous).sum()),
        "error_accuracy": error_acc,
        "correct_accuracy": correct_acc,
        "f1": f1,
    }


def evaluate_processbench(
    model: ProcessRewardModel,
    path: str | Path,
    threshold: float = 0.5,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, float | str]:
    items = read_processbench(path)
    solutions = [Solution(item["problem"], list(item["steps"])) for item in items]
    step_probs = score_solutions(model, solutions, progress=progress)
    predicted = [first_error(p, threshold) for p in step_probs]
    return {
        "subset": Path(path).stem,
        "threshold": threshold,
        **processbench_metrics(predicted, [item["label"] for item in items]),
    }


# ---------------------------------------------------------------- best of N


class Sample(NamedTuple):
    answer: str
    score: float
    correct: bool


def normalize_answer(answer: str) -> str:
    """A light normalisation: no \\boxed{}, $, spaces, \\left/\\right, trailing period;
    dfrac/tfrac -> frac; thousands commas dropped."""
    text = str(answer).strip()
    boxed = re.fullmatch(r"\\boxed\{(.*)\}", text)
    if boxed:
        text = boxed.group(1)
    text = text.replace("$", "").replace("\\left", "").replace("\\right", "").replace("\\!", "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = re.sub(r"\s+", "", text).rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    return text


def answers_match(a: str, b: str) -> bool:
    """Whether two final answers are the same. The single place answer checking lives."""
    x, y = normalize_answer(a), normalize_answer(b)
    if x == y:
        return True
    try:
        return abs(float(x) - float(y)) <= 1e-9 * max(1.0, abs(float(x)))
    except ValueError:
        return False


def majority_pick(samples: Sequence[Sample]) -> Sample:
    """A member of the largest group of matching answers (the earliest group on ties)."""
    groups: list[list[Sample]] = []
    for sample in samples:
        for group in groups:
            if answers_match(group[0].answer, sample.answer):
                group.append(sample)
                break
        else:
            groups.append([sample])
    return max(groups, key=len)[0]


def prm_pick(samples: Sequence[Sample]) -> Sample:
    return max(samples, key=lambda s: s.score)


def best_of_n(
    samples_by_problem: Mapping[str, Sequence[Sample]],
    ns: Sequence[int],
    repeats: int = 100,
    seed: int = 0,
) -> dict[int, dict[str, float]]:
    """Accuracy of the PRM's pick and of majority voting among N samples per problem,
    averaged over `repeats` random subsets of each problem's samples (the paper's
    Figure 3). Problems with fewer than N samples are left out at that N."""
    rng = random.Random(seed)
    curve = {}
    for n in ns:
        prm_hits = vote_hits = trials = 0
        for samples in samples_by_problem.values():
            if len(samples) < n:
                continue
            for _ in range(repeats):
                subset = rng.sample(list(samples), n)
                prm_hits += prm_pick(subset).correct
                vote_hits += majority_pick(subset).correct
                trials += 1
        if trials:
            curve[n] = {
                "prm": prm_hits / trials,
                "majority": vote_hits / trials,
                "problems": trials // repeats,
            }
    return curve
