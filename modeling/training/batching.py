"""Packed token rows (`data.Row`) as padded tensors: a `Batch` per step, and the tree attention
mask that keeps every document and alternative to itself (see `data`'s docstring for the rule).
Split from `data` so that reading records does not load torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .data import Row, pack_length


@dataclass
class Batch:
    """Right-padded tensors for a list of rows or packs; see `attention_mask_4d` for the mask."""

    input_ids: torch.Tensor  # (B, T)
    position_ids: torch.Tensor  # (B, T), from 0 in each document
    segment: torch.Tensor  # (B, T), -1 on padding
    visible: torch.Tensor  # (B, T): a token sees its document's path tokens before this index
    document: torch.Tensor  # (B, T): which row of the pack a token belongs to, -1 on padding
    ends: torch.Tensor  # (N,) flat index b * T + t of every step end
    labels: torch.Tensor  # (N,)
    slots: list[tuple[int, int]]  # (example, slot) per step end
    n_tokens: int  # real (unpadded) tokens

    TENSORS = ("input_ids", "position_ids", "segment", "visible", "document", "ends", "labels")

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        move = {k: getattr(self, k).to(device, non_blocking=non_blocking) for k in self.TENSORS}
        return Batch(**move, slots=self.slots, n_tokens=self.n_tokens)

    def pin_memory(self) -> Batch:
        """Page-locked copies (DataLoader's pin_memory calls this): the copy to the GPU can
        then overlap the step before it."""
        pinned = {k: getattr(self, k).pin_memory() for k in self.TENSORS}
        return Batch(**pinned, slots=self.slots, n_tokens=self.n_tokens)


def collate(items: Sequence[Row | Sequence[Row]], pad_id: int) -> Batch:
    """One batch row per item: a row, or a pack of rows laid one after another (documents
    0, 1, ...: each keeps its own position ids and sees only itself)."""
    packs = [[item] if isinstance(item, Row) else list(item) for item in items]
    width = max(pack_length(p) for p in packs)
    shape = (len(packs), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    segment = torch.full(shape, -1, dtype=torch.long)
    visible = torch.zeros(shape, dtype=torch.long)
    document = torch.full(shape, -1, dtype=torch.long)
    ends: list[int] = []
    labels: list[int] = []
    slots: list[tuple[int, int]] = []
    for b, pack in enumerate(packs):
        start = 0
        for d, row in enumerate(pack):
            span = slice(start, start + len(row))
            input_ids[b, span] = torch.tensor(row.input_ids)
            position_ids[b, span] = torch.tensor(row.position_ids)
            segment[b, span] = torch.tensor(row.segment)
            visible[b, span] = torch.tensor(row.visible) + start  # a key index in the batch row
            document[b, span] = d
            ends += [b * width + start + pos for pos in row.ends]
            labels += row.labels
            slots += [(row.example, s) for s in row.slots]
            start += len(row)
    return Batch(
        input_ids,
        position_ids,
        segment,
        visible,
        document,
        torch.tensor(ends, dtype=torch.long),
        torch.tensor(labels, dtype=torch.long),
        slots,
        sum(pack_length(p) for p in packs),
    )


def attention_mask_4d(
    segment: torch.Tensor, visible: torch.Tensor, document: torch.Tensor
) -> torch.Tensor:
    """Boolean (B, 1, T, T) mask, True where query t may attend to key s.

    A token sees only its own document: there, the path tokens before index `visible` and,
    if it is on an alternative, the tokens of its own alternative up to itself. Padding sees
    earlier padding only, so no row of the mask is empty (an empty row makes softmax NaN).
    """
    width = segment.shape[1]
    key = torch.arange(width, device=segment.device)
    q_seg = segment[:, :, None]
    k_seg = segment[:, None, :]
    same = document[:, :, None] == document[:, None, :]
    sees_path = (k_seg == 0) & (key[None, None, :] < visible[:, :, None])
    own = (k_seg == q_seg) & (q_seg != 0) & (key[None, None, :] <= key[None, :, None])
    return (same & (sees_path | own))[:, None]


def tree_block_mask(segment: torch.Tensor, visible: torch.Tensor, document: torch.Tensor) -> Any:
    """The same rule as `attention_mask_4d`, as a FlexAttention BlockMask: the mask is a
    function of (row, query, key) evaluated block by block, never a (T, T) tensor, and
    blocks nobody may see (another document's, among others) are skipped by the kernel."""
    from torch.nn.attention.flex_attention import create_block_mask

    def tree(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q_seg, k_seg = segment[b, q], segment[b, k]
        same = document[b, q] == document[b, k]
        sees_path = (k_seg == 0) & (k < visible[b, q])
        own = (k_seg == q_seg) & (q_seg != 0) & (k <= q)
        return same & (sees_path | own)

    batch, width = segment.shape
    # Compiled: builds the block table without materialising the (B, T, T) mask.
    return create_block_mask(tree, batch, None, width, width, device=segment.device, _compile=True)
