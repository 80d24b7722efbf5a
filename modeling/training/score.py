"""Scoring: per-step probabilities for solutions, and one rule to turn them into a score."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from .batching import collate
from .data import LabeledSolution, Solution, build_features, length_batches
from .external import ExternalPRM
from .model import ProcessRewardModel, three_way

Scorer = ProcessRewardModel | ExternalPRM  # ours, or one imported (external.py)

RULES = ("product", "min", "last", "mean")


@torch.no_grad()
def _run(
    model: ProcessRewardModel,
    solutions: Sequence[Solution | LabeledSolution],
    batch_tokens: int | None,
    max_length: int | None,
    progress: Callable[[int, int], None] | None,
) -> list[tuple[list[tuple[int, int]], np.ndarray]]:
    """((example, slot) per step end, [P(-1), P(0), P(+1)] each) per length-bucketed batch, in
    the model's own layout (its step separator)."""
    model.eval()
    device = next(model.head.parameters()).device
    max_length = max_length or model.config.max_length
    rows = build_features(
        solutions, model.tokenizer, max_length, separator=model.config.step_separator
    )
    batches = length_batches([len(r) for r in rows], batch_tokens or model.config.batch_tokens)
    use_bf16 = device.type == "cuda" and model.config.bf16 != "false"
    out = []
    for n, batch_rows in enumerate(batches):
        batch = collate([rows[i] for i in batch_rows], model.pad_id).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(batch)
        out.append((batch.slots, three_way(logits).cpu().numpy()))
        if progress:
            progress(n + 1, len(batches))
    return out


def score_solutions(
    model: Scorer,
    solutions: Sequence[Solution | LabeledSolution],
    *,
    batch_tokens: int | None = None,
    max_length: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[np.ndarray]:
    """Per solution an (n_steps, 3) array of P(-1), P(0), P(+1), one row per step (a 2-class
    model's: [1 - P(good), 0, P(good)]).

    Solutions are bucketed by length (batch_tokens padded tokens per batch, default the
    model's config), so a long one does not pad the rest. Steps past max_length (default
    the model's) have no score: their row is NaN. An imported model reads its own layout.
    """
    if isinstance(model, ExternalPRM):
        return model.score_solutions(
            solutions, batch_tokens=batch_tokens, max_length=max_length, progress=progress
        )
    results = [np.full((len(s.steps), 3), np.nan, dtype=np.float32) for s in solutions]
    plain = [Solution(s.problem, list(s.steps)) for s in solutions]  # path only
    for slots, probs in _run(model, plain, batch_tokens, max_length, progress):
        for (example, slot), p in zip(slots, probs, strict=True):
            results[example][slot] = p
    return results


def predict_labelled(
    model: Scorer,
    examples: Sequence[LabeledSolution],
    *,
    batch_tokens: int | None = None,
    max_length: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities (N, 3), ratings (N,) in -1/0/+1) for every rated step and alternative."""
    if isinstance(model, ExternalPRM):
        return model.predict_labelled(
            examples, batch_tokens=batch_tokens, max_length=max_length, progress=progress
        )
    # The ratings themselves, by slot: a 2-class model's targets no longer tell 0 from +1.
    slot_ratings = [e.slot_ratings() for e in examples]
    probs, ratings = [], []
    for slots, p in _run(model, examples, batch_tokens, max_length, progress):
        for (example, slot), row in zip(slots, p, strict=True):
            rating = slot_ratings[example][slot]
            if rating is not None:
                probs.append(row)
                ratings.append(rating)
    if not probs:
        return np.zeros((0, 3), dtype=np.float32), np.zeros(0, dtype=np.int64)
    return np.stack(probs), np.array(ratings, dtype=np.int64)


def solution_score(step_probs: np.ndarray, rule: str = "product") -> float:
    """One score from (n_steps, 3) step probabilities, step score = P(+1) + P(0).

    product (the paper's best: the chance no step is wrong), min (weakest step), last
    (the final step), mean. Unscored (NaN) steps are skipped; no scored step gives NaN.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, not {rule!r}")
    probs = np.asarray(step_probs, dtype=np.float64).reshape(-1, 3)
    step_scores = probs[:, 1] + probs[:, 2]
    step_scores = step_scores[~np.isnan(step_scores)]
    if step_scores.size == 0:
        return float("nan")
    if rule == "product":
        return float(np.prod(step_scores))
    if rule == "min":
        return float(np.min(step_scores))
    if rule == "last":
        return float(step_scores[-1])
    return float(np.mean(step_scores))
