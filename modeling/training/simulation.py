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

from .config import TrainConfig
from .data import (
    LabeledSolution,
    build_features,
    collate,
    examples_from_prm800k,
    length_batches,
    read_critic_parquet,
    read_jsonl,
    split_by_problem,
    subsample_problems,
)
from .evaluate import step_metrics
from .model import ProcessRewardModel
from .selection import Candidate, select_generation, select_uniform

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


@torch.no_grad()
def backbone_features(
    examples: Sequence[LabeledSolution],
    *,
    backbone: str,
    backbone_layers: int | None = None,
    max_length: int = 1024,
    batch_tokens: int = 8192,
    progress: Callable[[int, int], None] | None = None,
) -> dict[FeatureKey, torch.Tensor]:
    """Frozen-backbone features at every step end (path steps and alternatives), float32."""
    config = TrainConfig(
        backbone=backbone,
        backbone_layers=backbone_layers,
        mode="head",
        max_length=max_length,
        device="cpu",
    )
    model = ProcessRewardModel.from_config(config).eval()
    rows = build_features(examples, model.tokenizer, max_length)
    batches = length_batches([len(r) for r in rows], batch_tokens)
    features: dict[FeatureKey, torch.Tensor] = {}
    for n, batch_rows in enumerate(batches):
        batch = collate([rows[i] for i in batch_rows], model.pad_id)
        hidden = model.features(batch)
        for key, vector in zip(batch.slots, hidden, strict=True):
            features[key] = vector.clone()
        if progress:
            progress(n + 1, len(batches))
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
    steps: int = 300,
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


@torch.no_grad()
def score_candidates(
    head: torch.nn.Linear, table: FeatureTable, candidates: Sequence[OracleCandidate]
) -> list[float]:
    """The paper's solution score: product over steps of P(0) + P(+1)."""
    probs = torch.softmax(head(table.matrix), dim=-1)
    ok = (probs[:, 1] + probs[:, 2]).clamp_min(1e-12).log()
    scores = []
    for cand in candidates:
        idx = [
            table.index[(cand.example, s)] for s in cand.slots if (cand.example, s) in table.index
        ]
        scores.append(float(ok[idx].sum().exp()) if idx else 0.0)
    return scores


@torch.no_grad()
def step_auroc(
    head: torch.nn.Linear, table: FeatureTable, examples: Sequence[LabeledSolution]
) -> dict[str, Any]:
    keys, ratings = [], []
    for i, example in enumerate(examples):
        for slot, rating in enumerate(example.slot_ratings()):
            if rating is not None:
                keys.append((i, slot))
                ratings.append(rating)
    x, present = table.rows(keys)
    y = np.array([r for r, p in zip(ratings, present, strict=True) if p])
    probs = torch.softmax(head(x), dim=-1).numpy()
    metrics = step_metrics(probs, y)
    return {
        "auroc": metrics["auroc_negative"],
        "accuracy": metrics["accuracy"],
        "n_eval": metrics["n"],
    }


# --- the experiment ---------------------------------------------------------------------------


@dataclass
class SimulationConfig:
    generations: int = 4  # active-learning generations after the shared seed generation
    per_generation: int = 100  # solutions labeled per generation (the label budget, both arms)
    seed_size: int | None = None  # generation 0 (uniform, shared); default per_generation
    uniform_generations: int | None = None  # default 2 x generations: uniform's curve runs past
    convincing_wrong_fraction: float = 0.8
    per_problem_cap: int | None = None
    holdout_fraction: float = 0.2
    seed: int = 0
    head_steps: int = 300
    head_lr: float = 0.05


@dataclass
class Point:
    arm: str
    generation: int
    solutions: int
    labels: int
    wrong_share: float  # share of this generation's picks the oracle calls wrong
    auroc: float
    accuracy: float
    n_eval: int


@dataclass
class SimulationResult:
    config: SimulationConfig
    points: list[Point]
    ratio: float | None  # on labeled solutions, the paper's unit
    ratio_bound: str  # "=", ">", "<=" or "n/a"
    uniform_labels_to_match: float | None  # uniform's solutions at active's final AUROC
    pool_size: int
    pool_wrong_share: float
    eval_problems: int
    train_problems: int
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def arm(self, name: str) -> list[Point]:
        return [p for p in self.points if p.arm == name]


