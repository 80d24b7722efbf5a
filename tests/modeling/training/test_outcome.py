"""Outcome supervision (an ORM): the config rule, graded data in each shape, training in every
mode, the held-out solution AUROC, and the export as a plain transformers sequence classifier."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from modeling.training import cli
from modeling.training.config import TrainConfig
from modeling.training.data import (
    GradedSolution,
    LabeledSolution,
    outcome_examples,
    pack_solution,
    problem_key,
    split_by_problem,
)
from modeling.training.inputs import DataFormatError, read_graded, read_graded_data
from tests.helpers.paths import SHARED_DATA
from tests.helpers.tiny_models import SAMPLES

PROCESSBENCH_GSM8K = SHARED_DATA / "processbench" / "gsm8k.json"


def marker_task(problems: int = 24) -> list[GradedSolution]:
    """A learnable outcome: a solution is correct iff its last step ends in "indeed" (the other
    ends in "perhaps"); two solutions a problem, one of each."""
    graded = []
    for k in range(problems):
        for correct in (True, False):
            last = f"So the answer is {2 * k} {'indeed' if correct else 'perhaps'}"
            steps = [f"We add {k} and {k}.", last]
            graded.append(GradedSolution(f"What is {k} + {k}?", steps, correct))
    return graded


def write_graded(path: Path, graded: list[GradedSolution]) -> Path:
    lines = [
        json.dumps({"problem": g.problem, "steps": g.steps, "correct": g.correct}) for g in graded
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the config ---------------------------------------------------------------------------------


def test_outcome_takes_a_two_class_head_and_refuses_an_explicit_three():
    assert TrainConfig(objective="outcome").num_labels == 2
    assert TrainConfig().objective == "process" and TrainConfig().num_labels == 3
    assert TrainConfig(objective="outcome", num_labels=2).num_labels == 2
    with pytest.raises(ValueError, match="objective outcome trains a 2-class head") as refused:
        TrainConfig(objective="outcome", num_labels=3)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="objective must be one of"):
        TrainConfig(objective="reward")


def test_a_saved_config_round_trips_and_replacing_the_objective_takes_its_head():
    outcome = TrainConfig(objective="outcome")
    assert TrainConfig.from_dict(outcome.to_dict()) == outcome
    assert TrainConfig().replace(objective="outcome").num_labels == 2
    assert outcome.replace(objective="process").num_labels == 3
    # A config saved before objectives existed reads as process.
    old = TrainConfig().to_dict()
    del old["objective"]
    assert TrainConfig.from_dict(old).objective == "process"


def test_objective_is_a_train_flag_with_its_default(capsys, monkeypatch):
    args = cli.build_parser().parse_args(["train", "--objective", "outcome"])
    assert args.objective == "outcome" and args.num_labels is None
    assert cli.build_parser().parse_args(["train"]).objective == "process"
    monkeypatch.setenv("COLUMNS", "1000")  # argparse's width: one line a flag
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--help"])
    shown = capsys.readouterr().out.split("  --objective OBJECTIVE", 1)[1].split("\n  --")[0]
    assert "(default: process)" in shown and "outcome: one label per solution" in shown


# --- data ---------------------------------------------------------------------------------------


def test_problem_key_strips_and_collapses_whitespace():
    key = problem_key("  What is\n\n1 +  1?  ")
    assert key == hashlib.sha256(b"What is 1 + 1?").hexdigest()[:16]
    assert key == problem_key("What is 1 + 1?") and len(key) == 16


def test_outcome_examples_rate_the_last_step_alone(tokenizer):
    correct, wrong = outcome_examples(
        [
            GradedSolution("p", ["a", "b", "c"], True),
            GradedSolution("q", ["x"], False),
        ]
    )
    assert correct == LabeledSolution("p", ["a", "b", "c"], [None, None, 1])
    assert wrong == LabeledSolution("q", ["x"], [-1])
    # Outcome targets keep only the last step's label, whatever the solution carries.
    from modeling.training.data import Targets

    rated = LabeledSolution("p", ["a", "b", "c"], [1, -1, 1])
    (row,) = pack_solution(rated, tokenizer, 512, targets=Targets(2, outcome=True))
    assert [lab for lab in row.labels if lab != -100] == [1]
    assert row.ends[-1] == len(row) - 1  # the last token: the separator after the last step


# --- graded readers -----------------------------------------------------------------------------


def test_graded_jsonl_reads_and_each_bad_row_is_one_line(tmp_path):
    good = write_graded(tmp_path / "graded.jsonl", marker_task(2))
    assert read_graded(good) == marker_task(2)
    first = {"problem": "p", "steps": ["a"], "correct": True}
    bad_rows = {
        "missing": ({"problem": "p", "steps": ["a"]}, "row 2, column 'correct': missing"),
        "string": (
            {"problem": "p", "steps": ["a"], "correct": "yes"},
            "row 2, column 'correct': true or false was expected, not a string",
        ),
        "empty": ({"problem": "p", "steps": [], "correct": True}, "column 'steps': no steps"),
    }
    for name, (row, message) in bad_rows.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(first) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(DataFormatError) as refused:
            read_graded(path)
        assert message in str(refused.value) and "\n" not in str(refused.value)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "p", "completions": ["a"], "labels": [True]}) + "\n")
    with pytest.raises(DataFormatError, match="match no graded shape"):
        read_graded(other)


def test_processbench_reads_final_answer_correct(shared_data):
    items = json.loads(PROCESSBENCH_GSM8K.read_text())
    graded = read_graded(PROCESSBENCH_GSM8K)
    assert len(graded) == len(items) == 400
    assert [g.correct for g in graded] == [item["final_answer_correct"] for item in items]
    assert graded[0].steps == items[0]["steps"] and graded[0].problem == items[0]["problem"]


def test_prm800k_lines_with_a_ground_truth_are_graded_by_their_final_steps_answer(shared_data):
    asked = []

    def grade(steps, answer, truth):
        asked.append((list(steps), answer, truth))
        return truth in steps[-1]

    data = read_graded_data(SAMPLES, grade)
    records = [json.loads(line) for line in SAMPLES.read_text().splitlines()]
    finished = [
        r
        for r in records
        if r["label"]["finish_reason"] == "solution"
        and r["question"].get("ground_truth_answer") is not None
    ]
    assert len(data.solutions) == len(finished) == 3 and len(asked) == 3
    for (steps, answer, truth), record in zip(asked, finished, strict=True):
        assert answer is None and truth == record["question"]["ground_truth_answer"]
        assert len(steps) == 1 and "# Answer" in steps[0]  # the final step alone
    assert [g.problem for g in data.solutions] == [r["question"]["problem"] for r in finished]
    assert len(data.notes) == 3  # found_error, give_up, no ground truth: each said
    with pytest.raises(DataFormatError, match="no answer checker"):
        read_graded(SAMPLES)


def test_best_of_n_samples_are_graded_with_the_callers_checker(tmp_path):
    path = tmp_path / "samples.jsonl"
    line = {
        "problem": "What is 1 + 1?",
        "answer": "2",
        "samples": [
            {"steps": ["1 + 1 = 2.", "# Answer\n\n2"], "answer": "2"},
            {"steps": ["1 + 1 = 3.", "# Answer\n\n3"]},
        ],
    }
    path.write_text(json.dumps(line) + "\n")
    graded = read_graded(path, lambda steps, answer, truth: (answer or steps[-1][-1]) == truth)
    assert [g.correct for g in graded] == [True, False] and graded[1].steps[0] == "1 + 1 = 3."
    line["samples"][1]["steps"] = []
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(DataFormatError, match=r"row 1, column 'samples\[1\].steps': no steps"):
        read_graded(path, lambda *args: True)


def test_the_reference_best_of_n_file_is_graded_by_the_answer_checker():
    path = Path(__file__).parents[1] / "data" / "best_of_n_samples.jsonl"
    graded = read_graded(path, cli.grade_answer)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(graded) == sum(len(line["samples"]) for line in lines)
    # "half": 0.5 equals 1/2, the thirds do not; "ten": 10 and 10.0 are right, 12 is not.
    assert [g.correct for g in graded[:4]] == [True, False, False, False]
    assert [g.correct for g in graded[4:7]] == [True, False, True]


# --- training -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["head", "lora", "full"])
def test_an_orm_trains_in_each_mode_with_its_training_record(mode, tiny_llama, make_config):
    from modeling.training.train import train

    graded = marker_task(6)
    config = make_config(tiny_llama, mode=mode, objective="outcome", max_steps=3)
    result = train(config, outcome_examples(graded))
    assert result.step == 3 and all(np.isfinite(loss) for _, loss in result.loss_curve)
    assert result.metrics["labels"] == len(graded)  # one label a solution
    out = Path(result.output_dir)
    meta = json.loads((out / "prm.json").read_text())
    assert meta["objective"] == "outcome" and meta["config"]["num_labels"] == 2
    assert meta["layout"]["classes"] == ["wrong", "correct"]
    keys = sorted({problem_key(g.problem) for g in graded})
    assert meta["training"] == {
        "problems": keys,
        "problems_digest": hashlib.sha256("\n".join(keys).encode()).hexdigest(),
        "optimizer_steps": 3,
        "examples": len(graded),
    }
    head = load_file(out / "head.safetensors")
    assert set(head) == {"weight"} and head["weight"].shape[0] == 2  # 2-class, no bias


def test_a_process_model_records_its_objective_and_training_problems(
    tiny_llama, make_config, samples
):
    from modeling.training.train import train

    result = train(make_config(tiny_llama, max_steps=1), samples)
    meta = json.loads((Path(result.output_dir) / "prm.json").read_text())
    assert meta["objective"] == "process" and meta["config"]["num_labels"] == 3
    assert meta["training"]["optimizer_steps"] == 1
    assert meta["training"]["examples"] == len(samples)
    assert meta["training"]["problems"] == sorted({problem_key(s.problem) for s in samples})


def test_the_orm_learns_a_marker_and_ranks_held_out_solutions(tiny_llama, make_config):
    from modeling.training.evaluate import evaluate_outcome
    from modeling.training.model import ProcessRewardModel
    from modeling.training.train import train

    train_graded, held_out = split_by_problem(marker_task(24), 0.25, seed=0)
    # Head mode over cached features: 60 steps cost seconds (full and lora learn it too).
    config = make_config(tiny_llama, mode="head", objective="outcome", max_steps=60, lr=1e-2)
    result = train(config, outcome_examples(train_graded))
    model = ProcessRewardModel.load(result.output_dir)
    report = evaluate_outcome(model, held_out)
    assert report["solutions"] == len(held_out) == 12 and report["correct"] == 6
    assert report["solution_auroc"] > 0.75, report  # 0.94 on this tiny random backbone
    assert report["unscored"] == 0 and report["accuracy"] > 0.5


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_trains_an_orm_on_graded_jsonl_and_evaluates_its_held_out_problems(
    tiny_llama, tmp_path, capsys
):
    data = write_graded(tmp_path / "graded.jsonl", marker_task(8))
    out = tmp_path / "orm"
    argv = [
        "train", "--objective", "outcome", "--data", str(data), "--backbone", tiny_llama,
        "--mode", "head", "--max-steps", "2", "--device", "cpu", "--output-dir", str(out),
        "--holdout-fraction", "0.25",
    ]  # fmt: skip
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out[captured.out.index("{") :])
    assert summary["held_out"]["solutions"] == 4 and "solution_auroc" in summary["held_out"]
    assert "graded solutions" in captured.err
    meta = json.loads((out / "prm.json").read_text())
    assert meta["objective"] == "outcome" and meta["training"]["examples"] == 12
    split = json.loads((out / "split.json").read_text())
    assert not set(split["test_problems"]) & set(meta["training"]["problems"])
    assert json.loads((out / "metrics.json").read_text())["held_out"] == summary["held_out"]

    assert cli.main(["evaluate", "--model", str(out), "--data", str(data), "--device", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["objective"] == "outcome" and report["solutions"]["solutions"] == 4


def test_cli_outcome_training_refuses_a_bad_graded_file_in_one_line(tiny_llama, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "p", "steps": ["a"], "correct": 1}) + "\n")
    argv = ["train", "--objective", "outcome", "--data", str(bad), "--backbone", tiny_llama]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "orm")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"train: error: {bad}: row 1, column 'correct': true or false was expected, "
                   "not an integer"]  # fmt: skip
    assert not (tmp_path / "orm" / "prm.json").exists()
    assert cli.main([*argv[:-2], "--num-labels", "3", "--backbone", tiny_llama]) == 2
    assert "objective outcome trains a 2-class head" in capsys.readouterr().err


# --- export -------------------------------------------------------------------------------------


def saved_orm(backbone: str, mode: str, folder: Path) -> str:
    """A saved ORM whose trained parts are random (LoRA's B too, which peft starts at 0)."""
    from modeling.training.model import ProcessRewardModel

    torch.manual_seed(1)
    config = TrainConfig(backbone=backbone, mode=mode, device="cpu", objective="outcome")
    model = ProcessRewardModel.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.requires_grad:
                param.normal_(0, 0.3 if "lora_" in name or "head" in name else 0.02)
    model.save(folder / "model")
    return str(folder / "model")


@pytest.mark.parametrize("mode", ["head", "lora", "full"])
def test_an_orm_exports_as_a_sequence_classifier_with_equal_scores(mode, tiny_llama, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from modeling.training.model import ProcessRewardModel
    from modeling.training.score import score_solutions, solution_score

    model_dir = saved_orm(tiny_llama, mode, tmp_path)
    out = tmp_path / "hf"
    assert cli.main(["export", "--model", model_dir, "--output", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"]
    assert config["id2label"] == {"0": "wrong", "1": "correct"} and config["pad_token_id"] == 0
    assert config["stepwise"]["objective"] == "outcome"

    graded = marker_task(2)
    ours = ProcessRewardModel.load(model_dir)
    expected = [solution_score(p, "last") for p in score_solutions(ours, graded)]
    classifier = AutoModelForSequenceClassification.from_pretrained(out, dtype=torch.float32)
    assert classifier.config.num_labels == 2
    sep = classifier.config.step_separator
    tok = AutoTokenizer.from_pretrained(out)
    for g, want in zip(graded, expected, strict=True):
        ids = [tok.bos_token_id] + tok(g.problem + sep, add_special_tokens=False)["input_ids"]
        for step in g.steps:
            ids += tok(step, add_special_tokens=False)["input_ids"]
            ids += tok(sep, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = classifier(input_ids=torch.tensor([ids])).logits[0]
        assert abs(float(logits.softmax(-1)[1]) - want) < 1e-4
    card = (out / "README.md").read_text()
    assert "LlamaForSequenceClassification" in card and "outcome reward model" in card
    if mode == "lora":  # the card's own snippet, in a process that has no Stepwise
        assert card_scores(card, out, graded, tmp_path) == pytest.approx(expected, abs=1e-4)


def card_scores(card: str, export: Path, graded: list[GradedSolution], tmp_path: Path) -> list:
    snippet = card.split("```python\n", 1)[1].split("```", 1)[0]
    script = (
        "import json, sys\nout = []\n"
        "for problem, steps in json.load(open(sys.argv[1])):\n"
        + "".join(f"    {line}\n" for line in snippet.splitlines())
        + "    out.append(correct)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('modeling', 'labeling')]\n"
        "print(json.dumps(out))\n"
    )
    (tmp_path / "solutions.json").write_text(json.dumps([[g.problem, g.steps] for g in graded]))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "solutions.json")],
        cwd=export.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_two_processes_under_torchrun_train_an_orm_like_one(tiny_llama, make_config, tmp_path):
    from modeling.training.train import train
    from tests.modeling.training.test_distributed import assert_curves_match, torchrun

    graded = marker_task(6)
    data = write_graded(tmp_path / "graded.jsonl", graded)
    settings = dict(
        mode="lora", objective="outcome", max_steps=3, batch_tokens=256, lora_dropout=0.0
    )
    one = train(
        make_config(tiny_llama, grad_accum=2, output_dir=str(tmp_path / "one"), **settings),
        outcome_examples(graded),
    )
    two = make_config(tiny_llama, grad_accum=1, output_dir=str(tmp_path / "two"), **settings)
    torchrun("-m", "modeling.training.cli", "train", "--data", str(data), *cli.config_flags(two))
    saved = json.loads((tmp_path / "two" / "prm.json").read_text())
    assert saved["world_size"] == 2 and saved["objective"] == "outcome"
    assert saved["training"] == json.loads((tmp_path / "one" / "prm.json").read_text())["training"]
    meta = json.loads(next((tmp_path / "two" / "checkpoints").glob("step-*/meta.json")).read_text())
    assert_curves_match(meta["loss_curve"], one.loss_curve)


def test_an_encoder_orm_export_is_refused_in_one_line_and_writes_nothing(
    tokenizer, tmp_path, capsys
):
    from transformers import BertConfig, BertModel

    bert = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    BertModel(bert).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    model_dir = saved_orm(str(tmp_path / "bert"), "head", tmp_path)
    assert cli.main(["export", "--model", model_dir, "--output", str(tmp_path / "hf")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("export: error: ")
    assert "an outcome model exports from a decoder backbone only" in errors[0]
    assert not (tmp_path / "hf").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".hf")] == []


def test_a_prm_and_an_orm_trained_here_on_the_same_problems_compare_on_equal_footing(
    tiny_llama, make_config, tmp_path, capsys
):
    """The training record both objectives write is what best-of-n's footing reads: trained
    alike, they compare without --allow-mismatch; trained for other steps, they do not."""
    from modeling.training.train import train

    graded = marker_task(4)
    steps = [LabeledSolution(g.problem, g.steps, [1, 1 if g.correct else -1]) for g in graded]
    runs = {
        "prm": (make_config(tiny_llama, max_steps=2, output_dir=str(tmp_path / "prm")), steps),
        "orm": (
            make_config(
                tiny_llama, objective="outcome", max_steps=2, output_dir=str(tmp_path / "orm")
            ),
            outcome_examples(graded),
        ),
    }
    for config, examples in runs.values():
        train(config, examples)
    samples = tmp_path / "samples.jsonl"
    line = {
        "problem": "What is 50 + 50?",
        "answer": "100",
        "samples": [
            {"steps": ["We add 50 and 50.", "# Answer\n\n100"]},
            {"steps": ["We add 50 and 50.", "# Answer\n\n90"]},
        ],
    }
    samples.write_text(json.dumps(line) + "\n")
    models = f"{tmp_path / 'prm'},{tmp_path / 'orm'}"
    argv = ["best-of-n", "--models", models, "--input", str(samples), "--intervals", "10"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("best-of-N at N=2: prm ")

    train(runs["orm"][0].replace(max_steps=3, output_dir=str(tmp_path / "orm3")), runs["orm"][1])
    argv[2] = f"{tmp_path / 'prm'},{tmp_path / 'orm3'}"
    assert cli.main(argv) == 2
    assert "different optimizer steps: 2 (" in capsys.readouterr().err


# --- reading an ORM made elsewhere (or our own export) back -------------------------------------


def test_an_exported_orm_is_read_back_with_its_own_scores_and_exports_again(tiny_llama, tmp_path):
    from modeling.training import external
    from modeling.training.model import ProcessRewardModel
    from modeling.training.score import score_solutions, solution_score

    model_dir = saved_orm(tiny_llama, "head", tmp_path)
    out = tmp_path / "hf"
    assert cli.main(["export", "--model", model_dir, "--output", str(out)]) == 0
    manifest = external.describe(out)
    assert (manifest["kind"], manifest["objective"], manifest["labels"]) == (
        "sequence_classification",
        "outcome",
        2,
    )
    assert manifest["layout"] == "stepwise" and manifest["step_separator_from"] == "config.json"
    external.write_manifest(out, manifest)

    graded = marker_task(3)
    imported = external.load_prm(out)
    theirs = score_solutions(imported, graded, batch_tokens=64)  # several batches, padded rows
    ours = score_solutions(ProcessRewardModel.load(model_dir), graded)
    for mine, read in zip(ours, theirs, strict=True):
        assert np.isnan(read[:-1]).all()  # one score a solution, at its end
        assert read[-1, 1] == 0 and read[-1, 0] + read[-1, 2] == pytest.approx(1)
        assert solution_score(read, "last") == pytest.approx(solution_score(mine, "last"), abs=1e-4)
    # Past max_length the end is not read: no score rather than a truncated one.
    (cut,) = score_solutions(imported, graded[:1], max_length=8)
    assert np.isnan(cut).all()

    again = tmp_path / "again"
    assert cli.main(["export", "--model", str(out), "--output", str(again)]) == 0
    config = json.loads((again / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"]
    assert config["stepwise"]["objective"] == "outcome"
    assert external.describe(again)["layout"] == "stepwise"


def save_reward_model(folder: Path, *, labels: int = 1, pad: bool = True) -> Path:
    """A random Llama sequence classifier as TRL's RewardTrainer saves one (1 label: a score)."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from tests.helpers.tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        num_labels=labels,
        pad_token_id=tokenizer.pad_token_id if pad else None,
    )
    torch.manual_seed(3)
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def reward_reading(folder: Path, graded: list[GradedSolution], separator: str) -> list[float]:
    """sigmoid(score) by plain transformers, one solution at a time, on TRL's PRM layout."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    out = []
    for g in graded:
        ids = [tok.bos_token_id] + tok(g.problem, add_special_tokens=False)["input_ids"]
        for step in g.steps:
            ids += tok(step, add_special_tokens=False)["input_ids"]
            ids += tok.encode(separator, add_special_tokens=False)
        with torch.no_grad():
            out.append(float(torch.sigmoid(model(input_ids=torch.tensor([ids])).logits[0, 0])))
    return out


@pytest.mark.parametrize("pad", [True, False])
def test_a_reward_model_with_one_score_is_read_as_p_correct_on_trls_layout(pad, tmp_path):
    from modeling.training import external
    from modeling.training.evaluate import evaluate_outcome
    from modeling.training.score import score_solutions

    source = save_reward_model(tmp_path / "rm", pad=pad)
    with pytest.raises(external.ExternalModelError, match="no step_separator and none was given"):
        external.describe(source)
    manifest = external.describe(source, step_separator="\n")
    assert (manifest["labels"], manifest["layout"], manifest["step_separator_from"]) == (
        1,
        "trl",
        "given",
    )
    external.write_manifest(source, manifest)

    graded = marker_task(3)
    read = score_solutions(external.load_prm(source), graded, batch_tokens=64)
    expected = reward_reading(source, graded, "\n")
    assert [p[-1, 2] for p in read] == pytest.approx(expected, abs=1e-4)
    report = evaluate_outcome(external.load_prm(source), graded)
    assert (report["solutions"], report["unscored"]) == (6, 0)


def test_a_sequence_classifier_of_three_labels_is_refused_saying_why(tmp_path):
    from modeling.training import external

    source = save_reward_model(tmp_path / "three", labels=3)
    with pytest.raises(external.ExternalModelError, match="has 2 labels .* or 1 .* not 3"):
        external.describe(source, step_separator="\n")
