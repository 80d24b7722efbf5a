"""The training loop, top to bottom: build rows, (cache features), AdamW, checkpoints.

`train(config, examples)` is all a caller needs. It resumes from the newest checkpoint in
`config.output_dir` when there is one, and ends exactly where an uninterrupted run would:
the batch order is a pure function of (seed, epoch), and a checkpoint holds the trained
parameters, optimizer, scheduler, RNG states, step and loss curve. Under torchrun every
rank calls it with the same arguments (distributed.py): each takes its share of every step,
and the checkpoint (torch.distributed.checkpoint) resumes on any number of processes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import multiprocessing
import shutil
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from transformers import get_scheduler

from .batching import Batch, collate
from .config import TrainConfig
from .data import (
    IGNORE,
    NUM_CLASSES,
    SEPARATOR,
    LabeledSolution,
    Row,
    Targets,
    build_features,
    length_batches,
    pack_length,
    pack_rows,
    training_record,
)
from .distributed import World, all_sum, any_rank, barrier, current_world, rank_device
from .model import ProcessRewardModel, resolve_device, transformer_blocks

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# What a checkpoint written before a setting existed did: it resumes with that value.
SETTINGS_BEFORE_THEY_EXISTED = {
    "attention": "sdpa",
    "pack_solutions": False,
    "num_labels": NUM_CLASSES,
    "neutral_as": "good",
    "step_separator": SEPARATOR,
    "train_on_last_step_only": False,
    "objective": "process",
}

# Changing these between an interrupted run and its resume does not change the result.
RESUMABLE_CHANGES = {
    "output_dir",
    "device",
    "checkpoint_every",
    "num_workers",
    "log_every",
    "gradient_checkpointing",
    "compile",
}
KEEP_CHECKPOINTS = 2
logger = logging.getLogger(__name__)


@dataclass
class Progress:
    """One report of train(): its phase, in order "load" (the backbone: 0 of 1, then 1 of 1),
    "tokenize" (solutions), "features" (head mode's frozen backbone pass, solutions) and
    "train" (optimizer steps), and how far it is: `step` of `total` in that unit."""

    phase: str
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


class Stopped(Exception):
    """should_stop said yes inside a phase (tokenizing, a backbone block): train() returns a
    stopped result."""


def train(
    config: TrainConfig,
    examples: Sequence[LabeledSolution],
    *,
    progress: ProgressFn | None = None,
    should_stop: StopFn | None = None,
) -> TrainResult:
    """Train in this process, or as one rank of a torchrun process group (see distributed.py):
    every rank gets the same examples and config and takes its share of each step."""
    started = time.perf_counter()
    world = current_world()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = rank_device(resolve_device(config.device), world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls (the head, fp32 masters)
        torch.backends.cudnn.allow_tf32 = True
    autocast = bf16_autocast(config, device)
    report = (progress or (lambda p: None)) if world.main else (lambda p: None)
    stop = should_stop or (lambda: False)
    # Asked inside a phase on one rank alone, which a process group cannot do: its ranks
    # agree (any_rank) at the end of each phase instead.
    stop_here = (lambda: False) if world.distributed else stop

    # Model and data. Seeded alike on every rank: a fresh run and a resumed one, one process
    # or many, start from the same head (FSDP2 shards what each rank built, never broadcasts).
    report(Progress("load", 0, 1))
    torch.manual_seed(config.seed)
    model = ProcessRewardModel.from_config(config, device).to(device)
    report(Progress("load", 1, 1))
    try:
        rows = labelled_rows(examples, model.tokenizer, config, report, stop_here)
    except Stopped:
        return TrainResult(str(out), 0, 0, stopped=True)
    if any_rank(stop(), world, device):
        return TrainResult(str(out), 0, 0, stopped=True)
    if not rows:
        raise ValueError("no labelled step in the training examples")
    packs, batches = training_batches(rows, config)
    labels_per_batch = [
        sum(lab != IGNORE for i in b for row in packs[i] for lab in row.labels) for b in batches
    ]
    # One optimizer step takes grad_accum micro-batches on each rank.
    per_step = config.grad_accum * world.size
    total_steps = config.max_steps or max(1, math.ceil(config.epochs * len(batches) / per_step))

    # Head mode: the frozen backbone's step-end features, computed once (shared out by rank).
    cached: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    feature_s, feature_tokens = 0.0, 0
    if config.mode == "head" and config.cache_features:
        t0 = time.perf_counter()
        cached, computed = features_for(
            model, config, packs, batches, device, autocast, report, stop, world
        )
        if cached is None:
            return TrainResult(str(out), 0, total_steps, stopped=True)
        feature_s = time.perf_counter() - t0
        if computed:  # read back from an earlier attempt, nothing was measured
            feature_tokens = sum(len(row) for pack in packs for row in pack)

    trained = wrap_for_training(model, config, world, device, cached is not None)
    optimizer = make_optimizer(model, config, device)
    scheduler = lr_scheduler(optimizer, config, total_steps)
    class_weights = torch.tensor(config.class_weights(), device=device)
    step, loss_curve = 0, list[tuple[int, float]]()
    checkpoint = latest_checkpoint(out)
    if checkpoint is not None:
        step, loss_curve = restore_checkpoint(
            checkpoint, model, optimizer, scheduler, config, world
        )

    def micro_batches(from_step: int) -> Iterator[int]:
        """This rank's batch indices, step after step: a share of each step's micro-batches."""
        for s in range(from_step, total_steps):
            for m in range(config.grad_accum):
                index = s * per_step + world.rank * config.grad_accum + m
                yield batch_at(index, len(batches), config.seed)

    order = micro_batches(step)
    loader = (
        None
        if cached is not None
        else iter(batch_loader(packs, batches, list(order), model.pad_id, config, device))
    )
    model.train()
    tokens, t_train = 0, time.perf_counter()
    stopped = False
    pending: list[tuple[int, torch.Tensor]] = []  # step losses still on the device
    while step < total_steps:
        # One process asks before every step (on a CPU a step can take seconds); a process
        # group votes every log_every steps, as the vote waits for every rank's device.
        checked = not world.distributed or step % config.log_every == 0
        if checked and any_rank(stop(), world, device):
            stopped = True
            break
        first = step * per_step
        n_labels = sum(
            labels_per_batch[batch_at(first + m, len(batches), config.seed)]
            for m in range(per_step)
        )  # one mean over the whole step, on every rank
        step_loss = torch.zeros((), device=device)
        for m in range(config.grad_accum):
            with gradient_sync(trained, last=m == config.grad_accum - 1, world=world):
                if cached is not None:
                    features, labels = cached[next(order)]
                    logits = trained(features)
                else:
                    assert loader is not None
                    batch = next(loader).to(device, non_blocking=True)
                    with autocast:
                        logits = trained(batch)
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
                # DDP and FSDP average gradients over ranks; the step's loss is their sum.
                (loss * world.size).backward()
            step_loss += loss.detach()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        pending.append((step, step_loss))
        if step % config.log_every == 0 or step == total_steps:
            flush_losses(pending, loss_curve, world)
            report(
                Progress(
                    "train",
                    step,
                    total_steps,
                    loss_curve[-1][1],
                    float(scheduler.get_last_lr()[0]),
                    time.perf_counter() - started,
                )
            )
        if step % config.checkpoint_every == 0 and step < total_steps:
            flush_losses(pending, loss_curve, world)
            save_checkpoint(out, step, model, optimizer, scheduler, loss_curve, config, world)

    flush_losses(pending, loss_curve, world)
    train_s = time.perf_counter() - t_train
    tokens = int(all_sum(torch.tensor([tokens], device=device), world).item())
    save_checkpoint(out, step, model, optimizer, scheduler, loss_curve, config, world)
    metrics = {
        "rows": len(rows),
        "packed_rows": len(packs),
        "labels": sum(labels_per_batch),
        "steps": step,
        "final_loss": final_loss(loss_curve),
        "feature_seconds": round(feature_s, 3),
        "train_seconds": round(train_s, 3),
        "seconds": round(time.perf_counter() - started, 3),
        "world_size": world.size,
    }
    # Tokens through the model a second, where tokens went through it: head mode over cached
    # features trains on none (its backbone's tokens are the feature pass's), and a resume
    # that found every step done trained none.
    if tokens and train_s:
        metrics["train_tokens_per_s"] = round(tokens / train_s, 1)
    if feature_tokens and feature_s:
        metrics["feature_tokens_per_s"] = round(feature_tokens / feature_s, 1)
    if not stopped:
        # The solutions a label of which was trained on (not those whose labels all lie past
        # max_length): their problems are the model's training problems.
        used = sorted({row.example for row in rows})
        training = training_record([examples[i].problem for i in used], step, len(used))
        save_model(model, config, out, world, training)
        if world.main:
            (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    barrier(world)
    return TrainResult(str(out), step, total_steps, stopped, metrics, loss_curve)


# ------------------------------------------------------------------ helpers


def bf16_autocast(config: TrainConfig, device: torch.device) -> Any:
    """bf16 autocast on CUDA only (config.bf16 "auto"/"true"); CPU runs in float32."""
    if device.type == "cuda" and config.bf16 != "false":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def training_batches(
    rows: Sequence[Row], config: TrainConfig
) -> tuple[list[list[Row]], list[list[int]]]:
    """What train() batches: packs of rows (config.pack_solutions; else a row each) and the
    length-bucketed batches of pack indices. A pack holds at most max_length tokens, and at
    most batch_tokens, so that a batch of one pack stays within the budget."""
    if config.pack_solutions:
        packs = pack_rows(rows, min(config.max_length, config.batch_tokens))
    else:
        packs = [[row] for row in rows]
    return packs, length_batches([pack_length(p) for p in packs], config.batch_tokens)


def batch_at(index: int, n_batches: int, seed: int) -> int:
    """The batch for the index-th micro-batch: a fresh seeded shuffle every epoch."""
    epoch, offset = divmod(index, n_batches)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return int(torch.randperm(n_batches, generator=generator)[offset])


def lr_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 over warmup_ratio of the steps, then linear or cosine decay to 0."""
    return get_scheduler(
        config.decay,  # "linear" or "cosine": transformers' SchedulerType names
        optimizer,
        num_warmup_steps=math.ceil(config.warmup_ratio * total_steps),
        num_training_steps=total_steps,
    )


def make_optimizer(
    model: nn.Module, config: TrainConfig, device: torch.device | None = None
) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]  # matrices; not biases or norms
    no_decay = [p for p in params if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # Fused: one kernel for every parameter's update on CUDA instead of a loop of small ones.
    fused = device is not None and device.type == "cuda"
    return torch.optim.AdamW(groups, lr=config.lr, fused=fused or None)


def wrap_for_training(
    model: ProcessRewardModel,
    config: TrainConfig,
    world: World,
    device: torch.device,
    head_only: bool,
) -> nn.Module:
    """The module each step calls: the model (or its head, over cached features) itself in
    one process; under DDP for head and LoRA, FSDP2-sharded for full fine-tuning."""
    module: nn.Module = model.head if head_only else model
    if not world.distributed:
        return module
    if config.mode == "full" and not head_only:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        bf16 = device.type == "cuda" and config.bf16 != "false"
        policy = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if bf16
            else MixedPrecisionPolicy()
        )
        for block in transformer_blocks(cast("PreTrainedModel", model.backbone)):
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)  # the rest: embeddings, final norm, head
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


