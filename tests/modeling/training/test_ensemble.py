"""The uncertainty rule's ensemble of heads on a tiny random backbone."""

from __future__ import annotations

import numpy as np
import pytest

from modeling.training.config import TrainConfig
from modeling.training.data import Solution
from modeling.training.ensemble import (
    ensemble_uncertainties,
    error_probabilities,
    step_features,
    train_heads,
)
from modeling.training.model import ProcessRewardModel
from modeling.training.selection import ensemble_disagreement


@pytest.fixture(scope="module")
def head_model(tiny_llama):
    import torch

    torch.manual_seed(0)
    return ProcessRewardModel.from_config(TrainConfig(backbone=tiny_llama, device="cpu")).eval()


def plain(examples) -> list[Solution]:
    return [Solution(e.problem, list(e.steps)) for e in examples]


def test_heads_differ_and_their_disagreement_is_what_selection_computes(head_model, samples):
    heads = train_heads(head_model, samples[:4], heads=3, seed=0, steps=30)
    assert len(heads) == 3
    assert not np.allclose(heads[0].weight.detach(), heads[1].weight.detach())

    pool = plain(samples[4:8])
    probs = error_probabilities(head_model, heads, pool)
    assert [p.shape for p in probs] == [(3, len(s.steps)) for s in pool]
    assert all(((p >= 0) & (p <= 1)).all() for p in probs)
    spread = ensemble_uncertainties(head_model, heads, pool)
    assert spread == [ensemble_disagreement(p) for p in probs]
    assert all(0.0 < s <= 0.5 for s in spread)  # differing heads on a random backbone


def test_the_ensemble_is_reproducible_for_a_seed_and_varies_across_seeds(head_model, samples):
    pool = plain(samples[4:6])
    first = ensemble_uncertainties(
        head_model, train_heads(head_model, samples[:4], heads=2, seed=1, steps=10), pool
    )
    again = ensemble_uncertainties(
        head_model, train_heads(head_model, samples[:4], heads=2, seed=1, steps=10), pool
    )
    other = ensemble_uncertainties(
        head_model, train_heads(head_model, samples[:4], heads=2, seed=2, steps=10), pool
    )
    assert first == again
    assert first != other


def test_identical_heads_do_not_disagree(head_model, samples):
    heads = train_heads(head_model, samples[:2], heads=2, seed=0, steps=5)
    heads[1].load_state_dict(heads[0].state_dict())
    assert ensemble_uncertainties(head_model, heads, plain(samples[2:4])) == [0.0, 0.0]


def test_step_features_are_the_models_own(head_model, samples):
    import torch

    features, _, slots = step_features(head_model, plain(samples[:2]))
    logits = head_model.head(features)
    from modeling.training.score import score_solutions

    scored = score_solutions(head_model, plain(samples[:2]))
    first = [row for row, (example, _) in enumerate(slots) if example == 0]
    expected = torch.tensor(scored[0][: len(first)])
    assert torch.allclose(torch.softmax(logits[first], -1), expected, atol=1e-5)


def test_lora_and_full_models_are_refused_with_what_they_would_cost(tiny_llama, samples):
    for mode in ("lora", "full"):
        model = ProcessRewardModel.from_config(
            TrainConfig(backbone=tiny_llama, device="cpu", mode=mode)
        )
        with pytest.raises(ValueError, match=f"a {mode} model would need 5 trainings"):
            train_heads(model, samples[:2], heads=5)


def test_bad_ensembles_are_refused(head_model, samples):
    with pytest.raises(ValueError, match="at least 2 heads"):
        train_heads(head_model, samples[:2], heads=1)
    with pytest.raises(ValueError, match="imported"):
        train_heads(object(), samples[:2], heads=3)
    unrated = [Solution(samples[0].problem, list(samples[0].steps))]
    from modeling.training.data import LabeledSolution

    unlabeled = [LabeledSolution(s.problem, s.steps, [None] * len(s.steps)) for s in unrated]
    with pytest.raises(ValueError, match="no rated step"):
        train_heads(head_model, unlabeled, heads=2)
