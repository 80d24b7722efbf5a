"""`cli export --format hf`: a plain transformers process scores exactly as `cli score` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from modeling.training import cli

SOLUTIONS = [
    {"problem": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "# Answer\n\n5"]},
    {
        "problem": "Find x if 2x = 10.",
        "steps": ["Divide both sides by 2.", "So x = 6.", "Check: 2 * 6 = 12, not 10.", "x = 5"],
    },
]

# Imports nothing of Stepwise (and could not: it runs outside the checkout, no PYTHONPATH).
SCRIPT = """
import json, sys
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

path, solutions = sys.argv[1], json.load(open(sys.argv[2]))
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForTokenClassification.from_pretrained(path, dtype=torch.float32).eval()
sep = model.config.step_separator
enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]
out = []
for s in solutions:
    ids = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + enc(s["problem"].strip() + sep)
    ends = []
    for step in s["steps"]:
        ids += enc(step.strip()) + enc(sep)
        ends.append(len(ids) - 1)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, ends]
    out.append(logits.float().softmax(-1).tolist())
assert not [m for m in sys.modules if m.split(".")[0] in ("modeling", "labeling", "stepwise")]
print(json.dumps({"probs": out, "labels": model.config.id2label}))
"""


def save_model(backbone: str, mode: str, folder: Path, **overrides) -> str:
    """A saved PRM whose trained parts are random (LoRA's B too, which peft starts at 0)."""
    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    torch.manual_seed(1)
    config = TrainConfig(
        backbone=backbone, mode=mode, device="cpu", dataset_version="d" * 64, **overrides
    )
    model = ProcessRewardModel.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.requires_grad:
                param.normal_(0, 0.3 if "lora_" in name or "head" in name else 0.02)
    (folder / "model").mkdir()
    model.save(folder / "model")
    (folder / "model" / "metrics.json").write_text(json.dumps({"steps": 3, "final_loss": 0.5}))
    return str(folder / "model")


def cli_score(model_dir: str, tmp_path: Path) -> list[np.ndarray]:
    solutions = tmp_path / "solutions.jsonl"
    solutions.write_text("".join(json.dumps(s) + "\n" for s in SOLUTIONS))
    scored = tmp_path / "scored.jsonl"
    argv = ["score", "--model", model_dir, "--input", str(solutions), "--device", "cpu"]
    assert cli.main([*argv, "--output", str(scored)]) == 0
    return [np.array(json.loads(line)["step_probs"]) for line in scored.read_text().splitlines()]


def plain_transformers_scores(export: Path, tmp_path: Path) -> dict:
    (tmp_path / "solutions.json").write_text(json.dumps(SOLUTIONS))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(export), str(tmp_path / "solutions.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def export_and_compare(model_dir: str, tmp_path: Path, layers: int) -> dict:
    expected = cli_score(model_dir, tmp_path)
    out = tmp_path / "hf"
    assert cli.main(["export", "--model", model_dir, "--format", "hf", "--output", str(out)]) == 0

    got = plain_transformers_scores(out, tmp_path)
    assert got["labels"] == {"0": "-1", "1": "0", "2": "+1"}
    for want, probs in zip(expected, got["probs"], strict=True):
        assert want.shape == np.array(probs).shape
        assert abs(np.array(probs) - want).max() < 1e-4
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == layers
    assert config["step_separator"] == "\n\n"
    assert config["stepwise"]["dataset_version"] == "d" * 64
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    card = (out / "README.md").read_text()
    assert "d" * 64 in card and '"final_loss": 0.5' in card
    return config


@pytest.mark.parametrize("mode", ["head", "lora", "full"])
def test_plain_transformers_load_of_the_export_gives_cli_scores_step_probabilities(
    mode, tiny_llama, tmp_path
):
    # LoRA on one kept block of two: only that block is exported, with the adapter merged.
    overrides = {"backbone_layers": 1} if mode == "lora" else {}
    model_dir = save_model(tiny_llama, mode, tmp_path, **overrides)
    config = export_and_compare(model_dir, tmp_path, layers=1 if mode == "lora" else 2)
    assert config["architectures"] == ["LlamaForTokenClassification"]
    assert config["stepwise"]["mode"] == mode


def test_an_encoder_export_stays_causal_and_gives_cli_scores_step_probabilities(
    tokenizer, tmp_path
):
    from transformers import BertConfig, BertModel

    bert = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    BertModel(bert).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    model_dir = save_model(str(tmp_path / "bert"), "full", tmp_path)
    config = export_and_compare(model_dir, tmp_path, layers=2)
    assert config["architectures"] == ["BertForTokenClassification"]
    assert config["is_decoder"] is True


def test_export_of_a_missing_or_invalid_model_folder_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "hf"
    argv = ["export", "--format", "hf", "--output", str(out), "--model"]

    assert cli.main([*argv, str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err

    (tmp_path / "bad").mkdir()
    assert cli.main([*argv, str(tmp_path / "bad")]) == 2
    assert "has no prm.json" in capsys.readouterr().err

    (tmp_path / "bad" / "prm.json").write_text('{"format": "something-else"}')
    assert cli.main([*argv, str(tmp_path / "bad")]) == 2
    assert "is not a loadable stepwise-prm/1 model" in capsys.readouterr().err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad"]  # no temporary folder left


def test_an_export_imported_back_scores_as_the_model_it_came_from(tiny_llama, tmp_path):
    """The round trip: `cli export`, then the importer's reading of the folder (import_prm's
    manifest, loaded by load_prm), gives the native model's step probabilities."""
    from modeling.training import external
    from modeling.training.data import Solution
    from modeling.training.score import score_solutions

    model_dir = save_model(tiny_llama, "lora", tmp_path, backbone_layers=1)
    expected = cli_score(model_dir, tmp_path)
    out = tmp_path / "hf"
    assert cli.main(["export", "--model", model_dir, "--format", "hf", "--output", str(out)]) == 0

    manifest = external.describe(out)
    assert manifest["layout"] == "stepwise" and manifest["labels"] == 3
    external.write_manifest(out, manifest)
    imported = external.load_prm(out)
    got = score_solutions(imported, [Solution(s["problem"], s["steps"]) for s in SOLUTIONS])
    for want, probs in zip(expected, got, strict=True):
        assert abs(probs - want).max() < 1e-4
