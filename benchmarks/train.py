"""Training throughput of our loop next to TRL 1.13.0's PRMTrainer, same data and model.

    python -m benchmarks.train                 # small random Llama, 8 parquet problems
    python -m benchmarks.train --setup-trl     # first create the TRL virtualenv
    python -m benchmarks.train --data trl.jsonl --skip-trl   # a TRL-format file instead

Both train one epoch, full fine-tuning, on the same labelled steps (PRM800K phase-1 rows
from the shared parquet) with the same random Llama (built in code) and tokenizer. TRL
sees each rated alternative as its own sequence (prefix + alternative, only the last step
labelled: the same labels); ours packs alternatives after the path with a tree mask. So
"labelled steps/s" is the like-for-like figure; tokens/s counts the tokens each side ran.
On CUDA it also prints model FLOPs utilisation: 6 * N * tokens/s / peak bf16 FLOP/s.
The last lines add, on the whole phase-1 training file: the share of pad tokens in one
epoch's batches with a row per solution and with solutions packed into shared rows
(`pack_solutions`), and the tree's gain in tokens: tokens the model processes per labelled
step, packed trees against one sequence per rated path. `--data PATH` takes any shape `cli train
--data` reads (TRL stepwise supervision, Math-Shepherd, ...) in place of the phase-1 file.

TRL lives in its own virtualenv (default $STEPWISE_CACHE/venv-trl) and runs as a
subprocess, so its pins never touch the project's.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._setup import shared_data
from benchmarks._trl import TRL_PINS, run_trl, trl_python, trl_rows

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


def build_model(folder: Path, texts: list[str], hidden: int, layers: int) -> int:
    """A random Llama causal LM and a byte-level BPE tokenizer trained on `texts`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=4000,
            special_tokens=["<pad>", "<s>", "</s>"],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        max_position_embeddings=8192,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    embeddings = model.model.embed_tokens.weight.numel()
    return sum(p.numel() for p in model.model.parameters()) - embeddings  # N for 6*N*tokens


def labelled_rows(examples: list, tokenizer: Any, max_length: int) -> list:
    """Our token rows of the examples, those with a label (what train() keeps)."""
    from modeling.training.data import IGNORE, build_features

    return [
        r
        for r in build_features(examples, tokenizer, max_length)
        if any(label != IGNORE for label in r.labels)
    ]


def padding_shares(rows: list, max_length: int, batch_tokens: int) -> tuple[float, float]:
    """Share of pad tokens in one epoch's batches as train() builds them: (a row per solution,
    solutions packed into shared rows)."""
    from modeling.training.config import TrainConfig
    from modeling.training.data import pack_length
    from modeling.training.train import training_batches

    shares = []
    for pack in (False, True):
        config = TrainConfig(max_length=max_length, batch_tokens=batch_tokens, pack_solutions=pack)
        packs, batches = training_batches(rows, config)
        padded = sum(len(b) * max(pack_length(packs[i]) for i in b) for b in batches)
        shares.append(1 - sum(pack_length(p) for p in packs) / padded)
    return shares[0], shares[1]


def tree_tokens(rows: list, examples: list, tokenizer: Any, max_length: int) -> tuple[float, float]:
    """Tokens the model processes per labelled step: (our packed trees, one sequence per
    rated path as `trl_rows` lays them out: each alternative repeats its whole prefix).
    Both truncate at max_length and drop the labels past it, as their trainers do."""
    from modeling.training.data import IGNORE, encode_segments, start_ids

    ours = sum(len(r) for r in rows) / sum(lab != IGNORE for r in rows for lab in r.labels)
    start = len(start_ids(tokenizer))
    tokens = labels = 0
    for e in examples:
        lengths = [len(ids) for ids in encode_segments(tokenizer, [e.problem, *e.steps])]
        ends = [start + sum(lengths[: k + 2]) for k in range(len(e.steps))]  # step k's end
        if e.steps:
            tokens += min(ends[-1], max_length)
            labels += sum(
                r is not None and end <= max_length for r, end in zip(e.ratings, ends, strict=True)
            )
        alts = encode_segments(tokenizer, [a.text for a in e.alternatives])
        for a, ids in zip(e.alternatives, alts, strict=True):
            length = (ends[a.after - 1] if a.after else start + lengths[0]) + len(ids)
            tokens += min(length, max_length)
            labels += length <= max_length
    return ours, tokens / labels