@contextmanager
def gradient_sync(module: nn.Module, *, last: bool, world: World) -> Iterator[None]:
    """Reduce gradients across ranks once per optimizer step, after its last micro-batch."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(last or not world.distributed)
        yield
    elif isinstance(module, DistributedDataParallel) and not last:
        with module.no_sync():
            yield
    else:
        yield


def flush_losses(
    pending: list[tuple[int, torch.Tensor]], loss_curve: list[tuple[int, float]], world: World
) -> None:
    """Read the steps' losses back from the device (summed over ranks) into the curve."""
    if not pending:
        return
    values = all_sum(torch.stack([loss for _, loss in pending]), world).tolist()
    loss_curve += [(step, value) for (step, _), value in zip(pending, values, strict=True)]
    pending.clear()


class _Batches(Dataset):
    """Batch i padded and collated: what a DataLoader worker builds ahead of the step."""

    def __init__(
        self, packs: Sequence[Sequence[Row]], batches: Sequence[Sequence[int]], pad_id: int
    ):
        self.packs, self.batches, self.pad_id = packs, batches, pad_id

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> Batch:
        return collate([self.packs[i] for i in self.batches[index]], self.pad_id)


def batch_loader(
    packs: Sequence[Sequence[Row]],
    batches: Sequence[Sequence[int]],
    order: Sequence[int],
    pad_id: int,
    config: TrainConfig,
    device: torch.device,
) -> DataLoader:
    """The batches in `order`, collated by config.num_workers worker processes (none: in this
    one), pinned for an asynchronous copy on CUDA."""
    workers = config.num_workers
    if workers and multiprocessing.current_process().daemon:
        # A daemonic process (a Celery prefork child) may not start workers of its own.
        logger.warning("num_workers %d ignored in a daemonic process: batches built here", workers)
        workers = 0
    return DataLoader(
        _Batches(packs, batches, pad_id),
        batch_size=None,  # items are whole batches already
        sampler=order,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=4 if workers else None,
        # Its own generator: starting a loader draws a worker seed, which must not move the
        # global RNG (dropout) or a resumed run would part from an uninterrupted one.
        generator=torch.Generator().manual_seed(config.seed),
    )


