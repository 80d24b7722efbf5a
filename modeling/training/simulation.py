"""Simulated active learning: PRM-selected generations against uniform selection, same label
budget, same seed, labels answered by an oracle (`oracle`: the candidates and what "labeling"
one reveals; no web server, no database needed).

Model. Head-only PRM on a frozen backbone (the training core's `ProcessRewardModel`): the
backbone runs once over every oracle solution (path and alternatives packed as in training) and
its step-end features are cached; each generation trains a fresh linear head on the features of
the labeled steps (full-batch AdamW, seeded) and scores the pool from the cache. Retraining from
text each generation would give the same model at many times the cost.

Quality. Step AUROC (P(-1) against the oracle's -1) on the held-out problems' every rated step
and alternative, after each generation. Budget: both arms label the same number of solutions per
generation (the paper's unit); step labels are reported too. The data-efficiency ratios against
uniform are `efficiency`'s; the tables and the plot, `simulation_report`'s.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from .data import LabeledSolution, problem_fold_of
from .efficiency import AXES, Point, Ratio, summarize_ratios
from .evaluate import step_metrics
from .feature_cache import FeatureCache, cached_features
from .oracle import OracleCandidate, candidates_from_oracle
from .routing import (
    SimulatedJudge,
    agreed_labels,
    first_error,
    machine_precision,
    oracle_steps,
    simulated_judge,
    verdict,
)
from .selection import (
    Candidate,
    ensemble_disagreement,
    judge_disagreement,
    select_by_rule,
    select_uniform,
)

FeatureKey = tuple[int, int]  # (example index, slot): slot k < n_steps is path step k, else alt


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

ARMS = ("uniform", "convincing_wrong", "uncertainty", "mix", "routing", "routing+machine")
DEFAULT_ARMS = ("uniform", "convincing_wrong", "uncertainty", "mix")
# Arms that need judges: each runs once per judge kappa ("routing kappa 0.5", ...).
ROUTING_ARMS = ("routing", "routing+machine")


@dataclass
class SimulationConfig:
    generations: int = 4  # active-learning generations after the shared seed generation
    per_generation: int = 100  # solutions labeled per generation (the label budget, all arms)
    seed_size: int | None = (
        None  # generation 0 (uniform, shared by the arms); default per_generation
    )
    uniform_generations: int | None = None  # default 2 x generations: uniform's curve runs past
    arms: tuple[str, ...] = DEFAULT_ARMS
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
    # Routing arms (issue 47): simulated judges at each kappa against the oracle.
    judge_kappas: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9)
    judges: int = 2  # independent simulated judges (the product's llm and mc, say)
    audit_share: float = 0.1  # routing+machine: share of accepted machine labels humans audit
    machine_per_generation: int | None = None  # machine labels accepted a generation; default
    # per_generation

    def __post_init__(self) -> None:
        unknown = [arm for arm in self.arms if arm not in ARMS]
        if unknown or "uniform" not in self.arms:
            raise ValueError(f"arms must include uniform and be among {ARMS}, not {self.arms}")
        if self.folds < 2 or self.seeds < 1 or self.generations < 1 or self.per_generation < 1:
            raise ValueError("folds >= 2, seeds >= 1, generations >= 1, per_generation >= 1")
        if any(not 0.0 <= k <= 1.0 for k in self.judge_kappas) or not self.judge_kappas:
            raise ValueError(f"judge kappas must be in [0, 1], got {self.judge_kappas}")
        if self.judges < 1 or not 0.0 <= self.audit_share <= 1.0:
            raise ValueError("judges >= 1 and an audit share in [0, 1]")
        if self.machine_per_generation is not None and self.machine_per_generation < 0:
            raise ValueError("machine_per_generation must be >= 0")

    def arm_names(self) -> list[str]:
        """Every arm as its points name it: a routing arm once per judge kappa."""
        return [
            name
            for arm in self.arms
            for name in (
                [routing_arm(arm, k) for k in self.judge_kappas] if arm in ROUTING_ARMS else [arm]
            )
        ]


def routing_arm(arm: str, kappa: float) -> str:
    return f"{arm} kappa {kappa:g}"


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
    judge_kappas: dict[float, list[float]] = {}
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
            panels = (
                {
                    kappa: JudgePanel(everyone, pool, config, kappa, run_seed)
                    for kappa in config.judge_kappas
                }
                if any(arm in ROUTING_ARMS for arm in config.arms)
                else {}
            )
            for panel in panels.values():
                judge_kappas.setdefault(panel.kappa, []).extend(j.kappa for j in panel.judges)
            for arm in config.arms:
                if arm in ROUTING_ARMS:
                    for kappa, panel in panels.items():
                        points += _run_routing(
                            routing_arm(arm, kappa),
                            arm == "routing+machine",
                            panel,
                            fold,
                            seed,
                            run_seed,
                            [pool[by_id[s.solution_id]] for s in first],
                            pool,
                            table,
                            held_out,
                            best,
                            problem_ids,
                            config,
                        )
                        last = points[-1]
                        log(
                            f"fold {fold} seed {seed} {last.arm}: {last.solutions} solutions, "
                            f"{last.labels} labels, {last.machine_solutions} machine, AUROC "
                            f"{last.auroc:.4f} ({time.perf_counter() - started:.0f} s)"
                        )
                    continue
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
        for arm in config.arm_names()
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
        extra={"judge_kappas": _realised(judge_kappas)} if judge_kappas else {},
    )


def _realised(kappas: Mapping[float, list[float]]) -> list[dict[str, float]]:
    """Per target kappa: the simulated judges' realised kappas (mean, min, max)."""
    return [
        {
            "target": target,
            "realised_mean": float(np.mean(values)),
            "realised_min": float(np.min(values)),
            "realised_max": float(np.max(values)),
            "judges": len(values),
        }
        for target, values in kappas.items()
    ]


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


