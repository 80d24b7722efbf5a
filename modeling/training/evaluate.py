"""Evaluation: step-level metrics, ProcessBench first-error F1, best-of-N vs majority voting."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
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


def judge_answers(
    answers: Sequence[str | None],
    ground_truth: str,
    equivalent: Callable[[str, str], bool],
    key: Callable[[str], str] = str,
) -> tuple[list[int], list[bool]]:
    """(each answer's group, whether it is right): the checker compares one answer of each
    group with the ground truth; a sample without an answer is wrong."""
    groups = group_answers(answers, equivalent, key)
    right: dict[int, bool] = {}
    for answer, group in zip(answers, groups, strict=True):
        if group not in right:
            right[group] = answer is not None and equivalent(answer, ground_truth)
    return groups, [right[group] for group in groups]


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, ... up to limit."""
    return [2**k for k in range(max(limit, 1).bit_length())]


class _Judged(NamedTuple):
    """A problem's samples as arrays: answer groups numbered 0..G-1, each sample's and each
    group's correctness, and named per-sample scores (NaN: unscored)."""

    groups: np.ndarray
    correct: np.ndarray
    group_correct: np.ndarray
    scores: dict[str, np.ndarray]

    @classmethod
    def of(
        cls, groups: Sequence[int], correct: Sequence[bool], scores: Mapping[str, Sequence[float]]
    ) -> _Judged:
        numbers, dense = np.unique(np.asarray(groups, dtype=np.int64), return_inverse=True)
        right = np.asarray(correct, dtype=bool)
        group_correct = np.zeros(len(numbers), dtype=bool)
        group_correct[dense] = right
        return cls(
            dense.reshape(-1),
            right,
            group_correct,
            {name: np.asarray(s, dtype=np.float64) for name, s in scores.items()},
        )


# A way to pick one answer from each of S subsets of a problem's samples ((S, N) indexes):
# the credit of each pick, in [0, 1]; tied picks share it (two tied, one right: 1/2), so a
# scorer that cannot tell samples apart does as well as a random pick, not as the first.
Credit = Callable[[_Judged, np.ndarray], np.ndarray]


def _top_share(values: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Per row, the share of the row's highest values whose `right` is true."""
    top = values == values.max(axis=1, keepdims=True)
    return (top & right).sum(axis=1) / top.sum(axis=1)


def _group_sums(
    problem: _Judged, subsets: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """(S, G): per subset, each answer group's sample count (or sum of `weights`)."""
    n_groups = len(problem.group_correct)
    cells = np.arange(len(subsets))[:, None] * n_groups + problem.groups[subsets]
    sums = np.bincount(
        cells.ravel(),
        weights=None if weights is None else weights[subsets].ravel(),
        minlength=len(subsets) * n_groups,
    )
    return sums.reshape(len(subsets), n_groups)


def pick_highest(score: str) -> Credit:
    """The sample with the highest `score` (an unscored one never beats a scored one)."""

    def credit(problem: _Judged, subsets: np.ndarray) -> np.ndarray:
        values = problem.scores[score][subsets]
        return _top_share(np.where(np.isnan(values), -np.inf, values), problem.correct[subsets])

    return credit


def weighted_majority(score: str) -> Credit:
    """The answer group whose samples' `score`s sum highest (an unscored sample adds 0)."""

    def credit(problem: _Judged, subsets: np.ndarray) -> np.ndarray:
        weight = _group_sums(problem, subsets, np.nan_to_num(problem.scores[score], nan=0.0))
        present = _group_sums(problem, subsets) > 0
        weight = np.where(present, weight, -np.inf)
        return _top_share(weight, np.broadcast_to(problem.group_correct, weight.shape))

    return credit


def majority_vote(problem: _Judged, subsets: np.ndarray) -> np.ndarray:
    """The largest answer group (no answer: a group of one)."""
    sizes = _group_sums(problem, subsets)
    return _top_share(sizes, np.broadcast_to(problem.group_correct, sizes.shape))


def pass_at_n(problem: _Judged, n: int) -> float:
    """The share of the problem's N-subsets holding a right answer, exactly:
    1 - C(wrong, N) / C(samples, N)."""
    wrong = len(problem.correct) - int(problem.correct.sum())
    return 1.0 - math.comb(wrong, n) / math.comb(len(problem.correct), n)


def _subsets(size: int, n: int, repeats: int, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """(N-subsets of `size` samples as rows of indexes, whether they were drawn at random):
    every one when there are at most `repeats`, else `repeats` random ones."""
    if math.comb(size, n) <= repeats:
        every = itertools.combinations(range(size), n)
        return np.array(list(every), dtype=np.intp).reshape(-1, n), False
    return np.argsort(rng.random((repeats, size)), axis=1)[:, :n], True


def _percentile_interval(
    accuracy: np.ndarray,
    pools: Mapping[int, np.ndarray],
    intervals: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile bootstrap of the mean over problems of `accuracy` (P, M): each replicate
    draws P problems with replacement and, for a problem whose figure is a mean over random
    N-subsets (`pools[p]`, (R, M') credits of its first M' methods), redraws those R subsets
    with replacement. A problem whose N-subsets are all enumerated has an exact figure."""
    problems, methods = accuracy.shape
    if intervals <= 0:
        return np.full(methods, np.nan), np.full(methods, np.nan)
    position = np.full(problems, -1)
    position[list(pools)] = np.arange(len(pools))
    stacked = np.stack(list(pools.values())) if pools else np.zeros((0, 1, 0))
    repeats, redrawn = stacked.shape[1], stacked.shape[2]
    means = np.empty((intervals, methods))
    for b in range(intervals):
        drawn = rng.integers(0, problems, problems)
        values = accuracy[drawn]
        pooled = position[drawn]
        again = pooled >= 0
        if again.any():
            k = int(again.sum())
            # How often each of a problem's R subsets is drawn in R draws with replacement
            # (a multinomial; bincount is many times faster than Generator.multinomial).
            draws = np.arange(k)[:, None] * repeats + rng.integers(0, repeats, (k, repeats))
            counts = np.bincount(draws.ravel(), minlength=k * repeats).reshape(k, 1, repeats)
            redrawn_means = np.matmul(counts.astype(np.float64), stacked[pooled[again]])
            values[again, :redrawn] = redrawn_means[:, 0, :] / repeats
        means[b] = values.mean(axis=0)
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return low, high


def _curves(
    problems: Sequence[_Judged],
    credits: Mapping[str, Credit],
    exact: Mapping[str, Callable[[_Judged, int], float]],
    ns: Sequence[int],
    *,
    repeats: int,
    intervals: int,
    seed: int,
) -> tuple[list[int], dict[str, list[dict[str, Any]]]]:
    """(the Ns some problem has samples for, each method's rows {n, accuracy, low, high,
    problems}). A problem's accuracy at N is its mean credit over every N-subset of its
    samples when there are at most `repeats`, else over `repeats` random ones (seeded); a
    method's accuracy is the mean over problems with at least N samples; `exact` methods give
    a problem's figure at N directly. low/high: _percentile_interval (NaN when intervals=0)."""
    for n in ns:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"N must be a positive whole number, not {n!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    draw = np.random.default_rng([seed, 0])  # which subsets
    resample = np.random.default_rng([seed, 1])  # the intervals' replicates
    names = [*credits, *exact]
    table: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    used = []
    for n in sorted(set(ns)):
        rows: list[np.ndarray] = []
        pools: dict[int, np.ndarray] = {}
        for problem in problems:
            size = len(problem.correct)
            if size < n:
                continue
            subsets, drawn = _subsets(size, n, repeats, draw)
            pool = np.column_stack([credit(problem, subsets) for credit in credits.values()])
            if drawn:
                pools[len(rows)] = pool
            figures = [pool.mean(axis=0), [rule(problem, n) for rule in exact.values()]]
            rows.append(np.concatenate(figures))
        if not rows:
            continue
        accuracy = np.array(rows, dtype=np.float64)
        low, high = _percentile_interval(accuracy, pools, intervals, resample)
        used.append(n)
        for k, name in enumerate(names):
            table[name].append(
                {
                    "n": n,
                    "accuracy": float(accuracy[:, k].mean()),
                    "low": float(low[k]),
                    "high": float(high[k]),
                    "problems": len(rows),
                }
            )
    return used, table


def best_of_n(
    samples_by_problem: Mapping[str, Sequence[Sample]],
    ns: Sequence[int] | None = None,
    repeats: int = 100,
    seed: int = 0,
) -> dict[int, dict[str, float]]:
    """Accuracy at each N (default 1, 2, 4, ... up to the most samples a problem has) of the
    PRM's pick (product rule, neutral steps counted positive), the last step's pick
    ("ORM-like") and majority voting among N samples of a problem (the paper's Figure 3), as
    `compare_best_of_n` measures them (without intervals); `problems` counts the problems with
    at least N samples.
    """
    problems = [
        _Judged.of(
            [s.group for s in samples],
            [s.correct for s in samples],
            {"product": [s.product for s in samples], "last": [s.last for s in samples]},
        )
        for samples in samples_by_problem.values()
    ]
    if ns is None:
        ns = powers_of_two(max((len(s) for s in samples_by_problem.values()), default=1))
    methods = {"prm": pick_highest("product"), "last": pick_highest("last")}
    used, table = _curves(
        problems,
        {**methods, "majority": majority_vote},
        {},
        ns,
        repeats=repeats,
        intervals=0,
        seed=seed,
    )
    return {
        n: {
            **{name: rows[i]["accuracy"] for name, rows in table.items()},
            "problems": table["prm"][i]["problems"],
        }
        for i, n in enumerate(used)
    }


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


def fill_answers(
    problems: Sequence[SampledProblem], extract: Callable[[list[str]], str | None]
) -> list[SampledProblem]:
    """The problems with each sample's missing answer taken from its steps by `extract` (the
    answer checker's extraction: `# Answer`, `\\boxed{}`, ...)."""
    return [
        p._replace(samples=[(steps, answer or extract(steps)) for steps, answer in p.samples])
        for p in problems
    ]


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
        groups, right = judge_answers(answers, problem.ground_truth, equivalent, key)
        by_problem[problem.key] = [
            Sample(group, ok, solution_score(p, "product"), solution_score(p, "last"))
            for group, ok, p in zip(groups, right, (next(step_probs) for _ in answers), strict=True)
        ]
    curve = best_of_n(by_problem, ns, repeats=repeats, seed=seed)
    return {
        "problems": len(problems),
        "samples": len(solutions),
        "repeats": repeats,
        "curve": [{"n": n, **row} for n, row in sorted(curve.items())],
    }


# ------------------------------------------------- best of N, models side by side

PROCESS_RULES = ("product", "min")  # a process model's per-solution scores (score.RULES)


def compare_best_of_n(
    problems: Sequence[SampledProblem],
    scores: Mapping[str, list[list[np.ndarray]]],
    objectives: Mapping[str, str],
    *,
    equivalent: Callable[[str, str], bool],
    key: Callable[[str], str] = str,
    ns: Sequence[int] | None = None,
    repeats: int = 100,
    intervals: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Best-of-N accuracy at each N of every way to pick one of N sampled solutions, side by
    side (the paper's Figure 3), with 95% bootstrap intervals.

    `scores[model][i][j]` is the (n_steps, 3) step probabilities of problem i's sample j;
    `objectives[model]` is "process" or "outcome" (missing: "process", as prm.json reads).
    Methods: per process model M, "M:product" and "M:min" (the sample whose steps' product /
    weakest step of P(+1)+P(0) is highest) and "M:weighted" (the answer whose samples' product
    scores sum highest); per outcome model M, "M" (its P(correct) at the last step); then
    "majority" (the most frequent answer) and "pass@n" (a right answer among the N: the
    ceiling). Answers are judged as in evaluate_best_of_n: grouped once per distinct form
    (`key`), each group checked once against the ground truth with `equivalent`.

    Accuracy is best_of_n's (ties split the credit; all N-subsets when there are at most
    `repeats`, else `repeats` seeded random ones; mean over problems with at least N samples;
    pass@n exact). low/high: percentile interval of `intervals` replicates, each resampling
    the problems with replacement and, where a problem's subsets were drawn at random,
    redrawing its subsets (_percentile_interval).
    """
    credits: dict[str, Credit] = {}
    rules: dict[str, tuple[str, ...]] = {}
    for model, per_problem in scores.items():
        objective = objectives.get(model, "process")
        if objective == "process":
            rules[model] = PROCESS_RULES
            credits[f"{model}:product"] = pick_highest(f"{model}:product")
            credits[f"{model}:min"] = pick_highest(f"{model}:min")
            credits[f"{model}:weighted"] = weighted_majority(f"{model}:product")
        elif objective == "outcome":
            rules[model] = ("last",)
            credits[model] = pick_highest(f"{model}:last")
        else:
            raise ValueError(f"{model}'s objective is {objective!r}, not process or outcome")
        if len(per_problem) != len(problems):
            raise ValueError(
                f"{model} has scores for {len(per_problem)} of {len(problems)} problems"
            )
        for problem, probs in zip(problems, per_problem, strict=True):
            if len(probs) != len(problem.samples):
                raise ValueError(
                    f"{model} has scores for {len(probs)} of problem {problem.key}'s "
                    f"{len(problem.samples)} samples"
                )
    for method in ("majority", "pass@n"):
        if method in credits:
            raise ValueError(f"a model is named {method!r}, as a method is: rename its folder")
    credits["majority"] = majority_vote
    judged = []
    for i, problem in enumerate(problems):
        answers = [answer for _, answer in problem.samples]
        groups, right = judge_answers(answers, problem.ground_truth, equivalent, key)
        sample_scores = {
            f"{model}:{rule}": [solution_score(p, rule) for p in scores[model][i]]
            for model in scores
            for rule in rules[model]
        }
        judged.append(_Judged.of(groups, right, sample_scores))
    if ns is None:
        ns = powers_of_two(max((len(p.samples) for p in problems), default=1))
    used, table = _curves(
        judged,
        credits,
        {"pass@n": pass_at_n},
        ns,
        repeats=repeats,
        intervals=intervals,
        seed=seed,
    )
    return {
        "problems": len(problems),
        "samples": sum(len(p.samples) for p in problems),
        "ns": used,
        "methods": table,
    }


def _accuracy_cell(row: Mapping[str, Any] | None) -> str:
    if row is None or row["accuracy"] is None:
        return "n/a"
    low, high = row.get("low"), row.get("high")
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return f"{row['accuracy']:.3f}"
    return f"{row['accuracy']:.3f} [{low:.3f}, {high:.3f}]"


def _row_at(report: Mapping[str, Any], method: str | None, n: int) -> Mapping[str, Any] | None:
    rows = report["methods"].get(method, []) if method else []
    return next((row for row in rows if row["n"] == n), None)


def comparison_table(report: Mapping[str, Any]) -> str:
    """A compare_best_of_n report as plain text: one row per N, a column per method
    (accuracy [95% interval])."""
    methods = list(report["methods"])
    widths = [max(len(name), len("0.000 [0.000, 0.000]")) for name in methods]
    header = f"{'N':>5}  {'problems':>8}  " + "  ".join(
        f"{name:<{w}}" for name, w in zip(methods, widths, strict=True)
    )
    lines = [header.rstrip()]
    for n in report["ns"]:
        cells = [_row_at(report, name, n) for name in methods]
        problems = next((c["problems"] for c in cells if c is not None), 0)
        line = f"{n:>5}  {problems:>8}  " + "  ".join(
            f"{_accuracy_cell(c):<{w}}" for c, w in zip(cells, widths, strict=True)
        )
        lines.append(line.rstrip())
    return "\n".join(lines)


def comparison_summary(report: Mapping[str, Any], objectives: Mapping[str, str]) -> str:
    """`best-of-N at N=K: prm X, orm Y, majority Z, weighted W, pass@N P` at the largest N:
    the first process model's product pick and weighted vote, the first outcome model's pick;
    n/a where there is none."""
    process = next((m for m, o in objectives.items() if o == "process"), None)
    outcome = next((m for m, o in objectives.items() if o == "outcome"), None)
    n = max(report["ns"]) if report["ns"] else 0

    def value(method: str | None) -> str:
        row = _row_at(report, method, n)
        return "n/a" if row is None or row["accuracy"] is None else f"{row['accuracy']:.3f}"

    return (
        f"best-of-N at N={n}: prm {value(process and f'{process}:product')}, "
        f"orm {value(outcome)}, majority {value('majority')}, "
        f"weighted {value(process and f'{process}:weighted')}, pass@N {value('pass@n')}"
    )


def footing(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What keeps models (name -> prm.json) from a fair comparison, one line each: a model with
    no training record, different backbones, different training problems, different numbers
    of optimizer steps. Empty: equal footing."""
    mismatches = [
        f"{name} was trained before Stepwise recorded its problems (no training record)"
        for name, meta in models.items()
        if not isinstance(meta.get("training"), dict)
    ]
    mismatches += _differences("backbones", {n: m.get("backbone") for n, m in models.items()})
    trained = {n: m["training"] for n, m in models.items() if isinstance(m.get("training"), dict)}
    digests = {n: t.get("problems_digest") for n, t in trained.items()}
    mismatches += _differences("training problems", digests, shown=lambda d: f"digest {d:.12}")
    steps = {n: t.get("optimizer_steps") for n, t in trained.items()}
    mismatches += _differences("optimizer steps", steps)
    return mismatches


def _differences(
    what: str, values: Mapping[str, Any], shown: Callable[[Any], str] = str
) -> list[str]:
    """["different WHAT: value (models); value (models)"] when the models' values differ."""
    models_of: dict[str, list[str]] = {}
    for model, value in values.items():
        models_of.setdefault("unknown" if value is None else shown(value), []).append(model)
    if len(models_of) < 2:
        return []
    parts = [f"{value} ({', '.join(models)})" for value, models in models_of.items()]
    return [f"different {what}: {'; '.join(parts)}"]


def overlap(models: Mapping[str, Mapping[str, Any]], problem_keys: Iterable[str]) -> dict[str, int]:
    """How many of the evaluation problems (data.problem_key) each model trained on; a model
    with no training record is left out (footing names it)."""
    keys = set(problem_keys)
    return {
        name: len(keys.intersection(meta["training"].get("problems", [])))
        for name, meta in models.items()
        if isinstance(meta.get("training"), dict)
    }


def plot_best_of_n(
    report: Mapping[str, Any],
    path: str | Path,
    *,
    size: tuple[float, float] = (8.0, 5.0),
    dpi: int = 100,
) -> Path:
    """A compare_best_of_n report as a PNG of `size` inches at `dpi` (800 x 500 pixels by
    default): accuracy against N on a log2 axis, one line per method with its 95% band."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)  # no pyplot: no global state, safe in any thread
    axes = figure.add_subplot()
    for method, rows in report["methods"].items():
        ns = [row["n"] for row in rows]
        values = {
            field: np.array([np.nan if r[field] is None else r[field] for r in rows], dtype=float)
            for field in ("accuracy", "low", "high")
        }
        (line,) = axes.plot(ns, values["accuracy"], marker="o", label=method)
        axes.fill_between(
            ns, values["low"], values["high"], color=line.get_color(), alpha=0.15, linewidth=0
        )
    axes.set_xscale("log", base=2)
    if report["ns"]:
        axes.set_xticks(report["ns"], [str(n) for n in report["ns"]])
    axes.set_ylim(0.0, 1.0)
    axes.set_xlabel("N (solutions sampled per problem)")
    axes.set_ylabel("accuracy (95% interval)")
    axes.set_title(f"Best-of-N on {report['problems']} problems")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    out = Path(path)
    figure.savefig(out, format="png", dpi=dpi)
    return out