def labelled_rows(
    examples: Sequence[LabeledSolution],
    tokenizer: Any,
    config: TrainConfig,
    report: ProgressFn,
    stop: StopFn,
) -> list[Row]:
    """The examples' token rows that carry a label, in the config's layout and targets
    (step_separator, num_labels, neutral_as, train_on_last_step_only). Reports "tokenize"
    (solutions) about a hundred times and asks `stop` as often (raising Stopped)."""
    total = len(examples)
    every = max(1, total // 100)

    def tokenized(done: int) -> None:
        if done % every == 0 or done == total:
            report(Progress("tokenize", done, total))
            if stop():
                raise Stopped

    return [
        r
        for r in build_features(
            examples,
            tokenizer,
            config.max_length,
            tokenized,
            separator=config.step_separator,
            targets=Targets.of_config(config),
        )
        if any(label != IGNORE for label in r.labels)
    ]


def features_for(
    model: ProcessRewardModel,
    config: TrainConfig,
    packs: Sequence[Sequence[Row]],
    batches: Sequence[Sequence[int]],
    device: torch.device,
    autocast: Any,
    report: ProgressFn,
    stop: StopFn,
    world: World,
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]] | None, bool]:
    """Every batch's step-end features (None if asked to stop), and whether they were
    computed now: read from the output folder when an earlier attempt left them, else
    computed, each rank a share of the batches, and shared through the folder."""
    out = Path(config.output_dir)
    key = features_key(config, packs, batches)
    cached = load_features(out, key, device)
    if cached is not None:  # a resumed run: the frozen backbone would give the same again
        solutions = len({row.example for pack in packs for row in pack})
        report(Progress("features", solutions, solutions, elapsed_s=0.0))
        return cached, False
    mine = list(range(world.rank, len(batches), world.size))
    computed = cache_features(
        model, packs, [batches[b] for b in mine], device, autocast, report, stop
    )
    if any_rank(computed is None, world, device):
        return None, True
    assert computed is not None
    if not world.distributed:
        save_features(out, key, computed)
        return computed, True
    shard = out / f"{FEATURES_FILE}.rank{world.rank}"
    torch.save([(f.cpu(), lab.cpu()) for f, lab in computed], shard)
    barrier(world)
    features: list[tuple[torch.Tensor, torch.Tensor]] = [None] * len(batches)  # type: ignore[list-item]
    for rank in range(world.size):
        saved = torch.load(out / f"{FEATURES_FILE}.rank{rank}", weights_only=True)
        for b, pair in zip(range(rank, len(batches), world.size), saved, strict=True):
            features[b] = (pair[0].to(device), pair[1].to(device))
    barrier(world)
    if world.main:
        save_features(out, key, features)
    (out / f"{FEATURES_FILE}.rank{world.rank}").unlink()
    return features, True


