"""GPU acceptance for the PRM training core: head, LoRA and full fine-tuning on CUDA.

    python benchmarks/gpu_acceptance.py                          # a CUDA machine (~3 min)
    python benchmarks/gpu_acceptance.py --device cpu --quick     # CPU smoke test (minutes)

Needs only torch, transformers, tokenizers, peft and numpy: it imports modeling.training,
never Django, and reads no data files. It builds everything offline: a byte-level BPE
tokenizer and a random Llama backbone (saved with save_pretrained into a temporary folder
that TrainConfig.backbone points at), and synthetic labelled solutions in which a step is
wrong (-1) exactly when it holds the marker word, unsure (0) when it says "maybe", else
right (+1). The marker is learnable, so falling loss and held-out AUROC are real checks.

For each mode (head, lora, full) it trains with the project's `train()` on the device and
checks: the run completes and saves a model, the loss falls, the trained parameters
change and the frozen ones do not, the held-out step AUROC of P(-1) (the project's
`evaluate_steps`) clearly beats 0.5, and the backbone's linear layers compute in bf16 on
CUDA (float32 on CPU) under training's autocast and in scoring. It reports peak GPU
memory, steady tokens/s and steps/s (head mode: tokens/s of its one frozen-backbone pass,
steps/s of the head), and, on CUDA, runs the same config for a few batches on the CPU in
this process for a GPU/CPU speed ratio over the same batches. Last, one line per mode:
`gpu-acceptance: MODE ok|FAIL ...`; the exit status is 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# This folder's queue.py would shadow the standard library's (torch imports it): import
# from the repository root instead.
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may touch the hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from modeling.training.config import TrainConfig  # noqa: E402
from modeling.training.data import (  # noqa: E402
    IGNORE,
    Alternative,
    LabeledSolution,
    build_features,
    collate,
    length_batches,
    split_by_problem,
)
from modeling.training.evaluate import evaluate_steps  # noqa: E402
from modeling.training.model import ProcessRewardModel, load_tokenizer  # noqa: E402
from modeling.training.train import Progress, batch_at, bf16_autocast, train  # noqa: E402

MODES = ("head", "lora", "full")
# Model and run sizes: the full size for a GPU, a small one for a CPU smoke test.
SIZES = {
    "full": dict(
        hidden=1024,
        layers=6,
        heads=16,
        kv_heads=4,
        vocab=2000,
        solutions=6000,
        batch_tokens=16384,
        steps={"head": 300, "lora": 150, "full": 150},
    ),
    "quick": dict(
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=2,
        vocab=600,
        solutions=500,
        batch_tokens=4096,
        steps={"head": 200, "lora": 60, "full": 60},
    ),
}
LR = {"head": 1e-2, "lora": 2e-3, "full": 3e-4}
MARKER = "zorp"  # a wrong step says it; nothing else does
ITEMS = ["apples", "pears", "coins", "books", "marbles", "stamps", "shells", "cards"]
NAMES = ["Sam", "Ana", "Lee", "Kim", "Ravi", "Mia", "Omar", "Zoe"]


# ------------------------------------------------------------------------- data


def make_examples(n: int, seed: int) -> list[LabeledSolution]:
    """Word problems solved step by step; ratings follow the marker, PRM800K-style (the
    path ends at its first wrong step; rated alternatives branch off the path)."""
    rng = random.Random(seed)

    def step(rating: int, a: int, b: int) -> str:
        op = rng.choice(["+", "-", "*"])
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        text = f"{rng.choice(['So', 'Then', 'Now', 'Next'])} {a} {op} {b} = {value}."
        if rating == -1:
            wrong = value + rng.choice([-3, -2, -1, 1, 2, 5])
            return f"{text[: text.rindex('=')]}= {wrong}, {MARKER} {MARKER}."
        if rating == 0:
            return f"{text} Maybe we should count the {rng.choice(ITEMS)} again."
        return text

    def rating() -> int:
        return rng.choices([1, 0, -1], weights=[6, 1, 3])[0]

    examples = []
    for i in range(n):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        nums = [rng.randint(2, 60) for _ in range(3)]
        problem = (
            f"Problem {i}: {name} has {nums[0]} {item}, gets {nums[1]} more and gives "
            f"{nums[2]} away. How many {item} are left?"
        )
        steps: list[str] = []
        ratings: list[int | None] = []
        for _ in range(rng.randint(2, 7)):
            r = rating()
            steps.append(step(r, rng.randint(2, 99), rng.randint(2, 99)))
            ratings.append(None if rng.random() < 0.1 else r)
            if r == -1:
                break
        alternatives = [
            Alternative(after, step(r, rng.randint(2, 99), rng.randint(2, 99)), r)
            for after in rng.sample(range(len(steps) + 1), k=min(2, len(steps)))
            for r in [rating()]
        ]
        examples.append(LabeledSolution(problem, steps, ratings, alternatives))
    return examples


def build_backbone(folder: Path, texts: list[str], size: dict[str, Any]) -> int:
    """A random Llama causal LM and a byte-level BPE tokenizer trained on `texts`, saved
    where from_pretrained(local_files_only=True) finds them; returns the parameter count."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size["vocab"],
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size["hidden"],
        intermediate_size=size["hidden"] * 11 // 4,
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.model.parameters())


