"""The training loop, top to bottom: build rows, (cache features), AdamW, checkpoints.

`train(config, examples)` is all a caller needs. It resumes from the newest checkpoint in
`config.output_dir` when there is one, and ends exactly where an uninterrupted run would:
the batch order is a pure function of (seed, epoch), and a checkpoint holds the trained
parameters, optimizer, scheduler, RNG states, step and loss curve.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from array import array
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from .config import TrainConfig
from .data import IGNORE, LabeledSolution, Row, build_features, collate, length_batches
from .model import ProcessRewardModel, resolve_device

# Changing these between an interrupted run and its resume does not change the result.
RESUMABLE_CHANGES = {"output_dir", "device", "checkpoint_every"}
KEEP_CHECKPOINTS = 2


@dataclass
class Progress:
    phase: str  # "features" (head mode caching the backbone pass) or "train"
    step: int
    total: int
    loss: float | None = None
    lr: float | None = None
    elapsed_s: float = 0.0


@dataclass
class TrainResult:
    output_dir: str
    step: int
    total_steps: int
    stopped: bool  # should_stop asked to stop; the run resumes from its checkpoint
    metrics: dict[str, float] = field(default_factory=dict)
    loss_curve: list[tuple[int, float]] = field(default_factory=list)


ProgressFn = Callable[[Progress], None]
StopFn = Callable[[], bool]


def train(
    config: TrainConfig,
    examples: Sequence[LabeledSolution],
    *,
    progress: ProgressFn | None = None,
    should_stop: StopFn | None = None,
) -> TrainResult:
    started = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(config.device)
    autocast = bf16_autocast(config, device)
    report = progress or (lambda p: None)
    stop = should_stop or (lambda: False)

    # Model and data. The head is seeded so a fresh run and a resumed one start alike.
    torch.manual_seed(config.seed)
    model = ProcessRewardModel.from_config(config).to(device)
    rows = [
        r
        for r in build_features(examples, model.tokenizer, config.max_length)
        if any(label != IGNORE for label in r.labels)
    ]
    if not rows:
        raise ValueError("no labelled step in the training examples")
    batches = length_batches([len(r) for r in rows], config.batch_tokens)
    labels_per_batch = [sum(lab != IGNORE for i in b for lab in rows[i].labels) for b in batches]
    total_steps = config.max_steps or max(
        1, math.ceil(config.epochs * len(batches) / config.grad_accum)
    )

    # Head mode: the frozen backbone's step-end features, computed once.
    cached: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    feature_s = 0.0
    if config.mode == "head" and config.cache_features:
        t0 = time.perf_counter()
        key = features_key(config, rows, batches)
        cached = load_features(out, key, device)
        if cached is not None:  # a resumed run: the frozen backbone would give the same again
            report(Progress("features", len(batches), len(batches), elapsed_s=0.0))
        else:
            cached = cache_features(model, rows, batches, device, autocast, report, stop)
            if cached is None:
                return TrainResult(str(out), 0, total_steps, stopped=True)
            save_features(out, key, cached)
        feature_s = time.perf_counter() - t0

    optimizer = make_optimizer(model, config)
    scheduler = lr_scheduler(optimizer, config, total_steps)
    class_weights = torch.tensor([1.0, config.neutral_weight, 1.0], device=device)
    step, loss_curve = 0, list[tuple[int, float]]()
    checkpoint = latest_checkpoint(out)
    if checkpoint is not None:
        step, loss_curve = restore_checkpoint(checkpoint, model, optimizer, scheduler, config)

    model.train()
    tokens, t_train = 0, time.perf_counter()
    stopped = False
    while step < total_steps:
        if stop():
            stopped = True
            break
        micro = [
            batch_at(step * config.grad_accum + m, len(batches), config.seed)
            for m in range(config.grad_accum)
        ]
        n_labels = sum(labels_per_batch[b] for b in micro)  # one mean over the whole step
        step_loss = 0.0
        for b in micro:
            if cached is not None:
                features, labels = cached[b]
                logits = model.head(features)
            else:
                batch = collate([rows[i] for i in batches[b]], model.pad_id).to(device)
                with autocast:
                    logits = model(batch)
                labels = batch.labels
                tokens += batch.n_tokens
            loss = (
                F.cross_entropy(
                    logits.float(),
                    labels,
                    weight=class_weights,
                    ignore_index=IGNORE,
                    reduction="sum",
                )
                / n_labels
            )
            loss.backward()
            step_loss += loss.item()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        loss_curve.append((step, step_loss))
        report(
            Progress(
                "train",
                step,
                total_steps,
                step_loss,
                float(scheduler.get_last_lr()[0]),
                time.perf_counter() - started,
            )
        )
        if step % config.checkpoint_every == 0 and step < total_steps:
            save_checkpoint(out, step, model, optimizer, scheduler, loss_curve, config)

    train_s = time.perf_counter() - t_train
    save_checkpoint(out, step, model, optimizer, scheduler, loss_curve, config)
    metrics = {
        "rows": len(rows),
        "labels": sum(labels_per_batch),
        "steps": step,
        "final_loss": final_loss(loss_curve),
        "feature_seconds": round(feature_s, 3),
        "train_seconds": round(train_s, 3),
        # Cached head training reads features, not tokens: its tokens/s would mislead.
        "train_tokens_per_s": round(tokens / train_s, 1) if tokens and train_s else 0.0,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if not stopped:
        model.save(out)
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return TrainResult(str(out), step, total_steps, stopped, metrics, loss_curve)


# ------------------------------------------------------------------ helpers


def bf16_autocast(config: TrainConfig, device: torch.device) -> Any:
    """bf16 autocast on CUDA only (config.bf16 "auto"/"true"); CPU runs in float32."""
    if device.type == "cuda" and config.bf16 != "false":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def batch_at(index: int, n_batches: int, seed: int) -> int:
    """The batch for the index-th micro-batch: a fresh seeded shuffle every epoch."""
    epoch, offset = divmod(index, n_batches)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return int(torch.randperm(n_batches, generator=generator)[offset])


def lr_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 over warmup_ratio of the steps, then linear or cosine decay to 0."""
    from transformers import get_scheduler

    return get_scheduler(
        config.decay,  # "linear" or "cosine": transformers' SchedulerType names
        optimizer,
        num_warmup_steps=math.ceil(config.warmup_ratio * total_steps),
        num_training_steps=total_steps,
    )


