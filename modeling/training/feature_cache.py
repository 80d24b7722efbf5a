"""The frozen backbone's step features, cached on disk by content hash.

A head-only PRM (and every experiment that fits heads: `benchmarks/cpu_recipe.py`, the
active-learning simulation) needs one thing from the backbone: the hidden states at each
step. On a CPU that pass is the whole cost, so it is done once and kept:

    root/<identity key>/identity.json     what the features were computed with
    root/<identity key>/chunk-*.pt        {solution content hash: SolutionFeatures}

The **identity** (`BackboneIdentity`) is the backbone's name and a hash of its folder's files
(weights, config and tokenizer: name, size and content), the blocks kept, the poolings, the
stored dtype and max_length. A changed backbone has another key, so its features are
**recomputed** into their own folder; nothing computed with other weights is ever read.

A solution's **content hash** covers its problem, steps and alternatives' texts and
positions (not the ratings: features do not depend on them). Changed data has other hashes, so
those solutions are **recomputed** and the unchanged ones reused.

**Resumable**: missing solutions are computed in chunks, each written to a temporary file and
renamed, so an interrupted pass leaves only whole chunks, and the next call computes only
what is still missing. Another process may read the cache while a pass writes it.

Features per step: for each kept block (index into `hidden_states`: 0 is the embeddings,
k the output of block k; the backbone is cut after the deepest kept block, whose states
transformers gives after the final norm, as the PRM's head reads them) and each pooling: "end" (the step's last token, what the PRM's head
reads) or "mean" (the mean over the step's tokens). Steps cut off by max_length have none.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn.attention import sdpa_kernel

from .backbones import resolve_backbone
from .batching import attention_mask_4d, collate
from .data import (
    LabeledSolution,
    Row,
    Solution,
    build_features,
    encode_segments,
    length_batches,
    start_ids,
)

POOLINGS = ("end", "mean")
FORMAT = "stepwise-features/1"


@dataclass(frozen=True)
class BackboneIdentity:
    backbone: str
    files: str  # sha256 over the backbone folder's files (name, size, content)
    blocks: tuple[int, ...]
    poolings: tuple[str, ...]
    dtype: str  # how features are stored (the pass itself runs in float32)
    max_length: int
    format: str = FORMAT

    def key(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def folder_hash(folder: Path) -> str:
    """sha256 over every file in the folder (relative name, size, content)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def backbone_identity(
    backbone: str,
    *,
    blocks: Sequence[int],
    poolings: Sequence[str] = ("end",),
    dtype: str = "float16",
    max_length: int = 2048,
) -> BackboneIdentity:
    folder = Path(resolve_backbone(backbone)).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"the feature cache needs a backbone in a local folder (to hash its weights), "
            f"not {backbone!r}"
        )
    unknown = sorted(set(poolings) - set(POOLINGS))
    if unknown or not poolings:
        raise ValueError(f"poolings must be among {POOLINGS}, not {list(poolings)}")
    if not blocks or min(blocks) < 0:
        raise ValueError(f"blocks must be hidden-state indices >= 0, not {list(blocks)}")
    if dtype not in ("float16", "bfloat16", "float32"):
        raise ValueError(f"dtype must be float16, bfloat16 or float32, not {dtype!r}")
    return BackboneIdentity(
        backbone, folder_hash(folder), tuple(blocks), tuple(poolings), dtype, max_length
    )


def content_hash(solution: Solution | LabeledSolution) -> str:
    alternatives = [(a.after, a.text) for a in getattr(solution, "alternatives", [])]
    text = json.dumps([solution.problem, list(solution.steps), alternatives])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class SolutionFeatures:
    """One solution's features by slot (path step k -> k, alternative j -> n_steps + j)."""

    x: torch.Tensor  # (slots, blocks, poolings, hidden) in the stored dtype; NaN when absent
    present: torch.Tensor  # (slots,) bool: False past max_length
    length: torch.Tensor  # (slots,) tokens of each step (0 when absent)


class FeatureCache:
    """The chunks of one backbone identity under `root` (see the module docstring)."""

    def __init__(self, root: str | Path, identity: BackboneIdentity) -> None:
        self.identity = identity
        self.folder = Path(root) / identity.key()
        self.folder.mkdir(parents=True, exist_ok=True)
        stamp = self.folder / "identity.json"
        if stamp.exists():
            saved = json.loads(stamp.read_text())
            if saved != json.loads(json.dumps(asdict(identity))):
                raise ValueError(f"{stamp} does not match its key: the cache folder was altered")
        else:
            _write_atomic(stamp, lambda path: path.write_text(json.dumps(asdict(identity))))

    def chunks(self) -> list[Path]:
        return sorted(self.folder.glob("chunk-*.pt"))  # temporary files end in .tmp

    def load(self) -> dict[str, SolutionFeatures]:
        found: dict[str, SolutionFeatures] = {}
        for path in self.chunks():
            found.update(torch.load(path, weights_only=False))
        return found

    def write(self, entries: dict[str, SolutionFeatures]) -> Path:
        path = self.folder / f"chunk-{uuid.uuid4().hex}.pt"
        _write_atomic(path, lambda tmp: torch.save(entries, tmp))
        return path


