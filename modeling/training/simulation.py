"""Simulated active learning: PRM-selected generations against uniform selection, same label
budget, same seed, labels answered by an oracle (no web server, no database needed).

The oracle is a set of labelled solutions (`modeling.training.data.LabeledSolution`): the
stepwise-critic parquet, a PRM800K-format file, or the database's completed labelings.

Candidates. From every oracle solution come one candidate per distinct path through its rated
steps: the chosen path itself, and for each rated alternative of step k, the chosen steps before
k followed by that alternative. Each candidate's steps all carry the oracle's ratings (None for
an unrated, e.g. human-written, step), so "labeling" a candidate reveals exactly those ratings.
Labels used = rated steps of the labeled candidates (a shared prefix is counted every time it
is shown again, as a human would rate it again).

Wrong answer. The oracle has labels only for steps labelers saw, and phase-1 labelers finished
only correct solutions, so a final-answer check cannot tell a candidate's fate. A candidate is
**wrong** when the oracle rates one of its steps -1 (the solution went wrong there and, had it
continued, its answer would not be trusted); else it is **correct**. In the real loop the grader
knows wrong answers before labeling too (answer vs ground truth), so selection may use this
flag, exactly as `select_generation` uses `Solution.answer_correct`.

Model. Head-only PRM on a frozen backbone (the training core's `ProcessRewardModel`): the
backbone runs once over every oracle solution (path and alternatives packed as in training) and
its step-end features are cached; each generation trains a fresh linear head on the features of
the labeled steps (full-batch AdamW, seeded) and scores the pool from the cache. Retraining from
text each generation would give the same model at many times the cost.

Quality. Step AUROC (P(-1) against the oracle's -1) on the held-out problems' every rated step
and alternative, after each generation. Budget: both arms label the same number of solutions per
generation (the paper's unit); step labels are reported too. Data-efficiency ratio: the solutions
uniform needs to reach active's final AUROC (linear interpolation between uniform's first two
points that bracket it) divided by the solutions active labeled; the same on step labels. When uniform never reaches it the ratio is a lower bound
(">"), when uniform's first point already does, an upper bound ("<=").
"""

from __future__ import annotations

import csv
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .data import (
    LabeledSolution,
    example_from_prm800k,
    examples_from_prm800k,
    problem_fold_of,
    read_critic_parquet,
    read_jsonl,
    subsample_problems,
)
from .evaluate import step_metrics
from .feature_cache import FeatureCache, cached_features, content_hash
from .selection import Candidate, ensemble_disagreement, select_by_rule, select_uniform

FeatureKey = tuple[int, int]  # (example index, slot): slot k < n_steps is path step k, else alt


@dataclass
class OracleCandidate:
    id: int
    example: int
    problem: str
    steps: list[str]
    ratings: list[int | None]
    slots: list[int]  # feature slot of each step within its example

    @property
    def wrong(self) -> bool:
        return any(r == -1 for r in self.ratings)

    @property
    def n_labels(self) -> int:
        return sum(r is not None for r in self.ratings)


def candidates_from_oracle(examples: Sequence[LabeledSolution]) -> list[OracleCandidate]:
    """Every distinct rated path of every oracle solution (see the module docstring)."""
    out: list[OracleCandidate] = []
    for i, example in enumerate(examples):
        n = len(example.steps)
        if any(r is not None for r in example.ratings):
            out.append(
                OracleCandidate(
                    len(out),
                    i,
                    example.problem,
                    list(example.steps),
                    list(example.ratings),
                    list(range(n)),
                )
            )
        for j, alt in enumerate(example.alternatives):
            out.append(
                OracleCandidate(
                    len(out),
                    i,
                    example.problem,
                    list(example.steps[: alt.after]) + [alt.text],
                    list(example.ratings[: alt.after]) + [alt.rating],
                    list(range(alt.after)) + [n + j],
                )
            )
    return out


# --- features ----------------------------------------------------------------------------------


