"""Which CPU recipe learns: one frozen backbone pass, many heads compared on its features.

The expensive part of a CPU run is the backbone pass; heads are cheap. This runs the
backbone once over a by-problem split of the phase-1 parquet, keeps the step-end hidden
states of several blocks, and fits the heads a recipe could use on them, printing the
held-out step AUROC of P(-1) of each beside a baseline that reads no model (step length):

    python -m benchmarks.cpu_recipe --problems 300 --layers 12 --keep 2,4,6,8,10,12 \\
        --features /tmp/recipe300.pt          # the pass, kept; run again to refit only
    python -m benchmarks.cpu_recipe --problems 300 --layers 12 --lora-problems 60
                                              # LoRA on the last blocks, same held-out problems

The recipe README documents is the cheapest row that clears the bar; docs/training.md has
the table this printed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import sdpa_kernel

from benchmarks._setup import shared_data
from modeling.training.config import TrainConfig
from modeling.training.data import (
    IGNORE,
    LabeledSolution,
    attention_mask_4d,
    build_features,
    collate,
    length_batches,
    problem_key,
    read_critic_parquet,
    split_by_problem,
    subsample_problems,
)
from modeling.training.evaluate import auroc, evaluate_steps
from modeling.training.model import SDPA_BACKENDS, ProcessRewardModel
from modeling.training.train import train

PARQUET = Path("prm800k") / "phase1_train.stepwise-critic.parquet"  # in shared_data()
NEGATIVE = 0  # class of rating -1


@torch.no_grad()
def extract(
    model: ProcessRewardModel,
    examples: list[LabeledSolution],
    blocks: list[int],
    max_length: int,
    batch_tokens: int,
) -> dict[str, torch.Tensor]:
    """At every labelled step end: x, the hidden states after each of `blocks` (labels,
    blocks, hidden); y, the class; length, the step's tokens; problem, an index."""
    rows = build_features(examples, model.tokenizer, max_length)
    rows = [r for r in rows if any(label != IGNORE for label in r.labels)]
    feats, labels, lengths, problems = [], [], [], []
    index: dict[str, int] = {}
    for batch_rows in length_batches([len(r) for r in rows], batch_tokens):
        batch = collate([rows[i] for i in batch_rows], model.pad_id)
        with sdpa_kernel(SDPA_BACKENDS):
            out = model.backbone(
                input_ids=batch.input_ids,
                attention_mask=attention_mask_4d(batch.segment, batch.visible),
                position_ids=batch.position_ids,
                output_hidden_states=True,
            )
        hidden = torch.stack([out.hidden_states[k] for k in blocks], dim=2)
        ends = hidden.reshape(-1, len(blocks), hidden.shape[-1])[batch.ends].float()
        rated = batch.labels != IGNORE
        feats.append(ends[rated])
        labels.append(batch.labels[rated])
        for i in batch_rows:
            row = rows[i]
            path_start = None
            for pos, label in zip(row.ends, row.labels, strict=True):
                # A path step starts after the previous path step; an alternative at its
                # segment's first token.
                segment = row.segment[pos]
                if segment:
                    start = row.segment.index(segment)
                else:
                    start = pos if path_start is None else path_start
                    path_start = pos + 1
                if label != IGNORE:
                    lengths.append(pos - start + 1)
                    problem = problem_key(examples[row.example].problem)
                    problems.append(index.setdefault(problem, len(index)))
    return {
        "x": torch.cat(feats),
        "y": torch.cat(labels),
        "length": torch.tensor(lengths, dtype=torch.float32),
        "problem": torch.tensor(problems),
    }


def fit_head(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    *,
    hidden: int = 0,
    norm: str = "dataset",
    epochs: int = 60,
    lr: float = 1e-3,
    weight_decay: float = 1e-2,
    dropout: float = 0.1,
) -> torch.Tensor:
    """P(-1) on test_x from a linear (or one-hidden-layer MLP) head fit on the train set.
    Features are (N, blocks, hidden) or (N, hidden); blocks are concatenated after `norm`:
    "dataset" (each feature by the training set's mean and std), "vector" (a parameter-free
    LayerNorm of each block's vector) or "none"."""
    torch.manual_seed(0)
    if norm == "vector":
        train_x = F.layer_norm(train_x, train_x.shape[-1:])
        test_x = F.layer_norm(test_x, test_x.shape[-1:])
    elif norm == "dataset":
        mean, std = train_x.mean(0), train_x.std(0) + 1e-5
        train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    train_x, test_x = train_x.reshape(len(train_x), -1), test_x.reshape(len(test_x), -1)
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


