"""attention "flex": the packed step tree through FlexAttention gives today's (sdpa) numbers.

On a CPU torch has no FlexAttention backward pass, so the one-step tests of lora and full
run only where CUDA is (a GPU session); head mode's step (frozen backbone) runs here.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from modeling.training.batching import attention_mask_4d, collate, tree_block_mask
from modeling.training.config import TrainConfig
from modeling.training.data import build_features, examples_from_critic_rows, pack_rows
from modeling.training.model import ProcessRewardModel, attention_for
from modeling.training.train import train
from tests.helpers.tiny_models import save_tiny_llama

TOLERANCE = 1e-4
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention backward: CUDA")


@pytest.fixture(scope="module")
def trees(critic_rows):
    """Three real phase-1 solutions with alternatives, and one of them as a bare path."""
    examples = [e for e in examples_from_critic_rows(critic_rows) if len(e.alternatives) >= 3]
    path_only = dataclasses.replace(examples[0], alternatives=[])
    return [*examples[:3], path_only]


@pytest.fixture(scope="module")
def flex_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny Llama with heads of 16, the narrowest FlexAttention's CUDA kernels take (the
    shared one's heads of 8 fail to compile there): the same tests run on a CPU and a GPU."""
    return save_tiny_llama(tmp_path_factory.mktemp("flex-llama"), hidden=64)


def tree_batch(tokenizer, trees):
    rows = build_features(trees, tokenizer, max_length=1024)
    batch = collate(rows, tokenizer.pad_token_id)
    # What the test claims to cover: alternatives, padding and a row of only a path.
    assert (batch.segment > 0).any() and (batch.segment == -1).any()
    assert any(set(r.segment) == {0} for r in rows)
    return batch


def packed_batch(tokenizer, trees):
    """The same rows, several to a batch row (pack_solutions)."""
    packs = pack_rows(build_features(trees, tokenizer, max_length=1024), 2048)
    assert any(len(p) > 1 for p in packs)
    return collate(packs, tokenizer.pad_token_id)


@pytest.mark.parametrize("layout", [tree_batch, packed_batch])
def test_tree_block_mask_allows_exactly_what_the_dense_mask_allows(tokenizer, trees, layout):
    from torch.nn.attention.flex_attention import create_mask

    batch = layout(tokenizer, trees)
    block_mask = tree_block_mask(batch.segment, batch.visible, batch.document)
    batch_size, width = batch.segment.shape
    assert block_mask.shape == (batch_size, 1, width, width)
    allowed = create_mask(block_mask.mask_mod, batch_size, 1, width, width, device="cpu")
    assert torch.equal(allowed, attention_mask_4d(batch.segment, batch.visible, batch.document))
    # Blocks nobody may see (a path block under a later alternative's ...) are skipped.
    dense_blocks = block_mask.kv_num_blocks.sum() + block_mask.full_kv_num_blocks.sum()
    assert dense_blocks < batch_size * block_mask.kv_num_blocks.shape[-1] ** 2


def flex_copy(model: ProcessRewardModel) -> ProcessRewardModel:
    """The same weights, attending through FlexAttention (scoring needs no backward)."""
    model.backbone.set_attn_implementation("flex_attention")
    return model


@pytest.mark.parametrize("mode", ["head", "lora", "full"])
def test_flex_gives_every_steps_logits_of_sdpa_in_every_mode(
    flex_llama, make_config, tokenizer, trees, mode
):
    config = make_config(flex_llama, mode=mode)
    torch.manual_seed(0)
    model = ProcessRewardModel.from_config(config).eval()
    batch = tree_batch(model.tokenizer, trees)
    with torch.no_grad():
        sdpa = model(batch)
        flex = flex_copy(model)(batch)
    assert model.backbone.config._attn_implementation == "flex_attention"
    assert sdpa.shape == (len(batch.labels), 3)
    assert torch.allclose(flex, sdpa, atol=TOLERANCE, rtol=0)