def backbone_features(
    examples: Sequence[LabeledSolution],
    cache: FeatureCache,
    *,
    block: int,
    pooling: str = "end",
    batch_tokens: int = 8192,
    progress: Callable[[int, int], None] | None = None,
) -> dict[FeatureKey, torch.Tensor]:
    """Frozen-backbone features of one kept block and pooling at every step (path steps and
    alternatives), float32, from the feature cache (the missing solutions computed into it)."""
    identity = cache.identity
    if block not in identity.blocks or pooling not in identity.poolings:
        raise ValueError(
            f"block {block} / pooling {pooling!r} is not in the cache's blocks "
            f"{list(identity.blocks)} / poolings {list(identity.poolings)}"
        )
    b, p = identity.blocks.index(block), identity.poolings.index(pooling)
    found = cached_features(examples, cache, batch_tokens=batch_tokens, progress=progress)
    features: dict[FeatureKey, torch.Tensor] = {}
    for i, solution in enumerate(found):
        assert solution is not None  # computed above
        for slot in torch.nonzero(solution.present).flatten().tolist():
            features[(i, slot)] = solution.x[slot, b, p].float()
    return features


class FeatureTable:
    """Features as one standardized matrix, looked up by (example, slot)."""

    def __init__(self, features: dict[FeatureKey, torch.Tensor]) -> None:
        self.index = {key: i for i, key in enumerate(features)}
        matrix = torch.stack(list(features.values())) if features else torch.zeros(0, 1)
        mean, std = matrix.mean(0), matrix.std(0).clamp_min(1e-6)
        self.matrix = (matrix - mean) / std  # a fixed affine map: a linear head absorbs it

    def rows(self, keys: Iterable[FeatureKey]) -> tuple[torch.Tensor, list[bool]]:
        """Stacked features of the keys that have one (steps past max_length have none)."""
        found = [self.index.get(key) for key in keys]
        present = [i is not None for i in found]
        picked = [i for i in found if i is not None]
        return self.matrix[picked] if picked else self.matrix[:0], present


# --- the head ---------------------------------------------------------------------------------


def train_head(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    seed: int,
    steps: int = 200,
    lr: float = 0.05,
    weight_decay: float = 1e-3,
) -> torch.nn.Linear:
    """A linear 3-class head (classes -1/0/+1) on fixed features: full-batch AdamW."""
    torch.manual_seed(seed)
    head = torch.nn.Linear(x.shape[1], 3)
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(head(x), y + 1)
        loss.backward()
        optimizer.step()
    return head.eval()


def _labeled_xy(
    table: FeatureTable, labeled: Sequence[OracleCandidate]
) -> tuple[torch.Tensor, torch.Tensor]:
    keys, ratings = [], []
    for cand in labeled:
        for slot, rating in zip(cand.slots, cand.ratings, strict=True):
            if rating is not None:
                keys.append((cand.example, slot))
                ratings.append(rating)
    x, present = table.rows(keys)
    y = torch.tensor([r for r, p in zip(ratings, present, strict=True) if p], dtype=torch.long)
    return x, y


class PoolIndex:
    """Each candidate's feature rows in the table, in step order (steps with none left out)."""

    def __init__(self, table: FeatureTable, candidates: Sequence[OracleCandidate]) -> None:
        self.rows = [
            [table.index[(c.example, s)] for s in c.slots if (c.example, s) in table.index]
            for c in candidates
        ]


@torch.no_grad()
def score_candidates(head: torch.nn.Linear, table: FeatureTable, pool: PoolIndex) -> list[float]:
    """The paper's solution score: product over steps of P(0) + P(+1)."""
    probs = torch.softmax(head(table.matrix), dim=-1)
    ok = (probs[:, 1] + probs[:, 2]).clamp_min(1e-12).log().numpy()
    return [float(np.exp(ok[rows].sum())) if rows else 0.0 for rows in pool.rows]


@torch.no_grad()
def ensemble_uncertainties(
    heads: Sequence[torch.nn.Linear], table: FeatureTable, pool: PoolIndex
) -> list[float | None]:
    """Each candidate's ensemble disagreement (selection.ensemble_disagreement: the spread of
    the heads' P(-1) up to the first step their mean calls wrong); None with no step."""
    wrong = np.stack([torch.softmax(h(table.matrix), dim=-1)[:, 0].numpy() for h in heads])
    return [ensemble_disagreement(wrong[:, rows]) if rows else None for rows in pool.rows]


