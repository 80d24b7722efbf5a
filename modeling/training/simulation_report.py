"""The simulation's report: every point as CSV, the ratios and curves as a Markdown table, all
of it as JSON, the curves as a PNG plot, and the last line a lab compares first."""

from __future__ import annotations

import csv
import json
import math
import textwrap
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .efficiency import AXES
from .simulation import SimulationResult


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
    # Only the plot needs matplotlib (the training core imports without it); Agg before pyplot.
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
    title = (
        f"Simulated active learning: {result.problems} problems, {c.folds} folds x {c.seeds} "
        f"seeds; {last_line(result).removeprefix('active learning: ')}"
    )
    # Wrapped: the ratios of every arm make one line wider than the figure.
    fig.suptitle(textwrap.fill(title, width=130), fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
