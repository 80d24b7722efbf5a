from __future__ import annotations

import pytest
import torch

from modeling.training.batching import collate
from modeling.training.data import Solution, pack_solution
from modeling.training.model import ProcessRewardModel
from modeling.training.score import score_solutions
from modeling.training.train import train


def _logits(model, rows):
    with torch.no_grad():
        return model(collate(rows, model.pad_id))


def test_a_packed_alternative_scores_as_if_it_ran_alone_after_its_prefix(
    tiny_llama, make_config, samples
):
    torch.manual_seed(0)
    model = ProcessRewardModel.from_config(make_config(tiny_llama, mode="full")).eval()
    example = samples[0]
    rows = pack_solution(example, model.tokenizer, 4096)
    packed = _logits(model, rows)
    slots = [s for r in rows for s in r.slots]
    for j, alt in enumerate(example.alternatives):
        alone = Solution(example.problem, example.steps[: alt.after] + [alt.text])
        expected = _logits(model, pack_solution(alone, model.tokenizer, 4096))[-1]
        got = packed[slots.index(len(example.steps) + j)]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # and a path step does not see the steps after it
    cut = Solution(example.problem, example.steps[:3])
    torch.testing.assert_close(
        packed[2],
        _logits(model, pack_solution(cut, model.tokenizer, 4096))[-1],
        atol=1e-5,
        rtol=1e-5,
    )


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _changed(before, model):
    return {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}


def _train_two_steps(make_config, backbone, samples, mode, tmp_path):
    config = make_config(backbone, mode=mode, max_steps=2, output_dir=str(tmp_path / mode))
    torch.manual_seed(config.seed)
    initial = _params(ProcessRewardModel.from_config(config))  # same seed: the run's start
    train(config, samples)
    trained = ProcessRewardModel.load(config.output_dir)
    return initial, trained


def test_head_mode_trains_the_head_only(tiny_llama, make_config, samples, tmp_path):
    initial, trained = _train_two_steps(make_config, tiny_llama, samples, "head", tmp_path)
    assert _changed(initial, trained) == {"head.weight", "head.bias"}


def test_lora_mode_trains_adapters_and_head_only(tiny_llama, make_config, samples, tmp_path):
    initial, trained = _train_two_steps(make_config, tiny_llama, samples, "lora", tmp_path)
    changed = _changed(initial, trained)
    assert {"head.weight", "head.bias"} <= changed
    assert any("lora_" in n for n in changed)
    assert all("lora_" in n or n.startswith("head.") for n in changed)


def test_lora_blocks_puts_adapters_on_the_last_blocks_only(
    tiny_llama, make_config, samples, tmp_path
):
    config = make_config(tiny_llama, mode="lora", lora_blocks=1, max_steps=2)
    torch.manual_seed(config.seed)
    initial = _params(ProcessRewardModel.from_config(config))
    train(config, samples)
    trained = ProcessRewardModel.load(config.output_dir)  # the adapter's block list is saved
    adapters = {n for n in _params(trained) if "lora_" in n}
    assert adapters and all(".layers.1." in n for n in adapters)  # block 0 of 2 has none
    changed = _changed(initial, trained)
    assert any(".layers.1." in n and "lora_" in n for n in changed)
    assert all("lora_" in n or n.startswith("head.") for n in changed)


def test_lora_blocks_past_the_backbone_is_refused(tiny_llama, make_config):
    with pytest.raises(ValueError, match="lora_blocks must be at most the backbone's 2 blocks"):
        ProcessRewardModel.from_config(make_config(tiny_llama, mode="lora", lora_blocks=3))
    with pytest.raises(ValueError, match="lora_blocks must be at least 1"):
        make_config(tiny_llama, mode="lora", lora_blocks=0)


def test_full_mode_trains_the_backbone_too(tiny_llama, make_config, samples, tmp_path):
    initial, trained = _train_two_steps(make_config, tiny_llama, samples, "full", tmp_path)
    changed = _changed(initial, trained)
    assert any(n.startswith("backbone.layers.") for n in changed)
    assert "backbone.embed_tokens.weight" in changed


def test_save_then_load_scores_identically_in_every_mode(
    tiny_llama, make_config, samples, tmp_path
):
    solutions = [Solution(e.problem, e.steps) for e in samples]
    for mode in ("head", "lora", "full"):
        config = make_config(tiny_llama, mode=mode, max_steps=1, output_dir=str(tmp_path / mode))
        torch.manual_seed(1)
        model = ProcessRewardModel.from_config(config)
        model.save(config.output_dir)
        loaded = ProcessRewardModel.load(config.output_dir)
        for a, b in zip(
            score_solutions(model, solutions), score_solutions(loaded, solutions), strict=True
        ):
            assert a.shape == b.shape
            assert abs(a - b).max() < 1e-6, mode
        assert loaded.config == config


def test_encoders_work_with_the_causal_tree_mask(tmp_path, tokenizer):
    from transformers import BertConfig, BertModel

    from modeling.training.config import TrainConfig

    bert = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=1024,
    )
    BertModel(bert).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    model = ProcessRewardModel.from_config(
        TrainConfig(backbone=str(tmp_path / "bert"), mode="full", device="cpu")
    ).eval()
    long = Solution("1+1?", ["One plus one.", "It is 2.", "# Answer\n\n2"])
    short = Solution("1+1?", ["One plus one."])
    [a, b] = score_solutions(model, [long, short])
    assert abs(a[0] - b[0]).max() < 1e-5  # step 1 does not see steps 2 and 3
