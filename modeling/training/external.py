"""Process reward models trained elsewhere, scored like ours (no Django).

Two shapes are read, each as its trainer wrote it:

- **token classification** (TRL's PRMTrainer layout): an `AutoModelForTokenClassification`
  reading ``[BOS] prompt step_1 SEP step_2 SEP ...`` (each piece tokenized on its own), the
  label taken at the last token of each step's separator. 2 labels as TRL trains (1 = good
  step), or 3 labels with id2label ``{0: "-1", 1: "0", 2: "+1"}``. The separator is
  config.json's ``step_separator`` (our export writes it), else the one given; with neither the
  folder is refused, never read with a guess: TRL keeps the one it trained with only in
  training_args.bin, a pickle this module never opens (its README.md and trainer_state.json do
  not carry it), and a wrong one moves every score.
- **step tag** (Math-Shepherd): an `AutoModelForCausalLM` reading
  ``problem step_1 TAG\\nstep_2 TAG...``; at each TAG the softmax over the logits of the good
  and the bad token gives P(good).

- **sequence classification** (an outcome reward model, ORM: our own ORM export, or a reward
  model scored on the same text as TRL's PRM layout): an `AutoModelForSequenceClassification`
  reading the token-classification text, its one score read at the last token (the separator
  after the last step): 2 labels, P(correct) = softmax[1]; 1 label (a reward model's scalar),
  P(correct) = sigmoid. The separator is found as for token classification, never guessed.

All give what scoring already uses, per step [P(-1), P(0), P(+1)]: 3-label models their three
probabilities; 2-label and step-tag models [1 - P(good), 0, P(good)]; a sequence classifier only
its last step's row, [1 - P(correct), 0, P(correct)], the other rows NaN (as our own ORM's
scores are read: `score.solution_score(probs, "last")`).

A LoRA adapter (adapter_config.json and adapter_model.safetensors, no config.json: what TRL
saves with a peft_config) is read by `read_adapter` and merged into its base model by
`merge_adapter` (peft's merge_and_unload), then described as a whole folder. Its base is a
named offline backbone, a model in the local Hugging Face cache, or a folder the caller names
(the operator's command); the adapter's own `base_model_name_or_path` never names a folder to
read.

An imported folder is the model's own files plus `external.json` (MANIFEST), which says which
shape it is and how to read it; `load_prm` loads a folder of either kind, ours (prm.json) or
imported.

A folder is read as data, never run: one whose config names its own Python code (`auto_map`)
is refused, and every load passes `trust_remote_code=False` (transformers would otherwise ask
on the terminal, and run the code on "y"). Its size is checked before anything is allocated
(`check_size`): parameters estimated from config.json's dimensions and counted from the
weight files' headers, never by instantiating the model.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .backbones import NAMED_BACKBONES, check_available, in_hf_cache, resolve_backbone
from .data import LabeledSolution, Solution, length_batches, start_ids

MANIFEST = "external.json"
FORMAT = "stepwise-external-prm/1"
TOKEN_CLASSIFICATION = "token_classification"
STEP_TAG = "step_tag"
SEQUENCE_CLASSIFICATION = "sequence_classification"
KINDS = (TOKEN_CLASSIFICATION, STEP_TAG, SEQUENCE_CLASSIFICATION)
THREE_LABELS = {"0": "-1", "1": "0", "2": "+1"}  # our own HF export's id2label
STEPWISE_HF_FORMAT = "stepwise-prm-hf/1"  # export.HF_FORMAT: config.json's stepwise.format
STEPWISE_ORM_HF_FORMAT = "stepwise-orm-hf/1"  # export.OUTCOME_FORMAT: an ORM's export
MISSING_SEPARATOR = (
    "config.json has no step_separator and none was given: the scores depend on the text after "
    "each step, and TRL's PRMTrainer keeps the one it trained with only in training_args.bin (a "
    "pickle, never opened here); give the one it was trained with (PRMConfig.step_separator, "
    "default '\\n'): --step-separator for import_prm, step_separator for the API"
)
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# peft's task types an adapter may have, and the shape its merged model is read as.
ADAPTER_TASKS = {"TOKEN_CLS": "…ForTokenClassification", "CAUSAL_LM": "…ForCausalLM"}
# The head peft saves beside a TOKEN_CLS adapter (PeftModelForTokenClassification's names).
HEAD_MODULES = ("classifier", "score")
MATH_SHEPHERD = {"step_tag": "ки", "good_token": "+", "bad_token": "-"}
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
MAX_LENGTH = 4096  # tokens read per sequence, at most (fewer if the model's positions are fewer)
BATCH_TOKENS = 16384
# config.json and tokenizer_config.json are read whole: a few KB in real models (Llama 3's
# tokenizer_config.json, with its 256 reserved tokens, 50 KB).
MAX_JSON_BYTES = 2**20
# Any other file beside the weights (the tokenizer's: the largest in use, Gemma's, is 33 MB).
MAX_OTHER_FILE_BYTES = 512 * 2**20
# A 7 B model's shard has a header of about 30 KB; a single file of a model with 100,000
# tensors, 10 MB. (The safetensors library's own limit is 100 MB, parsed into far more.)
SAFETENSORS_MAX_HEADER_BYTES = 16 * 2**20
MAX_LABELS = 3
# Bits per element of each safetensors dtype: a header's shapes must fit its byte ranges.
SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F6_E2M3": 6,
    "F6_E3M2": 6, "F4": 4, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}  # fmt: skip
# config.json's names for the dimensions that size a transformer, as architectures spell them.
CONFIG_DIMENSIONS = {
    "vocab": ("vocab_size",),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "intermediate": ("moe_intermediate_size", "intermediate_size", "n_inner", "ffn_dim", "d_ff"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
    "head_dim": ("head_dim",),
    "positions": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
}


class ExternalModelError(ValueError):
    """A folder that is not a model this module can read; the message says why."""


class ModelTooLarge(ExternalModelError):
    """A model over the parameter limit it was checked against (`check_size`)."""


def describe(
    folder: str | Path,
    *,
    step_separator: str | None = None,
    step_tag: str = MATH_SHEPHERD["step_tag"],
    good_token: str = MATH_SHEPHERD["good_token"],
    bad_token: str = MATH_SHEPHERD["bad_token"],
    max_parameters: int | None = None,
) -> dict[str, Any]:
    """The manifest for a model folder (its shape and how to read it), checked up front:
    config.json, no code of its own, the architecture and labels, weights present, its size
    (`max_parameters`; None: a folder this machine made, not sized), and the tokenizer's
    pieces. Nothing is loaded before the size is known."""
    folder = Path(folder)
    config = read_config(folder, "the model folder")
    refuse_own_code(folder, config)
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ExternalModelError("config.json's architectures is not a list of names")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise ExternalModelError(
            f"no weights in the model folder (one of {', '.join(WEIGHT_FILES)})"
        )
    if max_parameters is not None:
        check_size(folder, config, max_parameters)
    if any(a.endswith("ForTokenClassification") for a in architectures):
        return _describe_token_classification(folder, config, step_separator)
    if any(a.endswith("ForCausalLM") for a in architectures):
        return _describe_step_tag(folder, config, step_tag, good_token, bad_token)
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return _describe_sequence_classification(folder, config, step_separator)
    shown = ", ".join(architectures) or "none"
    raise ExternalModelError(
        f"architecture {shown} is neither a token-classification PRM (…ForTokenClassification, "
        "TRL's layout), a causal LM scored at step tags (…ForCausalLM, Math-Shepherd's) nor an "
        "outcome model (…ForSequenceClassification)"
    )


def read_json(path: Path) -> Any:
    """A JSON file read whole, refused past MAX_JSON_BYTES before it is read."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{path.name} is {size:,} bytes, over {MAX_JSON_BYTES:,}")
    return json.loads(path.read_text(encoding="utf-8"))