def peak_flops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=8, help="parquet problems to train on")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=4, help="TRL sequences per batch")
    parser.add_argument("--batch-tokens", type=int, default=8192, help="our padded tokens/batch")
    parser.add_argument(
        "--data",
        metavar="PATH",
        help="train on this file (any shape cli train --data reads) instead of the phase-1 parquet",
    )
    parser.add_argument("--trl-python", help="python of a venv with trl (default: ours)")
    parser.add_argument("--setup-trl", action="store_true", help=f"create it: {' '.join(TRL_PINS)}")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument(
        "--no-pack", action="store_true", help="train with a row per solution (pack_solutions off)"
    )
    args = parser.parse_args()

    import torch
    from transformers.utils import logging as hf_logging

    from modeling.training.config import TrainConfig
    from modeling.training.data import subsample_problems
    from modeling.training.inputs import DataFormatError, read_training_data
    from modeling.training.train import train

    hf_logging.set_verbosity_error()
    path = args.data or shared_data() / "prm800k" / "phase1_train.stepwise-critic.parquet"
    try:
        data = read_training_data(path)
    except DataFormatError as exc:
        parser.error(str(exc))
    print(data.summary())
    every = data.solutions
    examples = subsample_problems(every, args.problems, seed=0)
    texts = [e.problem for e in examples] + [s for e in examples for s in e.steps]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"device {device}, torch threads {torch.get_num_threads()}, {len(examples)} solutions, "
        f"{sum(e.n_labels() for e in examples)} labelled steps"
    )

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        n_params = build_model(model_dir, texts, args.hidden, args.layers)
        print(
            f"model: random Llama, hidden {args.hidden}, {args.layers} layers, "
            f"{n_params / 1e6:.1f}M non-embedding parameters"
        )

        config = TrainConfig(
            backbone=str(model_dir),
            mode="full",
            epochs=1,
            lr=1e-4,
            batch_tokens=args.batch_tokens,
            max_length=args.max_length,
            warmup_ratio=0.0,
            pack_solutions=not args.no_pack,
            output_dir=str(Path(tmp) / "ours"),
            checkpoint_every=10**9,
        )
        result = train(config, examples)
        ours = {
            "tokens_per_s": result.metrics["train_tokens_per_s"],
            "labels_per_s": result.metrics["labels"] / result.metrics["train_seconds"],
            "seconds": result.metrics["train_seconds"],
            "labels": result.metrics["labels"],
        }
        print(
            f"ours:  {ours['tokens_per_s']:9.0f} tokens/s  {ours['labels_per_s']:7.1f} "
            f"labelled steps/s  ({ours['labels']} labels, {ours['seconds']:.1f} s, "
            f"{result.metrics['steps']} steps, pack_solutions {config.pack_solutions})"
        )
        peak = peak_flops()
        if peak:
            mfu = 6 * n_params * ours["tokens_per_s"] / peak
            print(f"ours:  MFU {mfu:.1%} of {peak / 1e12:.0f} TFLOP/s bf16")

        theirs = None if args.skip_trl else trl_throughput(args, Path(tmp), model_dir, examples)
        if theirs:
            print(
                f"ratio ours/TRL: tokens/s x{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}, "
                f"labelled steps/s x{ours['labels_per_s'] / theirs['labels_per_s']:.2f}"
            )
        # Padding and the tree's gain in tokens, on the whole file (no
        # training needed).
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        rows = labelled_rows(every, tokenizer, args.max_length)
        before, after = padding_shares(rows, args.max_length, args.batch_tokens)
        tree, per_path = tree_tokens(rows, every, tokenizer, args.max_length)
    print(
        f"padding: before {before:.2%}, after {after:.2%} (pad tokens in one epoch's batches of "
        f"the {'--data' if args.data else 'phase-1 training'} file, max length {args.max_length}, "
        f"batch tokens {args.batch_tokens}: a row per solution, then solutions packed)"
    )
    trl_speed = f"{theirs['labels_per_s']:.1f}" if theirs else "n/a"
    ratio = f"{ours['labels_per_s'] / theirs['labels_per_s']:.2f}" if theirs else "n/a"
    print(
        f"tree training: labeled steps/s ours {ours['labels_per_s']:.1f}, trl {trl_speed}, "
        f"ratio {ratio}; tokens per labeled step ours {tree:.0f}, per-path {per_path:.0f}"
    )
    return 0 if theirs or args.skip_trl else 1


def trl_throughput(
    args: Any, tmp: Path, model_dir: Path, examples: list
) -> dict[str, float] | None:
    """TRL's PRMTrainer on the same rows in its own virtualenv; None (said why) if it cannot."""
    python = trl_python(args.trl_python, args.setup_trl)
    if python is None:
        return None
    options = ["--batch-size", str(args.batch_size), "--max-length", str(args.max_length)]
    report = run_trl(python, model_dir, trl_rows(examples), tmp, options)
    if report is None:
        return None
    theirs = {
        "tokens_per_s": report["tokens"] / report["seconds"],
        "labels_per_s": report["labels"] / report["seconds"],
    }
    print(
        f"TRL {report['trl']} PRMTrainer: {theirs['tokens_per_s']:9.0f} tokens/s  "
        f"{theirs['labels_per_s']:7.1f} labelled steps/s  ({report['labels']} labels, "
        f"{report['sequences']} sequences, {report['seconds']:.1f} s)"
    )
    return theirs


if __name__ == "__main__":
    raise SystemExit(main())
