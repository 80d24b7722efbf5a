"""One process or many: torch.distributed as `torchrun` sets it up, and nothing home-made.

`train()` runs unchanged in one process or under `torchrun --nproc-per-node N` (or several
nodes): each rank takes its share of every optimizer step's micro-batches, head and LoRA
train under DDP, full fine-tuning under FSDP2 (`fully_shard`, parameters, gradients and
optimizer state sharded across ranks), and checkpoints go through
`torch.distributed.checkpoint`, so a run saved by N processes resumes on M.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def current_world() -> World:
    """This process's place in the process group (one process when there is none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    return World(
        dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    )


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


@contextmanager
def process_group(device: str = "auto") -> Iterator[World]:
    """Join the process group torchrun describes in the environment (nothing to join when
    it says one process): NCCL between GPUs, gloo on CPUs. Leaves it on the way out."""
    if not launched_by_torchrun() or dist.is_initialized():
        yield current_world()
        return
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        yield current_world()
    except BaseException:
        dist.destroy_process_group()  # a rank that failed leaves at once: no peer to wait for
        raise
    _leave_together()
    dist.destroy_process_group()


def _leave_together() -> None:
    """Every rank reaches the end before any tears the group down: a gloo rank whose peer
    had already left aborted at exit ("terminate called without an active exception") after
    a finished run (seen once in four full test runs). Bounded on gloo: a peer that died
    after its last collective costs a minute, not a hang."""
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=60))
        else:
            dist.barrier()
    except RuntimeError:
        pass  # a peer gone: leaving is all that is left to do


def rank_device(device: torch.device, world: World) -> torch.device:
    """Each rank on its own GPU of the machine (cuda:LOCAL_RANK); a CPU stays a CPU."""
    if device.type == "cuda" and world.distributed:
        return torch.device("cuda", world.local_rank)
    return device


def all_sum(values: torch.Tensor, world: World) -> torch.Tensor:
    if world.distributed:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def any_rank(flag: bool, world: World, device: torch.device) -> bool:
    """True on every rank when it is true on one: every rank stops at the same step."""
    if not world.distributed:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()