def refuse_own_code(folder: Path, config: dict[str, Any]) -> None:
    """A model whose config points at Python files of its own (`auto_map`) is refused: loading
    it means running that code, which an import never does."""
    found = ["config.json"] if "auto_map" in config else []
    tokenizer_config = folder / "tokenizer_config.json"
    if tokenizer_config.is_file():
        try:
            if "auto_map" in (read_json(tokenizer_config) or {}):
                found.append("tokenizer_config.json")
        except (OSError, UnicodeDecodeError, ValueError, TypeError, RecursionError):
            pass  # the tokenizer's own load says what is wrong with it (and runs no code)
    if found:
        raise ExternalModelError(
            f"{' and '.join(found)} name{'s' if len(found) == 1 else ''} Python code of the "
            "model's own (auto_map), which Stepwise never runs: only architectures that "
            "transformers itself implements can be imported (save the model with one, e.g. "
            "LlamaForTokenClassification, and without auto_map)"
        )


def check_size(folder: Path, config: dict[str, Any], max_parameters: int) -> None:
    """Refuse a model larger than `max_parameters` before anything of it is allocated: the
    estimate from config.json's dimensions (what instantiating it would allocate: the values it
    gives, then with the defaults transformers fills in for those it leaves out) and the count
    from its weight files (safetensors headers; pickled weights by their bytes, at most 4 per
    parameter), whichever is larger. No file beside the weights may be over
    MAX_OTHER_FILE_BYTES (the tokenizer's are read whole)."""
    labels = config.get("num_labels")
    if labels is not None and not (isinstance(labels, int) and 0 < labels <= MAX_LABELS):
        # transformers builds an id2label entry per label as it reads the config
        raise ExternalModelError(f"config.json's num_labels is {labels!r}; a PRM has 2 or 3")
    _refuse_over(
        config_parameters(config), "estimated from config.json's dimensions", max_parameters
    )
    _refuse_over(
        config_parameters(_config_with_defaults(folder)),
        "estimated from config.json's dimensions and transformers' defaults for the others",
        max_parameters,
    )
    from_weights = 0
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        size = path.stat().st_size
        if path.name.endswith(".safetensors"):
            from_weights += safetensors_parameters(path)
        elif path.name.endswith(WEIGHT_SUFFIXES):
            from_weights += size // 4
        elif size > MAX_OTHER_FILE_BYTES:
            raise ExternalModelError(
                f"{path.name} is {size:,} bytes; a file beside the weights may have at most "
                f"{MAX_OTHER_FILE_BYTES:,}"
            )
    _refuse_over(from_weights, "counted in its weight files", max_parameters)