class HeldOut:
    """The held-out problems' rated steps (every path step and alternative) as one matrix."""

    def __init__(
        self, table: FeatureTable, examples: Sequence[LabeledSolution], ids: Sequence[int]
    ):
        keys, ratings = [], []
        for i in ids:
            for slot, rating in enumerate(examples[i].slot_ratings()):
                if rating is not None:
                    keys.append((i, slot))
                    ratings.append(rating)
        self.x, present = table.rows(keys)
        self.y = np.array([r for r, p in zip(ratings, present, strict=True) if p])

    @torch.no_grad()
    def quality(self, head: torch.nn.Linear) -> dict[str, Any]:
        metrics = step_metrics(torch.softmax(head(self.x), dim=-1).numpy(), self.y)
        return {
            "auroc": metrics["auroc_negative"],
            "accuracy": metrics["accuracy"],
            "n_eval": metrics["n"],
        }


class BestOfN:
    """Best-of-N over the held-out problems that have several sampled solutions with a graded
    final answer (PRM800K phase 2): the PRM picks its highest-scoring sample per problem."""

    def __init__(
        self,
        table: FeatureTable,
        examples: Sequence[LabeledSolution],
        ids: Sequence[int],
        correct: Mapping[int, bool],
    ) -> None:
        by_problem: dict[str, list[int]] = {}
        for i in ids:
            if i in correct:
                by_problem.setdefault(examples[i].problem, []).append(i)
        self.groups = [group for group in by_problem.values() if len(group) >= 2]
        flat = [i for group in self.groups for i in group]
        self.correct = correct
        self.pool = PoolIndex(
            table,
            [
                OracleCandidate(
                    n, i, examples[i].problem, [], [], list(range(len(examples[i].steps)))
                )
                for n, i in enumerate(flat)
            ],
        )
        self.position = {i: n for n, i in enumerate(flat)}

    def accuracy(self, head: torch.nn.Linear, table: FeatureTable) -> float | None:
        if not self.groups:
            return None
        scores = score_candidates(head, table, self.pool)
        picks = [max(group, key=lambda i: scores[self.position[i]]) for group in self.groups]
        return sum(self.correct[i] for i in picks) / len(picks)


# --- the experiment ---------------------------------------------------------------------------

ARMS = ("uniform", "convincing_wrong", "uncertainty", "mix")
AXES = ("solutions", "labels")


@dataclass
class SimulationConfig:
    generations: int = 4  # active-learning generations after the shared seed generation
    per_generation: int = 100  # solutions labeled per generation (the label budget, all arms)
    seed_size: int | None = (
        None  # generation 0 (uniform, shared by the arms); default per_generation
    )
    uniform_generations: int | None = None  # default 2 x generations: uniform's curve runs past
    arms: tuple[str, ...] = ARMS
    convincing_wrong_fraction: float = 0.8
    mix_shares: dict[str, float] = field(
        default_factory=lambda: {"convincing_wrong": 0.5, "uncertainty": 0.5}
    )
    ensemble_heads: int = 4  # the uncertainty rule's heads (bootstrap resamples, own seeds)
    per_problem_cap: int | None = None
    folds: int = 3  # held-out problems: one fold of k, by problem
    seeds: int = 5  # per fold: the generation-0 draw and the heads' initialisation
    seed: int = 0  # the fold assignment
    head_steps: int = 200
    head_lr: float = 0.05

    def __post_init__(self) -> None:
        unknown = [arm for arm in self.arms if arm not in ARMS]
        if unknown or "uniform" not in self.arms:
            raise ValueError(f"arms must include uniform and be among {ARMS}, not {self.arms}")
        if self.folds < 2 or self.seeds < 1 or self.generations < 1 or self.per_generation < 1:
            raise ValueError("folds >= 2, seeds >= 1, generations >= 1, per_generation >= 1")


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


@dataclass
class SimulationResult:
    config: SimulationConfig
    points: list[Point]
    ratios: list[Ratio]
    pool_size: int
    pool_wrong_share: float
    problems: int
    best_of_n_problems: int = 0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def arm(self, name: str) -> list[Point]:
        return [p for p in self.points if p.arm == name]

    def ratio(self, arm: str, axis: str) -> Ratio | None:
        return next((r for r in self.ratios if r.arm == arm and r.axis == axis), None)


