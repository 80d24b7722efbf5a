"""Best-of-N side by side (evaluate.compare_best_of_n, footing, overlap, plot_best_of_n) and the
`cli best-of-n` command: every aggregate on a hand-made set, computed by hand below."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from modeling.training import cli
from modeling.training.data import problem_key
from modeling.training.evaluate import (
    SampledProblem,
    compare_best_of_n,
    comparison_summary,
    comparison_table,
    footing,
    overlap,
    plot_best_of_n,
)

SAMPLES_FILE = Path(__file__).parent.parent / "data" / "best_of_n_samples.jsonl"


def process_probs(*step_scores: float) -> np.ndarray:
    """Step rows [P(-1), P(0), P(+1)] whose step score P(0) + P(+1) is each given value."""
    return np.array([[1 - s, 0.0, s] for s in step_scores])


def outcome_probs(score: float, steps: int) -> np.ndarray:
    """An outcome model's rows: only the last step's P(correct) counts (score.solution_score
    "last"); the earlier rows are there because score_solutions gives one per step."""
    return np.array([[0.5, 0.0, 0.5]] * (steps - 1) + [[1 - score, 0.0, score]])


# Three problems x four samples: (answer, the PRM's step scores, the ORM's score). Dyadic
# values, so sums and products are exact and the ties below are real ties.
HAND_MADE = {
    "a": (
        "7",
        [
            ("7", (0.5, 0.5), 0.75),  # a0 right: product .25, min .5
            ("5", (0.75,), 0.25),  # a1 wrong: product .75, min .75
            ("5", (0.25, 1.0), 0.5),  # a2 wrong: product .25, min .25
            ("7", (1.0, 0.125), 1.0),  # a3 right: product .125, min .125
        ],
    ),
    "b": (
        "3",
        [
            ("3", (0.5,), 0.5),  # b0 right: .5
            ("3", (0.5,), 0.5),  # b1 right: .5
            ("3", (0.25,), 0.25),  # b2 right: .25
            ("4", (0.75,), 0.75),  # b3 wrong: .75
        ],
    ),
    "c": (
        "9",
        [
            ("9", (1.0, 0.5), 0.5),  # c0 right: product .5, min .5
            ("8", (0.5, 1.0), 0.5),  # c1 wrong: product .5, min .5 (ties c0)
            (None, (0.25,), 0.25),  # c2 no answer (wrong, a group of its own): .25
            ("8", (1.0, 0.25), 0.125),  # c3 wrong: product .25, min .25
        ],
    ),
}

# By hand. N=1: every method picks the one sample, so each is the share of right samples:
#   a 2/4, b 3/4, c 1/4 -> (0.5 + 0.75 + 0.25) / 3 = 0.5; pass@1 the same.
# N=2, the six pairs of each problem (credit per pair; a tie of one right and one wrong: 1/2).
# At N=2 weighted = product: two different answers are two groups of one sample each.
#   a: (a0,a1) (a0,a2) (a0,a3) (a1,a2) (a1,a3) (a2,a3)
#      product .25<.75: 0 | .25=.25: 1/2 | both right: 1 | both wrong: 0 | .75>.125: 0 | .25>.125: 0
#        -> 1.5/6;  min .5<.75: 0 | .5>.25: 1 | 1 | 0 | 0 | 0 -> 2/6
#      orm .75>.25: 1 | .75>.5: 1 | 1 | 0 | .25<1: 1 | .5<1: 1 -> 5/6
#      majority 7 vs 5: 1/2 | 1/2 | 7,7: 1 | 5,5: 0 | 1/2 | 1/2 -> 3/6
#      pass@2 = 1 - C(2 wrong, 2) / C(4, 2) = 1 - 1/6 = 5/6
#   b: (b0,b1) (b0,b2) (b1,b2) right whatever is picked: 1 each; (b0,b3) (b1,b3) (b2,b3): b3 scores
#      highest for every model (.75 > .5, .25): 0 each -> product, min, weighted, orm 3/6;
#      majority 1, 1, 1 and three ties of 1/2 -> 4.5/6; pass@2 = 1 - C(1, 2)/6 = 1
#   c: (c0,c1) ties for every model and vote: 1/2 | (c0,c2) .5>.25: 1 | (c0,c3) .5>.25: 1 (min
#      .5 > .25, orm .5 > .125) | (c1,c2) (c1,c3) (c2,c3) all wrong: 0
#        -> product, min, weighted, orm 2.5/6; majority 1/2 | 9 vs None 1/2 | 9 vs 8 1/2 | 0 | 0 | 0
#        -> 1.5/6; pass@2 = 1 - C(3, 2)/6 = 3/6
#   mean over a, b, c (sixths / 3 = eighteenths):
#      product (1.5 + 3 + 2.5) / 18 = 7/18, min (2 + 3 + 2.5) / 18 = 7.5/18, weighted 7/18,
#      orm (5 + 3 + 2.5) / 18 = 10.5/18, majority (3 + 4.5 + 1.5) / 18 = 9/18,
#      pass@2 (5 + 6 + 3) / 18 = 14/18
# N=4, one subset (all four samples):
#   a: product max .75 a1: 0; min max .75 a1: 0; weighted 7: .25+.125 = .375 < 5: .75+.25 = 1: 0;
#      orm max 1.0 a3: 1; majority 7 and 5 two each: 1/2; pass 1
#   b: product, min, orm max .75 b3: 0; weighted 3: .5+.5+.25 = 1.25 > 4: .75: 1; majority 3: 1
#   c: product .5 ties c0, c1: 1/2; min .5 ties c0, c1 (c3 .25): 1/2; weighted 9: .5 < 8:
#      .5+.25 = .75: 0; orm .5 ties c0, c1: 1/2; majority 8 (two votes): 0; pass 1
#   mean: product (0 + 0 + 1/2)/3 = 1/6, min 1/6, weighted (0 + 1 + 0)/3 = 1/3,
#      orm (1 + 0 + 1/2)/3 = 1/2, majority (1/2 + 1 + 0)/3 = 1/2, pass 1
EXPECTED = {
    "prm:product": {1: 0.5, 2: 7 / 18, 4: 1 / 6},
    "prm:min": {1: 0.5, 2: 7.5 / 18, 4: 1 / 6},
    "prm:weighted": {1: 0.5, 2: 7 / 18, 4: 1 / 3},
    "orm": {1: 0.5, 2: 10.5 / 18, 4: 1 / 2},
    "majority": {1: 0.5, 2: 9 / 18, 4: 1 / 2},
    "pass@n": {1: 0.5, 2: 14 / 18, 4: 1.0},
}
OBJECTIVES = {"prm": "process", "orm": "outcome"}


def exact(a: str, b: str) -> bool:
    return a == b


def hand_made(copies: dict[str, str] | None = None):
    """(problems, scores) of HAND_MADE; `copies` maps new keys to a problem to repeat."""
    keys = {k: k for k in HAND_MADE} if copies is None else copies
    problems, prm, orm = [], [], []
    for key, source in keys.items():
        truth, samples = HAND_MADE[source]
        problems.append(
            SampledProblem(
                key, f"Problem {source}", truth, [(["step"] * len(s), a) for a, s, _ in samples]
            )
        )
        prm.append([process_probs(*s) for _, s, _ in samples])
        orm.append([outcome_probs(o, len(s)) for _, s, o in samples])
    return problems, {"prm": prm, "orm": orm}


def accuracies(report) -> dict[str, dict[int, float]]:
    return {
        method: {row["n"]: row["accuracy"] for row in rows}
        for method, rows in report["methods"].items()
    }


def test_every_aggregate_matches_the_hand_computation():
    problems, scores = hand_made()
    report = compare_best_of_n(problems, scores, OBJECTIVES, equivalent=exact, intervals=200)
    assert (report["problems"], report["samples"], report["ns"]) == (3, 12, [1, 2, 4])
    assert list(report["methods"]) == list(EXPECTED)  # process, outcome, majority, pass@n
    got = accuracies(report)
    for method, expected in EXPECTED.items():
        assert got[method] == pytest.approx(expected), method
    for rows in report["methods"].values():
        for row in rows:
            assert row["problems"] == 3
            assert row["low"] <= row["accuracy"] <= row["high"]
    # The problems differ, so resampling them widens the interval (at N=2: product a 1.5/6,
    # b 3/6, c 2.5/6); pass@4 is 1 on every problem, so its interval is that point.
    product_at_2 = report["methods"]["prm:product"][1]
    assert product_at_2["low"] < product_at_2["accuracy"] < product_at_2["high"]
    assert report["methods"]["pass@n"][2]["low"] == report["methods"]["pass@n"][2]["high"] == 1.0


def test_the_table_and_last_line_show_each_method_at_each_n():
    problems, scores = hand_made()
    report = compare_best_of_n(problems, scores, OBJECTIVES, equivalent=exact, intervals=0)
    lines = comparison_table(report).splitlines()
    assert lines[0].split() == ["N", "problems", *EXPECTED]
    assert lines[3].split() == ["4", "3", "0.167", "0.167", "0.333", "0.500", "0.500", "1.000"]
    assert comparison_summary(report, OBJECTIVES) == (
        "best-of-N at N=4: prm 0.167, orm 0.500, majority 0.500, weighted 0.333, pass@N 1.000"
    )
    only_process = compare_best_of_n(
        problems, {"prm": scores["prm"]}, {"prm": "process"}, equivalent=exact, intervals=0
    )
    assert comparison_summary(only_process, {"prm": "process"}) == (
        "best-of-N at N=4: prm 0.167, orm n/a, majority 0.500, weighted 0.333, pass@N 1.000"
    )


def test_intervals_collapse_to_the_mean_when_every_problem_is_the_same():
    problems, scores = hand_made({"c1": "c", "c2": "c", "c3": "c"})
    report = compare_best_of_n(problems, scores, OBJECTIVES, equivalent=exact)
    for method, rows in report["methods"].items():
        for row in rows:  # every subset enumerated: each problem's figure is exact
            assert row["low"] == pytest.approx(row["accuracy"]) == row["high"], method


def test_random_subsets_are_seeded_and_redrawn_for_the_intervals():
    truth, samples = HAND_MADE["a"]
    many = [samples[i % 4] for i in range(12)]  # C(12, 4) = 495 subsets, more than repeats
    problems = [
        SampledProblem(f"p{i}", "Problem a", truth, [(["s"] * len(s), a) for a, s, _ in many])
        for i in range(3)
    ]
    scores = {"prm": [[process_probs(*s) for _, s, _ in many] for _ in problems]}
    args = dict(equivalent=exact, ns=[4], repeats=20, intervals=300)
    first = compare_best_of_n(problems, scores, {"prm": "process"}, seed=3, **args)
    assert first == compare_best_of_n(problems, scores, {"prm": "process"}, seed=3, **args)
    assert first != compare_best_of_n(problems, scores, {"prm": "process"}, seed=4, **args)
    # The three problems are the same, so resampling problems alone would give no width: the
    # interval comes from redrawing each problem's 20 random subsets.
    row = first["methods"]["prm:product"][0]
    assert row["low"] < row["accuracy"] < row["high"]
    # pass@4 is exact: 6 of the 12 samples are wrong, 1 - C(6, 4) / C(12, 4) = 1 - 15/495.
    assert first["methods"]["pass@n"][0]["accuracy"] == pytest.approx(1 - 15 / 495)


def test_ns_beyond_the_samples_are_left_out_and_bad_scores_refused():
    problems, scores = hand_made()
    report = compare_best_of_n(problems, scores, OBJECTIVES, equivalent=exact, ns=[8, 2])
    assert report["ns"] == [2] and [r["n"] for r in report["methods"]["orm"]] == [2]
    with pytest.raises(ValueError, match="prm has scores for 2 of 3 problems"):
        compare_best_of_n(problems, {"prm": scores["prm"][:2]}, {}, equivalent=exact)
    short = [scores["prm"][0][:3], *scores["prm"][1:]]
    with pytest.raises(ValueError, match="3 of problem a's 4 samples"):
        compare_best_of_n(problems, {"prm": short}, {}, equivalent=exact)
    with pytest.raises(ValueError, match="objective is 'value'"):
        compare_best_of_n(problems, scores, {"orm": "value"}, equivalent=exact)
    with pytest.raises(ValueError, match="positive whole number, not 0"):
        compare_best_of_n(problems, scores, OBJECTIVES, equivalent=exact, ns=[0])
    named_like_a_method = {"prm": "process", "majority": "outcome"}
    with pytest.raises(ValueError, match="a model is named 'majority'"):
        compare_best_of_n(
            problems,
            {"prm": scores["prm"], "majority": scores["orm"]},
            named_like_a_method,
            equivalent=exact,
        )


def training(problems: list[str], steps: int = 100) -> dict:
    keys = sorted(set(problems))
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    return {"problems": keys, "problems_digest": digest, "optimizer_steps": steps, "examples": 9}


def test_footing_names_each_mismatch_and_overlap_counts_evaluation_problems():
    same = {"backbone": "tiny", "training": training(["k1", "k2"])}
    assert footing({"prm": same, "orm": {**same, "objective": "outcome"}}) == []
    mismatches = footing(
        {
            "prm": same,
            "orm": {"backbone": "small", "training": training(["k1", "k3"], steps=50)},
            "old": {"backbone": "tiny"},
        }
    )
    k12 = training(["k1", "k2"])["problems_digest"][:12]
    k13 = training(["k1", "k3"])["problems_digest"][:12]
    assert mismatches == [
        "old was trained before Stepwise recorded its problems (no training record)",
        "different backbones: tiny (prm, old); small (orm)",
        f"different training problems: digest {k12} (prm); digest {k13} (orm)",
        "different optimizer steps: 100 (prm); 50 (orm)",
    ]
    models = {"prm": same, "orm": {"training": training(["k3"])}, "old": {}}
    assert overlap(models, ["k2", "k3", "k4"]) == {"prm": 1, "orm": 1}


def png_size(path) -> tuple[int, int]:
    """A PNG's width and height from its header (the signature, then IHDR's first fields)."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", "not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_the_plot_is_a_png_of_the_size_asked(tmp_path):
    problems, scores = hand_made()
    report = compare_best_of_n(problems, scores, OBJECTIVES, equivalent=exact, intervals=50)
    path = plot_best_of_n(report, tmp_path / "curves.png")
    assert png_size(path) == (800, 500)
    small = plot_best_of_n(report, tmp_path / "small.png", size=(4.0, 3.0), dpi=50)
    assert png_size(small) == (200, 150)


