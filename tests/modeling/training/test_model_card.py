"""The export's model card: its scoring snippet, taken from the README.md the export writes and run
in a bare process (`python -I` in a folder of its own: only torch and transformers to import),
gives `cli score`'s step probabilities within 1e-4, for a model trained here and for imported
ones (a 2-class model trained with TRL's recipe; TRL's 2-label token classifier, Math-Shepherd's step-tag LM)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from modeling.training import cli, external
from tests.modeling.training.test_export import SOLUTIONS, cli_score, save_model

TOLERANCE = 1e-4


def card_snippet(export: Path) -> str:
    card = (export / "README.md").read_text()
    [snippet] = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    return snippet


def run_snippet(snippet: str, cwd: Path) -> list[dict]:
    """The snippet for each solution, in a process that cannot import this project."""
    script = (
        f"SOLUTIONS = {[(s['problem'], s['steps']) for s in SOLUTIONS]!r}\nout = []\n"
        "for problem, steps in SOLUTIONS:\n"
        + textwrap.indent(snippet, "    ")
        + "    out.append({'good': good.tolist(), 'probs': "
        "globals()['probs'].tolist() if 'probs' in globals() else None})\n"
        "import sys\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in "
        "('modeling', 'labeling', 'stepwise', 'tests')]\n"
        "print(repr(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-I", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def imported(folder: Path, **options) -> str:
    """`folder` as import_prm leaves it: the model's files and its manifest."""
    external.write_manifest(folder, external.describe(folder, **options))
    return str(folder)


def trained(tiny_llama: str, tmp_path: Path) -> str:
    return save_model(tiny_llama, "lora", tmp_path, backbone_layers=1)


def trained_two_labels(tiny_llama: str, tmp_path: Path) -> str:
    """TRL's recipe trained here: 2 classes, its separator."""
    return save_model(tiny_llama, "head", tmp_path, num_labels=2, step_separator="\n")


def trl_two_labels(tiny_llama: str, tmp_path: Path) -> str:
    from tests.modeling.test_import_prm import save_token_classifier

    return imported(save_token_classifier(tmp_path / "trl", labels=2), step_separator="\n")


def math_shepherd(tiny_llama: str, tmp_path: Path) -> str:
    from tests.modeling.test_import_prm import save_step_tag_lm

    # Math-Shepherd's "ки" is 4 tokens for the tiny tokenizer: its tag here is "#".
    return imported(save_step_tag_lm(tmp_path / "shepherd"), step_tag="#")


@pytest.mark.parametrize(
    "make", [trained, trained_two_labels, trl_two_labels, math_shepherd], ids=lambda f: f.__name__
)
def test_the_model_cards_snippet_in_a_bare_process_gives_cli_scores_probabilities(
    make, tiny_llama, tmp_path
):
    model_dir = make(tiny_llama, tmp_path)
    expected = cli_score(model_dir, tmp_path)
    out = tmp_path / "unzipped" / "hf-export"
    argv = ["export", "--model", model_dir, "--format", "hf", "--output", str(out)]
    assert cli.main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    card = (out / "README.md").read_text()
    assert "vllm serve hf-export --runner pooling" in card and "Untested here" in card

    got = run_snippet(card_snippet(out), out.parent)

    for want, result in zip(expected, got, strict=True):
        good = np.array(result["good"])
        assert abs(good - (want[:, 1] + want[:, 2])).max() < TOLERANCE
        if result["probs"] is not None and len(config["id2label"]) == 3:
            assert abs(np.array(result["probs"]) - want).max() < TOLERANCE
        elif result["probs"] is not None:  # 2 labels: cli score writes [1 - P(good), 0, P(good)]
            assert abs(np.array(result["probs"])[:, 0] - want[:, 0]).max() < TOLERANCE
    # The export reads back as the model it came from (the layout survives a second import).
    if make is not math_shepherd:
        manifest = external.describe(out)
        assert manifest["layout"] == ("trl" if make is trl_two_labels else "stepwise")
        assert manifest["step_separator"] == config["step_separator"]


def test_an_imported_step_tag_export_carries_what_vllms_step_pooling_needs(tiny_llama, tmp_path):
    from tests.modeling.test_import_prm import save_step_tag_lm

    model_dir = imported(save_step_tag_lm(tmp_path / "shepherd"), step_tag="#")
    manifest = json.loads((Path(model_dir) / external.MANIFEST).read_text())
    out = tmp_path / "hf-export"
    assert cli.main(["export", "--model", model_dir, "--output", str(out)]) == 0

    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["step_tag"] == "#" and config["step_tag_id"] == manifest["step_tag_id"]
    assert config["stepwise"]["vllm"]["pooler_config"] == {
        "pooling_type": "STEP",
        "step_tag_id": manifest["step_tag_id"],
        "returned_token_ids": [manifest["good_token_id"], manifest["bad_token_id"]],
    }
    card = (out / "README.md").read_text()
    assert '--pooler-config \'{"pooling_type": "STEP"' in card
    # Saved again by transformers, not copied: the manifest the uploader's folder had is gone.
    assert not (out / external.MANIFEST).exists()