def simulate(
    examples: Sequence[LabeledSolution],
    features: dict[FeatureKey, torch.Tensor]
    | Callable[[Sequence[LabeledSolution]], dict[FeatureKey, torch.Tensor]],
    config: SimulationConfig,
    log: Callable[[str], None] = lambda line: None,
) -> SimulationResult:
    """Run both arms. `features` is a cache over `examples` or a function computing one."""
    started = time.perf_counter()
    examples = list(examples)
    train_ex, test_ex = split_by_problem(examples, config.holdout_fraction, config.seed)
    ordered = train_ex + test_ex  # feature keys index this list
    cache = features(ordered) if callable(features) else features
    table = FeatureTable(cache)
    pool = candidates_from_oracle(train_ex)
    test_table_offset = len(train_ex)
    test_keys = {
        (i - test_table_offset, s): v for (i, s), v in cache.items() if i >= test_table_offset
    }
    test_table = FeatureTable.__new__(FeatureTable)  # same standardization as the pool's
    test_table.index = {key: table.index[(key[0] + test_table_offset, key[1])] for key in test_keys}
    test_table.matrix = table.matrix
    problem_ids = {p: n for n, p in enumerate(sorted({c.problem for c in pool}))}
    log(
        f"pool: {len(pool)} candidates from {len(train_ex)} solutions of {len(problem_ids)} problems; "
        f"{sum(c.wrong for c in pool)} wrong; held out: {len(test_ex)} solutions"
    )

    seed_size = config.seed_size or config.per_generation
    base = [Candidate(c.id, problem_ids[c.problem], 0.0, not c.wrong) for c in pool]
    first = select_uniform(
        base, k=seed_size, per_problem_cap=config.per_problem_cap, seed=config.seed
    )
    arms = {
        "active": config.generations,
        "uniform": config.uniform_generations or 2 * config.generations,
    }
    points: list[Point] = []
    for arm, generations in arms.items():
        labeled = [pool[s.solution_id] for s in first]
        picked_now = labeled
        for generation in range(generations + 1):
            x, y = _labeled_xy(table, labeled)
            head = train_head(x, y, seed=config.seed, steps=config.head_steps, lr=config.head_lr)
            quality = step_auroc(head, test_table, test_ex)
            point = Point(
                arm,
                generation,
                len(labeled),
                sum(c.n_labels for c in labeled),
                sum(c.wrong for c in picked_now) / max(1, len(picked_now)),
                **quality,
            )
            points.append(point)
            log(
                f"{arm:8s} gen {generation}: {point.solutions} solutions, {point.labels} labels, "
                f"{point.wrong_share:.0%} wrong picked, AUROC {point.auroc:.4f}"
            )
            if generation == generations:
                break
            taken = {c.id for c in labeled}
            if arm == "active":
                scores = score_candidates(head, table, pool)
                candidates = [
                    Candidate(c.id, problem_ids[c.problem], s, not c.wrong)
                    for c, s in zip(pool, scores, strict=True)
                ]
                picks = select_generation(
                    candidates,
                    k=config.per_generation,
                    exclude_ids=taken,
                    convincing_wrong_fraction=config.convincing_wrong_fraction,
                    per_problem_cap=config.per_problem_cap,
                    seed=config.seed,
                )
            else:
                picks = select_uniform(
                    base,
                    k=config.per_generation,
                    exclude_ids=taken,
                    per_problem_cap=config.per_problem_cap,
                    seed=config.seed * 1000 + generation + 1,
                )
            picked_now = [pool[p.solution_id] for p in picks]
            labeled = labeled + picked_now
            if not picked_now:
                break
    active_points = [p for p in points if p.arm == "active"]
    uniform_points = [p for p in points if p.arm == "uniform"]
    ratio, bound, to_match = efficiency_ratio(active_points, uniform_points, "solutions")
    label_ratio = efficiency_ratio(active_points, uniform_points, "labels")
    return SimulationResult(
        config=config,
        points=points,
        ratio=ratio,
        ratio_bound=bound,
        uniform_labels_to_match=to_match,
        pool_size=len(pool),
        pool_wrong_share=sum(c.wrong for c in pool) / max(1, len(pool)),
        eval_problems=len({e.problem for e in test_ex}),
        train_problems=len(problem_ids),
        seconds=round(time.perf_counter() - started, 1),
        extra={"label_ratio": label_ratio[0], "label_ratio_bound": label_ratio[1]},
    )


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
                "points": [asdict(p) for p in result.points],
                "ratio": result.ratio,
                "ratio_bound": result.ratio_bound,
                "uniform_solutions_to_match": result.uniform_labels_to_match,
                "pool_size": result.pool_size,
                "pool_wrong_share": result.pool_wrong_share,
                "train_problems": result.train_problems,
                "eval_problems": result.eval_problems,
                "seconds": result.seconds,
                **result.extra,
            },
            indent=2,
        )
        + "\n"
    )
    paths["plot"] = write_plot(result, out)
    return paths


