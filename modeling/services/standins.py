"""STAND-IN, to be deleted when issue 48's other two branches merge (orm-core, bestofn).

Every name here is one of the interfaces issue 48 fixes for the training core, written small so
that the Django side runs and is tested before those branches land. The Django side imports
them from this module only; after the merge each import becomes the real one:

    OBJECTIVES, effective_config, train_config   -> modeling.training.config (OBJECTIVES;
        TrainConfig.from_dict(...).to_dict() / TrainConfig.from_dict once it has `objective`)
    GradedSolution, outcome_examples             -> modeling.training.data
    read_graded                                  -> modeling.training.inputs
    evaluate_outcome, compare_best_of_n, footing, overlap, plot_best_of_n
                                                 -> modeling.training.evaluate

Nothing here imports torch or scikit-learn at module level (the web side reads
`effective_config`): the functions that score or compare import them when called.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from modeling.training.config import TrainConfig
from modeling.training.data import LabeledSolution
from modeling.training.inputs import DataFormatError

if TYPE_CHECKING:
    from modeling.training.evaluate import SampledProblem

OBJECTIVES = ("process", "outcome")


def effective_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """TrainConfig's effective dict with `objective` (process by default). Outcome trains a
    2-class head: num_labels 3 given explicitly is refused, left at its default it becomes 2."""
    config = dict(config)
    objective = config.pop("objective", "process")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if objective == "outcome":
        if config.get("num_labels", 2) != 2:
            raise ValueError(
                "objective outcome trains a 2-class head (correct or not): num_labels must be 2"
            )
        config["num_labels"] = 2
    return {**TrainConfig.from_dict(config).to_dict(), "objective": objective}


def train_config(config: Mapping[str, Any]) -> TrainConfig:
    """The TrainConfig of a run's stored config (which carries `objective` beside it)."""
    return TrainConfig.from_dict({k: v for k, v in config.items() if k != "objective"})


@dataclass(frozen=True)
class GradedSolution:
    problem: str
    steps: list[str]
    correct: bool


def outcome_examples(graded: Iterable[GradedSolution]) -> list[LabeledSolution]:
    """One label per solution, on its last step: +1 correct, -1 wrong."""
    return [
        LabeledSolution(
            g.problem, list(g.steps), [None] * (len(g.steps) - 1) + [1 if g.correct else -1]
        )
        for g in graded
        if g.steps
    ]


def read_graded(path: str | Path) -> list[GradedSolution]:
    """Graded JSONL: {"problem": str, "steps": [str, ...], "correct": bool} a line."""
    graded = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                steps, correct = row["steps"], row["correct"]
                if not isinstance(correct, bool) or not isinstance(steps, list):
                    raise TypeError("steps must be a list and correct true or false")
                graded.append(GradedSolution(str(row["problem"]), [str(s) for s in steps], correct))
            except (ValueError, KeyError, TypeError) as exc:
                raise DataFormatError(f"{path}: row {number}: {exc}") from None
    return graded


def evaluate_outcome(model: Any, graded: Sequence[GradedSolution]) -> dict[str, Any]:
    """Solution-level AUROC of correctness of the ORM's score (P(good) at the last step)."""
    from modeling.training.data import Solution
    from modeling.training.evaluate import auroc
    from modeling.training.score import score_solutions, solution_score

    probs = score_solutions(model, [Solution(g.problem, list(g.steps)) for g in graded])
    scores = np.array([solution_score(p, "last") for p in probs], dtype=np.float64)
    correct = np.array([g.correct for g in graded], dtype=bool)
    return {
        "solution_auroc": auroc(scores, correct),
        "accuracy": float(np.mean((scores >= 0.5) == correct)) if len(graded) else float("nan"),
        "solutions": len(graded),
        "correct": int(correct.sum()),
    }


def _aggregate(step_probs: np.ndarray, rule: str) -> float:
    probs = np.asarray(step_probs, dtype=np.float64).reshape(-1, 3)
    good = probs[:, 1] + probs[:, 2]
    good = good[~np.isnan(good)]
    if good.size == 0:
        return -np.inf
    if rule == "product":
        return float(np.prod(good))
    return float(np.min(good)) if rule == "min" else float(good[-1])


def _top_share(scores: np.ndarray, correct: np.ndarray) -> float:
    top = scores == scores.max()
    return float(correct[top].mean())