def _refuse_over(parameters: int, source: str, max_parameters: int) -> None:
    if parameters > max_parameters:
        raise ModelTooLarge(
            f"the model has about {_count(parameters)} parameters ({source}); the limit is "
            f"{_count(max_parameters)}"
        )


def _config_with_defaults(folder: Path) -> dict[str, Any]:
    """config.json as transformers reads it, every dimension it leaves out at the class's
    default (a config object only: nothing of the model is allocated)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:  # transformers raises many kinds for a config it cannot read
        raise ExternalModelError(
            f"transformers cannot read config.json ({exc.__class__.__name__}: {exc})"
        ) from None
    return config.to_dict()


def _count(n: int) -> str:
    if n >= 10**15:  # its digits (past 4300 of them, from its bits: an int that long has no str)
        digits = len(str(n)) if n < 10**4000 else int(n.bit_length() * math.log10(2)) + 1
        return f"10^{digits - 1}"
    return f"{n / 1e9:.1f} B" if n >= 10**9 else f"{n:,}"


def config_parameters(config: dict[str, Any], depth: int = 0) -> int:
    """About how many parameters a model of these dimensions has: embeddings and output head
    (vocab × hidden each), positions × hidden, and per layer the attention (queries and output
    hidden × heads × head_dim each, keys and values hidden × kv heads × head_dim each) and a
    gated MLP (3 × hidden × intermediate, per expert). The sub-models' configs (text_config,
    vision_config, …) are added. Refuses a dimension that is not a count."""
    dims = {name: _dimension(config, keys) for name, keys in CONFIG_DIMENSIONS.items()}
    hidden = dims["hidden"] or 0
    heads = dims["heads"] or 1
    kv_heads = dims["kv_heads"] or heads
    head_dim = dims["head_dim"] or hidden // heads
    intermediate = dims["intermediate"] if dims["intermediate"] is not None else 4 * hidden
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * intermediate * max(dims["experts"] or 1, 1)
    total = (2 * (dims["vocab"] or 0) + (dims["positions"] or 0)) * hidden
    total += (dims["layers"] or 0) * (attention + mlp)
    if depth < 2:
        for key, value in config.items():
            if key.endswith("_config") and isinstance(value, dict):
                total += config_parameters(value, depth + 1)
    return total


def _dimension(config: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        # JSON writes 1e6 as a float: taken as the count it is; 1.5, -3, "64" or true are not.
        whole = isinstance(value, float) and math.isfinite(value) and value.is_integer()
        if isinstance(value, bool) or not (isinstance(value, int) or whole) or value < 0:
            raise ExternalModelError(f"config.json's {key} is {value!r}, not a count")
        return int(value)
    return None


def safetensors_parameters(path: Path) -> int:
    """The parameters a safetensors file holds, from its header alone (an 8-byte length, then
    that much JSON): each tensor's shape must fill exactly its byte range inside the file, so
    the count is bounded by the file's size. An absurd header length is refused unread."""
    return sum(math.prod(t["shape"]) for t in safetensors_header(path).values())


def safetensors_header(path: Path) -> dict[str, dict[str, Any]]:
    """A safetensors file's tensors as its header declares them (dtype, shape, data_offsets),
    each checked to fill exactly its bytes in the file (`safetensors_parameters`)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        (length,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
        if not 0 < length <= min(SAFETENSORS_MAX_HEADER_BYTES, size - 8):
            raise ExternalModelError(
                f"{path.name} is not a safetensors file (its header length {length:,} does not "
                f"fit a file of {size:,} bytes, or is over {SAFETENSORS_MAX_HEADER_BYTES:,})"
            )
        try:
            header = json.loads(f.read(length))
        except (UnicodeDecodeError, ValueError, RecursionError):
            header = None
    if not isinstance(header, dict):
        raise ExternalModelError(f"{path.name}'s safetensors header is not a JSON object")
    data_bytes = size - 8 - length
    header.pop("__metadata__", None)
    for name, tensor in header.items():
        if _tensor_elements(tensor, data_bytes) is None:
            raise ExternalModelError(
                f"{path.name}: tensor {str(name)[:100]!r} does not match its bytes in the file "
                "(dtype, shape and data_offsets)"
            )
    return header


def _tensor_elements(tensor: Any, data_bytes: int) -> int | None:
    """A header entry's element count, or None where it does not describe its own bytes."""
    if not isinstance(tensor, dict):
        return None
    bits = SAFETENSORS_DTYPE_BITS.get(str(tensor.get("dtype")))
    shape, offsets = tensor.get("shape"), tensor.get("data_offsets")
    if bits is None or not isinstance(shape, list) or not isinstance(offsets, list):
        return None
    counts = [*shape, *offsets]
    if len(offsets) != 2 or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts
    ):
        return None
    begin, end = offsets
    numel = math.prod(shape)
    return numel if begin <= end <= data_bytes and (numel * bits + 7) // 8 == end - begin else None


