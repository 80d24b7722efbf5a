from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from modeling.training.data import examples_from_critic_rows
from modeling.training.model import ProcessRewardModel
from modeling.training.score import predict_labelled
from modeling.training.train import Progress, latest_checkpoint, train
from tests.helpers.checkpoints import read_checkpoint


def _data_loss(model, examples):
    probs, ratings = predict_labelled(model, examples)
    return float(-np.log(probs[np.arange(len(ratings)), ratings + 1]).mean())


def test_loss_falls_on_a_real_slice_of_the_parquet(tiny_llama, make_config, critic_rows):
    examples = examples_from_critic_rows(critic_rows)[:4]
    # One batch holds every row, so each step sees all the labels: a smooth descent.
    config = make_config(
        tiny_llama, mode="full", max_steps=12, lr=3e-3, max_length=512, batch_tokens=16384
    )
    torch.manual_seed(config.seed)
    before = _data_loss(ProcessRewardModel.from_config(config), examples)
    result = train(config, examples)
    after = _data_loss(ProcessRewardModel.load(result.output_dir), examples)
    assert len(result.loss_curve) == 12 and result.metrics["labels"] > 50
    assert after < 0.8 * before


def _final_state(output_dir):
    return read_checkpoint(latest_checkpoint(output_dir))["model"]


def test_an_interrupted_run_resumes_to_the_same_result(
    tiny_llama_dropout, make_config, samples, tmp_path
):
    def config(name):
        return make_config(
            tiny_llama_dropout,
            mode="full",
            max_steps=7,
            checkpoint_every=2,
            batch_tokens=1024,
            max_length=512,
            warmup_ratio=0.3,
            output_dir=str(tmp_path / name),
        )

    straight = train(config("straight"), samples)

    def crash_at_step_5(p: Progress) -> None:
        if p.phase == "train" and p.step == 5:
            raise KeyboardInterrupt  # a kill between the step-4 checkpoint and the next

    with pytest.raises(KeyboardInterrupt):
        train(config("resumed"), samples, progress=crash_at_step_5)
    assert latest_checkpoint(tmp_path / "resumed").name == "step-00000004"
    resumed = train(config("resumed"), samples)

    assert resumed.step == straight.step == 7
    assert [s for s, _ in resumed.loss_curve] == list(range(1, 8))
    for (_, a), (_, b) in zip(resumed.loss_curve, straight.loss_curve, strict=True):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-7)
    a, b = _final_state(tmp_path / "resumed"), _final_state(tmp_path / "straight")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=1e-6)


def test_should_stop_cancels_with_a_checkpoint_and_a_later_call_finishes(
    tiny_llama, make_config, samples
):
    config = make_config(tiny_llama, mode="head", max_steps=6)
    seen: list[Progress] = []
    stopped = train(
        config,
        samples,
        progress=seen.append,
        should_stop=lambda: any(p.phase == "train" and p.step >= 2 for p in seen),
    )
    assert stopped.stopped and stopped.step == 2
    assert [p.step for p in seen if p.phase == "train"] == [1, 2]
    assert all(p.total == 6 for p in seen if p.phase == "train")
    finished = train(config, samples)
    assert not finished.stopped and finished.step == 6
    assert [s for s, _ in finished.loss_curve] == list(range(1, 7))


def test_resuming_with_a_different_config_is_refused(tiny_llama, make_config, samples):
    train(make_config(tiny_llama, mode="head", max_steps=2), samples)
    with pytest.raises(ValueError, match="different config"):
        train(make_config(tiny_llama, mode="head", max_steps=2, lr=1.0), samples)


def test_a_checkpoint_from_before_packing_resumes_unpacked_and_refuses_packing(
    tiny_llama, make_config, samples
):
    unpacked = make_config(tiny_llama, mode="head", max_steps=4, pack_solutions=False)
    seen: list[Progress] = []
    first = train(
        unpacked,
        samples,
        progress=seen.append,
        should_stop=lambda: any(p.phase == "train" and p.step >= 1 for p in seen),
    )
    assert first.stopped and first.step == 1
    meta_path = latest_checkpoint(Path(unpacked.output_dir)) / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["config"]["pack_solutions"], meta["config"]["attention"]  # as an older Stepwise
    meta_path.write_text(json.dumps(meta))

    packed = make_config(tiny_llama, mode="head", max_steps=4)  # today's default packs
    with pytest.raises(ValueError, match="pack_solutions"):
        train(packed, samples)
    assert train(unpacked, samples).step == 4


def test_cached_head_training_matches_running_the_backbone_every_step(
    tiny_llama, make_config, samples, tmp_path
):
    cached = train(
        make_config(tiny_llama, mode="head", max_steps=3, output_dir=str(tmp_path / "cached")),
        samples,
    )
    live = train(
        make_config(
            tiny_llama,
            mode="head",
            max_steps=3,
            cache_features=False,
            output_dir=str(tmp_path / "live"),
        ),
        samples,
    )
    for (_, a), (_, b) in zip(cached.loss_curve, live.loss_curve, strict=True):
        assert a == pytest.approx(b, rel=1e-5)