# ----------------------------------------------------------------------------- the command

# The models below have zeroed heads: a process model scores every step 2/3 (P(-1) = P(0) =
# P(+1)), an outcome model P(correct) 1/2, so on tests/modeling/data/best_of_n_samples.jsonl
# (its README has the per-problem table) at N=4:
#   prm (product: the fewest steps, ties split) (1 + 1/2 + 0)/3 = 0.500;
#   orm ties every sample, so it is the share of right samples (1/4 + 3/4 + 3/4)/3 = 0.583;
#   majority (0 + 1 + 1)/3 = 0.667;
#   weighted (group sums of (2/3)^steps): half 1/2 alone 2/3 < 1/3's 4/9 + 4/9 + 8/27: 0;
#     ten 10's 2/3 + 4/9 + 8/27 > 12's 2/3: 1; three 3's 4/9 + 4/9 + 8/27 > 4's 2/3: 1 -> 0.667;
#   pass@4: every problem has a right sample -> 1.000.
LAST_LINE = "best-of-N at N=4: prm 0.500, orm 0.583, majority 0.667, weighted 0.667, pass@N 1.000"


def save_constant_model(folder: Path, backbone: str, objective: str, record: dict | None) -> str:
    import torch

    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    labels = 2 if objective == "outcome" else 3
    config = TrainConfig(backbone=backbone, device="cpu", num_labels=labels)
    model = ProcessRewardModel.from_config(config)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    model.save(folder)
    meta = json.loads((folder / "prm.json").read_text())
    meta["objective"] = objective
    if record is not None:
        meta["training"] = record
    (folder / "prm.json").write_text(json.dumps(meta))
    return str(folder)


