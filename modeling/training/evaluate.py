"""Evaluation: step-level metrics, ProcessBench first-error F1, best-of-N vs majority voting."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from sklearn.calibration import calibration_curve
from sklearn.metrics import roc_auc_score

from .data import GradedSolution, LabeledSolution, Solution
from .score import Scorer, predict_labelled, score_solutions, solution_score

# ------------------------------------------------------------------ step level


def auroc(scores: ArrayLike, positive: ArrayLike) -> float:
    """Area under the ROC curve (scikit-learn's): the chance a random positive outscores a
    random negative, ties counting one half. NaN when a class is missing (undefined, where
    scikit-learn raises)."""
    is_pos = np.asarray(positive, dtype=bool)
    if is_pos.all() or not is_pos.any():
        return float("nan")
    return float(roc_auc_score(is_pos, np.asarray(scores, dtype=np.float64)))


def reliability_bins(
    predicted: ArrayLike, outcome: ArrayLike, n_bins: int = 10
) -> list[dict[str, float]]:
    """Equal-width bins of a predicted probability with the observed frequency in each
    (scikit-learn's calibration curve, which leaves empty bins out: here they stay, NaN)."""
    prob = np.asarray(predicted, dtype=np.float64)
    happened = np.asarray(outcome, dtype=bool)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # The bin assignment calibration_curve uses, for the counts it does not return.
    counts = np.bincount(np.searchsorted(edges[1:-1], prob), minlength=n_bins)
    observed = np.full(n_bins, np.nan)
    mean_predicted = np.full(n_bins, np.nan)
    if prob.size:
        filled = counts > 0
        observed[filled], mean_predicted[filled] = calibration_curve(
            happened, prob, n_bins=n_bins, strategy="uniform"
        )
    return [
        {
            "low": b / n_bins,
            "high": (b + 1) / n_bins,
            "count": int(counts[b]),
            "mean_predicted": float(mean_predicted[b]),
            "observed": float(observed[b]),
        }
        for b in range(n_bins)
    ]


def expected_calibration_error(bins: Sequence[Mapping[str, float]]) -> float:
    """ECE: the count-weighted mean gap between predicted and observed over the bins."""
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
    reliability bins and ECE are for P(-1) as a probability of a -1. A 2-class model's rows are
    [1 - P(good), 0, P(good)] (score.py): P(-1) is its P(bad), and its accuracy never counts a
    neutral rating right.
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
    model: Scorer,
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


# ------------------------------------------------------------- solution level


def evaluate_outcome(
    model: Scorer,
    graded: Sequence[GradedSolution],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """An outcome model (ORM) against final-answer correctness: solution_auroc (its score,
    P(correct) at the last step: solution_score "last", against `correct`), accuracy at 0.5,
    and how many solutions (and correct ones) there were. A solution whose last step lies past
    the model's max_length has no score: counted in `unscored`, left out of both figures."""
    solutions = [Solution(g.problem, list(g.steps)) for g in graded]
    step_probs = score_solutions(model, solutions, progress=progress) if solutions else []
    # P(correct) where the label was trained: the last step's end (not an earlier step's when
    # the last lies past max_length, as solution_score's NaN skipping would give).
    scores = np.array(
        [solution_score(p[-1:], "last") if len(p) else np.nan for p in step_probs],
        dtype=np.float64,
    )
    correct = np.array([g.correct for g in graded], dtype=bool)
    scored = ~np.isnan(scores)
    return {
        "solution_auroc": auroc(scores[scored], correct[scored]),
        "accuracy": float(((scores[scored] >= 0.5) == correct[scored]).mean())
        if scored.any()
        else float("nan"),
        "solutions": len(graded),
        "correct": int(correct.sum()),
        "unscored": int((~scored).sum()),
    }


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


def processbench_sweep(
    step_probs: Sequence[np.ndarray], labels: ArrayLike, thresholds: Sequence[float]
) -> dict[float, dict[str, float]]:
    """ProcessBench metrics at each threshold on P(correct) = P(0) + P(+1) (`first_error`):
    ProcessBench picks a PRM's threshold on its GSM8K subset, this gives the curve to pick on."""
    return {
        t: processbench_metrics([first_error(p, t) for p in step_probs], labels) for t in thresholds
    }


def evaluate_processbench(
    model: Scorer,
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
    """One sampled solution of a problem, already judged: `group` is its answer's group
    among the problem's samples (equal answers share one, see `group_answers`), `correct`
    whether that answer is right, `product` and `last` its PRM scores (score.solution_score's
    rules; NaN, an unscored solution, is never picked over a scored one)."""

    group: int
    correct: bool
    product: float
    last: float


def group_answers(
    answers: Sequence[str | None],
    equivalent: Callable[[str, str], bool],
    key: Callable[[str], str] = str,
) -> list[int]:
    """A group number per answer, equal answers sharing one; None (no answer) is alone.

    Answers with the same `key` (a cheap normal form) are grouped without a comparison;
    only each key's first answer is compared, with `equivalent`, to earlier groups' first
    answers, so the costly checker runs once per pair of distinct forms, not of samples.
    """
    group_of_key: dict[str, int] = {}
    representatives: list[str] = []
    groups: list[int] = []
    for answer in answers:
        if answer is None:
            groups.append(-1 - len(groups))  # a group of its own
            continue
        form = key(answer)
        if form not in group_of_key:
            same = (g for g, rep in enumerate(representatives) if equivalent(answer, rep))
            group = next(same, None)
            if group is None:  # a new answer
                group = len(representatives)
                representatives.append(answer)
            group_of_key[form] = group
        groups.append(group_of_key[form])
    return groups


def _pick_by_score(samples: Sequence[Sample], field: str) -> float:
    """Share of the top-scoring samples that are correct: ties split the credit, so a PRM
    that cannot tell samples apart scores like a random pick, not like the first sample."""
    scores = np.array([getattr(s, field) for s in samples], dtype=np.float64)
    scores = np.where(np.isnan(scores), -np.inf, scores)
    top = scores == scores.max()
    return float(np.mean([s.correct for s, t in zip(samples, top, strict=True) if t]))


def _majority_vote(samples: Sequence[Sample]) -> float:
    """Share of the largest answer groups that are correct (ties split the credit)."""
    sizes: dict[int, int] = {}
    correct: dict[int, bool] = {}
    for sample in samples:
        sizes[sample.group] = sizes.get(sample.group, 0) + 1
        correct[sample.group] = sample.correct
    largest = max(sizes.values())
    return float(np.mean([correct[g] for g, size in sizes.items() if size == largest]))


BEST_OF_N_METHODS: dict[str, Callable[[Sequence[Sample]], float]] = {
    "prm": lambda samples: _pick_by_score(samples, "product"),
    "last": lambda samples: _pick_by_score(samples, "last"),
    "majority": _majority_vote,
}


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, ... up to limit."""
    return [2**k for k in range(max(limit, 1).bit_length())]


def best_of_n(
    samples_by_problem: Mapping[str, Sequence[Sample]],
    ns: Sequence[int] | None = None,
    repeats: int = 100,
    seed: int = 0,
) -> dict[int, dict[str, float]]:
    """Accuracy at each N (default 1, 2, 4, ... up to the most samples a problem has) of the
    PRM's pick (product rule, neutral steps counted positive), the last step's pick
    ("ORM-like") and majority voting among N samples of a problem (the paper's Figure 3).

    A problem's accuracy is its mean over every N-subset of its samples when there are at
    most `repeats` of them, else over `repeats` random subsets (seeded); the figure at N is
    the mean over problems with at least N samples (`problems` says how many).
    """
    rng = random.Random(seed)
    if ns is None:
        ns = powers_of_two(max((len(s) for s in samples_by_problem.values()), default=1))
    curve = {}
    for n in ns:
        per_problem = []
        for samples in samples_by_problem.values():
            if len(samples) < n:
                continue
            subsets: list[Sequence[Sample]]
            if math.comb(len(samples), n) <= repeats:
                subsets = list(itertools.combinations(samples, n))
            else:
                subsets = [rng.sample(list(samples), n) for _ in range(repeats)]
            per_problem.append(
                {
                    name: np.mean([pick(s) for s in subsets])
                    for name, pick in BEST_OF_N_METHODS.items()
                }
            )
        if per_problem:
            curve[n] = {
                **{
                    name: float(np.mean([p[name] for p in per_problem]))
                    for name in BEST_OF_N_METHODS
                },
                "problems": len(per_problem),
            }
    return curve


def best_of_n_table(curve: Sequence[Mapping[str, float]]) -> str:
    """A best-of-N report's curve as a plain-text table, one row per N."""
    lines = [f"{'N':>5}  {'PRM (product)':>13}  {'last step':>9}  {'majority':>8}  problems"]
    for row in curve:
        lines.append(
            f"{row['n']:>5}  {row['prm']:>13.3f}  {row['last']:>9.3f}  "
            f"{row['majority']:>8.3f}  {row['problems']:>8}"
        )
    return "\n".join(lines)


class SampledProblem(NamedTuple):
    """A problem of a best-of-N file: its text, ground truth, and sampled solutions as
    (steps, final answer); the answer is None where the file gives none."""

    key: str
    problem: str
    ground_truth: str
    samples: list[tuple[list[str], str | None]]


def read_best_of_n(path: str | Path) -> list[SampledProblem]:
    """Read a best-of-N samples file: JSON Lines, one problem a line,

        {"id": "p1", "problem": "What is 1/2 + 0?", "answer": "\\frac{1}{2}",
         "samples": [{"steps": ["1/2 + 0 = 0.5.", "# Answer\\n\\n0.5"], "answer": "0.5"}, ...]}

    `id` is optional (the line number otherwise), `answer` the ground truth; a sample's
    `answer` is optional (the caller extracts it from the steps)."""
    problems = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            samples = [(list(s["steps"]), s.get("answer")) for s in item["samples"]]
            problems.append(
                SampledProblem(
                    str(item.get("id", number)), item["problem"], item["answer"], samples
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}, line {number}: {exc.__class__.__name__}: {exc}") from None
    return problems


def evaluate_best_of_n(
    model: Scorer,
    problems: Sequence[SampledProblem],
    *,
    equivalent: Callable[[str, str], bool],
    key: Callable[[str], str] = str,
    ns: Sequence[int] | None = None,
    repeats: int = 100,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Score every sample with the PRM and report best_of_n's curve. Answers are judged by
    the caller's checker: `equivalent(answer, ground_truth)`, and `key` a cheap normal form
    (see group_answers); a sample without an answer is wrong."""
    solutions = [Solution(p.problem, steps) for p in problems for steps, _ in p.samples]
    step_probs = iter(score_solutions(model, solutions, progress=progress))
    by_problem: dict[str, list[Sample]] = {}
    for problem in problems:
        answers = [answer for _, answer in problem.samples]
        groups = group_answers(answers, equivalent, key)
        right = {}  # one check per answer group
        for answer, group in zip(answers, groups, strict=True):
            if group not in right:
                right[group] = answer is not None and equivalent(answer, problem.ground_truth)
        by_problem[problem.key] = [
            Sample(group, right[group], solution_score(p, "product"), solution_score(p, "last"))
            for group, p in zip(groups, (next(step_probs) for _ in answers), strict=True)
        ]
    curve = best_of_n(by_problem, ns, repeats=repeats, seed=seed)
    return {
        "problems": len(problems),
        "samples": len(solutions),
        "repeats": repeats,
        "curve": [{"n": n, **row} for n, row in sorted(curve.items())],
    }