def save_model(
    model: ProcessRewardModel,
    config: TrainConfig,
    out: Path,
    world: World,
    training: dict[str, Any] | None = None,
) -> None:
    """The trained model as model.save lays it out, written by rank 0; with the number of
    processes and the global batch it was trained with in prm.json, and `training`
    (data.training_record: the problems, optimizer steps and solutions trained on)."""
    run: dict[str, Any] = {
        "world_size": world.size,
        "global_batch": {
            "micro_batches": config.grad_accum * world.size,
            "batch_tokens": config.batch_tokens,
        },
    }
    if training is not None:
        run["training"] = training
    if world.distributed and config.mode == "full":
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        # Sharded: gather the full weights (every rank takes part) into a plain copy.
        full = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if world.main:
            plain = ProcessRewardModel.from_config(config)
            plain.load_state_dict(full)
            plain.save(out, run=run)
    elif world.main:
        model.save(out, run=run)
    barrier(world)


@torch.no_grad()
def cache_features(
    model: ProcessRewardModel,
    packs: Sequence[Sequence[Row]],
    batches: Sequence[Sequence[int]],
    device: torch.device,
    autocast: Any,
    report: ProgressFn,
    stop: StopFn,
) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """(step-end features, labels) of every batch, None if `stop` said so: it is asked before
    every transformer block, as one batch can take a minute on a CPU. Reports "features" in
    solutions: those whose every row is done (of these batches: a rank's share)."""
    model.eval()
    started = time.perf_counter()
    finished = solutions_finished(packs, batches)
    total = finished[-1] if finished else 0
    report(Progress("features", 0, total))  # the first batch can take a minute
    features = []
    try:
        with stop_between_blocks(model, stop):
            for n, batch_packs in enumerate(batches):
                if stop():
                    return None
                batch = collate([packs[i] for i in batch_packs], model.pad_id).to(device)
                with autocast:
                    features.append((model.features(batch), batch.labels))
                elapsed = time.perf_counter() - started
                report(Progress("features", finished[n], total, elapsed_s=elapsed))
    except Stopped:
        return None
    return features