def _describe_token_classification(
    folder: Path, config: dict[str, Any], step_separator: str | None
) -> dict[str, Any]:
    # transformers leaves out id2label when it is the default: 2 labels
    id2label = config.get("id2label") or {}
    labels = len(id2label) if isinstance(id2label, dict) else 0
    if not id2label:
        labels = config.get("num_labels", 2)
    if labels == 3 and {str(k): str(v) for k, v in id2label.items()} != THREE_LABELS:
        raise ExternalModelError(
            f"a 3-label model must have id2label {THREE_LABELS} (-1, 0, +1), not {id2label}"
        )
    if labels not in (2, 3):
        raise ExternalModelError(
            f"a token-classification PRM has 2 labels (TRL: 1 = good step) or 3 (-1, 0, +1), "
            f"not {labels}"
        )
    return {
        "format": FORMAT,
        "kind": TOKEN_CLASSIFICATION,
        "architecture": config["architectures"][0],
        "labels": labels,
        **_separated_text(folder, config, step_separator, STEPWISE_HF_FORMAT),
    }


def _separated_text(
    folder: Path, config: dict[str, Any], step_separator: str | None, our_format: str
) -> dict[str, str]:
    """How a classifier reading `[BOS] problem step SEP step SEP …` is read: its separator
    (checked to give tokens) and layout. Our own export (config.json's stepwise.format is
    `our_format`) reads the problem with the separator after it and each text stripped
    (export.step_inputs); TRL's layout reads them as they are."""
    separator, separator_from = step_separator_of(config, step_separator)
    if not _tokenizer(folder).encode(separator, add_special_tokens=False):
        raise ExternalModelError(f"the step separator {separator!r} gives no tokens")
    stepwise = config.get("stepwise")
    exported_here = isinstance(stepwise, dict) and stepwise.get("format") == our_format
    return {
        "step_separator": separator,
        "step_separator_from": separator_from,
        "layout": "stepwise" if exported_here else "trl",
    }


def _describe_sequence_classification(
    folder: Path, config: dict[str, Any], step_separator: str | None
) -> dict[str, Any]:
    id2label = config.get("id2label") or {}
    labels = len(id2label) if isinstance(id2label, dict) and id2label else config.get("num_labels")
    labels = 2 if labels is None else labels
    if labels not in (1, 2):
        raise ExternalModelError(
            f"an outcome model (…ForSequenceClassification) has 2 labels (1 = correct) or 1 (a "
            f"reward model's score), not {labels}"
        )
    if config.get("is_encoder_decoder"):
        raise ExternalModelError(
            "an encoder-decoder sequence classifier reads its text through its decoder's inputs: "
            "not a layout an outcome model is read in here"
        )
    return {
        "format": FORMAT,
        "kind": SEQUENCE_CLASSIFICATION,
        "objective": "outcome",
        "architecture": config["architectures"][0],
        "labels": labels,
        **_separated_text(folder, config, step_separator, STEPWISE_ORM_HF_FORMAT),
    }


def step_separator_of(config: dict[str, Any], given: str | None) -> tuple[str, str]:
    """(the step separator, where it came from: "config.json" or "given"). Refused when neither
    says it, when the given one is empty, and when the two disagree: never a default."""
    saved = config.get("step_separator")
    if saved is not None and (not isinstance(saved, str) or not saved):
        raise ExternalModelError(f"config.json's step_separator is {saved!r}, not a text")
    if given is not None and not given:
        raise ExternalModelError("the step separator given is empty")
    if saved and given is not None and given != saved:
        raise ExternalModelError(
            f"config.json's step_separator is {saved!r} but {given!r} was given: leave it out "
            "to use config.json's, or fix config.json"
        )
    if saved:
        return saved, "config.json"
    if given is None:
        raise ExternalModelError(MISSING_SEPARATOR)
    return given, "given"