def test_a_resumed_head_run_reuses_its_backbone_features(
    tiny_llama, make_config, samples, tmp_path
):
    import shutil

    from modeling.training.train import FEATURES_FILE

    config = make_config(tiny_llama, mode="head", max_steps=6, batch_tokens=1024, max_length=512)
    first: list[Progress] = []
    stopped = train(
        config,
        samples,
        progress=first.append,
        should_stop=lambda: any(p.phase == "train" and p.step == 3 for p in first),
    )
    assert stopped.stopped and stopped.step == 3
    computed = [p for p in first if p.phase == "features"]
    assert len(computed) > 1  # one report per backbone batch

    again: list[Progress] = []
    resumed = train(config, samples, progress=again.append)
    assert [p.step for p in again if p.phase == "features"] == [
        computed[-1].total
    ]  # loaded, not run
    assert resumed.step == 6 and [s for s, _ in resumed.loss_curve] == list(range(1, 7))

    # Features of other rows (here: another max_length) are never taken for these.
    other = make_config(
        tiny_llama,
        mode="head",
        max_steps=6,
        batch_tokens=1024,
        max_length=256,
        output_dir=str(tmp_path / "other"),
    )
    (tmp_path / "other").mkdir()
    shutil.copy(f"{config.output_dir}/{FEATURES_FILE}", tmp_path / "other" / FEATURES_FILE)
    fresh: list[Progress] = []
    train(
        other,
        samples,
        progress=fresh.append,
        should_stop=lambda: any(p.phase == "train" for p in fresh),
    )
    assert len([p for p in fresh if p.phase == "features"]) > 1


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_lr_warms_up_from_zero_then_decays_to_zero(decay):
    from modeling.training.config import TrainConfig
    from modeling.training.train import lr_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    scheduler = lr_scheduler(optimizer, TrainConfig(warmup_ratio=0.2, decay=decay), 10)
    used = []
    for _ in range(10):
        used.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    progress = [(step - 2) / 8 for step in range(2, 10)]
    shape = {"linear": lambda p: 1 - p, "cosine": lambda p: 0.5 * (1 + math.cos(math.pi * p))}
    assert used == pytest.approx([0.0, 1.0] + [2.0 * shape[decay](p) for p in progress])
    assert scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)


# --- phases, stopping and throughput (issue 43) ----------------------------------------------


def test_train_reports_each_phase_and_the_feature_pass_in_solutions(
    tiny_llama, make_config, samples
):
    seen: list[Progress] = []
    config = make_config(tiny_llama, mode="head", max_steps=2, batch_tokens=1024, max_length=512)
    train(config, samples, progress=seen.append)
    assert list(dict.fromkeys(p.phase for p in seen)) == ["load", "tokenize", "features", "train"]
    tokenized = [p for p in seen if p.phase == "tokenize"]
    assert (tokenized[-1].step, tokenized[-1].total) == (len(samples), len(samples))
    extracted = [p for p in seen if p.phase == "features"]
    labelled = sum(1 for e in samples if e.n_labels())  # a solution with a rated step
    assert len(extracted) > 1 and {p.total for p in extracted} == {labelled}
    done = [p.step for p in extracted]
    assert done == sorted(done) and done[-1] == labelled


def test_a_stop_asked_for_inside_a_backbone_batch_ends_the_feature_pass_there(
    tiny_llama, make_config, samples
):
    from contextlib import nullcontext

    from modeling.training.data import IGNORE, build_features
    from modeling.training.model import transformer_blocks
    from modeling.training.train import cache_features, training_batches

    # One batch holds every row: a pass that asks only between batches would run it whole.
    config = make_config(tiny_llama, mode="head", batch_tokens=16384, max_length=512)
    model = ProcessRewardModel.from_config(config)
    rows = [
        r
        for r in build_features(samples, model.tokenizer, config.max_length)
        if any(label != IGNORE for label in r.labels)
    ]
    packs, batches = training_batches(rows, config)
    assert len(batches) == 1
    asked: list[int] = []

    def yes_when_asked_the_third_time() -> bool:  # before the batch, then before each block
        asked.append(1)
        return len(asked) >= 3

    reports: list[Progress] = []
    features = cache_features(
        model,
        packs,
        batches,
        torch.device("cpu"),
        nullcontext(),
        reports.append,
        yes_when_asked_the_third_time,
    )
    assert features is None and len(asked) == 3
    assert [p.step for p in reports] == [0]  # the pass began; no batch of it ended
    assert not any(block._forward_pre_hooks for block in transformer_blocks(model.backbone))


def test_one_process_asks_to_stop_before_every_step_whatever_log_every(
    tiny_llama, make_config, samples
):
    seen: list[Progress] = []
    asked_while_training: list[int] = []

    def yes_at_the_second_step() -> bool:
        if seen and seen[-1].phase == "features" and seen[-1].step == seen[-1].total:
            asked_while_training.append(1)
        return len(asked_while_training) >= 2

    config = make_config(tiny_llama, mode="head", max_steps=50, log_every=25, max_length=512)
    result = train(config, samples, progress=seen.append, should_stop=yes_at_the_second_step)
    assert result.stopped and result.step == 1  # not at step 25, the next report


def test_tokens_per_second_are_reported_only_where_tokens_went_through_the_model(
    tiny_llama, make_config, samples, tmp_path
):
    head = make_config(tiny_llama, mode="head", max_steps=2, output_dir=str(tmp_path / "head"))
    metrics = train(head, samples).metrics
    # Cached head training reads features: its backbone's tokens went through the feature pass.
    assert "train_tokens_per_s" not in metrics and metrics["feature_tokens_per_s"] > 0
    lora = make_config(tiny_llama, mode="lora", max_steps=2, output_dir=str(tmp_path / "lora"))
    metrics = train(lora, samples).metrics
    assert metrics["train_tokens_per_s"] > 0 and "feature_tokens_per_s" not in metrics
    # Again in the finished folder: features read back, no step left to train, nothing measured.
    metrics = train(head, samples).metrics
    assert "train_tokens_per_s" not in metrics and "feature_tokens_per_s" not in metrics
