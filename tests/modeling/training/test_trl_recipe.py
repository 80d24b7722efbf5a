"""TRL PRMTrainer's recipe in our trainer (issue 49): 2-class heads with the neutral rating's
class stated, a step separator saved with the model and its export and used to score it,
train_on_last_step_only, and a TRL config file read in PRMConfig's field names."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from modeling.training import cli
from modeling.training.data import (
    IGNORE,
    Alternative,
    LabeledSolution,
    Targets,
    build_features,
    pack_solution,
)
from tests.helpers.tiny_models import SAMPLES

ROOT = Path(__file__).resolve().parents[3]
TRAINING_DOC = ROOT / "docs" / "training.md"

RIGHT, WRONG, NEUTRAL = "Right", "Wrong", "Fine"


def learnable(n: int = 12) -> list[LabeledSolution]:
    """Solutions whose steps say what they are: a 2-class head learns them at once."""
    out = []
    for i in range(n):
        steps = [RIGHT, NEUTRAL if i % 3 == 0 else RIGHT, WRONG if i % 2 else RIGHT]
        ratings = [1, 0 if i % 3 == 0 else 1, -1 if i % 2 else 1]
        out.append(LabeledSolution(f"Sum {i}.", steps, ratings))
    return out


@pytest.fixture(scope="module")
def two_class(tiny_llama, tmp_path_factory) -> tuple[str, object]:
    """A 2-class head-mode model trained with the separator "\\n", and its training result."""
    from modeling.training.config import TrainConfig
    from modeling.training.train import train

    config = TrainConfig(
        backbone=tiny_llama,
        mode="head",
        num_labels=2,
        step_separator="\n",
        output_dir=str(tmp_path_factory.mktemp("two-class") / "run"),
        max_steps=60,
        lr=0.1,
        warmup_ratio=0.0,
        batch_tokens=4096,
        max_length=1024,
        device="cpu",
        dataset_version="d" * 64,
    )
    return config.output_dir, train(config, learnable())


# ------------------------------------------------------------------ targets and packing


def labels_by_slot(rows) -> dict[int, int]:
    return {s: lab for r in rows for s, lab in zip(r.slots, r.labels, strict=True)}


def test_two_classes_put_a_neutral_rating_where_neutral_as_says(tokenizer):
    example = LabeledSolution("P", ["a", "b", "c"], [1, 0, -1], [Alternative(1, "d", 0)])
    three = labels_by_slot(pack_solution(example, tokenizer, 4096))
    good = labels_by_slot(pack_solution(example, tokenizer, 4096, targets=Targets(2, "good")))
    bad = labels_by_slot(pack_solution(example, tokenizer, 4096, targets=Targets(2, "bad")))
    # slots 0-2: the path's +1, 0, -1; slot 3: the alternative rated 0
    assert three == {0: 2, 1: 1, 2: 0, 3: 1}
    assert good == {0: 1, 1: 1, 2: 0, 3: 1}
    assert bad == {0: 1, 1: 0, 2: 0, 3: 0}


def test_train_on_last_step_only_keeps_the_paths_last_rated_step_and_each_alternative(
    tokenizer, samples
):
    last = Targets(last_step_only=True)
    example = LabeledSolution(
        "P",
        ["a", "b", "c", "d"],
        [1, -1, 0, None],
        [Alternative(1, "e", -1), Alternative(3, "f", 1)],
    )
    # the path's last rated step is c (slot 2: rating 0, class 1); d is unrated
    labels = labels_by_slot(pack_solution(example, tokenizer, 4096, targets=last))
    assert labels == {0: IGNORE, 1: IGNORE, 2: 1, 3: IGNORE, 4: 0, 5: 2}

    # Without alternatives: exactly one label per solution, on its last rated step.
    paths = [LabeledSolution(e.problem, e.steps, e.ratings) for e in samples]
    paths = [p for p in paths if any(r is not None for r in p.ratings)]
    rows = build_features(paths, tokenizer, 4096, targets=last)
    kept: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        for slot, label in zip(row.slots, row.labels, strict=True):
            if label != IGNORE:
                kept.setdefault(row.example, []).append((slot, label))
    assert len(paths) > 3 and sorted(kept) == list(range(len(paths)))
    for i, path in enumerate(paths):
        rated = [k for k, r in enumerate(path.ratings) if r is not None]
        assert kept[i] == [(rated[-1], path.ratings[rated[-1]] + 1)]


def test_the_config_states_and_checks_the_two_class_settings():
    from modeling.training.config import TrainConfig

    assert Targets.of_config(TrainConfig(num_labels=2, neutral_as="bad")) == Targets(2, "bad")
    for bad, message in [
        ({"num_labels": 4}, "num_labels"),
        ({"num_labels": 2, "neutral_as": "maybe"}, "neutral_as"),
        ({"num_labels": 2, "neutral_weight": 2.0}, "neutral_weight"),
        ({"step_separator": ""}, "step_separator"),
        ({"train_on_last_step_only": "yes"}, "train_on_last_step_only"),
    ]:
        with pytest.raises(ValueError, match=message):
            TrainConfig(**bad)


def test_a_separator_that_gives_no_tokens_is_refused():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    word_piece = Tokenizer(models.WordPiece({"[UNK]": 0, "[CLS]": 1, "a": 2}, unk_token="[UNK]"))
    word_piece.normalizer = normalizers.BertNormalizer()
    word_piece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    encoder = PreTrainedTokenizerFast(
        tokenizer_object=word_piece, unk_token="[UNK]", cls_token="[CLS]"
    )
    solution = LabeledSolution("a", ["a a", "a"], [1, -1])
    with pytest.raises(ValueError, match=r"step_separator '\\x01' gives no tokens"):
        build_features([solution], encoder, 512, separator="\x01")
    # An encoder drops every whitespace: the label sits on the step's last word piece, as before.
    rows = build_features([solution], encoder, 512)
    assert rows[0].labels == [2, 0]


# -------------------------------------------------------- a 2-class model, end to end


def test_a_two_class_model_learns_saves_scores_and_evaluates_every_rating(two_class):
    from modeling.training.evaluate import evaluate_steps
    from modeling.training.external import load_prm
    from modeling.training.score import predict_labelled, score_solutions

    folder, result = two_class
    losses = [loss for _, loss in result.loss_curve]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    meta = json.loads((Path(folder) / "prm.json").read_text())
    assert meta["layout"]["separator"] == "\n" and meta["layout"]["classes"] == ["bad", "good"]

    model = load_prm(folder)
    assert model.head.out_features == 2 and model.config.step_separator == "\n"
    examples = learnable(6)
    probs = score_solutions(model, examples)
    for example, p in zip(examples, probs, strict=True):
        assert p.shape == (3, 3) and np.allclose(p[:, 1], 0) and np.allclose(p.sum(axis=1), 1)
        for step, row in zip(example.steps, p, strict=True):
            # [1 - P(good), 0, P(good)]: right and so-so steps good, wrong ones bad
            assert (row[2] > 0.5) == (step != WRONG)

    # Evaluation reads the ratings themselves, neutral ones included (not the 2 classes).
    got, ratings = predict_labelled(model, examples)
    assert sorted(ratings.tolist()) == sorted(r for e in examples for r in e.ratings)
    assert 0 in ratings and got.shape == (len(ratings), 3)
    steps = evaluate_steps(model, examples)
    assert (steps["n"], steps["n_negative"]) == (len(ratings), ratings.tolist().count(-1))
    assert steps["auroc_negative"] > 0.9


def test_the_saved_separator_is_the_one_scoring_uses(two_class, tmp_path):
    from modeling.training.external import load_prm
    from modeling.training.score import score_solutions

    folder, _ = two_class
    forced = tmp_path / "forced"
    shutil.copytree(folder, forced, ignore=shutil.ignore_patterns("checkpoints", "features.pt"))
    meta = json.loads((forced / "prm.json").read_text())
    meta["layout"]["separator"] = "\n\n"
    (forced / "prm.json").write_text(json.dumps(meta))

    examples = learnable(4)
    trained = np.concatenate(score_solutions(load_prm(folder), examples))
    other = np.concatenate(score_solutions(load_prm(forced), examples))
    assert load_prm(forced).config.step_separator == "\n\n"
    assert np.abs(trained - other).max() > 1e-3


def test_a_two_class_export_says_so_and_reimports_scoring_alike(two_class, tmp_path):
    from transformers import AutoConfig

    from modeling.training.export import export_hf
    from modeling.training.external import describe, load_prm, write_manifest
    from modeling.training.score import score_solutions

    folder, _ = two_class
    export = export_hf(folder, tmp_path / "hf")
    config = json.loads((export / "config.json").read_text())
    assert config["step_separator"] == "\n"
    assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1"}
    assert AutoConfig.from_pretrained(export).num_labels == 2
    assert config["stepwise"]["step_score"] == "P(1)"
    assert "good = probs[:, 1:].sum(-1)  # P(good step)" in (export / "README.md").read_text()

    manifest = describe(export)
    assert (manifest["labels"], manifest["step_separator"]) == (2, "\n")
    write_manifest(export, manifest)
    examples = learnable(5)
    ours = score_solutions(load_prm(folder), examples)
    imported = score_solutions(load_prm(export), examples)
    for a, b in zip(ours, imported, strict=True):
        assert np.abs(a - b).max() < 1e-4


@pytest.mark.parametrize("change", [{"num_labels": 2}, {"step_separator": "\n"}])
def test_resuming_with_another_head_or_separator_is_refused_by_name(
    tiny_llama, make_config, change
):
    from modeling.training.train import train

    config = make_config(tiny_llama, mode="head", max_steps=2)
    train(config, learnable(4))
    with pytest.raises(ValueError, match=rf"different config \(\['{next(iter(change))}'\]\)"):
        train(config.replace(**change), learnable(4))


# ------------------------------------------------------------------ TRL config files


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_a_trl_config_file_maps_its_fields_and_explicit_flags_win(tmp_path, capsys):
    yaml_file = write(
        tmp_path / "prm.yaml",
        """
