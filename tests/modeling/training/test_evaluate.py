from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from modeling.training.evaluate import (
    Sample,
    auroc,
    best_of_n,
    best_of_n_table,
    evaluate_processbench,
    expected_calibration_error,
    first_error,
    group_answers,
    powers_of_two,
    processbench_metrics,
    processbench_sweep,
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
    assert np.isnan(auroc([0.1, 0.2], [False, False]))  # scikit-learn raises; a NaN here
    assert np.isnan(auroc([], []))


def test_library_metrics_agree_with_a_hand_computed_case():
    # 3 positives x 2 negatives: 0.35 beats 0.1 and loses to 0.4; 0.8 beats both;
    # 0.4 beats 0.1 and ties the negative 0.4 (a half): 4.5 of 6 pairs.
    assert auroc([0.1, 0.4, 0.35, 0.8, 0.4], [0, 0, 1, 1, 1]) == pytest.approx(4.5 / 6)
    # Two bins: {0.1, 0.3} predicts 0.2 and sees 1 of 2; {0.6, 0.9} predicts 0.75, sees 2 of 2.
    bins = reliability_bins([0.1, 0.3, 0.6, 0.9], [False, True, True, True], n_bins=2)
    assert [(b["count"], b["mean_predicted"], b["observed"]) for b in bins] == [
        (2, pytest.approx(0.2), pytest.approx(0.5)),
        (2, pytest.approx(0.75), pytest.approx(1.0)),
    ]
    assert expected_calibration_error(bins) == pytest.approx((2 * 0.3 + 2 * 0.25) / 4)
    empty = reliability_bins([0.05], [True], n_bins=4)[1]
    assert empty["count"] == 0 and np.isnan(empty["observed"]) and np.isnan(empty["mean_predicted"])


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


def test_processbench_sweep_moves_the_first_error_with_the_threshold():
    # P(correct) = P(0) + P(+1) per step: 0.9, 0.3, 0.1 | 0.6, 0.95 | 0.95, 0.9
    wrong_at_1 = np.array([[0.1, 0.1, 0.8], [0.7, 0.1, 0.2], [0.9, 0.0, 0.1]])
    wrong_at_0 = np.array([[0.4, 0.2, 0.4], [0.05, 0.05, 0.9]])
    correct = np.array([[0.05, 0.0, 0.95], [0.1, 0.1, 0.8]])
    sweep = processbench_sweep([wrong_at_1, wrong_at_0, correct], [1, 0, -1], [0.2, 0.5, 0.7])
    # 0.2: only step 2 of the first is flagged (wrong index), the second none: 0 of 2 errors.
    assert sweep[0.2]["error_accuracy"] == 0.0 and sweep[0.2]["f1"] == 0.0
    # 0.5: the first flags step 1 (right), the second nothing (0.6 >= 0.5): 1 of 2.
    assert sweep[0.5]["error_accuracy"] == pytest.approx(0.5)
    assert sweep[0.5]["correct_accuracy"] == 1.0
    assert sweep[0.5]["f1"] == pytest.approx(2 / 3)
    # 0.7: both erroneous found exactly, the correct one still clean (0.95, 0.9 >= 0.7).
    assert sweep[0.7]["f1"] == 1.0


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


def test_group_answers_compares_each_distinct_form_once():
    calls = []

    def equivalent(a, b):
        calls.append((a, b))
        return float(a) == float(b)

    answers = ["0.5", " 0.5", "0.50", "2", None, "0.5 ", "2.0", None]
    groups = group_answers(answers, equivalent, key=str.strip)
    assert groups[:4] == [0, 0, 0, 1] and groups[5:7] == [0, 1]
    assert groups[4] != groups[7] and groups[4] not in (0, 1)  # no answer: alone
    # "0.5" starts a group; "0.50" vs "0.5"; "2" vs "0.5"; "2.0" vs "0.5", "2": four calls,
    # where comparing every sample with every group would take more.
    assert calls == [("0.50", "0.5"), ("2", "0.5"), ("2.0", "0.5"), ("2.0", "2")]


def test_best_of_n_splits_ties_and_enumerates_small_subset_counts():
    nan = float("nan")
    samples = [  # group, correct, product, last
        Sample(0, False, 0.1, 0.5),
        Sample(0, False, 0.2, 0.5),
        Sample(1, True, 0.9, 0.5),
        Sample(2, False, nan, nan),  # unscored: never picked over a scored one
    ]
    curve = best_of_n({"p": samples, "q": [Sample(0, True, 0.5, 0.5)]}, ns=[1, 2, 4])
    assert curve[4] == {"prm": 1.0, "last": 1 / 3, "majority": 0.0, "problems": 1}
    # N=2, the 6 pairs of p: the PRM picks the right one in the 3 with it; the last step
    # ties 3 scored pairs (1/2, 1/2, 0 credit) and 3 with the unscored one (0, 0, 1);
    # majority: {0, 0} is wrong; of the 5 pairs that tie two groups, 3 hold the right one (1/2).
    assert curve[2] == {
        "prm": pytest.approx(3 / 6),
        "last": pytest.approx(2 / 6),
        "majority": pytest.approx(1.5 / 6),
        "problems": 1,
    }
    assert curve[1]["problems"] == 2 and curve[1]["prm"] == pytest.approx((1 / 4 + 1) / 2)
    many = [Sample(i % 3, i % 3 == 0, i / 40, 0.5) for i in range(40)]  # C(40, 2) > repeats
    again = best_of_n({"p": many}, ns=[2], repeats=30, seed=1)
    assert again == best_of_n({"p": many}, ns=[2], repeats=30, seed=1)  # seeded
    assert (
        powers_of_two(4) == [1, 2, 4] and powers_of_two(7) == [1, 2, 4] and powers_of_two(1) == [1]
    )
    table = best_of_n_table([{"n": 2, **curve[2]}])
    assert table.splitlines()[1].split() == ["2", "0.500", "0.333", "0.250", "1"]