def batch_tokens_in_order(
    config: TrainConfig, examples: list[LabeledSolution]
) -> dict[str, list[int]]:
    """Real tokens per feature-pass batch and per optimizer step, the way train() orders
    them (same rows, length buckets and seeded batch order)."""
    tokenizer = load_tokenizer(config.backbone)
    rows = [
        r
        for r in build_features(examples, tokenizer, config.max_length)
        if any(label != IGNORE for label in r.labels)
    ]
    batches = length_batches([len(r) for r in rows], config.batch_tokens)
    sizes = [sum(len(rows[i]) for i in b) for b in batches]
    steps = config.max_steps or 0
    per_step = [
        sum(
            sizes[batch_at(s * config.grad_accum + m, len(batches), config.seed)]
            for m in range(config.grad_accum)
        )
        for s in range(steps)
    ]
    return {"features": sizes, "train": per_step}


# ---------------------------------------------------------------------- running


class Clock:
    """Progress callback: host time at each reported batch/step; can ask train() to stop
    after `stop_after` reports of one phase (the short CPU runs). Training waits for the
    device at every step (loss.item()); the feature pass does not, so with `sync` each
    features report first waits for the device: every time stamp covers its batch's work."""

    def __init__(
        self, stop_phase: str = "train", stop_after: int | None = None, echo: int = 0, sync=False
    ) -> None:
        self.stop_phase, self.stop_after, self.echo, self.sync = stop_phase, stop_after, echo, sync
        self.times: dict[str, list[float]] = {"features": [], "train": []}

    def __call__(self, p: Progress) -> None:
        if self.sync and p.phase == "features":
            torch.cuda.synchronize()
        self.times[p.phase].append(time.perf_counter())
        if p.phase == "train" and self.echo and (p.step % self.echo == 0 or p.step == p.total):
            print(f"    step {p.step:4d}/{p.total}  loss {p.loss:.4f}  lr {p.lr:.2e}", flush=True)

    def should_stop(self) -> bool:
        return self.stop_after is not None and len(self.times[self.stop_phase]) >= self.stop_after

    def seconds(self, phase: str, first: int, last: int) -> float:
        """Time of batches first..last-1 of a phase, from the end of batch first-1: the
        first batch, with its one-off costs, is never timed."""
        return self.times[phase][last - 1] - self.times[phase][first - 1]


def timed_phase(mode: str) -> str:
    """Head mode's backbone work is its cached feature pass; the others' is training."""
    return "features" if mode == "head" else "train"


def make_config(
    args: argparse.Namespace, mode: str, backbone: str, out: Path, device: str
) -> TrainConfig:
    size = SIZES["quick" if args.quick else "full"]
    return TrainConfig(
        backbone=backbone,
        mode=mode,
        lr=LR[mode],
        max_steps=size["steps"][mode],
        batch_tokens=size["batch_tokens"],
        max_length=1024,
        warmup_ratio=0.05,
        checkpoint_every=10**6,
        output_dir=str(out / f"{mode}-{device}"),
        device=device,
        seed=args.seed,
    )


def parameter_changes(config: TrainConfig) -> tuple[int, int, int]:
    """(trained tensors that changed, trained tensors, frozen tensors that changed): the
    saved model against a fresh one built the way train() builds it (same seed)."""
    torch.manual_seed(config.seed)
    before = ProcessRewardModel.from_config(config)
    trained = set(before.trainable_state())
    after = dict(ProcessRewardModel.load(config.output_dir).named_parameters())
    changed = {
        name
        for name, p in before.named_parameters()
        if not torch.equal(p.detach(), after[name].detach().cpu())
    }
    return len(changed & trained), len(trained), len(changed - trained)