def one_step(make_config, backbone, trees, tmp_path, attention, **overrides):
    config = make_config(
        backbone,
        attention=attention,
        max_steps=1,
        output_dir=str(tmp_path / attention),
        device="cuda" if torch.cuda.is_available() else "cpu",
        dtype="float32",
        bf16="false",
        # One batch, one shape: on the CPU flex is compiled once per batch length (slow).
        batch_tokens=16384,
        **overrides,
    )
    result = train(config, trees)
    saved = json.loads((tmp_path / attention / "prm.json").read_text())
    assert saved["config"]["attention"] == attention
    trained = ProcessRewardModel.load(tmp_path / attention).trainable_state()
    return result.loss_curve, trained


def assert_same_step(make_config, backbone, trees, tmp_path, **overrides):
    loss_sdpa, params_sdpa = one_step(make_config, backbone, trees, tmp_path, "sdpa", **overrides)
    loss_flex, params_flex = one_step(make_config, backbone, trees, tmp_path, "flex", **overrides)
    assert len(loss_flex) == 1 and loss_flex[0][0] == 1
    assert abs(loss_flex[0][1] - loss_sdpa[0][1]) < TOLERANCE
    assert params_flex.keys() == params_sdpa.keys()
    for name, value in params_sdpa.items():
        assert torch.allclose(params_flex[name], value, atol=TOLERANCE, rtol=0), name


@pytest.mark.parametrize("cache_features", [True, False])
def test_one_head_step_with_flex_has_the_loss_and_update_of_sdpa(
    flex_llama, make_config, trees, tmp_path, cache_features
):
    assert_same_step(
        make_config, flex_llama, trees, tmp_path, mode="head", cache_features=cache_features
    )


@cuda
@pytest.mark.parametrize("mode", ["lora", "full"])
def test_one_backbone_step_with_flex_has_the_loss_and_update_of_sdpa(
    flex_llama, make_config, trees, tmp_path, mode
):
    assert_same_step(make_config, flex_llama, trees, tmp_path, mode=mode)


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_flex_refuses_to_train_a_backbone_on_the_cpu(tiny_llama, make_config, mode):
    config = make_config(tiny_llama, mode=mode, attention="flex")
    with pytest.raises(ValueError, match="no FlexAttention backward pass on the CPU"):
        ProcessRewardModel.from_config(config)
    # auto keeps sdpa there, and so does head mode's frozen backbone only on request.
    assert attention_for(config.replace(attention="auto"), torch.device("cpu")) == "sdpa"
    assert attention_for(config.replace(mode="head"), torch.device("cpu")) == "flex"


def test_flex_refuses_a_backbone_with_attention_dropout(make_config, tmp_path):
    dropout_llama = save_tiny_llama(tmp_path / "dropout", dropout=0.1, hidden=64)
    config = make_config(dropout_llama, mode="lora", attention="flex")
    with pytest.raises(ValueError, match="attention dropout"):
        attention_for(config, torch.device("cuda"))
    assert attention_for(config.replace(attention="auto"), torch.device("cuda")) == "sdpa"
    assert attention_for(config.replace(mode="head"), torch.device("cuda")) == "flex"


def test_an_unknown_attention_is_refused():
    with pytest.raises(ValueError, match="attention must be one of"):
        TrainConfig(attention="flash")


def test_flex_refuses_heads_narrower_than_its_cuda_kernels_take(
    tiny_llama, flex_llama, make_config
):
    narrow = make_config(tiny_llama, mode="lora", attention="flex")  # heads of 8
    with pytest.raises(ValueError, match="head dimension of at least 16 and this backbone's is 8"):
        attention_for(narrow, torch.device("cuda"))
    with pytest.raises(ValueError, match="head dimension"):
        attention_for(narrow.replace(mode="head"), torch.device("cuda"))
    assert attention_for(narrow.replace(attention="auto"), torch.device("cuda")) == "sdpa"
    # On a CPU the narrow heads are no obstacle to head mode's frozen pass.
    assert attention_for(narrow.replace(mode="head"), torch.device("cpu")) == "flex"
    wide = make_config(flex_llama, mode="lora", attention="auto")
    assert attention_for(wide, torch.device("cuda")) == "flex"
