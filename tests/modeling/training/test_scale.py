"""What large runs need, on the CPU: storage dtype, activation checkpointing, compilation,
DataLoader workers, loss read back every N steps, per-mode learning rates."""

from __future__ import annotations

import multiprocessing
import queue

import pytest
import torch

from modeling.training.config import LR_DEFAULTS, TrainConfig
from modeling.training.model import ProcessRewardModel, storage_dtype, transformer_blocks
from modeling.training.train import Progress, train

SMALL = dict(max_steps=4, batch_tokens=1024, max_length=512)


def losses(curve):
    return [loss for _, loss in curve]


def test_the_learning_rate_defaults_to_the_modes_own():
    assert {m: TrainConfig(mode=m).lr for m in LR_DEFAULTS} == {
        "head": 1e-3,
        "lora": 2e-4,
        "full": 2e-5,
    }
    assert TrainConfig(mode="full", lr=1e-4).lr == 1e-4  # a given one stays
    # Switching mode moves a default rate along, never a chosen one.
    assert TrainConfig().replace(mode="full").lr == 2e-5
    assert TrainConfig(lr=5e-3).replace(mode="full").lr == 5e-3


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dtype", "float16", "dtype must be one of"),
        ("gradient_checkpointing", "yes", "gradient_checkpointing must be true or false"),
        ("compile", 1, "compile must be true or false"),
        ("num_workers", -1, "num_workers must be between"),
        ("log_every", 0, "log_every must be between"),
    ],
)
def test_bad_scale_settings_are_refused_up_front(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{field: value})


def test_auto_storage_dtype_is_bf16_only_where_weights_are_frozen_on_cuda():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert storage_dtype(TrainConfig(mode="head"), cuda) == torch.bfloat16
    assert storage_dtype(TrainConfig(mode="lora"), cuda) == torch.bfloat16
    assert storage_dtype(TrainConfig(mode="full"), cuda) == torch.float32  # fp32 masters
    assert storage_dtype(TrainConfig(mode="lora"), cpu) == torch.float32
    assert storage_dtype(TrainConfig(mode="full", dtype="bfloat16"), cpu) == torch.bfloat16


def test_bf16_base_weights_train_lora_adapters_in_fp32(tiny_llama, make_config, samples):
    config = make_config(tiny_llama, mode="lora", dtype="bfloat16", **SMALL)
    model = ProcessRewardModel.from_config(config)
    dtypes = {
        "lora" if "lora_" in name else "base": p.dtype
        for name, p in model.backbone.named_parameters()
    }
    assert dtypes == {"base": torch.bfloat16, "lora": torch.float32}
    assert model.head.weight.dtype == torch.float32
    result = train(config, samples)
    assert result.step == 4 and torch.isfinite(torch.tensor(losses(result.loss_curve))).all()
    assert ProcessRewardModel.load(result.output_dir).config.dtype == "bfloat16"


def test_gradient_checkpointing_recomputes_the_same_gradients(
    tiny_llama_dropout, make_config, samples, tmp_path
):
    def run(name, checkpointing):
        config = make_config(
            tiny_llama_dropout,
            mode="full",
            gradient_checkpointing=checkpointing,
            output_dir=str(tmp_path / name),
            **SMALL,
        )
        return train(config, samples).loss_curve

    config = make_config(tiny_llama_dropout, mode="full", gradient_checkpointing=True)
    assert ProcessRewardModel.from_config(config).backbone.is_gradient_checkpointing
    # Non-reentrant checkpointing replays the dropout masks: the same losses, not close ones.
    plain, recomputed = run("plain", False), run("checkpointed", True)
    assert [s for s, _ in plain] == [s for s, _ in recomputed] == [1, 2, 3, 4]
    for (_, a), (_, b) in zip(plain, recomputed, strict=True):
        assert a == pytest.approx(b, rel=1e-5)


def test_dataloader_workers_build_the_same_batches(tiny_llama, make_config, samples, tmp_path):
    def run(name, workers):
        config = make_config(
            tiny_llama,
            mode="lora",
            num_workers=workers,
            lora_dropout=0.0,
            output_dir=str(tmp_path / name),
            **SMALL,
        )
        return train(config, samples)

    in_process, workers = run("in-process", 0), run("workers", 2)
    assert losses(workers.loss_curve) == pytest.approx(losses(in_process.loss_curve), rel=1e-6)
    assert workers.metrics["train_tokens_per_s"] > 0


def test_the_loss_is_read_back_every_log_every_steps_and_kept_for_every_step(
    tiny_llama, make_config, samples, tmp_path
):
    seen: list[Progress] = []
    config = make_config(tiny_llama, mode="full", log_every=3, **{**SMALL, "max_steps": 7})
    result = train(config, samples, progress=seen.append)
    assert [p.step for p in seen if p.phase == "train"] == [3, 6, 7]  # and the last step
    assert [s for s, _ in result.loss_curve] == list(range(1, 8))
    every = train(config.replace(log_every=1, output_dir=str(tmp_path / "every")), samples)
    assert losses(result.loss_curve) == pytest.approx(losses(every.loss_curve), rel=1e-6)


def test_compile_compiles_each_transformer_block(tiny_llama, make_config):
    model = ProcessRewardModel.from_config(make_config(tiny_llama, mode="full", compile=True))
    blocks = transformer_blocks(model.backbone)
    assert all(block._compiled_call_impl is not None for block in blocks)
    plain = ProcessRewardModel.from_config(make_config(tiny_llama, mode="full"))
    assert all(block._compiled_call_impl is None for block in transformer_blocks(plain.backbone))


@pytest.mark.slow  # inductor compiles for minutes on a CPU: make test-slow
def test_a_compiled_backbone_trains_like_the_eager_one(tiny_llama, make_config, samples, tmp_path):
    def run(name, compiled):
        config = make_config(
            tiny_llama, mode="full", compile=compiled, output_dir=str(tmp_path / name), **SMALL
        )
        return train(config, samples).loss_curve

    assert losses(run("compiled", True)) == pytest.approx(losses(run("eager", False)), rel=1e-4)


def _train_and_send(config, samples, results):
    results.put(losses(train(config, samples).loss_curve))


def test_workers_asked_for_in_a_daemonic_process_are_not_started(tiny_llama, make_config, samples):
    # A Celery prefork child is daemonic and may not have children: the batches are then
    # built in the training process instead of failing the run.
    config = make_config(tiny_llama, mode="full", num_workers=2, **SMALL)
    # Spawned, not forked: a fork of this many-threaded test process may crash the child.
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_train_and_send, args=(config, samples, results), daemon=True)
    child.start()
    while True:  # the result, or the child's death (a failed run) as soon as it happens
        try:
            curve = results.get(timeout=1)
            break
        except queue.Empty:
            assert child.is_alive() or not results.empty(), f"training died: {child.exitcode}"
    child.join(timeout=60)
    assert child.exitcode == 0 and len(curve) == 4