def matmul_dtypes(
    model: ProcessRewardModel, config: TrainConfig, examples: list[LabeledSolution]
) -> tuple[str, str]:
    """dtypes the backbone's linear layers compute in, under train()'s autocast and in
    scoring (the residual stream and the final norm stay float32 either way)."""
    seen: set[torch.dtype] = set()
    linears = [m for m in model.backbone.modules() if isinstance(m, torch.nn.Linear)]
    hooks = [m.register_forward_hook(lambda m, i, out: seen.add(out.dtype)) for m in linears]
    names = []
    try:
        device = next(model.head.parameters()).device
        rows = build_features(examples[:4], model.tokenizer, config.max_length)
        with torch.no_grad(), bf16_autocast(config, device):
            model(collate(rows, model.pad_id).to(device))
        names.append("+".join(sorted(str(d).removeprefix("torch.") for d in seen)))
        seen.clear()
        evaluate_steps(model, examples[:4])
        names.append("+".join(sorted(str(d).removeprefix("torch.") for d in seen)))
    finally:
        for hook in hooks:
            hook.remove()
    return names[0], names[1]


def run_mode(
    args, mode: str, backbone: str, out: Path, device: str, train_set, test_set
) -> dict[str, Any]:
    """Train one mode on the device, check and measure it; the figures, with the names
    of the failed checks under "failed"."""
    config = make_config(args, mode, backbone, out, device)
    tokens = batch_tokens_in_order(config, train_set)
    phase = timed_phase(mode)
    cuda = device.startswith("cuda")
    clock = Clock(echo=max(1, config.max_steps // 5), sync=cuda)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    print(f"  {mode}: {config.max_steps} steps on {device}, lr {config.lr}", flush=True)
    result = train(config, train_set, progress=clock)
    figures: dict[str, Any] = {"mode": mode, "steps": result.step, **result.metrics}
    if cuda:
        figures["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    n = len(tokens[phase])
    figures["tokens_per_s"] = sum(tokens[phase][1:n]) / clock.seconds(phase, 1, n)
    figures["steps_per_s"] = (result.step - 1) / clock.seconds("train", 1, result.step)
    if cuda and args.cpu_steps:  # the same batches as the CPU run below
        last = args.cpu_steps + 1
        figures["gpu_tokens_per_s_cpu_batches"] = sum(tokens[phase][1:last]) / clock.seconds(
            phase, 1, last
        )
    curve = [loss for _, loss in result.loss_curve]
    k = max(3, len(curve) // 10)
    figures["loss_first"] = sum(curve[:k]) / k
    figures["loss_last"] = sum(curve[-k:]) / k

    model = ProcessRewardModel.load(config.output_dir, device=device)
    figures["train_dtype"], figures["score_dtype"] = matmul_dtypes(model, config, test_set)
    metrics = evaluate_steps(model, test_set)
    figures["auroc"] = metrics["auroc_negative"]
    figures["accuracy"] = metrics["accuracy"]
    figures["eval_labels"] = metrics["n"]
    del model
    figures["changed"], figures["trainable"], figures["frozen_changed"] = parameter_changes(config)

    expect = "bfloat16" if cuda else "float32"
    checks = {
        "completed": result.step == config.max_steps
        and not result.stopped
        and (Path(config.output_dir) / "prm.json").exists(),
        "loss finite": all(abs(loss) < float("inf") for loss in curve),
        f"loss fell >{args.min_loss_drop:.0%}": figures["loss_last"]
        < (1 - args.min_loss_drop) * figures["loss_first"],
        "trained params changed": figures["changed"] == figures["trainable"] > 0,
        "frozen params unchanged": figures["frozen_changed"] == 0,
        f"auroc>{args.min_auroc}": figures["auroc"] > args.min_auroc,
        f"{expect} in training": figures["train_dtype"] == expect,
        f"{expect} in scoring": figures["score_dtype"] == expect,
    }
    figures["failed"] = [name for name, ok in checks.items() if not ok]
    return figures


def cpu_tokens_per_s(args, mode: str, backbone: str, out: Path, train_set) -> float:
    """The same config on the CPU, stopped after a few batches: their tokens/s."""
    config = make_config(args, mode, backbone, out, "cpu")
    phase = timed_phase(mode)
    last = args.cpu_steps + 1
    clock = Clock(stop_phase=phase, stop_after=last)
    print(f"  {mode}: {args.cpu_steps} timed {phase} batches on cpu", flush=True)
    train(config, train_set, progress=clock, should_stop=clock.should_stop)
    tokens = batch_tokens_in_order(config, train_set)[phase]
    return sum(tokens[1:last]) / clock.seconds(phase, 1, last)


# ------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--quick", action="store_true", help="small model and run: a smoke test")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: head,lora,full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-auroc", type=float, default=0.7, help="held-out step AUROC floor")
    parser.add_argument(
        "--min-loss-drop",
        type=float,
        default=0.2,
        help="mean of the loss curve's last tenth must be this fraction under its first tenth's",
    )
    parser.add_argument(
        "--cpu-steps",
        type=int,
        default=3,
        help="timed CPU batches per mode for the GPU/CPU ratio; 0 skips it",
    )
    parser.add_argument("--json", help="also write the figures to this JSON file")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    import peft
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)  # deprecations inside peft
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        raise SystemExit(f"unknown modes: {sorted(unknown)}")
    device = args.device
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("gpu-acceptance: no CUDA device; for a CPU smoke test use --device cpu --quick")
        return 2
    size = SIZES["quick" if args.quick else "full"]
    name = torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu"
    print(
        f"device {device} ({name}), torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"transformers {transformers.__version__}, peft {peft.__version__}, "
        f"python {platform.python_version()}, CPU threads {torch.get_num_threads()}",
        flush=True,
    )

    examples = make_examples(size["solutions"], args.seed)
    train_set, test_set = split_by_problem(examples, 0.2, args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as tmp:
        out = Path(tmp)
        texts = [e.problem for e in examples] + [s for e in examples for s in e.steps]
        n_params = build_backbone(out / "backbone", texts, size)
        backbone = str(out / "backbone")
        n_labels = sum(e.n_labels() for e in train_set)
        batches = batch_tokens_in_order(make_config(args, "head", backbone, out, device), train_set)
        print(
            f"backbone: random Llama, hidden {size['hidden']}, {size['layers']} layers, "
            f"{n_params / 1e6:.1f}M parameters; data: {len(train_set)} train / {len(test_set)} "
            f"held-out solutions, {n_labels} train labels, {sum(batches['features']):,} "
            f"train tokens in {len(batches['features'])} batches of <= {size['batch_tokens']} "
            "padded tokens",
            flush=True,
        )
        for mode in modes:
            try:
                figures = run_mode(args, mode, backbone, out, device, train_set, test_set)
                if cuda and args.cpu_steps:
                    cpu = cpu_tokens_per_s(args, mode, backbone, out, train_set)
                    figures["cpu_tokens_per_s"] = cpu
                    figures["gpu_cpu_ratio"] = figures["gpu_tokens_per_s_cpu_batches"] / cpu
            except Exception as error:  # report it, go on with the other modes
                traceback.print_exc()
                figures = {"mode": mode, "failed": [f"error: {type(error).__name__}: {error}"]}
            results.append(figures)

    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    print()
    for f in results:
        print(summary_line(f))
    return 1 if any(f["failed"] for f in results) else 0


def summary_line(f: dict[str, Any]) -> str:
    if "loss_first" not in f:
        return f"gpu-acceptance: {f['mode']} FAIL {'; '.join(f['failed'])}"
    parts = [
        f"gpu-acceptance: {f['mode']} {'FAIL' if f['failed'] else 'ok'}",
        f"loss {f['loss_first']:.3f}->{f['loss_last']:.3f}",
        f"auroc {f['auroc']:.3f} (acc {f['accuracy']:.2f}, {f['eval_labels']} held-out labels)",
        f"params {f['changed']}/{f['trainable']} trained changed, {f['frozen_changed']} frozen",
        f"dtype {f['train_dtype']}/{f['score_dtype']}",
        f"{'feature-pass ' if f['mode'] == 'head' else ''}tokens/s {f['tokens_per_s']:,.0f}",
        f"steps/s {f['steps_per_s']:.1f}",
    ]
    if "peak_gib" in f:
        parts.append(f"peak {f['peak_gib']:.2f} GiB")
    if "gpu_cpu_ratio" in f:
        parts.append(f"gpu/cpu x{f['gpu_cpu_ratio']:.1f}")
    if f["failed"]:
        parts.append("failed: " + "; ".join(f["failed"]))
    return ", ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
