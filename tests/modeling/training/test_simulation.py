"""The simulation on a tiny model and a real slice of the stepwise-critic oracle."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from modeling.training import simulation, simulation_report
from modeling.training.data import Alternative, LabeledSolution
from modeling.training.efficiency import Point, efficiency_ratio, summarize_ratios
from modeling.training.oracle import candidates_from_oracle
from modeling.training.simulation import SimulationConfig


def test_candidates_are_every_rated_path_and_wrong_means_an_oracle_minus_one():
    example = LabeledSolution(
        "P", ["a", "b", "c"], [1, 0, 1], [Alternative(1, "b'", -1), Alternative(2, "c'", 1)]
    )
    cands = candidates_from_oracle([example])
    assert [(c.steps, c.ratings, c.slots, c.wrong) for c in cands] == [
        (["a", "b", "c"], [1, 0, 1], [0, 1, 2], False),
        (["a", "b'"], [1, -1], [0, 3], True),
        (["a", "b", "c'"], [1, 0, 1], [0, 1, 4], False),
    ]
    assert cands[1].n_labels == 2


def tiny_cache(backbone, root, max_length=512):
    from modeling.training.feature_cache import FeatureCache, backbone_identity

    identity = backbone_identity(backbone, blocks=(1, 2), poolings=("end",), max_length=max_length)
    return FeatureCache(root, identity)


def points(arm, rows):
    return [Point(arm, 0, 0, g, n, n * 10, 0.0, auc, 0.0, 1) for g, (n, auc) in enumerate(rows)]


def test_efficiency_ratio_interpolates_uniform_solutions_to_active_final_auroc():
    active = points("active", [(10, 0.6), (20, 0.7)])
    uniform = points("uniform", [(10, 0.6), (30, 0.65), (50, 0.75)])
    ratio, bound, needed = efficiency_ratio(active, uniform)
    assert bound == "=" and needed == pytest.approx(40) and ratio == pytest.approx(2.0)
    assert efficiency_ratio(active, points("uniform", [(10, 0.6), (40, 0.65)]))[:2] == (2.0, ">")
    assert efficiency_ratio(active, points("uniform", [(10, 0.8)]))[:2] == (0.5, "<=")


@pytest.fixture(scope="module")
def critic_slice():
    from tests.helpers.paths import require_shared_data
    from tests.helpers.tiny_models import PARQUET

    require_shared_data()
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from modeling.training.data import examples_from_critic_rows

    table = pq.read_table(PARQUET)
    problems = sorted(set(table.column("instruction").to_pylist()))[:16]
    rows = table.filter(
        pc.is_in(table.column("instruction"), value_set=pa.array(problems))
    ).to_pylist()
    return examples_from_critic_rows(rows)


def test_simulation_runs_every_arm_over_folds_and_seeds_at_equal_budgets(critic_slice, tmp_path):
    from tests.helpers.tiny_models import save_tiny_llama

    backbone = save_tiny_llama(tmp_path / "tiny")
    config = SimulationConfig(
        generations=2,
        per_generation=8,
        uniform_generations=3,
        folds=2,
        seeds=2,
        ensemble_heads=2,
        head_steps=30,
    )
    cache = tiny_cache(backbone, tmp_path / "features")

    def featurize(ordered):
        return simulation.backbone_features(ordered, cache, block=2)

    result = simulation.simulate(critic_slice, featurize, config)
    runs = {(p.fold, p.seed) for p in result.points}
    assert runs == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for run in runs:
        by_arm = {
            arm: [p for p in result.arm(arm) if (p.fold, p.seed) == run] for arm in config.arms
        }
        assert [p.solutions for p in by_arm["uniform"]] == [8, 16, 24, 32]
        for arm in ("convincing_wrong", "uncertainty", "mix"):
            assert [p.solutions for p in by_arm[arm]] == [8, 16, 24]  # equal budgets
            assert by_arm[arm][0].auroc == by_arm["uniform"][0].auroc  # the shared generation 0
        # round(8 x 0.8) = 6 of the 8 picks are wrong answers
        assert by_arm["convincing_wrong"][1].wrong_share == pytest.approx(0.75)
    assert {(r.arm, r.axis) for r in result.ratios} == {
        (arm, axis)
        for arm in ("convincing_wrong", "uncertainty", "mix")
        for axis in ("solutions", "labels")
    }
    for ratio in result.ratios:
        assert len(ratio.values) == 4 and ratio.low <= ratio.mean <= ratio.high
    again = simulation.simulate(critic_slice, featurize, config)
    assert [p.auroc for p in again.points] == [p.auroc for p in result.points]  # seeded

    paths = simulation_report.write_outputs(result, tmp_path / "out", command="test")
    assert paths["plot"].suffix == ".png" and paths["plot"].stat().st_size > 10_000
    text = paths["markdown"].read_text()
    assert text.rstrip().splitlines()[-1] == simulation_report.last_line(result)
    assert "Best-of-N: n/a" in text  # the phase-1 oracle has no graded samples
    assert len(paths["csv"].read_text().splitlines()) == 1 + len(result.points)
    assert re.fullmatch(
        r"active learning: ratio \(solutions\) convincing_wrong [\d.]+ \[[\d.]+, [\d.]+\], "
        r"uncertainty [\d.]+ \[[\d.]+, [\d.]+\]; \(step labels\) convincing_wrong [\d.]+ "
        r"\[[\d.]+, [\d.]+\], uncertainty [\d.]+ \[[\d.]+, [\d.]+\]",
        simulation_report.last_line(result),
    )


def test_ratios_summarize_every_run_against_uniform_in_the_same_run():
    rows = []
    for seed, needed in ((0, 40), (1, 20)):  # uniform needs 40, then 20, for the arm's 0.7
        rows += [
            Point("uniform", 0, seed, g, n, n * 10, 0.0, auc, 0.0, 1)
            for g, (n, auc) in enumerate([(10, 0.6), (needed, 0.7), (60, 0.8)])
        ]
        rows += [
            Point("uncertainty", 0, seed, g, n, 10, 0.0, a, 0.0, 1)
            for g, (n, a) in enumerate([(10, 0.6), (20, 0.7)])
        ]
    ratio = summarize_ratios(rows, "uncertainty", "solutions")
    assert ratio.values == [2.0, 1.0] and ratio.bounds == ["=", "="]
    assert ratio.mean == pytest.approx(1.5) and (ratio.low, ratio.high) == (1.0, 2.0)
    labels = summarize_ratios(rows, "uncertainty", "labels")
    assert labels.values == [40.0, 20.0]  # uniform's 400 / 200 step labels against the arm's 10


def test_best_of_n_picks_the_sample_the_head_scores_highest():
    examples = [LabeledSolution("P", ["fine"], [1]), LabeledSolution("P", ["broken"], [-1])]
    table = simulation.FeatureTable(
        {(0, 0): torch.tensor([1.0, 0.0]), (1, 0): torch.tensor([0.0, 1.0])}
    )
    head = torch.nn.Linear(2, 3)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[-5.0, 5.0], [0.0, 0.0], [5.0, -5.0]]))  # 2nd dim: -1
        head.bias.zero_()
    right_first = simulation.BestOfN(table, examples, [0, 1], {0: True, 1: False})
    assert right_first.accuracy(head, table) == 1.0
    assert (
        simulation.BestOfN(table, examples, [0, 1], {0: False, 1: True}).accuracy(head, table)
        == 0.0
    )
    assert simulation.BestOfN(table, examples, [0, 1], {}).accuracy(head, table) is None


def test_simulate_command_on_cached_features(critic_slice, tmp_path, capsys, monkeypatch, settings):
    from django.core.management import call_command

    from tests.helpers.tiny_models import PARQUET, save_tiny_llama

    settings.STEPWISE_MODELS_ROOT = tmp_path  # the command takes model folders only under it
    backbone = save_tiny_llama(tmp_path / "tiny")
    args = [
        "simulate_active_learning",
        "--oracle",
        str(PARQUET),
        "--max-problems",
        "10",
        "--generations",
        "1",
        "--per-generation",
        "5",
        "--folds",
        "2",
        "--seeds",
        "1",
        "--ensemble-heads",
        "2",
        "--backbone",
        backbone,
        "--keep",
        "1,2",
        "--block",
        "2",
        "--poolings",
        "end",
        "--max-length",
        "512",
        "--feature-cache",
        str(tmp_path / "features"),
        "--out",
        str(tmp_path / "out"),
    ]
    call_command(*args)
    assert list((tmp_path / "features").glob("*/chunk-*.pt"))
    call_command(*args)
    out = capsys.readouterr().out
    assert "reusing" in out
    assert out.rstrip().splitlines()[-1].startswith("active learning: ratio (solutions) ")
    assert (tmp_path / "out" / "simulation.png").exists()


def test_features_cover_every_path_step_and_alternative(critic_slice, tmp_path):
    from tests.helpers.tiny_models import save_tiny_llama

    examples = critic_slice[:3]
    cache = tiny_cache(save_tiny_llama(tmp_path / "t"), tmp_path / "features", max_length=4096)
    features = simulation.backbone_features(examples, cache, block=2)
    expected = {
        (i, s) for i, e in enumerate(examples) for s in range(len(e.steps) + len(e.alternatives))
    }
    assert set(features) == expected
    assert all(v.dtype == torch.float32 for v in features.values())


@pytest.mark.django_db
def test_the_db_oracle_reads_the_completed_labelings_through_the_command():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no labelled solution"):
        call_command("simulate_active_learning", "--oracle", "db")


def test_a_prm800k_oracle_with_sampled_answers_reports_best_of_n(tmp_path, capsys, settings):
    from django.core.management import call_command

    from tests.helpers.tiny_models import SAMPLES, save_tiny_llama

    records = [json.loads(line) for line in SAMPLES.read_text().splitlines()]
    phase2 = next(r for r in records if r["generation"] == 6)
    right = json.loads(json.dumps(phase2))  # a second sample of the problem, answer right
    right["question"]["pre_generated_answer"] = right["question"]["ground_truth_answer"]
    right["label"]["steps"][0]["completions"][0]["text"] += " Let us count again."
    oracle = tmp_path / "oracle.jsonl"
    oracle.write_text("".join(json.dumps(r) + "\n" for r in [*records, right]))
    settings.STEPWISE_MODELS_ROOT = tmp_path
    call_command(
        "simulate_active_learning",
        *("--oracle", str(oracle), "--backbone", save_tiny_llama(tmp_path / "tiny")),
        *("--keep", "2", "--block", "2", "--poolings", "end", "--max-length", "512"),
        *("--generations", "1", "--per-generation", "2", "--folds", "2", "--seeds", "1"),
        *("--ensemble-heads", "2", "--feature-cache", str(tmp_path / "features")),
        *("--out", str(tmp_path / "out")),
    )
    out = capsys.readouterr().out
    assert "best-of-N: 2 sampled solutions with graded answers" in out
    result = json.loads((tmp_path / "out" / "simulation.json").read_text())
    assert result["best_of_n_problems"] == 1
    finals = [p["best_of_n"] for p in result["points"] if p["best_of_n"] is not None]
    assert finals and all(value in (0.0, 1.0) for value in finals)  # one problem: right or not


def test_an_arm_without_a_comparable_run_has_no_ratio():
    """No uniform run beside it (or no AUROC): nothing to divide, said as NaN, not a crash."""
    ratio = summarize_ratios([], "uncertainty", "solutions")
    assert ratio.values == [] and ratio.bounds == [] and math.isnan(ratio.mean)