def simulate(
    examples: Sequence[LabeledSolution],
    features: dict[FeatureKey, torch.Tensor]
    | Callable[[Sequence[LabeledSolution]], dict[FeatureKey, torch.Tensor]],
    config: SimulationConfig,
    log: Callable[[str], None] = lambda line: None,
    answer_correct: Mapping[int, bool] | None = None,
) -> SimulationResult:
    """Every arm, fold and seed. `features` is a cache over `examples` or a function computing
    one; `answer_correct` (example index -> graded final answer) enables best-of-N."""
    started = time.perf_counter()
    examples = list(examples)
    cache = features(examples) if callable(features) else features
    table = FeatureTable(cache)
    everyone = candidates_from_oracle(examples)
    folds = problem_fold_of([e.problem for e in examples], config.folds, config.seed)
    problem_ids = {p: n for n, p in enumerate(sorted(folds))}
    log(
        f"oracle: {len(everyone)} candidates ({sum(c.wrong for c in everyone)} wrong) from "
        f"{len(examples)} solutions of {len(folds)} problems; {config.folds} folds x "
        f"{config.seeds} seeds"
    )
    points: list[Point] = []
    best_of_n_problems = 0
    for fold in range(config.folds):
        pool = [c for c in everyone if folds[c.problem] != fold]
        held_ids = [i for i, e in enumerate(examples) if folds[e.problem] == fold]
        held_out = HeldOut(table, examples, held_ids)
        best = BestOfN(table, examples, held_ids, answer_correct or {})
        best_of_n_problems += len(best.groups)
        index = PoolIndex(table, pool)
        by_id = {c.id: n for n, c in enumerate(pool)}
        base = [Candidate(c.id, problem_ids[c.problem], 0.0, not c.wrong) for c in pool]
        for seed in range(config.seeds):
            run_seed = config.seed * 1000 + fold * 100 + seed
            first = select_uniform(
                base,
                k=config.seed_size or config.per_generation,
                per_problem_cap=config.per_problem_cap,
                seed=run_seed,
            )
            for arm in config.arms:
                points += _run_arm(
                    arm,
                    fold,
                    seed,
                    run_seed,
                    [pool[by_id[s.solution_id]] for s in first],
                    pool,
                    base,
                    index,
                    table,
                    held_out,
                    best,
                    problem_ids,
                    config,
                )
                last = points[-1]
                log(
                    f"fold {fold} seed {seed} {arm:16s}: {last.solutions} solutions, "
                    f"{last.labels} labels, AUROC {last.auroc:.4f} "
                    f"({time.perf_counter() - started:.0f} s)"
                )
    ratios = [
        summarize_ratios(points, arm, axis)
        for arm in config.arms
        if arm != "uniform"
        for axis in AXES
    ]
    return SimulationResult(
        config=config,
        points=points,
        ratios=ratios,
        pool_size=len(everyone),
        pool_wrong_share=sum(c.wrong for c in everyone) / max(1, len(everyone)),
        problems=len(folds),
        best_of_n_problems=best_of_n_problems,
        seconds=round(time.perf_counter() - started, 1),
    )


def _run_arm(
    arm: str,
    fold: int,
    seed: int,
    run_seed: int,
    first: list[OracleCandidate],
    pool: Sequence[OracleCandidate],
    base: Sequence[Candidate],
    index: PoolIndex,
    table: FeatureTable,
    held_out: HeldOut,
    best: BestOfN,
    problem_ids: Mapping[str, int],
    config: SimulationConfig,
) -> list[Point]:
    """One arm of one run: retrain on what is labeled, measure, select, label; repeat."""
    generations = (
        config.uniform_generations or 2 * config.generations
        if arm == "uniform"
        else config.generations
    )
    by_id = {c.id: n for n, c in enumerate(pool)}
    labeled, picked_now = list(first), list(first)
    points = []
    for generation in range(generations + 1):
        x, y = _labeled_xy(table, labeled)
        head = train_head(x, y, seed=run_seed, steps=config.head_steps, lr=config.head_lr)
        last = generation == generations or arm == "uniform" and generation == config.generations
        points.append(
            Point(
                arm,
                fold,
                seed,
                generation,
                len(labeled),
                sum(c.n_labels for c in labeled),
                sum(c.wrong for c in picked_now) / max(1, len(picked_now)),
                **held_out.quality(head),
                best_of_n=best.accuracy(head, table) if last else None,
            )
        )
        if generation == generations:
            break
        taken = {c.id for c in labeled}
        common: dict[str, Any] = {
            "k": config.per_generation,
            "exclude_ids": taken,
            "per_problem_cap": config.per_problem_cap,
        }
        if arm == "uniform":
            picks = select_by_rule("uniform", base, seed=run_seed * 1000 + generation + 1, **common)
        else:
            scores = score_candidates(head, table, index)
            uncertainty: list[float | None] = [None] * len(pool)
            if arm in ("uncertainty", "mix"):
                uncertainty = ensemble_uncertainties(
                    _ensemble(x, y, run_seed, config), table, index
                )
            candidates = [
                Candidate(c.id, problem_ids[c.problem], s, not c.wrong, u)
                for c, s, u in zip(pool, scores, uncertainty, strict=True)
            ]
            rule_options: dict[str, dict[str, Any]] = {
                "convincing_wrong": {"convincing_wrong_fraction": config.convincing_wrong_fraction},
                "mix": {"shares": config.mix_shares},
            }
            options = rule_options.get(arm, {})
            picks = select_by_rule(arm, candidates, seed=run_seed, **common, **options)
        picked_now = [pool[by_id[p.solution_id]] for p in picks]
        if not picked_now:
            break
        labeled = labeled + picked_now
    return points


