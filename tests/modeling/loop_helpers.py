"""Shared set-up for the loop's end-to-end tests: demo pool, real labels, a tiny model config."""

from __future__ import annotations

from pathlib import Path

from labeling.services.importing import import_math, import_prm800k
from modeling.services.pool import import_pool
from tests.helpers.paths import SAMPLE_DIR


def load_pool_and_labels(shared_data: Path) -> None:
    """The demo's 63 graded pool solutions, and PRM800K sample labelings to train on."""
    import_math(SAMPLE_DIR / "problems.jsonl")
    import_pool(SAMPLE_DIR / "solutions.jsonl")
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")


def tiny_train_config(backbone: str) -> dict:
    return {
        "backbone": backbone,
        "mode": "head",
        "max_steps": 3,
        "device": "cpu",
        "batch_tokens": 4096,
        "max_length": 512,
        "checkpoint_every": 1000,
    }


def make_tiny_backbone(folder: Path) -> str:
    from tests.helpers.tiny_models import save_tiny_llama

    return save_tiny_llama(folder)
