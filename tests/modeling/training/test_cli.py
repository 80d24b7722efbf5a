"""The plain command line: what `evaluate` prints and writes."""

from __future__ import annotations

import json

import pytest
import torch

from modeling.training import cli
from tests.helpers.tiny_models import SAMPLES


@pytest.fixture(scope="module")
def saved_model(tiny_llama, tmp_path_factory) -> str:
    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    torch.manual_seed(0)
    model = ProcessRewardModel.from_config(TrainConfig(backbone=tiny_llama, device="cpu"))
    return str(model.save(tmp_path_factory.mktemp("prm")))


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as every JSON parser but Python's does."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))


def test_evaluate_output_writes_null_not_nan_in_empty_reliability_bins(
    saved_model, tmp_path, capsys
):
    out = tmp_path / "report.json"
    argv = [
        "evaluate",
        "--model",
        saved_model,
        "--prm800k",
        str(SAMPLES),
        "--all",
        "--device",
        "cpu",
    ]
    assert cli.main([*argv, "--output", str(out)]) == 0
    report = strict_json(out.read_text())
    empty = [b for b in report["steps"]["reliability_negative"] if b["count"] == 0]
    assert empty and all(b["mean_predicted"] is None and b["observed"] is None for b in empty)
    assert strict_json(capsys.readouterr().out) == report


def test_evaluate_prints_how_many_labels_lie_past_max_length_and_takes_max_length(
    saved_model, tokenizer, prm800k_records, capsys
):
    from modeling.training.data import IGNORE, build_features, examples_from_prm800k

    examples = examples_from_prm800k(prm800k_records)
    labels = sum(e.n_labels() for e in examples)
    carried = sum(
        label != IGNORE for row in build_features(examples, tokenizer, 150) for label in row.labels
    )
    argv = [
        "evaluate",
        "--model",
        saved_model,
        "--prm800k",
        str(SAMPLES),
        "--all",
        "--device",
        "cpu",
    ]

    assert cli.main([*argv, "--max-length", "150"]) == 0
    out, err = capsys.readouterr()
    steps = strict_json(out)["steps"]
    dropped = labels - carried
    assert 0 < dropped < labels and (steps["n"], steps["n_dropped"]) == (carried, dropped)
    assert (
        f"{dropped:,} of {labels:,} step labels ({dropped / labels:.1%}) dropped: past max_length 150 "
        "tokens (--max-length to change it)"
    ) in err

    assert cli.main(argv) == 0  # the model's own max_length
    out, err = capsys.readouterr()
    steps = strict_json(out)["steps"]
    assert steps["max_length"] == 2048 and steps["n"] + steps["n_dropped"] == labels
    assert f"of {labels:,} step labels" in err and "past max_length 2,048 tokens" in err


def test_train_flags_follow_the_config_field_types_and_defaults():
    args = cli.build_parser().parse_args(
        ["train", "--max-steps", "3", "--lr", "0.5", "--cache-features", "false"]
    )
    assert (args.max_steps, args.lr, args.cache_features) == (3, 0.5, False)
    assert (args.backbone_layers, args.mode, args.warmup_ratio) == (None, "head", 0.05)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--max-steps", "three"])
