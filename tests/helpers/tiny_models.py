"""Tiny models built in code: a byte-level BPE tokenizer and random Llama backbones."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.helpers.paths import SHARED_DATA, require_shared_data

SAMPLES = SHARED_DATA / "prm800k" / "samples.jsonl"
PARQUET = SHARED_DATA / "prm800k" / "phase1_train.stepwise-critic.parquet"


def _corpus() -> list[str]:
    texts = []
    require_shared_data()
    for line in SAMPLES.read_text().splitlines():
        record = json.loads(line)
        texts.append(record["question"]["problem"])
        for step in record["label"]["steps"]:
            texts += [c["text"] for c in step["completions"] or []]
    return texts


@functools.cache
def _trained_bpe() -> str:
    """The BPE trained on the reference samples, as JSON: trained once a process (it is the
    same every time), each caller gets its own tokenizer object built from it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

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
    return core.to_str()


def build_tokenizer(with_bos: bool = True) -> Any:  # a PreTrainedTokenizerFast
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_bpe()),
        bos_token="<s>" if with_bos else None,
        eos_token="</s>",
        pad_token="<pad>",
    )


def save_tiny_llama(folder: Path, dropout: float = 0.0, hidden: int = 32) -> str:
    """A 2-layer random Llama causal LM and its tokenizer, saved in `folder`; returns its path.
    Four heads: hidden 32 gives heads of 8, hidden 64 heads of 16 (FlexAttention's CUDA floor).

    Built once a process per shape (seeded: the same weights every time) and copied after."""
    shutil.copytree(_built_tiny_llama(dropout, hidden), folder, dirs_exist_ok=True)
    return str(folder)


@functools.cache
def _built_tiny_llama(dropout: float, hidden: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(tempfile.mkdtemp(prefix="stepwise-tiny-llama-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
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
    return folder