def _vote_share(groups: np.ndarray, correct: np.ndarray, weights: np.ndarray) -> float:
    totals: dict[int, float] = {}
    right: dict[int, bool] = {}
    for g, c, w in zip(groups.tolist(), correct.tolist(), weights.tolist(), strict=True):
        totals[g] = totals.get(g, 0.0) + w
        right[g] = c
    best = max(totals.values())
    return float(np.mean([right[g] for g, t in totals.items() if t == best]))


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
    from modeling.training.evaluate import group_answers, powers_of_two

    rng = np.random.default_rng(seed)
    judged = []
    for problem in problems:
        answers = [answer for _, answer in problem.samples]
        groups = group_answers(answers, equivalent, key)
        right: dict[int, bool] = {}
        for answer, group in zip(answers, groups, strict=True):
            if group not in right:
                right[group] = answer is not None and equivalent(answer, problem.ground_truth)
        judged.append((np.array(groups), np.array([right[g] for g in groups], dtype=bool)))
    per_sample: dict[str, list[np.ndarray]] = {}
    # method -> (how it picks, whose per-sample scores)
    methods: dict[str, tuple[str, str]] = {}
    for model, rows in scores.items():
        rules = ("product", "min") if objectives[model] == "process" else ("last",)
        for rule in rules:
            per_sample[f"{model}:{rule}"] = [
                np.array([_aggregate(p, rule) for p in r]) for r in rows
            ]
        if objectives[model] == "process":
            methods[f"{model}:product"] = ("top", f"{model}:product")
            methods[f"{model}:min"] = ("top", f"{model}:min")
            methods[f"{model}:weighted"] = ("vote", f"{model}:product")
        else:
            methods[model] = ("top", f"{model}:last")
    methods["majority"] = ("vote", "")
    methods["pass@n"] = ("any", "")

    def pick(how: str, whose: str, i: int, s: np.ndarray) -> float:
        groups, correct = judged[i][0][s], judged[i][1][s]
        if how == "any":
            return float(correct.any())
        if how == "top":
            return _top_share(per_sample[whose][i][s], correct)
        weights = np.maximum(per_sample[whose][i][s], 0) if whose else np.ones(len(s))
        return _vote_share(groups, correct, weights)

    most = max((len(p.samples) for p in problems), default=1)
    ns = list(ns) if ns else powers_of_two(most)
    report: dict[str, Any] = {
        "problems": len(problems),
        "samples": sum(len(p.samples) for p in problems),
        "ns": ns,
        "methods": {name: [] for name in methods},
    }
    for n in ns:
        eligible = [i for i, p in enumerate(problems) if len(p.samples) >= n]
        if not eligible:
            continue
        values = np.zeros((len(eligible), len(methods)))
        for row, i in enumerate(eligible):
            draws = [rng.choice(len(problems[i].samples), n, replace=False) for _ in range(repeats)]
            for col, how in enumerate(methods.values()):
                values[row, col] = np.mean([pick(*how, i, s) for s in draws])
        boot = values[rng.integers(0, len(eligible), (intervals, len(eligible)))].mean(axis=1)
        for col, name in enumerate(methods):
            low, high = np.percentile(boot[:, col], [2.5, 97.5])
            report["methods"][name].append(
                {
                    "n": n,
                    "accuracy": float(values[:, col].mean()),
                    "low": float(low),
                    "high": float(high),
                    "problems": len(eligible),
                }
            )
    return report


def footing(models: Mapping[str, dict]) -> list[str]:
    """What differs between the models' training: backbone, problems, optimizer steps."""
    found = [
        f"{name}: no training record (saved before models recorded their training problems)"
        for name, meta in models.items()
        if not meta.get("training")
    ]
    checks = (
        ("backbone", lambda m: m.get("backbone")),
        ("training problems", lambda m: (m.get("training") or {}).get("problems_digest")),
        ("optimizer steps", lambda m: (m.get("training") or {}).get("optimizer_steps")),
    )
    for what, read in checks:
        values = {name: read(meta) for name, meta in models.items() if meta.get("training")}
        if len({json.dumps(v) for v in values.values()}) > 1:
            found.append(f"different {what}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return found


def overlap(models: Mapping[str, dict], problem_keys: Iterable[str]) -> dict[str, int]:
    keys = set(problem_keys)
    return {
        name: len(keys & set((meta.get("training") or {}).get("problems") or []))
        for name, meta in models.items()
    }


def plot_best_of_n(report: dict, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rows in report["methods"].items():
        if not rows:
            continue
        ns = [r["n"] for r in rows]
        ax.plot(ns, [r["accuracy"] for r in rows], marker="o", label=name)
        ax.fill_between(ns, [r["low"] for r in rows], [r["high"] for r in rows], alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (solutions per problem)")
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path
