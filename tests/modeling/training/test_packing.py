"""pack_solutions: several solutions' rows in one token row give each step the logits, and a
step the loss and update, of a row per solution."""

from __future__ import annotations

import pytest
import torch

from modeling.training.batching import attention_mask_4d, collate
from modeling.training.data import (
    IGNORE,
    build_features,
    examples_from_critic_rows,
    pack_length,
    pack_rows,
)
from modeling.training.model import ProcessRewardModel
from modeling.training.train import latest_checkpoint, train
from tests.helpers.checkpoints import read_checkpoint

TOLERANCE = 1e-4
BUDGET = 2048  # tokens per packed row: about four of the rows below


@pytest.fixture(scope="module")
def rows(critic_rows, tokenizer):
    """Real phase-1 trees of the parquet slice, cut into rows of at most 512 tokens: each
    solution's path and alternatives, in extra rows where they overflow (those rows are
    documents of their own too)."""
    solutions = examples_from_critic_rows(critic_rows)
    rows = build_features(solutions, tokenizer, 512)
    assert len(rows) > len(solutions)
    return rows


def test_packs_hold_every_row_once_within_the_budget_and_no_two_would_fit_together(rows):
    packs = pack_rows(rows, BUDGET)
    assert sorted(id(r) for p in packs for r in p) == sorted(id(r) for r in rows)
    assert all(pack_length(p) <= BUDGET for p in packs)
    lengths = sorted(pack_length(p) for p in packs)
    assert lengths[0] + lengths[1] > BUDGET  # the two emptiest: nothing left to merge
    assert len(packs) < len(rows) / 2
    # The same rows always give the same packs (a resumed run's batches depend on it).
    again = pack_rows(rows, BUDGET)
    assert [[id(r) for r in p] for p in again] == [[id(r) for r in p] for p in packs]
    # A row longer than the budget goes alone.
    [alone] = pack_rows(rows[:1], 10)
    assert alone == rows[:1]


def by_slot(batch, values):
    return dict(zip(batch.slots, values, strict=True))


def test_a_packed_batch_keeps_step_ends_labels_and_positions_of_each_row(rows, tokenizer):
    packs = pack_rows(rows, BUDGET)
    packed, alone = collate(packs, tokenizer.pad_token_id), collate(rows, tokenizer.pad_token_id)
    assert packed.n_tokens == alone.n_tokens == sum(len(r) for r in rows)
    assert sorted(packed.slots) == sorted(alone.slots)
    assert by_slot(packed, packed.labels.tolist()) == by_slot(alone, alone.labels.tolist())
    assert (packed.labels != IGNORE).sum() == (alone.labels != IGNORE).sum()
    for name in ("input_ids", "position_ids"):
        at_ends = [getattr(b, name).flatten()[b.ends].tolist() for b in (packed, alone)]
        assert by_slot(packed, at_ends[0]) == by_slot(alone, at_ends[1]), name
    # Position ids restart in every document; padding is nobody's document.
    for b, pack in enumerate(packs):
        start = 0
        for d, row in enumerate(pack):
            span = slice(start, start + len(row))
            assert packed.position_ids[b, span].tolist() == row.position_ids
            assert (packed.document[b, span] == d).all()
            start += len(row)
        assert (packed.document[b, start:] == -1).all()


def test_a_document_sees_exactly_what_its_row_alone_sees_and_nothing_else(rows, tokenizer):
    packs = pack_rows(rows, BUDGET)
    packed = collate(packs, tokenizer.pad_token_id)
    mask = attention_mask_4d(packed.segment, packed.visible, packed.document)[:, 0]
    for b, pack in enumerate(packs):
        start = 0
        for row in pack:
            own = collate([row], tokenizer.pad_token_id)
            expected = attention_mask_4d(own.segment, own.visible, own.document)[0, 0]
            span = slice(start, start + len(row))
            assert torch.equal(mask[b, span, span], expected)
            assert mask[b, span].sum() == expected.sum()  # no key outside its document
            start += len(row)


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_every_steps_logits_of_a_packed_row_are_those_of_its_own_row(
    tiny_llama, make_config, rows, attention
):
    torch.manual_seed(0)
    model = ProcessRewardModel.from_config(make_config(tiny_llama, mode="full")).eval()
    rows = rows[:24]  # six packed rows: enough documents, a short CPU forward pass
    packs = pack_rows(rows, BUDGET)
    packed, alone = collate(packs, model.pad_id), collate(rows, model.pad_id)
    with torch.no_grad():
        # The reference: a row each under the dense mask (flex's equality with it on a row
        # each is test_flex_attention's), so flex compiles one shape only (slow on a CPU).
        expected = by_slot(alone, model(alone))
        if attention == "flex":  # forward only: the CPU has no FlexAttention backward
            model.backbone.set_attn_implementation("flex_attention")
        got = by_slot(packed, model(packed))
    assert got.keys() == expected.keys()
    for slot, logits in expected.items():
        assert torch.allclose(got[slot], logits, atol=TOLERANCE, rtol=0), slot


def test_one_step_on_packed_rows_has_the_loss_and_update_of_a_row_each(
    tiny_llama, make_config, samples, tmp_path
):
    # Full fine-tuning, so the backbone's update is compared too (flex trains on packed rows
    # in test_distributed's head mode test). The six PRM800K sample trees: a row each at
    # max_length 2048, two packed rows.
    def one_step(pack_solutions):
        out = tmp_path / f"pack-{pack_solutions}"
        config = make_config(
            tiny_llama,
            mode="full",
            pack_solutions=pack_solutions,
            max_steps=1,
            max_length=2048,
            batch_tokens=65536,  # one batch: the step sees every solution either way
            output_dir=str(out),
        )
        result = train(config, samples)
        return result, read_checkpoint(latest_checkpoint(out))["model"]

    (alone, params_alone), (packed, params_packed) = one_step(False), one_step(True)
    assert packed.metrics["packed_rows"] < alone.metrics["packed_rows"] == alone.metrics["rows"]
    assert packed.metrics["labels"] == alone.metrics["labels"]
    assert abs(packed.loss_curve[0][1] - alone.loss_curve[0][1]) < TOLERANCE
    assert params_packed.keys() == params_alone.keys()
    for name, value in params_alone.items():
        assert torch.allclose(params_packed[name], value, atol=TOLERANCE, rtol=0), name
