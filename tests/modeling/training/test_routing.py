"""Routing by judge disagreement in the simulation (issue 47): simulated judges at a set kappa,
their verdicts and agreement (machine labels), and the routing arms on a tiny oracle."""

from __future__ import annotations

import re

import pytest
import torch

from modeling.training import routing, simulation, simulation_report
from modeling.training.data import Alternative, LabeledSolution
from modeling.training.oracle import OracleCandidate, candidates_from_oracle
from modeling.training.simulation import SimulationConfig


def candidate(example: int, ratings: list[int | None]) -> OracleCandidate:
    return OracleCandidate(
        example, example, "P", ["s"] * len(ratings), ratings, list(range(len(ratings)))
    )


def test_a_simulated_judge_is_calibrated_to_the_kappa_asked_for_and_reports_the_realised():
    # 3,000 steps with a PRM800K-like mix of ratings.
    steps = {(i, 0): (1, 1, 1, 0, -1)[i % 5] for i in range(3000)}
    for kappa in (0.3, 0.5, 0.7, 0.9):
        judge = routing.simulated_judge(steps, kappa, seed=1)
        keys = sorted(steps)
        realised = routing.cohen_kappa([steps[k] for k in keys], [judge.labels[k] for k in keys])
        assert judge.kappa == pytest.approx(realised)
        assert abs(realised - kappa) <= 0.005
        assert set(judge.labels) == set(steps)
    perfect = routing.simulated_judge(steps, 1.0, seed=1)
    assert perfect.labels == steps and perfect.kappa == 1.0
    assert routing.simulated_judge(steps, 0.5, seed=1).labels == (
        routing.simulated_judge(steps, 0.5, seed=1).labels
    )  # seeded
    with pytest.raises(ValueError, match="kappa"):
        routing.simulated_judge(steps, 1.5, seed=1)


def test_verdicts_stop_at_the_first_minus_one_and_skip_unrated_steps():
    judge = routing.SimulatedJudge({(0, 0): 1, (0, 1): -1, (0, 2): 1}, 0.5, 0.5, 0.5)
    cand = OracleCandidate(0, 0, "P", ["a", "b", "c", "d"], [1, 1, 1, None], [0, 1, 2, 3])
    assert routing.verdict(judge, cand) == [1, -1, None, None]
    assert routing.first_error([1, -1, None, None]) == 1
    assert routing.first_error([1, 0, None]) is None


def test_machine_labels_need_every_judge_alike_and_precision_is_checked_as_a_human_would():
    assert routing.agreed_labels([[1, -1, None], [1, -1, None]]) == [1, -1, None]
    assert routing.agreed_labels([[1, -1, None], [1, 0, 1]]) is None
    assert routing.agreed_labels([[None, None], [None, None]]) is None  # nothing said
    assert routing.agreed_labels([]) is None
    # Right: the same labels up to and including the oracle's first -1 (it stops there).
    assert routing.machine_precision([1, -1, None], [1, -1, 1])
    assert routing.machine_precision([1, 0, 1], [1, 0, 1])
    assert not routing.machine_precision([1, 1, 1], [1, -1, 1])  # missed the error
    assert not routing.machine_precision([1, -1, None], [1, 1, 1])  # an error that is not one
    assert routing.machine_precision([1, None], [1, None])  # unrated (human-written) steps


@pytest.fixture(scope="module")
def tiny_oracle() -> tuple[list[LabeledSolution], dict]:
    """24 problems, two solutions each, with alternatives; features from a fixed random map
    in which a -1 step leans one way, so a head learns something."""
    generator = torch.Generator().manual_seed(0)
    examples = []
    for p in range(24):
        for s in range(2):
            ratings = [1, 1, 0, 1, -1 if (p + s) % 3 == 0 else 1]
            alternatives = [Alternative(2, f"alt {p} {s}", -1), Alternative(3, f"alt2 {p}", 1)]
            examples.append(
                LabeledSolution(f"problem {p}", [f"s{k}" for k in range(5)], ratings, alternatives)
            )
    features = {}
    for i, example in enumerate(examples):
        for slot, rating in enumerate(example.slot_ratings()):
            x = torch.randn(8, generator=generator)
            x[0] += -1.5 if rating == -1 else 0.5
            features[(i, slot)] = x
    return examples, features