model_name_or_path: my-backbone
learning_rate: 1.0e-4
num_train_epochs: 2
per_device_train_batch_size: 4
max_length: 512
step_separator: "\\n"
train_on_last_step_only: true
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: false
report_to: none
use_peft: true
lora_r: 8
seed: 7
""",
    )
    args = cli.parse_args(["train", "--trl-config", yaml_file])
    assert vars(args) | {
        "backbone": "my-backbone",
        "num_labels": 2,  # TRL's scripts build the model with 2 labels
        "lr": 1e-4,
        "epochs": 2,
        "batch_tokens": 4 * 512,
        "max_length": 512,
        "step_separator": "\n",
        "train_on_last_step_only": True,
        "decay": "cosine",
        "warmup_ratio": 0.1,
        "bf16": "false",
        "mode": "lora",
        "lora_r": 8,
        "seed": 7,
        "weight_decay": 0.0,  # TRL's defaults where the file says nothing
        "grad_clip": 1.0,
    } == vars(args)
    assert "--trl-config" in capsys.readouterr().err

    flags = ["--lr", "0.5", "--num-labels", "3", "--step-separator", "||"]
    args = cli.parse_args(["train", "--trl-config", yaml_file, *flags])
    assert (args.lr, args.num_labels, args.step_separator, args.epochs) == (0.5, 3, "||", 2)

    # An empty file is TRL's defaults: its separator, learning rate, epochs, full fine-tuning.
    args = cli.parse_args(["train", "--trl-config", write(tmp_path / "empty.json", "{}")])
    assert (args.step_separator, args.lr, args.epochs, args.mode) == ("\n", 1e-5, 3.0, "full")
    assert (args.num_labels, args.seed, args.batch_tokens) == (2, 42, 8 * 1024)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"learning_rate": 1e-5, "frobnicate": 1}, "field 'frobnicate' is not supported"),
        ({"fp16": True}, "field 'fp16' = True: refused unless false"),
        ({"max_prompt_length": 256}, "field 'max_prompt_length' = 256: refused: removed"),
        ({"lr_scheduler_type": "constant"}, "'lr_scheduler_type' = 'constant': decay (linear or"),
        ({"dataset_name": "trl-lib/prm800k"}, "field 'dataset_name'"),
    ],
)
def test_a_trl_field_we_do_not_support_is_refused_by_name_in_one_line(
    tmp_path, capsys, fields, said
):
    path = write(tmp_path / "prm.json", json.dumps(fields))
    with pytest.raises(SystemExit) as exit:
        cli.main(["train", "--trl-config", path, "--prm800k", str(SAMPLES)])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and err.startswith("train: error: --trl-config")


def test_train_with_a_trl_config_trains_trls_two_class_recipe(tiny_llama, tmp_path):
    path = write(
        tmp_path / "prm.json",
        json.dumps({"step_separator": "\n", "max_steps": 2, "output_dir": str(tmp_path / "run")}),
    )
    argv = ["train", "--trl-config", path, "--prm800k", str(SAMPLES), "--max-problems", "2"]
    argv += ["--backbone", tiny_llama, "--mode", "head", "--device", "cpu"]
    assert cli.main(argv) == 0
    meta = json.loads((tmp_path / "run" / "prm.json").read_text())
    assert (meta["config"]["num_labels"], meta["layout"]["separator"]) == (2, "\n")
    assert meta["config"]["lr"] == 1e-5 and meta["config"]["max_steps"] == 2


def test_the_training_doc_lists_the_trl_field_mapping_of_the_code():
    from modeling.training.trl_config import TRL_FIELDS

    text = TRAINING_DOC.read_text()
    section = text.split("## Coming from TRL's PRMTrainer", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", section, re.MULTILINE)
    assert dict(rows) == {name: field.doc for name, field in TRL_FIELDS.items()}
    assert len(rows) == len(TRL_FIELDS)
