"""The feature cache on a tiny random backbone: reused, recomputed on a changed backbone or
changed data, resumed after an interruption, and equal to the model's own step features."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch import nn

from modeling.training.batching import collate
from modeling.training.config import TrainConfig
from modeling.training.data import LabeledSolution, build_features
from modeling.training.feature_cache import (
    FeatureCache,
    backbone_identity,
    cached_features,
    content_hash,
)
from modeling.training.model import ProcessRewardModel
from tests.helpers.tiny_models import save_tiny_llama


@contextmanager
def counting_backbone_forwards():
    """Counts forward calls of the (Llama) base model, wherever it is built."""
    calls = []

    def hook(module: nn.Module, args: object, output: object) -> None:
        if type(module).__name__ == "LlamaModel":
            calls.append(module)

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        yield calls
    finally:
        handle.remove()


@pytest.fixture
def backbone(tmp_path: Path) -> str:
    return save_tiny_llama(tmp_path / "tiny")


def cache_for(root: Path, backbone: str, **options) -> FeatureCache:
    settings = dict(blocks=(1, 2), poolings=("end", "mean"), max_length=512) | options
    return FeatureCache(root, backbone_identity(backbone, **settings))


def test_a_second_run_reads_the_cache_and_runs_no_backbone_forward(samples, backbone, tmp_path):
    cache = cache_for(tmp_path / "cache", backbone)
    with counting_backbone_forwards() as calls:
        first = cached_features(samples, cache, chunk_solutions=2)
    assert calls, "the first run computes"
    with counting_backbone_forwards() as calls:
        again = cached_features(samples, cache_for(tmp_path / "cache", backbone))
    assert calls == []
    for a, b in zip(first, again, strict=True):
        assert a is not None and b is not None
        assert torch.equal(a.x.nan_to_num(), b.x.nan_to_num())
        assert torch.equal(a.present, b.present)
    # (slots, blocks, poolings, hidden); NaN where a step has none (past max_length)
    assert first[0].x.shape == (len(samples[0].slot_ratings()), 2, 2, 32)
    assert all(f.x[f.present].isfinite().all() and f.x[~f.present].isnan().all() for f in first)
    assert sum(int(f.present.sum()) for f in first) > 20


def test_step_end_features_equal_the_models_own_at_the_last_block(samples, backbone, tmp_path):
    cache = cache_for(tmp_path / "cache", backbone, dtype="float32")
    features = cached_features(samples[:2], cache)
    model = ProcessRewardModel.from_config(
        TrainConfig(backbone=backbone, mode="head", max_length=512, device="cpu")
    ).eval()
    batch = collate(build_features(samples[:2], model.tokenizer, 512), model.pad_id)
    with torch.no_grad():
        expected = model.features(batch)
    for (example, slot), vector in zip(batch.slots, expected, strict=True):
        # block 2, step end: the last block kept, so (as transformers gives it) after the norm
        assert torch.allclose(features[example].x[slot, 1, 0], vector, atol=1e-4)


def test_a_changed_backbone_is_recomputed_in_its_own_folder(samples, backbone, tmp_path):
    cached_features(samples, cache_for(tmp_path / "cache", backbone))
    changed = Path(backbone).parent / "changed"
    shutil.copytree(backbone, changed)
    weights = changed / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00\x00\x80\x3f")  # one weight altered
    cache = cache_for(tmp_path / "cache", str(changed))
    assert cache.folder != cache_for(tmp_path / "cache", backbone).folder
    with counting_backbone_forwards() as calls:
        cached_features(samples, cache)
    assert calls, "features of other weights are never read"
    # Other blocks or poolings are another identity too.
    assert cache_for(tmp_path / "cache", backbone, blocks=(2,)).folder != cache.folder


def test_changed_data_recomputes_only_the_changed_solutions(samples, backbone, tmp_path):
    cache = cache_for(tmp_path / "cache", backbone)
    cached_features(samples, cache)
    edited = LabeledSolution(
        samples[0].problem,
        [samples[0].steps[0] + " (edited)", *samples[0].steps[1:]],
        samples[0].ratings,
        samples[0].alternatives,
    )
    relabeled = LabeledSolution(  # the same texts rated otherwise: the same features
        samples[1].problem, samples[1].steps, [1] * len(samples[1].ratings), samples[1].alternatives
    )
    assert content_hash(edited) != content_hash(samples[0])
    assert content_hash(relabeled) == content_hash(samples[1])
    done = []
    features = cached_features(
        [edited, relabeled, *samples[2:]], cache, progress=lambda n, total: done.append(total)
    )
    assert done == [1]  # one solution computed
    assert not torch.equal(features[0].x[0], cached_features([samples[0]], cache)[0].x[0])


def test_an_interrupted_pass_resumes_where_it_stopped(samples, backbone, tmp_path):
    cache = cache_for(tmp_path / "cache", backbone)

    def stop_after_first_chunk(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cached_features(samples, cache, chunk_solutions=2, progress=stop_after_first_chunk)
    # A chunk half written when the process died is left as a temporary file: never read.
    (cache.folder / "chunk-dead.pt.123.tmp").write_bytes(b"half a chunk")
    partial = cached_features(samples, cache, compute=False)
    assert sum(f is not None for f in partial) == 2
    computed = []
    with counting_backbone_forwards() as calls:
        cached_features(samples, cache, chunk_solutions=2, progress=lambda n, t: computed.append(t))
    assert calls and set(computed) == {len(samples) - 2}
    assert all(f is not None for f in cached_features(samples, cache, compute=False))


def test_bad_settings_are_refused_with_a_clear_error(backbone, tmp_path):
    with pytest.raises(ValueError, match="poolings"):
        backbone_identity(backbone, blocks=(1,), poolings=("max",))
    with pytest.raises(ValueError, match="local folder"):
        backbone_identity("no/such-model", blocks=(1,))
    cache = cache_for(tmp_path / "cache", backbone)
    (cache.folder / "identity.json").write_text('{"backbone": "something else"}')
    with pytest.raises(ValueError, match="altered"):
        cache_for(tmp_path / "cache", backbone)