def solutions_finished(
    packs: Sequence[Sequence[Row]], batches: Sequence[Sequence[int]]
) -> list[int]:
    """After each batch, how many solutions have all their rows in it or an earlier one."""
    last: dict[int, int] = {}
    for n, batch in enumerate(batches):
        for i in batch:
            for row in packs[i]:
                last[row.example] = n
    ending = [0] * len(batches)
    for n in last.values():
        ending[n] += 1
    return list(itertools.accumulate(ending))


@contextmanager
def stop_between_blocks(model: ProcessRewardModel, stop: StopFn) -> Iterator[None]:
    """Ask `stop` before each transformer block of the backbone, raising Stopped. Not in
    compiled blocks, whose graphs the question would break (there a batch is quick)."""
    if model.config.compile:
        yield
        return

    def ask(module: nn.Module, args: Any) -> None:
        if stop():
            raise Stopped

    blocks = transformer_blocks(cast("PreTrainedModel", model.backbone))
    hooks = [block.register_forward_pre_hook(ask) for block in blocks]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


FEATURES_FILE = "features.pt"


def features_key(
    config: TrainConfig, packs: Sequence[Sequence[Row]], batches: Sequence[Sequence[int]]
) -> str:
    """What the cached features depend on: the backbone and the exact token rows, packs and
    batches."""
    digest = hashlib.sha256(
        json.dumps(
            [config.backbone, config.backbone_layers, config.max_length, config.batch_tokens]
        ).encode()
    )
    for pack in packs:
        digest.update(array("q", [len(pack)]).tobytes())
        for row in pack:
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
    world: World | None = None,
) -> Path:
    """The trained parameters and the optimizer through torch.distributed.checkpoint (every
    rank writes its shard; read back on any number of processes), the rest by rank 0."""
    import torch.distributed.checkpoint as dcp

    world = world or current_world()
    root = out / "checkpoints"
    final = root / f"step-{step:08d}"
    tmp = root / f"step-{step:08d}.tmp"
    if world.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier(world)
    dcp.save(trainable_state(model, optimizer), checkpoint_id=tmp / "dcp")
    if world.main:
        torch.save(
            {
                "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            tmp / "state.pt",
        )
        meta = {
            "step": step,
            "loss_curve": loss_curve,
            "config": config.to_dict(),
            "world_size": world.size,
        }
        (tmp / "meta.json").write_text(json.dumps(meta) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)  # a checkpoint is complete or absent, never half-written
        for old in sorted(root.glob("step-*[0-9]"))[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
    barrier(world)
    return final


def trainable_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """What a checkpoint holds of the model and optimizer, keyed by parameter name (so it
    reshards): only the parameters this mode trains, never the frozen backbone."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(ignore_frozen_params=True)
    return {
        "model": get_model_state_dict(model, options=options),
        "optimizer": get_optimizer_state_dict(model, optimizer, options=options),
    }


def restore_checkpoint(
    path: Path,
    model: ProcessRewardModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: TrainConfig,
    world: World | None = None,
) -> tuple[int, list[tuple[int, float]]]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    world = world or current_world()
    meta = json.loads((path / "meta.json").read_text())
    check_resumable(path, meta, config, world)
    if not (path / "dcp").is_dir():
        raise ValueError(
            f"{path} is a checkpoint of an older Stepwise; resume with that version or use a "
            "fresh output_dir"
        )
    state = trainable_state(model, optimizer)
    try:
        dcp.load(state, checkpoint_id=path / "dcp")
    except Exception as exc:  # DCP names what it misses in a long CheckpointException
        raise ValueError(f"{path} does not match this model: {str(exc)[:500]}") from exc
    # Not strict: the frozen backbone is not in a checkpoint (dcp.load above has already
    # refused one that lacks a trained parameter).
    options = StateDictOptions(ignore_frozen_params=True, strict=False)
    set_model_state_dict(model, state["model"], options=options)
    set_optimizer_state_dict(model, optimizer, state["optimizer"], options=options)
    saved = torch.load(path / "state.pt", weights_only=True)
    scheduler.load_state_dict(saved["scheduler"])
    torch.set_rng_state(saved["rng"])
    if saved["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    return meta["step"], [tuple(x) for x in meta["loss_curve"]]


def check_resumable(path: Path, meta: dict[str, Any], config: TrainConfig, world: World) -> None:
    """Same config, except what RESUMABLE_CHANGES lists, and the same global batch: on another
    number of processes, grad_accum must change so that grad_accum x processes stays."""
    # A setting newer than the checkpoint is read as what that older version did.
    saved = {**SETTINGS_BEFORE_THEY_EXISTED, **meta["config"]}
    changed = {k for k, v in config.to_dict().items() if saved.get(k) != v}
    changed -= RESUMABLE_CHANGES | {"grad_accum"}
    if changed:
        raise ValueError(
            f"{path} was made with a different config ({sorted(changed)}); "
            "resume with the same config or use a fresh output_dir"
        )
    saved_batch = saved["grad_accum"] * meta.get("world_size", 1)
    if config.grad_accum * world.size != saved_batch:
        raise ValueError(
            f"{path} was trained with {saved_batch} micro-batches per step "
            f"({saved['grad_accum']} x {meta.get('world_size', 1)} processes); on "
            f"{world.size} process(es) resume with grad_accum {saved_batch / world.size:g}"
        )
