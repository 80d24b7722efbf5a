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
from .simulation import SimulationResult, routing_arm

# The kappas the routing line names (the table has every one simulated).
LINE_KAPPAS = (0.5, 0.7, 0.9)


def last_line(result: SimulationResult) -> str:
    """The line a lab compares first: the routing line when routing arms ran, else the active-
    learning line."""
    return summary_lines(result)[-1]


def summary_lines(result: SimulationResult) -> list[str]:
    """`active learning: ratio (solutions) convincing_wrong X [lo, hi], uncertainty Y [lo, hi];
    (step labels) ...` when those arms ran; then, when routing ran, `routing (humans only): ...`
    and last `routing: human labels saved (step labels) at kappa 0.5 X [lo, hi], ...`: the step
    labels uniform needs for the arm's final AUROC over the human step labels the arm used, with
    audited machine labels (routing+machine) when that arm ran, else routing alone."""
    lines = []
    arms = result.config.arms

    def part(axis: str) -> str:
        return ", ".join(
            f"{arm} {ratio.text()}"
            for arm in ("convincing_wrong", "uncertainty")
            if (ratio := result.ratio(arm, axis))
        )

    if set(arms) & {"convincing_wrong", "uncertainty", "mix"} or not (
        set(arms) & {"routing", "routing+machine"}
    ):
        lines.append(
            f"active learning: ratio (solutions) {part('solutions')}; (step labels) "
            f"{part('labels')}"
        )

    def routing(arm: str) -> str:
        kappas = [k for k in result.config.judge_kappas if k in LINE_KAPPAS] or list(
            result.config.judge_kappas
        )
        return ", ".join(
            f"{kappa:g} {ratio.text()}"
            for kappa in kappas
            if (ratio := result.ratio(routing_arm(arm, kappa), "labels"))
        )

    if "routing" in arms and "routing+machine" in arms:
        lines.append(
            f"routing (humans only): human labels saved (step labels) at kappa {routing('routing')}"
        )
    for arm in ("routing+machine", "routing"):
        if arm in arms:
            lines.append(f"routing: human labels saved (step labels) at kappa {routing(arm)}")
            break
    return lines


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
    for arm in c.arm_names():
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
    for arm in c.arm_names():
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
    lines += machine_table(result)
    lines += [""] + summary_lines(result)
    return "\n".join(lines) + "\n"


def machine_table(result: SimulationResult) -> list[str]:
    """Routing arms: the judges' realised kappas and, with machine labels, how many were
    accepted and the audited precision (mean over runs of each run's final share)."""
    if not result.extra.get("judge_kappas"):
        return []
    lines = [
        "",
        "| judge kappa (target) | realised kappa, mean [min, max] | machine labels accepted "
        "(solutions, mean) | audited | audited precision (mean over runs) |",
        "|---:|---|---:|---:|---:|",
    ]
    for row in result.extra["judge_kappas"]:
        finals = _finals(result, routing_arm("routing+machine", row["target"]))
        accepted = f"{np.mean([p.machine_solutions for p in finals]):.0f}" if finals else "-"
        audited = f"{np.mean([p.machine_audited for p in finals]):.0f}" if finals else "-"
        precisions = [p.machine_precision for p in finals if p.machine_precision is not None]
        precision = f"{np.mean(precisions):.3f}" if precisions else "-"
        lines.append(
            f"| {row['target']:g} | {row['realised_mean']:.3f} [{row['realised_min']:.3f}, "
            f"{row['realised_max']:.3f}] | {accepted} | {audited} | {precision} |"
        )
    return lines


def _finals(result: SimulationResult, arm: str) -> list:
    points = result.arm(arm)
    if not points:
        return []
    last = max(p.generation for p in points)
    return [p for p in points if p.generation == last]


STYLES = {
    "uniform": ("#888888", "uniform"),
    "convincing_wrong": ("#2f5bea", "convincing wrong (paper)"),
    "uncertainty": ("#d9480f", "uncertainty (ensemble, ActPRM)"),
    "mix": ("#2b8a3e", "mix"),
}
# Routing arms, one shade per kappa (lighter = a weaker judge).
ROUTING_COLORS = {"routing": "Purples", "routing+machine": "Oranges"}


def style(result: SimulationResult, arm: str) -> tuple[str, str, str]:
    """(colour, legend, line style) of an arm."""
    if arm in STYLES:
        return (*STYLES[arm], "-")
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    base, kappa = arm.split(" kappa ")
    kappas = list(result.config.judge_kappas)
    shade = 0.45 + 0.5 * (kappas.index(float(kappa)) + 1) / len(kappas)
    colour = to_hex(colormaps[ROUTING_COLORS[base]](shade))
    return colour, arm, "--" if base == "routing" else "-"


def write_plot(result: SimulationResult, path: Path) -> Path:
    """Mean held-out step AUROC against solutions and against step labels, with 95% bands."""
    # Only the plot needs matplotlib (the training core imports without it); Agg before pyplot.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110, sharey=True)
    for ax, axis, label in zip(axes, AXES, ("solutions labeled", "step labels"), strict=True):
        for arm in result.config.arm_names():
            rows = curve(result, arm)
            xs = [r[axis] for r in rows]
            color, name, line = style(result, arm)
            ax.plot(
                xs, [r["auroc"] for r in rows], marker="o", color=color, label=name, linestyle=line
            )
            ax.fill_between(
                xs, [r["low"] for r in rows], [r["high"] for r in rows], color=color, alpha=0.15
            )
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out step AUROC (mean, 95% band)")
    axes[0].legend(fontsize=7)
    c = result.config
    title = (
        f"Simulated active learning: {result.problems} problems, {c.folds} folds x {c.seeds} "
        f"seeds; {'; '.join(summary_lines(result))}"
    )
    # Wrapped: the ratios of every arm make one line wider than the figure.
    fig.suptitle(textwrap.fill(title, width=130), fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
