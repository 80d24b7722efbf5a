"""Fixtures of the training-core tests: tiny models (tests/helpers/tiny_models.py), real data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.tiny_models import PARQUET, SAMPLES, build_tokenizer, save_tiny_llama


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_llama_dropout(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Same, with attention dropout: a resumed run must restore the RNG to match."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-dropout"), dropout=0.1)


@pytest.fixture(scope="session")
def prm800k_records(shared_data) -> list[dict]:
    return [json.loads(line) for line in SAMPLES.read_text().splitlines()]


@pytest.fixture(scope="session")
def critic_rows(shared_data) -> list[dict]:
    """The parquet's rows for 12 problems (a small real slice)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    columns = ["instruction", "responses", "next_response", "rating", "is_preferred_response"]
    table = pq.read_table(PARQUET, columns=columns)
    problems = sorted(set(table.column("instruction").to_pylist()))[:12]
    return table.filter(pc.is_in(table.column("instruction"), pa.array(problems))).to_pylist()


@pytest.fixture
def make_config(tmp_path: Path):
    """A small CPU TrainConfig writing under tmp_path; keyword arguments override."""
    from modeling.training.config import TrainConfig

    def make(backbone: str, **overrides) -> TrainConfig:
        settings = dict(
            backbone=backbone,
            output_dir=str(tmp_path / "run"),
            max_length=1024,
            batch_tokens=4096,
            lr=3e-3,
            warmup_ratio=0.0,
            checkpoint_every=1000,
            device="cpu",
            seed=0,
        )
        settings.update(overrides)
        return TrainConfig(**settings)

    return make


@pytest.fixture(scope="session")
def samples(prm800k_records):
    from modeling.training.data import examples_from_prm800k

    return examples_from_prm800k(prm800k_records)