@pytest.fixture(scope="module")
def models(tiny_llama, tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("best-of-n-models")
    record = training(["train-1", "train-2"])
    evaluation = [json.loads(line)["problem"] for line in SAMPLES_FILE.read_text().splitlines()]
    return {
        "prm": save_constant_model(root / "prm", tiny_llama, "process", record),
        "orm": save_constant_model(root / "orm", tiny_llama, "outcome", record),
        "orm-longer": save_constant_model(
            root / "orm-longer", tiny_llama, "outcome", training(["train-1", "train-2"], 300)
        ),
        "orm-peeked": save_constant_model(
            root / "orm-peeked",
            tiny_llama,
            "outcome",
            training(["train-1", "train-2", problem_key(evaluation[0])]),
        ),
    }


def run_best_of_n(models: dict[str, str], names: list[str], *flags: str) -> int:
    argv = ["best-of-n", "--models", ",".join(models[n] for n in names)]
    return cli.main([*argv, "--input", str(SAMPLES_FILE), "--intervals", "50", *flags])


def test_best_of_n_on_equal_footing_prints_the_table_and_the_hand_computed_last_line(
    models, tmp_path, capsys
):
    out_json, out_png = tmp_path / "report.json", tmp_path / "curves.png"
    flags = ["--json", str(out_json), "--png", str(out_png)]
    assert run_best_of_n(models, ["prm", "orm"], *flags) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == LAST_LINE
    assert lines[-5].split() == ["N", "problems", *EXPECTED]
    assert [line.split()[:2] for line in lines[-4:-1]] == [["1", "3"], ["2", "3"], ["4", "3"]]
    report = json.loads(out_json.read_text())
    assert (report["footing"], report["allowed_mismatch"], report["ns"]) == ([], False, [1, 2, 4])
    assert report["models"]["orm"]["objective"] == "outcome"
    assert report["methods"]["majority"][2]["accuracy"] == pytest.approx(2 / 3)
    assert png_size(out_png) == (800, 500)


def test_best_of_n_refuses_models_not_on_equal_footing_and_writes_nothing(models, tmp_path, capsys):
    out_json = tmp_path / "report.json"
    assert run_best_of_n(models, ["prm", "orm-longer"], "--json", str(out_json)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "best-of-n: error: not on equal footing: different optimizer steps: 100 (prm); "
        "300 (orm-longer) (--allow-mismatch compares anyway)"
    )
    assert run_best_of_n(models, ["prm", "orm-peeked"]) == 2
    err = capsys.readouterr().err
    assert "orm-peeked trained on 1 of the 3 evaluation problems" in err
    assert "different training problems" in err
    assert not out_json.exists()


def test_best_of_n_compares_despite_a_mismatch_when_allowed_and_says_so(models, tmp_path, capsys):
    out_json = tmp_path / "report.json"
    flags = ["--allow-mismatch", "--json", str(out_json), "--n", "4"]
    assert run_best_of_n(models, ["prm", "orm-longer"], *flags) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "comparing despite: different optimizer steps: 100 (prm); 300 (orm-longer)"
    assert out[-1] == LAST_LINE  # orm-longer is the same constant model, trained longer
    report = json.loads(out_json.read_text())
    assert report["allowed_mismatch"] is True and report["ns"] == [4]
    assert report["footing"] == ["different optimizer steps: 100 (prm); 300 (orm-longer)"]


def test_best_of_n_bad_input_is_one_line(models, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1 + 1", "samples": []}\n')
    argv = ["best-of-n", "--models", models["prm"], "--input", str(bad)]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"best-of-n: error: {bad}, line 1: KeyError: 'answer'"
    )
    argv = ["best-of-n", "--models", str(tmp_path), "--input", str(SAMPLES_FILE)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"best-of-n: error: {tmp_path} is not a saved model") and "\n" not in err
    too_few = ["best-of-n", "--models", models["prm"], "--input", str(SAMPLES_FILE), "--n", "8"]
    assert cli.main(too_few) == 2
    assert capsys.readouterr().err.strip() == (
        f"best-of-n: error: no problem of {SAMPLES_FILE} has 8 samples or more"
    )


def test_an_imported_model_has_no_training_record_and_compares_only_when_allowed(
    models, tmp_path, capsys
):
    from modeling.training.export import export_hf
    from modeling.training.external import describe, write_manifest

    imported = export_hf(models["prm"], tmp_path / "imported")  # a Hugging Face folder
    write_manifest(imported, describe(imported))  # as importing it makes it
    capsys.readouterr()
    argv = ["best-of-n", "--models", f"{imported},{models['orm']}", "--input", str(SAMPLES_FILE)]
    assert cli.main([*argv, "--intervals", "0"]) == 2
    assert (
        "imported was trained before Stepwise recorded its problems (no training record)"
        in capsys.readouterr().err
    )
    assert cli.main([*argv, "--intervals", "0", "--allow-mismatch"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("comparing despite: imported was trained before Stepwise")
    assert out[-1] == LAST_LINE  # the export scores as the model it came from
