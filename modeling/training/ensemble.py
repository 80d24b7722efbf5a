"""An ensemble of PRM heads on one frozen backbone, for the "uncertainty" selection rule.

ActPRM (Duan et al., 2025) labels where an ensemble of heads disagrees most. In head mode the
backbone is frozen, so k more heads cost one backbone pass over the training data and the pool
plus k small linear fits on the cached step-end features: seconds to minutes. Each head starts
from its own seed and fits its own bootstrap resample of the rated steps, so the heads differ
where the labels leave the answer open. In lora or full mode each head would need its own
training of the backbone (k trainings), so `train_heads` refuses those models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .batching import collate
from .config import LR_DEFAULTS
from .data import IGNORE, LabeledSolution, Solution, Targets, build_features, length_batches
from .model import ProcessRewardModel
from .selection import ensemble_disagreement

HEAD_STEPS = 200  # full-batch AdamW steps per head: the features are few and fixed
NOT_HEAD_MODE = (
    "the uncertainty rule trains an ensemble of heads on the model's frozen features, which "
    "needs a head-mode model; a {mode} model would need {heads} trainings of its backbone "
    "(one per head), which Stepwise does not run: retrain in head mode, or choose another rule"
)


def check_ensemble_model(model: object, heads: int) -> ProcessRewardModel:
    """The model, if an ensemble of `heads` heads can be trained on it; else a ValueError that
    says why (an imported model, or a lora/full model and what it would cost)."""
    if heads < 2:
        raise ValueError(f"an ensemble needs at least 2 heads, got {heads}")
    if not isinstance(model, ProcessRewardModel):
        raise ValueError(
            "the uncertainty rule needs a model trained here in head mode; an imported model "
            "has no training data to fit more heads on"
        )
    if model.config.mode != "head":
        raise ValueError(NOT_HEAD_MODE.format(mode=model.config.mode, heads=heads))
    return model


@torch.no_grad()
def step_features(
    model: ProcessRewardModel,
    solutions: Sequence[Solution | LabeledSolution],
    *,
    batch_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """(features (N, hidden) float32 on the CPU, class labels (N,), (example, slot) per row) for
    every step end the backbone reaches (steps past max_length have none), in the model's
    layout and with its targets (the classes it trained on)."""
    model.eval()
    device = next(model.head.parameters()).device
    rows = build_features(
        solutions,
        model.tokenizer,
        model.config.max_length,
        separator=model.config.step_separator,
        targets=Targets.of_config(model.config),
    )
    batches = length_batches([len(r) for r in rows], batch_tokens or model.config.batch_tokens)
    use_bf16 = device.type == "cuda" and model.config.bf16 != "false"
    features, labels, slots = [], [], []
    for batch_rows in batches:
        batch = collate([rows[i] for i in batch_rows], model.pad_id).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            features.append(model.features(batch).float().cpu())
        labels.append(batch.labels.cpu())
        slots += batch.slots
    if not features:
        hidden = model.head.in_features
        return torch.zeros(0, hidden), torch.zeros(0, dtype=torch.long), []
    return torch.cat(features), torch.cat(labels), slots


def train_heads(
    model: object,
    examples: Sequence[LabeledSolution],
    *,
    heads: int,
    seed: int = 0,
    steps: int = HEAD_STEPS,
    progress: Callable[[int, int], None] | None = None,
) -> list[nn.Linear]:
    """`heads` linear heads fitted on the model's frozen features of the rated steps, each from
    its own seed on its own bootstrap resample (ActPRM's ensemble, cheap in head mode)."""
    prm = check_ensemble_model(model, heads)
    features, labels, _ = step_features(prm, examples)
    rated = labels != IGNORE
    features, labels = features[rated], labels[rated]
    if not len(labels):
        raise ValueError("the model's training data has no rated step to fit an ensemble on")
    classes = prm.config.num_labels
    weights = torch.tensor(prm.config.class_weights())
    lr = prm.config.lr or LR_DEFAULTS["head"]
    fitted = []
    for member in range(heads):
        generator = torch.Generator().manual_seed(seed * 1000 + member)
        resample = torch.randint(len(labels), (len(labels),), generator=generator)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1000 + member)
            head = nn.Linear(features.shape[1], classes)
        optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
        x, y = features[resample], labels[resample]
        for _ in range(steps):
            optimizer.zero_grad()
            F.cross_entropy(head(x), y, weight=weights).backward()
            optimizer.step()
        fitted.append(head.eval())
        if progress:
            progress(member + 1, heads)
    return fitted


@torch.no_grad()
def error_probabilities(
    model: ProcessRewardModel, heads: Sequence[nn.Linear], solutions: Sequence[Solution]
) -> list[np.ndarray]:
    """Per solution a (heads x steps) array of each head's P(step is wrong) (class 0: -1, or a
    2-class head's "bad"), for the steps the backbone reaches, in step order."""
    features, _, slots = step_features(model, solutions)
    per_head = [torch.softmax(head(features), dim=-1)[:, 0].numpy() for head in heads]
    by_solution: list[list[tuple[int, int]]] = [[] for _ in solutions]
    for row, (example, slot) in enumerate(slots):
        by_solution[example].append((slot, row))
    out = []
    for rows in by_solution:
        order = [row for _, row in sorted(rows)]
        out.append(np.array([[probs[r] for r in order] for probs in per_head]))
    return out


def ensemble_uncertainties(
    model: ProcessRewardModel, heads: Sequence[nn.Linear], solutions: Sequence[Solution]
) -> list[float]:
    """The ensemble's disagreement on each solution (selection.ensemble_disagreement)."""
    return [ensemble_disagreement(p) for p in error_probabilities(model, heads, solutions)]
