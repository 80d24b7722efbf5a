from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from modeling.training.evaluate import (
    Sample,
    answers_match,
    auroc,
    best_of_n,
    evaluate_processbench,
    first_error,
    majority_pick,
    processbench_metrics,
    reliability_bins,
    step_metrics,
)


def _auroc_by_pairs(scores, positive):
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auroc_counts_ties_as_half():
    assert auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    assert auroc([0.5, 0.5, 0.5, 0.5], [True, False, True, False]) == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 60) / 4  # many ties
    positive = rng.random(60) < 0.4
    assert auroc(scores, positive) == pytest.approx(_auroc_by_pairs(scores, positive))
    assert np.isnan(auroc([0.1, 0.2], [True, True]))


def test_step_metrics_and_reliability_bins():
    probs = np.array([[0.9, 0.05, 0.05], [0.2, 0.1, 0.7], [0.6, 0.3, 0.1], [0.05, 0.05, 0.9]])
    ratings = np.array([-1, 1, 1, 1])
    metrics = step_metrics(probs, ratings, n_bins=2)
    assert metrics["auroc_negative"] == pytest.approx(1.0)
    assert metrics["accuracy"] == pytest.approx(0.75)
    low, high = metrics["reliability_negative"]
    assert (low["count"], high["count"]) == (2, 2)
    assert high["observed"] == pytest.approx(0.5) and high["mean_predicted"] == pytest.approx(0.75)
    assert [b["count"] for b in reliability_bins([0.0, 1.0], [True, False], 4)] == [1, 0, 0, 1]


def test_processbench_first_error_and_f1_on_a_hand_made_case():
    probs = np.array([[0.1, 0.1, 0.8], [0.7, 0.1, 0.2], [0.9, 0.0, 0.1]])
    assert first_error(probs, 0.5) == 1
    assert first_error(probs, 0.05) == -1
    # 3 erroneous cases (2 found exactly), 2 correct ones (1 left alone)
    metrics = processbench_metrics([1, 0, 2, -1, 3], [1, 2, 2, -1, -1])
    assert metrics["error_accuracy"] == pytest.approx(2 / 3)
    assert metrics["correct_accuracy"] == pytest.approx(1 / 2)
    assert metrics["f1"] == pytest.approx(2 * (2 / 3) * (1 / 2) / (2 / 3 + 1 / 2))
    assert processbench_metrics([-1, -1], [0, -1])["f1"] == 0.0


def test_evaluate_processbench_reads_the_subset_file(tiny_llama, tmp_path):
    import torch

    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    items = [
        {
            "id": "a",
            "generator": "g",
            "problem": "1+1?",
            "steps": ["1+1=3.", "So 3."],
            "final_answer_correct": False,
            "label": 0,
        },
        {
            "id": "b",
            "generator": "g",
            "problem": "2+2?",
            "steps": ["2+2=4."],
            "final_answer_correct": True,
            "label": -1,
        },
    ]
    path = tmp_path / "mini.json"
    path.write_text(json.dumps(items))
    torch.manual_seed(0)
    model = ProcessRewardModel.from_config(TrainConfig(backbone=tiny_llama, device="cpu"))
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([5.0, 0.0, 0.0]))  # always "-1"
    report = evaluate_processbench(model, path, threshold=0.5)
    assert report["subset"] == "mini"
    assert (report["error_accuracy"], report["correct_accuracy"], report["f1"]) == (1.0, 0.0, 0.0)


def test_answers_match_normalises_light_formatting():
    assert answers_match("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}")
    assert answers_match("1,000", "1000.0")
    assert answers_match(" $29$ ", "29")
    assert not answers_match("29", "28")
    assert not answers_match("x+1", "x-1")


def test_majority_vote_and_best_of_n():
    samples = [Sample("5", 0.1, False), Sample("5.0", 0.2, False), Sample("7", 0.9, True)]
    assert majority_pick(samples).answer == "5"
    curve = best_of_n({"p": samples, "q": [Sample("1", 0.5, True)]}, ns=[1, 3], repeats=50)
    assert curve[3] == {"prm": 1.0, "majority": 0.0, "problems": 1}
    assert curve[1]["problems"] == 2
    assert 0.0 < curve[1]["prm"] < 1.0