def test_the_routing_arms_run_at_each_kappa_with_equal_human_budgets(tiny_oracle, tmp_path):
    examples, features = tiny_oracle
    config = SimulationConfig(
        arms=("uniform", "routing", "routing+machine"),
        generations=2,
        per_generation=6,
        uniform_generations=4,
        folds=2,
        seeds=1,
        head_steps=20,
        judge_kappas=(0.5, 1.0),
        judges=2,
        audit_share=0.5,
        machine_per_generation=4,
    )
    result = simulation.simulate(examples, features, config)
    names = config.arm_names()
    assert names == [
        "uniform",
        "routing kappa 0.5",
        "routing kappa 1",
        "routing+machine kappa 0.5",
        "routing+machine kappa 1",
    ]
    for run in {(p.fold, p.seed) for p in result.points}:
        for name in names[1:]:
            mine = [p for p in result.arm(name) if (p.fold, p.seed) == run]
            # Equal human budgets: 6 solutions a generation, whatever the machine labels.
            assert [p.solutions for p in mine] == [6, 12, 18]
            if name == "routing+machine kappa 1":
                # Judges that agree on everything: 4 accepted a generation, half audited.
                assert [p.machine_solutions for p in mine] == [0, 2, 4]
                assert [p.machine_audited for p in mine] == [0, 2, 4]
            elif name.startswith("routing+machine"):
                # Weaker judges agree less: at most 4 a generation, half (rounded up) audited.
                accepted = [p.machine_solutions + p.machine_audited for p in mine]
                assert accepted[0] == 0 and all(
                    b - a <= 4 for a, b in zip(accepted, accepted[1:], strict=False)
                )
                assert all(p.machine_audited >= p.machine_solutions for p in mine)
            else:
                assert all(p.machine_solutions == 0 for p in mine)
    # Judges that always agree with the oracle (kappa 1) make no machine label a human rejects.
    perfect = [p for p in result.arm("routing+machine kappa 1") if p.generation == 2]
    assert all(p.machine_precision == 1.0 for p in perfect)
    realised = {row["target"]: row for row in result.extra["judge_kappas"]}
    assert set(realised) == {0.5, 1.0}
    assert realised[1.0]["realised_mean"] == 1.0
    assert abs(realised[0.5]["realised_mean"] - 0.5) < 0.05  # a small oracle: few steps
    assert {r.arm for r in result.ratios} == set(names[1:])

    paths = simulation_report.write_outputs(result, tmp_path / "out", command="test")
    assert paths["plot"].stat().st_size > 10_000
    text = paths["markdown"].read_text()
    lines = text.rstrip().splitlines()
    assert lines[-1] == simulation_report.last_line(result)
    number = r"[\d.]+ \[[\d.]+, [\d.]+\]"
    assert re.fullmatch(
        rf"routing: human labels saved \(step labels\) at kappa 0.5 {number}",
        lines[-1],
    )
    assert lines[-2].startswith("routing (humans only): human labels saved (step labels) at")
    assert "| 1 | 1.000 [1.000, 1.000] | 4 | 4 | 1.000 |" in text  # the machine-label table


def test_routing_picks_first_what_the_judges_disagree_on():
    # One problem, three candidates; judge A calls candidate 1 wrong at step 0, judge B never
    # does: only candidate 1 is disputed, so it is routed first.
    pool = [candidate(0, [1, 1]), candidate(1, [1, 1]), candidate(2, [1, 1])]
    judge_a = routing.SimulatedJudge({(0, 0): 1, (0, 1): 1, (1, 0): -1, (1, 1): 1}, 1, 1, 1)
    judge_a.labels.update({(2, 0): 1, (2, 1): 1})
    judge_b = routing.SimulatedJudge({key: 1 for key in judge_a.labels}, 1, 1, 1)
    panel = simulation.JudgePanel.__new__(simulation.JudgePanel)
    panel.judges = [judge_a, judge_b]
    panel.first_errors = [
        [routing.first_error(routing.verdict(j, c)) for j in panel.judges] for c in pool
    ]
    assert panel.first_errors == [[None, None], [0, None], [None, None]]
    from modeling.training.selection import Candidate, judge_disagreement, select_disagreement

    ranked = select_disagreement(
        [
            Candidate(c.id, 0, 0.0, None, disagreement=judge_disagreement(f, 2))
            for c, f in zip(pool, panel.first_errors, strict=True)
        ],
        k=1,
    )
    assert [p.solution_id for p in ranked] == [1]


def test_candidates_from_the_tiny_oracle_carry_their_alternatives(tiny_oracle):
    examples, _ = tiny_oracle
    assert len(candidates_from_oracle(examples)) == 3 * len(examples)