def make_optimizer(model: ProcessRewardModel, config: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]  # matrices; not biases or norms
    no_decay = [p for p in params if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr)


@torch.no_grad()
def cache_features(
    model: ProcessRewardModel,
    rows: Sequence[Row],
    batches: Sequence[Sequence[int]],
    device: torch.device,
    autocast: Any,
    report: ProgressFn,
    stop: StopFn,
) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """(step-end features, labels) of every batch (None if asked to stop)."""
    model.eval()
    started = time.perf_counter()
    features = []
    for n, batch_rows in enumerate(batches):
        if stop():
            return None
        batch = collate([rows[i] for i in batch_rows], model.pad_id).to(device)
        with autocast:
            features.append((model.features(batch), batch.labels))
        report(Progress("features", n + 1, len(batches), elapsed_s=time.perf_counter() - started))
    return features


FEATURES_FILE = "features.pt"


def features_key(config: TrainConfig, rows: Sequence[Row], batches: Sequence[Sequence[int]]) -> str:
    """What the cached features depend on: the backbone and the exact token rows and batches."""
    digest = hashlib.sha256(
        json.dumps(
            [config.backbone, config.backbone_layers, config.max_length, config.batch_tokens]
        ).encode()
    )
    for row in rows:
        for part in (
            row.input_ids,
            row.position_ids,
            row.segment,
            row.visible,
            row.ends,
            row.labels,
        ):
            digest.update(array("q", part).tobytes())
    digest.update(json.dumps([list(b) for b in batches]).encode())
    return digest.hexdigest()


def save_features(out: Path, key: str, cached: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Keep head mode's backbone pass on disk (float32, as trained on) for a resume."""
    tmp = out / (FEATURES_FILE + ".tmp")
    torch.save({"key": key, "batches": [(f.cpu(), lab.cpu()) for f, lab in cached]}, tmp)
    tmp.replace(out / FEATURES_FILE)


def load_features(
    out: Path, key: str, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    path = out / FEATURES_FILE
    if not path.exists():
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if saved.get("key") != key:
        return None
    return [(f.to(device), lab.to(device)) for f, lab in saved["batches"]]


def final_loss(loss_curve: Sequence[tuple[int, float]], window: int = 10) -> float:
    tail = [loss for _, loss in loss_curve[-window:]]
    return sum(tail) / len(tail) if tail else float("nan")


# -------------------------------------------------------------- checkpoints


def latest_checkpoint(out: Path) -> Path | None:
    found = sorted((out / "checkpoints").glob("step-*[0-9]"))
    return found[-1] if found else None


def save_checkpoint(
    out: Path,
    step: int,
    model: ProcessRewardModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    loss_curve: list[tuple[int, float]],
    config: TrainConfig,
) -> Path:
    root = out / "checkpoints"
    final = root / f"step-{step:08d}"
    tmp = root / f"step-{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    state = {k: v.contiguous().cpu() for k, v in model.trainable_state().items()}
    save_file(state, tmp / "trainable.safetensors")
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
        tmp / "state.pt",
    )
    meta = {"step": step, "loss_curve": loss_curve, "config": config.to_dict()}
    (tmp / "meta.json").write_text(json.dumps(meta) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)  # a checkpoint is complete or absent, never half-written
    for old in sorted(root.glob("step-*[0-9]"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def restore_checkpoint(
    path: Path,
    model: ProcessRewardModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: TrainConfig,
) -> tuple[int, list[tuple[int, float]]]:
    meta = json.loads((path / "meta.json").read_text())
    saved = meta["config"]
    changed = {k for k, v in config.to_dict().items() if saved.get(k) != v} - RESUMABLE_CHANGES
    if changed:
        raise ValueError(
            f"{path} was made with a different config ({sorted(changed)}); "
            "resume with the same config or use a fresh output_dir"
        )
    trainable = load_file(path / "trainable.safetensors")
    missing = set(model.trainable_state()) - set(trainable)
    if missing:
        raise ValueError(f"{path} lacks trained parameters: {sorted(missing)[:5]}")
    model.load_state_dict(trainable, strict=False)
    state = torch.load(path / "state.pt", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return meta["step"], [tuple(x) for x in meta["loss_curve"]]