def _write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def cached_features(
    examples: Sequence[Solution | LabeledSolution],
    cache: FeatureCache,
    *,
    batch_tokens: int = 8192,
    chunk_solutions: int = 64,
    compute: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> list[SolutionFeatures | None]:
    """Features of every example, in order: read from the cache, the missing ones computed in
    chunks (written as they finish; `progress(done, missing)` after each). With compute=False
    nothing is computed and a missing example is None (what an interrupted pass has so far)."""
    have = cache.load()
    hashes = [content_hash(e) for e in examples]
    missing = [i for i, h in enumerate(hashes) if h not in have]
    if missing and compute:
        for done, chunk in _compute(examples, missing, cache, batch_tokens, chunk_solutions):
            have.update(chunk)
            if progress:
                progress(done, len(missing))
    return [have.get(h) for h in hashes]


def _compute(
    examples: Sequence[Solution | LabeledSolution],
    missing: Sequence[int],
    cache: FeatureCache,
    batch_tokens: int,
    chunk_solutions: int,
) -> Iterator[tuple[int, dict[str, SolutionFeatures]]]:
    from transformers import AutoTokenizer

    from .model import SDPA_BACKENDS, load_backbone

    identity = cache.identity
    path = resolve_backbone(identity.backbone)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    backbone = load_backbone(identity.backbone, max(max(identity.blocks), 1)).eval()
    pad_id = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    store = getattr(torch, identity.dtype)
    for start in range(0, len(missing), chunk_solutions):
        part = [examples[i] for i in missing[start : start + chunk_solutions]]
        rows = build_features(part, tokenizer, identity.max_length)
        problem_tokens = [
            len(start_ids(tokenizer)) + len(ids)
            for ids in encode_segments(tokenizer, [e.problem for e in part])
        ]
        slots = [len(e.steps) + len(getattr(e, "alternatives", [])) for e in part]
        shape = (len(identity.blocks), len(identity.poolings), backbone.config.hidden_size)
        features = [torch.full((n, *shape), float("nan"), dtype=store) for n in slots]
        present = [torch.zeros(n, dtype=torch.bool) for n in slots]
        lengths = [torch.zeros(n, dtype=torch.long) for n in slots]
        for batch_rows in length_batches([len(r) for r in rows], batch_tokens):
            chosen = [rows[i] for i in batch_rows]
            batch = collate(chosen, pad_id)
            with torch.no_grad(), sdpa_kernel(SDPA_BACKENDS):
                out = backbone(
                    input_ids=batch.input_ids,
                    attention_mask=attention_mask_4d(batch.segment, batch.visible, batch.document),
                    position_ids=batch.position_ids,
                    output_hidden_states=True,
                    use_cache=False,
                )
            hidden = torch.stack([out.hidden_states[k] for k in identity.blocks], dim=2).float()
            summed = hidden.cumsum(dim=1)  # (B, T, blocks, hidden): span means by difference
            for b, row in enumerate(chosen):
                for end, slot, begin in _step_spans(row, problem_tokens[row.example]):
                    pooled = []
                    for pooling in identity.poolings:
                        if pooling == "end":
                            pooled.append(hidden[b, end])
                        else:
                            total = summed[b, end] - (summed[b, begin - 1] if begin else 0)
                            pooled.append(total / (end - begin + 1))
                    features[row.example][slot] = torch.stack(pooled, dim=1).to(store)
                    present[row.example][slot] = True
                    lengths[row.example][slot] = end - begin + 1
        chunk = {
            content_hash(e): SolutionFeatures(features[n], present[n], lengths[n])
            for n, e in enumerate(part)
        }
        cache.write(chunk)
        yield min(start + chunk_solutions, len(missing)), chunk


def _step_spans(row: Row, problem_tokens: int) -> Iterator[tuple[int, int, int]]:
    """(end, slot, first token) of every step end in the row: a path step starts after the
    previous path step (the first after the problem), an alternative at its own first token."""
    previous_end = problem_tokens - 1
    for end, slot in zip(row.ends, row.slots, strict=True):
        segment = row.segment[end]
        if segment:
            begin = row.segment.index(segment)
        else:
            begin = previous_end + 1
            previous_end = end
        yield end, slot, begin