def _ensemble(
    x: torch.Tensor, y: torch.Tensor, run_seed: int, config: SimulationConfig
) -> list[torch.nn.Linear]:
    """ActPRM's ensemble: heads from their own seeds on their own bootstrap resamples."""
    heads = []
    for member in range(config.ensemble_heads):
        generator = torch.Generator().manual_seed(run_seed * 100 + member + 1)
        resample = torch.randint(len(y), (len(y),), generator=generator)
        heads.append(
            train_head(
                x[resample],
                y[resample],
                seed=run_seed * 100 + member + 1,
                steps=config.head_steps,
                lr=config.head_lr,
            )
        )
    return heads


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


def last_line(result: SimulationResult) -> str:
    """`active learning: ratio (solutions) convincing_wrong X [lo, hi], uncertainty Y [lo, hi];
    (step labels) ...`: the ratios a lab compares first."""

    def part(axis: str) -> str:
        return ", ".join(
            f"{arm} {ratio.text()}"
            for arm in ("convincing_wrong", "uncertainty")
            if (ratio := result.ratio(arm, axis))
        )

    return f"active learning: ratio (solutions) {part('solutions')}; (step labels) {part('labels')}"


# --- oracles -----------------------------------------------------------------------------------


def load_oracle(
    source: str | Iterable[dict[str, Any]], *, max_problems: int | None = None, seed: int = 0
) -> list[LabeledSolution]:
    """A `.parquet` (stepwise-critic) or `.jsonl` (PRM800K labels) path, or PRM800K records
    (the database's completed labelings: `simulate_active_learning --oracle db` reads them)."""
    if not isinstance(source, str):
        examples = examples_from_prm800k(source)
    elif source.endswith(".parquet"):
        examples = read_critic_parquet(source)
    else:
        examples = examples_from_prm800k(read_jsonl(source))
    if max_problems:
        examples = subsample_problems(examples, max_problems, seed)
    return examples


def sampled_answers(records: Iterable[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """(final answer, ground truth) of every PRM800K record that has both (phase 2's sampled
    solutions), by the content hash of its labelled solution; the caller grades them."""
    found = {}
    for record in records:
        question = record.get("question") or {}
        answer, truth = question.get("pre_generated_answer"), question.get("ground_truth_answer")
        example = example_from_prm800k(record)
        if example is not None and answer and truth:
            found[content_hash(example)] = (str(answer), str(truth))
    return found


# --- outputs -----------------------------------------------------------------------------------


def write_outputs(
    result: SimulationResult, out_dir: str | Path, *, command: str = ""
) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "csv": out / "simulation.csv",
        "markdown": out / "simulation.md",
        "json": out / "simulation.json",
    }
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(result.points[0])))
        writer.writeheader()
        writer.writerows(asdict(p) for p in result.points)
    paths["markdown"].write_text(markdown_table(result, command=command))
    paths["json"].write_text(
        json.dumps(
            {
                "config": asdict(result.config),
                "ratios": [asdict(r) for r in result.ratios],
                "points": [asdict(p) for p in result.points],
                "pool_size": result.pool_size,
                "pool_wrong_share": result.pool_wrong_share,
                "problems": result.problems,
                "best_of_n_problems": result.best_of_n_problems,
                "seconds": result.seconds,
                **result.extra,
            },
            indent=2,
        )
        + "\n"
    )
    paths["plot"] = write_plot(result, out / "simulation.png")
    return paths