def ratio_text(result: SimulationResult, axis: str = "solutions") -> str:
    ratio, bound = (
        (result.ratio, result.ratio_bound)
        if axis == "solutions"
        else (result.extra.get("label_ratio"), result.extra.get("label_ratio_bound", "n/a"))
    )
    if ratio is None:
        return "n/a"
    prefix = {"=": "", ">": "> ", "<=": "<= "}[bound]
    return f"{prefix}{ratio:.2f}x"


def markdown_table(result: SimulationResult, *, command: str = "") -> str:
    lines = [
        "# Simulated active learning",
        "",
        f"Pool: {result.pool_size} candidates ({result.pool_wrong_share:.0%} wrong) from "
        f"{result.train_problems} problems; evaluation: {result.eval_problems} held-out problems.",
        f"Data-efficiency ratio (solutions uniform labels to reach active's final step AUROC / "
        f"solutions active labeled): **{ratio_text(result)}** (paper: 2.6x); counted in step "
        f"labels instead: {ratio_text(result, 'labels')}.",
        "",
        "| arm | generation | solutions | step labels | wrong picked | step AUROC | accuracy |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in result.points:
        lines.append(
            f"| {p.arm} | {p.generation} | {p.solutions} | {p.labels} | {p.wrong_share:.0%} "
            f"| {p.auroc:.4f} | {p.accuracy:.3f} |"
        )
    if command:
        lines += ["", f"Command: `{command}` ({result.seconds:.0f} s of simulation)."]
    return "\n".join(lines) + "\n"


def write_plot(result: SimulationResult, out: Path) -> Path:
    """PNG with matplotlib when installed, else an SVG drawn by hand."""
    series = {
        arm: [(p.solutions, p.auroc) for p in result.arm(arm) if not math.isnan(p.auroc)]
        for arm in ("active", "uniform")
    }
    title = f"Step AUROC vs labels (ratio {ratio_text(result)}; paper 2.6x)"
    try:  # matplotlib is optional: an SVG drawn by hand without it
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _write_svg(series, title, out / "simulation.svg")
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    styles = {
        "active": ("#2f5bea", "PRM-selected (convincing wrong first)"),
        "uniform": ("#999999", "uniform"),
    }
    for arm, points in series.items():
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", color=styles[arm][0], label=styles[arm][1])
    ax.set_xlabel("solutions labeled (both arms share generation 0)")
    ax.set_ylabel("held-out step AUROC (P(-1) vs human -1)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "simulation.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _write_svg(series: Mapping[str, Sequence[tuple[float, float]]], title: str, path: Path) -> Path:
    width, height, pad = 640, 400, 50
    points = [pt for pts in series.values() for pt in pts] or [(0, 0), (1, 1)]
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points) or 1
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    y0, y1 = (y0 - 0.01, y1 + 0.01) if y1 > y0 else (y0 - 0.05, y0 + 0.05)

    def xy(p: tuple[float, float]) -> str:
        x = pad + (p[0] - x0) / max(1e-9, x1 - x0) * (width - 2 * pad)
        y = height - pad - (p[1] - y0) / (y1 - y0) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    colors = {"active": "#2f5bea", "uniform": "#999999"}
    body = [
        f'<text x="{pad}" y="25" font-size="14">{title}</text>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
        f'<text x="{width / 2}" y="{height - 12}" font-size="12">solutions labeled ({x0:.0f} to {x1:.0f})</text>',
        f'<text x="5" y="{pad - 8}" font-size="12">AUROC {y0:.3f} to {y1:.3f}</text>',
    ]
    for n, (arm, pts) in enumerate(series.items()):
        if pts:
            body.append(
                f'<polyline fill="none" stroke="{colors[arm]}" stroke-width="2" '
                f'points="{" ".join(xy(p) for p in pts)}"/>'
            )
        body.append(
            f'<text x="{width - 150}" y="{pad + 16 * n}" fill="{colors[arm]}" font-size="12">{arm}</text>'
        )
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
        + "".join(body)
        + "</svg>\n"
    )
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
