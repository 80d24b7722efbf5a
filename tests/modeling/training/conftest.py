"""Tiny models built in code: a byte-level BPE tokenizer and random Llama/BERT backbones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA as DATA
from tests.conftest import require_shared_data

SAMPLES = DATA / "prm800k" / "samples.jsonl"
PARQUET = DATA / "prm800k" / "phase1_train.stepwise-critic.parquet"


def _corpus() -> list[str]:
    texts = []
    require_shared_data()
    for line in SAMPLES.read_text().splitlines():
        record = json.loads(line)
        texts.append(record["question"]["problem"])
        for step in record["label"]["steps"]:
            texts += [c["text"] for c in step["completions"] or []]
    return texts


def build_tokenizer(with_bos: bool = True):  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>" if with_bos else None,
        eos_token="</s>",
        pad_token="<pad>",
    )


def save_tiny_llama(folder: Path, dropout: float = 0.0) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        attention_dropout=dropout,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of a 2-layer random Llama causal LM with its tokenizer."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


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