def split(args: argparse.Namespace) -> tuple[list[LabeledSolution], list[LabeledSolution]]:
    """The seeded by-problem split every row of the table is measured on."""
    examples = subsample_problems(
        read_critic_parquet(shared_data() / PARQUET), args.problems, args.seed
    )
    return split_by_problem(examples, args.holdout, args.seed)


def compare_heads(saved: dict[str, Any]) -> None:
    tr, te, blocks = saved["train"], saved["test"], saved["blocks"]
    negative = (te["y"] == NEGATIVE).numpy()
    print(
        f"backbone pass: train {saved['train_s']:.0f} s, held out {saved['test_s']:.0f} s; "
        f"labels: train {len(tr['y'])}, held out {len(te['y'])} ({negative.sum()} rated -1)"
    )
    print("| head | held-out step AUROC |\n| --- | --- |")

    def row(name: str, probs: torch.Tensor) -> None:
        print(f"| {name} | {auroc(probs.numpy(), negative):.3f} |", flush=True)

    row("step length only (no model)", te["length"])
    last, mid = len(blocks) - 1, len(blocks) // 2
    row(
        f"linear, block {blocks[last]}, raw features (the head today)",
        fit_head(tr["x"][:, last], tr["y"], te["x"][:, last], norm="none"),
    )
    for i, block in enumerate(blocks):
        row(f"linear, block {block}", fit_head(tr["x"][:, i], tr["y"], te["x"][:, i]))
    row(f"linear, blocks {blocks}", fit_head(tr["x"], tr["y"], te["x"]))
    row(
        f"linear, blocks {blocks}, per-vector norm",
        fit_head(tr["x"], tr["y"], te["x"], norm="vector"),
    )
    row(
        f"MLP (256), block {blocks[last]}",
        fit_head(tr["x"][:, last], tr["y"], te["x"][:, last], hidden=256),
    )
    row(f"MLP (256), blocks {blocks}", fit_head(tr["x"], tr["y"], te["x"], hidden=256))
    # More problems: the same head on a growing share of the training problems.
    n_problems = int(tr["problem"].max()) + 1
    for column, block in ((mid, blocks[mid]), (last, blocks[last])):
        for share in (0.25, 0.5):
            some = tr["problem"] < int(n_problems * share)
            row(
                f"linear, block {block}, {int(n_problems * share)} of {n_problems} problems",
                fit_head(tr["x"][some, column], tr["y"][some], te["x"][:, column]),
            )


def lora_row(args: argparse.Namespace) -> None:
    """LoRA on the last blocks, trained on the first `lora_problems` training problems of the
    same split and measured on the same held-out problems as the heads."""
    train_set, test_set = split(args)
    keep = set(list(dict.fromkeys(problem_key(e.problem) for e in train_set))[: args.lora_problems])
    some = [e for e in train_set if problem_key(e.problem) in keep]
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
    parser.add_argument(
        "--problems", type=int, default=300, help="problems sampled from the parquet"
    )
    parser.add_argument("--holdout", type=float, default=0.2, help="share of them held out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=12, help="backbone blocks kept")
    parser.add_argument("--keep", default="2,4,6,8,10,12", help="blocks whose outputs are kept")
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--features", default="", help="keep the pass here; reuse it if present")
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
    path = Path(args.features) if args.features else None
    if path and path.exists():
        saved = torch.load(path, weights_only=False)
    else:
        train_set, test_set = split(args)
        config = TrainConfig(backbone_layers=args.layers, device="cpu", max_length=args.max_length)
        model = ProcessRewardModel.from_config(config).eval()
        blocks = [int(k) for k in args.keep.split(",")]
        started = time.perf_counter()
        train_features = extract(model, train_set, blocks, args.max_length, args.batch_tokens)
        middle = time.perf_counter()
        test_features = extract(model, test_set, blocks, args.max_length, args.batch_tokens)
        saved = {
            "train": train_features,
            "test": test_features,
            "blocks": blocks,
            "train_s": middle - started,
            "test_s": time.perf_counter() - middle,
        }
        if path:
            torch.save(saved, path)
    compare_heads(saved)


if __name__ == "__main__":
    main()
