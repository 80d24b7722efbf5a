from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from modeling.training.data import Solution
from modeling.training.model import ProcessRewardModel
from modeling.training.score import score_solutions, solution_score


def test_solution_score_rules():
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.1, 0.4], [0.0, 0.0, 1.0]])
    assert solution_score(probs) == pytest.approx(0.9 * 0.5 * 1.0)
    assert solution_score(probs, "product") == pytest.approx(0.45)
    assert solution_score(probs, "min") == pytest.approx(0.5)
    assert solution_score(probs, "last") == pytest.approx(1.0)
    assert solution_score(probs, "mean") == pytest.approx((0.9 + 0.5 + 1.0) / 3)
    with_unscored = np.vstack([probs, [np.nan] * 3])
    assert solution_score(with_unscored) == pytest.approx(0.45)
    assert math.isnan(solution_score(np.full((2, 3), np.nan)))
    with pytest.raises(ValueError):
        solution_score(probs, "max")


@pytest.fixture(scope="module")
def model(tiny_llama):
    from modeling.training.config import TrainConfig

    torch.manual_seed(0)
    return ProcessRewardModel.from_config(TrainConfig(backbone=tiny_llama, device="cpu")).eval()


def test_scores_have_one_probability_row_per_step(model, samples):
    solutions = [Solution(e.problem, e.steps) for e in samples] + [Solution("1+1?", [])]
    scored = score_solutions(model, solutions)
    assert [s.shape for s in scored] == [(len(x.steps), 3) for x in solutions]
    for s in scored[:-1]:
        np.testing.assert_allclose(s.sum(axis=1), 1.0, rtol=1e-5)


def test_scores_do_not_depend_on_the_batch_a_solution_lands_in(model, samples):
    solutions = [Solution(e.problem, e.steps) for e in samples]
    together = score_solutions(model, solutions, batch_tokens=100_000)
    alone = [score_solutions(model, [s])[0] for s in solutions]
    tiny_batches = score_solutions(model, solutions, batch_tokens=1)  # one row per batch
    for a, b, c in zip(together, alone, tiny_batches, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
        np.testing.assert_allclose(a, c, atol=1e-5)


def test_steps_past_max_length_are_unscored_not_shifted(model, samples):
    solution = Solution(samples[5].problem, samples[5].steps)
    full = score_solutions(model, [solution])[0]
    cut = score_solutions(model, [solution], max_length=150)[0]
    scored = ~np.isnan(cut[:, 0])
    assert 0 < scored.sum() < len(cut)
    np.testing.assert_allclose(cut[scored], full[scored], atol=1e-5)