# --- routing by judge disagreement, machine labels (issue 47) ----------------------------------


class JudgePanel:
    """The simulated judges of one run at one kappa, and what they say about the pool: each
    judge's first error per candidate (None: no error; absent: no label at all) and the labels
    they all agree on (the machine labels a batch could accept), or None."""

    def __init__(
        self,
        everyone: Sequence[OracleCandidate],
        pool: Sequence[OracleCandidate],
        config: SimulationConfig,
        kappa: float,
        run_seed: int,
    ) -> None:
        steps = oracle_steps(everyone)
        self.kappa = kappa
        self.judges: list[SimulatedJudge] = [
            simulated_judge(steps, kappa, seed=run_seed * 100 + j + 1 + int(kappa * 1000) * 7)
            for j in range(config.judges)
        ]
        self.first_errors: list[list[int | None]] = []  # per candidate: each labelling judge's
        self.agreed: list[list[int | None] | None] = []
        for cand in pool:
            verdicts = [verdict(judge, cand) for judge in self.judges]
            self.first_errors.append(
                [first_error(v) for v in verdicts if any(label is not None for label in v)]
            )
            self.agreed.append(agreed_labels(verdicts))


def _prm_first_error(p_wrong: np.ndarray, rows: Sequence[int | None]) -> int | None:
    """The PRM's verdict: its first step with P(-1) >= 0.5 (the judges' default threshold)."""
    return next((i for i, row in enumerate(rows) if row is not None and p_wrong[row] >= 0.5), None)


def _run_routing(
    arm: str,
    machine: bool,
    panel: JudgePanel,
    fold: int,
    seed: int,
    run_seed: int,
    first: list[OracleCandidate],
    pool: Sequence[OracleCandidate],
    table: FeatureTable,
    held_out: HeldOut,
    best: BestOfN,
    problem_ids: Mapping[str, int],
    config: SimulationConfig,
) -> list[Point]:
    """One routing arm of one run. Each generation humans label `per_generation` solutions:
    with machine labels, first the audit share of the machine labels accepted this generation,
    then (both arms) the solutions the judges and the PRM disagree on most
    (`selection.judge_disagreement`). Machine labels (routing+machine only): up to
    `machine_per_generation` unlabeled candidates on which every judge gives the same labels,
    in a seeded random order, train the head with the judges' labels; the audited ones are
    labeled by humans instead (the oracle) and measure the machine labels' precision."""
    by_id = {c.id: n for n, c in enumerate(pool)}
    rows = [[table.index.get((c.example, s)) for s in c.slots] for c in pool]
    human, picked_now = list(first), list(first)
    machine_labeled: list[OracleCandidate] = []
    audited = audited_right = 0
    points = []
    for generation in range(config.generations + 1):
        x, y = _labeled_xy(table, human + machine_labeled)
        head = train_head(x, y, seed=run_seed, steps=config.head_steps, lr=config.head_lr)
        last = generation == config.generations
        points.append(
            Point(
                arm,
                fold,
                seed,
                generation,
                len(human),
                sum(c.n_labels for c in human),
                sum(c.wrong for c in picked_now) / max(1, len(picked_now)),
                **held_out.quality(head),
                best_of_n=best.accuracy(head, table) if last else None,
                machine_solutions=len(machine_labeled),
                machine_audited=audited,
                machine_precision=audited_right / audited if audited else None,
            )
        )
        if last:
            break
        taken = {c.id for c in human} | {c.id for c in machine_labeled}
        budget = config.per_generation
        audit: list[OracleCandidate] = []
        if machine:
            agreeing = [
                n for n, c in enumerate(pool) if panel.agreed[n] is not None and c.id not in taken
            ]
            random.Random(run_seed * 1000 + generation + 1).shuffle(agreeing)
            accepted = agreeing[: config.machine_per_generation or config.per_generation]
            n_audit = min(budget, int(config.audit_share * len(accepted) + 0.5 + 1e-9))
            for n in accepted[:n_audit]:
                audit.append(pool[n])
                audited += 1
                audited_right += machine_precision(panel.agreed[n], pool[n].ratings)  # type: ignore[arg-type]
            machine_labeled += [
                replace(pool[n], ratings=list(panel.agreed[n] or [])) for n in accepted[n_audit:]
            ]
            budget -= n_audit
            taken |= {pool[n].id for n in accepted}
        with torch.no_grad():
            p_wrong = torch.softmax(head(table.matrix), dim=-1)[:, 0].numpy()
        candidates = [
            Candidate(
                c.id,
                problem_ids[c.problem],
                0.0,
                not c.wrong,
                disagreement=judge_disagreement(
                    panel.first_errors[n] + [_prm_first_error(p_wrong, rows[n])], len(c.slots)
                ),
            )
            for n, c in enumerate(pool)
            if c.id not in taken
        ]
        picks = select_by_rule(
            "disagreement",
            candidates,
            k=budget,
            per_problem_cap=config.per_problem_cap,
            seed=run_seed,
        )
        picked_now = audit + [pool[by_id[p.solution_id]] for p in picks]
        if not picked_now:
            break
        human = human + picked_now
    return points