def _describe_step_tag(
    folder: Path, config: dict[str, Any], step_tag: str, good_token: str, bad_token: str
) -> dict[str, Any]:
    tokenizer = _tokenizer(folder)
    ids = {
        name: single_token_id(tokenizer, text, name)
        for name, text in (
            ("step tag", step_tag),
            ("good token", good_token),
            ("bad token", bad_token),
        )
    }
    if ids["good token"] == ids["bad token"]:
        raise ExternalModelError("the good and the bad token are the same token")
    return {
        "format": FORMAT,
        "kind": STEP_TAG,
        "architecture": config["architectures"][0],
        "step_tag": step_tag,
        "good_token": good_token,
        "bad_token": bad_token,
        "step_tag_id": ids["step tag"],
        "good_token_id": ids["good token"],
        "bad_token_id": ids["bad token"],
    }


def _tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:  # transformers raises many kinds for a missing or broken one
        raise ExternalModelError(
            f"the model folder's tokenizer cannot be loaded ({exc.__class__.__name__}: {exc})"
        ) from None


def single_token_id(tokenizer: Any, text: str, name: str) -> int:
    """The id of `text` as one token (a SentencePiece word-start piece before it is allowed)."""
    if not text:
        raise ExternalModelError(f"the {name} is empty")
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) == 2 and not tokenizer.decode(ids[:1]).strip():
        ids = ids[1:]
    if len(ids) != 1:
        raise ExternalModelError(
            f"the {name} {text!r} is {len(ids)} tokens for this tokenizer, not one"
        )
    return int(ids[0])


def read_config(folder: Path, what: str, name: str = "config.json") -> dict[str, Any]:
    """`name` in `folder` as a JSON object, else an ExternalModelError naming `what`."""
    try:
        config = read_json(folder / name)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ExternalModelError(f"no readable {name} in {what} ({exc})") from None
    if not isinstance(config, dict):
        raise ExternalModelError(f"{name} of {what} is not a JSON object")
    return config


def is_adapter(folder: str | Path) -> bool:
    """A peft adapter saved alone: adapter_config.json and no config.json of a whole model."""
    folder = Path(folder)
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").exists()


@dataclass
class Adapter:
    """A LoRA adapter checked by `read_adapter`, ready for `merge_adapter`."""

    folder: Path
    base_model: str  # adapter_config.json's base_model_name_or_path, as it says it
    base: Path  # the folder it is merged into
    task_type: str  # a key of ADAPTER_TASKS
    labels: int | None  # TOKEN_CLS: the saved head's rows

    def summary(self) -> dict[str, Any]:
        """What the manifest records of it (the base as adapter_config.json names it)."""
        return {"peft_type": "LORA", "task_type": self.task_type, "base_model": self.base_model}


def read_adapter(
    folder: str | Path,
    *,
    base: str | Path | None = None,
    step_separator: str | None = None,
    max_parameters: int | None = None,
) -> Adapter:
    """A LoRA adapter folder checked before anything is loaded: adapter_config.json (LoRA, a
    TOKEN_CLS or CAUSAL_LM task, no model class of its own), adapter_model.safetensors (its
    header sized and, for TOKEN_CLS, the saved head's labels read from it), the step separator
    a TOKEN_CLS model needs (`step_separator_of`), and its base: `base` when the caller names
    one (the operator's command), else adapter_config.json's base_model_name_or_path when that
    is a named offline backbone or a model in the local Hugging Face cache, never a folder it
    names. The base is checked as an imported folder is (no code of its own, `check_size`)."""
    folder = Path(folder)
    config = read_config(folder, "the adapter folder", ADAPTER_CONFIG)
    peft_type = config.get("peft_type")
    if peft_type != "LORA":
        raise ExternalModelError(
            f"{ADAPTER_CONFIG}'s peft_type is {peft_type!r}: only LoRA adapters are imported "
            "(merged into their base)"
        )
    if config.get("auto_mapping"):
        raise ExternalModelError(
            f"{ADAPTER_CONFIG} names a model class of its own (auto_mapping), which Stepwise "
            "never loads: only adapters of models transformers itself implements are imported"
        )
    task_type = config.get("task_type")
    if task_type not in ADAPTER_TASKS:
        kinds = ", ".join(f"{task} ({arch})" for task, arch in ADAPTER_TASKS.items())
        raise ExternalModelError(
            f"{ADAPTER_CONFIG}'s task_type is {task_type!r}; an adapter of a PRM is one of {kinds}"
        )
    refuse_own_code(folder, {})  # its tokenizer's, when it saved one
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise ExternalModelError(
            f"no {ADAPTER_WEIGHTS} in the adapter folder (adapter_model.bin, a pickle, is not "
            "read: save the adapter with safetensors, peft's default)"
        )
    header = safetensors_header(weights)
    for path in sorted(folder.iterdir()):
        if path.is_file() and path != weights and path.stat().st_size > MAX_OTHER_FILE_BYTES:
            raise ExternalModelError(
                f"{path.name} is {path.stat().st_size:,} bytes; a file beside the adapter's "
                f"weights may have at most {MAX_OTHER_FILE_BYTES:,}"
            )
    if max_parameters is not None:
        counted = sum(math.prod(t["shape"]) for t in header.values())
        _refuse_over(counted, f"counted in {ADAPTER_WEIGHTS}", max_parameters)
    labels = None
    if task_type == "TOKEN_CLS":
        labels = _adapter_head_labels(header, config.get("modules_to_save"))
        step_separator_of({}, step_separator)
    base_model = config.get("base_model_name_or_path")
    if not isinstance(base_model, str) or not base_model:
        base_model = ""
    base_folder = Path(base) if base is not None else resolve_adapter_base(base_model)
    base_config = read_config(base_folder, "the base model")
    refuse_own_code(base_folder, base_config)
    if not any((base_folder / name).is_file() for name in WEIGHT_FILES):
        raise ExternalModelError(
            f"no weights in the base model's folder (one of {', '.join(WEIGHT_FILES)})"
        )
    if max_parameters is not None:
        check_size(base_folder, base_config, max_parameters)
    return Adapter(folder, base_model, base_folder, task_type, labels)