def curve(result: SimulationResult, arm: str) -> list[dict[str, float]]:
    """Per generation: mean solutions and step labels, mean AUROC and its 95% band (mean ±
    1.96 standard errors over the runs), mean best-of-N where measured."""
    out = []
    points = result.arm(arm)
    for generation in sorted({p.generation for p in points}):
        at = [p for p in points if p.generation == generation and not math.isnan(p.auroc)]
        if not at:
            continue
        aurocs = np.array([p.auroc for p in at])
        half = 1.96 * aurocs.std(ddof=1) / math.sqrt(len(at)) if len(at) > 1 else 0.0
        best = [p.best_of_n for p in at if p.best_of_n is not None]
        out.append(
            {
                "generation": generation,
                "solutions": float(np.mean([p.solutions for p in at])),
                "labels": float(np.mean([p.labels for p in at])),
                "auroc": float(aurocs.mean()),
                "low": float(aurocs.mean() - half),
                "high": float(aurocs.mean() + half),
                "wrong_share": float(np.mean([p.wrong_share for p in at])),
                "best_of_n": float(np.mean(best)) if best else math.nan,
                "runs": len(at),
            }
        )
    return out


def markdown_table(result: SimulationResult, *, command: str = "") -> str:
    c = result.config
    lines = [
        "# Simulated active learning",
        "",
        f"Oracle: {result.pool_size} candidates ({result.pool_wrong_share:.0%} wrong) from "
        f"{result.problems} problems; {c.folds} folds by problem x {c.seeds} seeds; "
        f"{c.per_generation} solutions per generation.",
        "",
        "| arm | data-efficiency ratio, solutions (mean [95% interval]) | step labels | "
        "runs bounded (> / <=) |",
        "|---|---|---|---|",
    ]
    for arm in c.arms:
        if arm == "uniform":
            continue
        by_axis = {axis: result.ratio(arm, axis) for axis in AXES}
        sol, lab = by_axis["solutions"], by_axis["labels"]
        assert sol is not None and lab is not None
        lines.append(
            f"| {arm} | {sol.text()} | {lab.text()} | "
            f"{sol.bounds.count('>')} / {sol.bounds.count('<=')} of {len(sol.values)} |"
        )
    lines += [
        "",
        "| arm | generation | solutions | step labels | wrong picked | step AUROC (95% band) "
        "| best-of-N |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in c.arms:
        for row in curve(result, arm):
            best = "n/a" if math.isnan(row["best_of_n"]) else f"{row['best_of_n']:.3f}"
            lines.append(
                f"| {arm} | {row['generation']} | {row['solutions']:.0f} | {row['labels']:.0f} "
                f"| {row['wrong_share']:.0%} | {row['auroc']:.3f} ({row['low']:.3f}-"
                f"{row['high']:.3f}) | {best} |"
            )
    if not result.best_of_n_problems:
        lines += ["", "Best-of-N: n/a (the oracle has no problems with several graded samples)."]
    if command:
        lines += ["", f"Command: `{command}` ({result.seconds:.0f} s of simulation)."]
    lines += ["", last_line(result)]
    return "\n".join(lines) + "\n"


STYLES = {
    "uniform": ("#888888", "uniform"),
    "convincing_wrong": ("#2f5bea", "convincing wrong (paper)"),
    "uncertainty": ("#d9480f", "uncertainty (ensemble, ActPRM)"),
    "mix": ("#2b8a3e", "mix"),
}


def write_plot(result: SimulationResult, path: Path) -> Path:
    """Mean held-out step AUROC against solutions and against step labels, with 95% bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110, sharey=True)
    for ax, axis, label in zip(axes, AXES, ("solutions labeled", "step labels"), strict=True):
        for arm in result.config.arms:
            rows = curve(result, arm)
            xs = [r[axis] for r in rows]
            color, name = STYLES[arm]
            ax.plot(xs, [r["auroc"] for r in rows], marker="o", color=color, label=name)
            ax.fill_between(
                xs, [r["low"] for r in rows], [r["high"] for r in rows], color=color, alpha=0.15
            )
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out step AUROC (mean, 95% band)")
    axes[0].legend()
    c = result.config
    fig.suptitle(
        f"Simulated active learning: {result.problems} problems, {c.folds} folds x {c.seeds} "
        f"seeds; {last_line(result).removeprefix('active learning: ')}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# --- simulated labelers over HTTP (load testing) ------------------------------------------------


class HttpLabeler:
    """Logs in and labels through the real endpoints, as a browser would.

    Ratings come from `ratings_for(labeling_id)` (e.g. `modeling.selectors.oracle_ratings(...)`, which looks the
    claimed solution up in an oracle). CSRF: the `csrftoken` cookie sent back as X-CSRFToken.
    """

    def __init__(self, base_url: str, username: str, password: str) -> None:
        import requests  # only the load-testing client needs it

        self.base = base_url.rstrip("/")
        self.session = requests.Session()
        self.username, self.password = username, password
        self.timings: list[float] = []

    def _csrf(self) -> dict[str, str]:
        return {"X-CSRFToken": self.session.cookies.get("csrftoken") or ""}

    def login(self) -> None:
        self.session.get(f"{self.base}/accounts/login/")
        response = self.session.post(
            f"{self.base}/accounts/login/",
            data={"username": self.username, "password": self.password},
            headers={**self._csrf(), "Referer": f"{self.base}/accounts/login/"},
        )
        response.raise_for_status()
        if "/accounts/login/" in response.url:
            raise RuntimeError(f"login failed for {self.username}")

    def claim(self) -> int | None:
        """POST /label/next/ -> the labeling id it redirects to, or None when nothing waits."""
        response = self.session.post(
            f"{self.base}/label/next/",
            headers={**self._csrf(), "Referer": self.base},
            allow_redirects=False,
        )
        location = response.headers.get("Location", "")
        parts = [p for p in location.split("/") if p]
        if response.status_code in (301, 302, 303) and len(parts) >= 2 and parts[-1].isdigit():
            return int(parts[-1])
        return None

    def rate(self, labeling_id: int, step_index: int, rating: int, elapsed_ms: int = 1500) -> int:
        started = time.perf_counter()
        response = self.session.post(
            f"{self.base}/label/{labeling_id}/rate/",
            data={"step_index": step_index, "rating": rating, "elapsed_ms": elapsed_ms},
            headers={
                **self._csrf(),
                "HX-Request": "true",
                "Referer": f"{self.base}/label/{labeling_id}/",
            },
        )
        self.timings.append(time.perf_counter() - started)
        return response.status_code

    def label(
        self,
        ratings_for: Callable[[int], Sequence[int]],
        *,
        max_solutions: int = 1,
        rng: random.Random | None = None,
    ) -> list[int]:
        """Claim and rate up to max_solutions solutions; stops rating a solution at its first -1
        (the page then finishes it as "found an error"). Returns the labeling ids."""
        done = []
        for _ in range(max_solutions):
            labeling_id = self.claim()
            if labeling_id is None:
                break
            for index, rating in enumerate(ratings_for(labeling_id)):
                status = self.rate(
                    labeling_id, index, rating, elapsed_ms=(rng or random).randint(800, 4000)
                )
                if status >= 400:
                    raise RuntimeError(
                        f"rating step {index} of labeling {labeling_id}: HTTP {status}"
                    )
                if rating == -1:
                    break
            done.append(labeling_id)
        return done


def oracle_lookup(
    examples: Sequence[LabeledSolution], *, default: int = 1
) -> Callable[[str, Sequence[str]], list[int]]:
    """ratings(problem, steps) from an oracle: the steps looked up by (problem, step texts)
    among the oracle's candidates; unknown steps get `default`. The labelers' ratings_for
    (labeling id) over it is `modeling.selectors.oracle_ratings`, which reads the database."""
    known: dict[tuple[str, tuple[str, ...]], list[int | None]] = {}
    for cand in candidates_from_oracle(examples):
        known[(cand.problem.strip(), tuple(s.strip() for s in cand.steps))] = cand.ratings

    def ratings(problem: str, steps: Sequence[str]) -> list[int]:
        found = known.get((problem.strip(), tuple(s.strip() for s in steps))) or [None] * len(steps)
        return [default if r is None else int(r) for r in found]

    return ratings