def _adapter_head_labels(header: dict[str, dict[str, Any]], modules_to_save: Any) -> int:
    """The rows of the classification head a TOKEN_CLS adapter saves (modules_to_save), read
    from the weights' header: a head that is not saved would be a random one."""
    names = set(HEAD_MODULES)
    if isinstance(modules_to_save, list):
        names |= {str(m).rsplit(".", 1)[-1] for m in modules_to_save}
    rows = {
        tensor["shape"][0]
        for key, tensor in header.items()
        if key.endswith(".weight")
        and "lora_" not in key
        and names & set(key.split(".")[:-1])
        and len(tensor["shape"]) == 2
    }
    if not rows:
        raise ExternalModelError(
            f"{ADAPTER_WEIGHTS} holds no classification head (modules_to_save: "
            f"{', '.join(HEAD_MODULES)}): the merged model would score with an untrained one"
        )
    if len(rows) > 1 or not 2 <= min(rows) <= MAX_LABELS:
        shown = ", ".join(str(r) for r in sorted(rows))
        raise ExternalModelError(
            f"the adapter's classification head has {shown} labels; a token-classification "
            "PRM has 2 (TRL: 1 = good step) or 3 (-1, 0, +1)"
        )
    return int(rows.pop())


def resolve_adapter_base(name: str) -> Path:
    """The folder of an adapter's named base: a named offline backbone, or a hub model already
    in the local Hugging Face cache (read offline). Anything else, a path above all, is
    refused: what an adapter says must not make the server read a folder of its choosing."""
    if name in NAMED_BACKBONES:
        try:
            check_available(name)
            return Path(resolve_backbone(name))
        except (OSError, RuntimeError) as exc:
            raise ExternalModelError(
                f"the adapter's base {name} cannot be loaded ({exc})"
            ) from None
    if in_hf_cache(name):
        from huggingface_hub import snapshot_download  # comes with transformers

        return Path(snapshot_download(name, local_files_only=True))
    shown = name if len(name) <= 100 else f"{name[:100]}…"
    raise ExternalModelError(
        f"the adapter's base model ({ADAPTER_CONFIG}'s base_model_name_or_path) {shown!r} is "
        f"neither a named offline backbone ({', '.join(NAMED_BACKBONES)}) nor a model in the "
        "local Hugging Face cache; a folder it names is never read (import_prm takes --base "
        "FOLDER)"
    )


def merge_adapter(adapter: Adapter, out: str | Path) -> None:
    """The adapter merged into its base (peft's merge_and_unload), saved in `out` as a whole
    model folder with the adapter's tokenizer (the base's when it saved none)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    options: dict[str, Any] = {
        "local_files_only": True,
        "trust_remote_code": False,
        "dtype": torch.float32,
    }
    if adapter.task_type == "TOKEN_CLS":
        base = AutoModelForTokenClassification.from_pretrained(
            str(adapter.base), num_labels=adapter.labels, **options
        )
    else:
        base = AutoModelForCausalLM.from_pretrained(str(adapter.base), **options)
    merged = PeftModel.from_pretrained(base, str(adapter.folder), is_trainable=False)
    merged.merge_and_unload().save_pretrained(str(out))
    has_tokenizer = (adapter.folder / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(
        str(adapter.folder if has_tokenizer else adapter.base),
        local_files_only=True,
        trust_remote_code=False,
    )
    tokenizer.save_pretrained(str(out))


def write_manifest(folder: str | Path, manifest: dict[str, Any]) -> None:
    (Path(folder) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def is_external(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def read_manifest(folder: Path) -> dict[str, Any]:
    """An imported folder's manifest (MANIFEST), checked: a FORMAT object of one of the KINDS."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ExternalModelError(f"{folder}'s {MANIFEST} cannot be read ({exc})") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or manifest.get("kind") not in KINDS
    ):
        raise ExternalModelError(f"{folder} is not a {FORMAT} model")
    return manifest


def load_prm(folder: str | Path, device: str = "cpu") -> Any:
    """A saved model of any kind: ours (prm.json) or an imported one (external.json)."""
    if is_external(folder):
        return ExternalPRM.load(folder, device=device)
    from .model import ProcessRewardModel

    return ProcessRewardModel.load(folder, device=device)


@dataclass
class ScoringConfig:
    """What scoring reads from a model's config (ProcessRewardModel's is a TrainConfig)."""

    max_length: int
    batch_tokens: int = BATCH_TOKENS


@dataclass
class _Sequence:
    """One text the model reads: its token ids and, per read position, (solution, slot, rating)."""

    ids: list[int]
    ends: list[int]
    slots: list[tuple[int, int, int | None]]


class ExternalPRM:
    """An imported model with the scoring interface of ProcessRewardModel (see score.py)."""

    def __init__(self, model: Any, tokenizer: Any, manifest: dict[str, Any]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.manifest = manifest
        self.kind = manifest["kind"]
        positions = getattr(model.config, "max_position_embeddings", None) or MAX_LENGTH
        self.config = ScoringConfig(max_length=min(int(positions), MAX_LENGTH))

    @classmethod
    def load(cls, folder: str | Path, device: str = "cpu") -> ExternalPRM:
        import torch
        from transformers import (
            AutoModelForCausalLM,
            AutoModelForSequenceClassification,
            AutoModelForTokenClassification,
            AutoTokenizer,
        )

        from .model import resolve_device

        folder = Path(folder)
        manifest = read_manifest(folder)
        target = resolve_device(device)
        dtype = torch.bfloat16 if target.type == "cuda" else torch.float32
        auto = {
            STEP_TAG: AutoModelForCausalLM,
            SEQUENCE_CLASSIFICATION: AutoModelForSequenceClassification,
        }.get(manifest["kind"], AutoModelForTokenClassification)
        model: Any = auto.from_pretrained(
            str(folder), local_files_only=True, dtype=dtype, trust_remote_code=False
        )
        tokenizer = AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=False
        )
        return cls(model.to(target).eval(), tokenizer, manifest)

    @property
    def pad_id(self) -> int:
        for token_id in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if token_id is not None:
                return int(token_id)
        return 0

    # ----------------------------------------------------------------- texts

    def _encode(
        self, problem: str, steps: Sequence[str], limit: int
    ) -> tuple[list[int], list[int]]:
        """(token ids, the position read for each step; fewer past `limit` tokens)."""
        tok = self.tokenizer
        if self.kind in (TOKEN_CLASSIFICATION, SEQUENCE_CLASSIFICATION):  # PRMTrainer.tokenize_row
            text = self.manifest["step_separator"]
            separator = tok.encode(text, add_special_tokens=False)
            if self.manifest.get("layout") == "stepwise":  # a Stepwise export, read as trained
                ids = (
                    start_ids(tok)
                    + tok(problem.strip() + text, add_special_tokens=False)["input_ids"]
                )
                steps = [step.strip() for step in steps]
            else:
                ids = [tok.bos_token_id] if tok.bos_token_id is not None else []
                ids += tok(problem, add_special_tokens=False)["input_ids"]
            ends = []
            for step in steps:
                ids += tok(step, add_special_tokens=False)["input_ids"] + separator
                ends.append(len(ids) - 1)
        else:  # Math-Shepherd: f"{question} {step 1} ки\n{step 2} ки..."; a tag in a step is dropped
            ids, ends = self._encode_step_tags(problem, steps)
        return ids[:limit], [e for e in ends if e < limit]

    def _encode_step_tags(self, problem: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """Math-Shepherd's text, read at each tag we placed: found by character offsets (a
        fast tokenizer), else as Math-Shepherd does, where the ids are the tag's id."""
        tok, tag = self.tokenizer, self.manifest["step_tag"]
        text, spans = f"{problem} ", []
        for k, step in enumerate(steps):
            text += f"{step.replace(tag, '')} "
            spans.append((len(text), len(text) + len(tag)))
            text += tag + ("\n" if k < len(steps) - 1 else "")
        if not getattr(tok, "is_fast", False):
            ids = tok.encode(text)
            tag_id = self.manifest["step_tag_id"]
            return ids, [i for i, token in enumerate(ids) if token == tag_id][: len(steps)]
        encoded = tok(text, return_offsets_mapping=True)
        ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
        ends: list[int] = []
        i = 0
        for start, end in spans:  # the last token overlapping the tag
            while i < len(offsets) and offsets[i][0] < end:
                i += 1
            hit = i - 1
            if hit >= 0 and offsets[hit][1] > start and (not ends or hit > ends[-1]):
                ends.append(hit)
            else:
                break  # a step we cannot place: it and the rest stay unread
        return ids, ends

    def _sequences(
        self, solutions: Sequence[Solution | LabeledSolution], limit: int
    ) -> list[_Sequence]:
        """The path of each solution, then one text per rated alternative (its prefix + it)."""
        out = []
        for n, solution in enumerate(solutions):
            steps = list(solution.steps)
            ratings = list(getattr(solution, "ratings", [None] * len(steps)))
            ids, ends = self._encode(solution.problem, steps, limit)
            if self.kind == SEQUENCE_CLASSIFICATION:
                # One score, at the end of the whole solution: read only when the last step is.
                if steps and len(ends) == len(steps):
                    out.append(_Sequence(ids, ends[-1:], [(n, len(steps) - 1, ratings[-1])]))
                continue
            slots = [(n, k, ratings[k]) for k in range(len(ends))]
            out.append(_Sequence(ids, ends, slots))
            for j, alt in enumerate(getattr(solution, "alternatives", [])):
                ids, ends = self._encode(solution.problem, [*steps[: alt.after], alt.text], limit)
                if len(ends) == alt.after + 1:  # its own step was read
                    out.append(_Sequence(ids, ends[-1:], [(n, len(steps) + j, alt.rating)]))
        return out

    # ---------------------------------------------------------------- scoring

    def _run(
        self,
        solutions: Sequence[Solution | LabeledSolution],
        batch_tokens: int | None,
        max_length: int | None,
        progress: Callable[[int, int], None] | None,
    ) -> list[tuple[tuple[int, int, int | None], np.ndarray]]:
        """((solution, slot, rating), [P(-1), P(0), P(+1)]) for every position read."""
        import torch

        limit = max_length or self.config.max_length
        sequences = [s for s in self._sequences(solutions, limit) if s.ends]
        device = next(self.model.parameters()).device
        pad_id = self.pad_id
        batches = length_batches(
            [len(s.ids) for s in sequences], batch_tokens or self.config.batch_tokens
        )
        whole = self.kind == SEQUENCE_CLASSIFICATION
        if whole:
            # The classifier reads each row's last token that is not its config's pad_token_id:
            # rows are padded with it, or, without one, run one by one.
            config_pad = getattr(self.model.config, "pad_token_id", None)
            if config_pad is None:
                batches = [[i] for i in range(len(sequences))]
            else:
                pad_id = int(config_pad)
        out = []
        for n, rows in enumerate(batches):
            chosen = [sequences[i] for i in rows]
            width = max(len(s.ids) for s in chosen)
            ids = torch.full((len(chosen), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(chosen), width), dtype=torch.long)
            for r, s in enumerate(chosen):
                ids[r, : len(s.ids)] = torch.tensor(s.ids)
                mask[r, : len(s.ids)] = 1
            with torch.no_grad():
                logits = self.model(
                    input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False
                ).logits.float()
            for r, s in enumerate(chosen):
                at = logits[r : r + 1] if whole else logits[r, s.ends]
                for slot, probs in zip(s.slots, self._step_probs(at), strict=True):
                    out.append((slot, probs))
            if progress:
                progress(n + 1, len(batches))
        return out

    def _step_probs(self, logits: Any) -> np.ndarray:
        import torch

        if self.kind == STEP_TAG:
            pair = logits[:, [self.manifest["good_token_id"], self.manifest["bad_token_id"]]]
            good = torch.softmax(pair, dim=-1)[:, 0]
        elif self.kind == SEQUENCE_CLASSIFICATION and self.manifest["labels"] == 1:
            good = torch.sigmoid(logits[:, 0])
        elif self.manifest["labels"] == 3:
            return torch.softmax(logits, dim=-1).cpu().numpy()
        else:
            good = torch.softmax(logits, dim=-1)[:, 1]
        return torch.stack([1 - good, torch.zeros_like(good), good], dim=-1).cpu().numpy()

    def score_solutions(
        self,
        solutions: Sequence[Solution | LabeledSolution],
        *,
        batch_tokens: int | None = None,
        max_length: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[np.ndarray]:
        """As score.score_solutions: per solution (n_steps, 3), NaN rows for unread steps."""
        plain = [Solution(s.problem, list(s.steps)) for s in solutions]
        results = [np.full((len(s.steps), 3), np.nan, dtype=np.float32) for s in plain]
        for (n, slot, _), probs in self._run(plain, batch_tokens, max_length, progress):
            results[n][slot] = probs
        return results

    def predict_labelled(
        self,
        examples: Sequence[LabeledSolution],
        *,
        batch_tokens: int | None = None,
        max_length: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """As score.predict_labelled: (probabilities (N, 3), ratings (N,)) of rated steps."""
        read = [
            (probs, rating)
            for (_, _, rating), probs in self._run(examples, batch_tokens, max_length, progress)
            if rating is not None
        ]
        if not read:
            return np.zeros((0, 3), dtype=np.float32), np.zeros(0, dtype=np.int64)
        return (
            np.stack([p for p, _ in read]).astype(np.float32),
            np.array([r for _, r in read], dtype=np.int64),
        )
