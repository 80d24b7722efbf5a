"""A TRL PRMTrainer config file read as TrainConfig fields (`cli train --trl-config FILE`).

The file is what TRL's scripts take (`HfArgumentParser`/`TrlParser` over PRMConfig, the
TrainingArguments fields it inherits, and ModelConfig's model and LoRA fields), as JSON or
YAML. `TRL_FIELDS` is the one table of how each field is read (docs/training.md lists it, and a
test keeps the two the same): into one of ours, accepted without effect, or refused by name.
A field the file leaves out takes TRL 1.13's default where that default shapes the recipe
(`TRL_DEFAULTS`: TRL's separator "\\n", learning rate 1e-5, 3 epochs, ...), so the file
trains what TRL would have; TRL's scripts build the model with 2 labels and train it whole (or
with LoRA under `use_peft`), so that is the default here too. Explicit flags win over all of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .inputs import one_line


class TrlConfigError(ValueError):
    """A TRL config file we cannot read as ours; the message names the file and the field."""


@dataclass(frozen=True)
class TrlField:
    """How one TRL field is read. `ours`: the TrainConfig field it sets ("" for none), from
    `convert(value, file)` (default: the value as it is). `accepts(value)`: whether a value is
    taken at all (the rest are refused with `doc` as the reason). `doc`: the docs table's cell."""

    ours: str
    doc: str
    convert: Callable[[Any, dict[str, Any]], Any] | None = None
    accepts: Callable[[Any], bool] | None = None


def _is(*allowed: Any) -> Callable[[Any], bool]:
    return lambda value: any(value == a and type(value) is type(a) for a in allowed)


def _never(value: Any) -> bool:
    return False


def _steps(value: Any, file: dict[str, Any]) -> Any:
    return None if value == -1 else value  # TRL's -1: train num_train_epochs instead


def _batch_tokens(value: Any, file: dict[str, Any]) -> Any:
    """TRL pads a batch of sequences to its longest, at most max_length: the same budget in
    padded tokens (our batches hold rows by tokens, not by count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return value  # TrainConfig refuses it with its own message
    return value * file["max_length"]  # always there: TRL_DEFAULTS holds it


def _bf16(value: Any, file: dict[str, Any]) -> Any:
    return {True: "true", False: "false", None: "auto"}.get(value, value)


def _use_peft(value: Any, file: dict[str, Any]) -> Any:
    return "lora" if value is True else "full" if value is False else value


def _cpu(value: Any, file: dict[str, Any]) -> Any:
    return "cpu" if value is True else "auto"


def _ratio_free_logging(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 1


def _whole(value: Any, file: dict[str, Any]) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# TRL field -> how we read it. PRMConfig's own fields first (TRL 1.13:
# trl/experimental/prm/prm_config.py), then the TrainingArguments fields PRM recipes set, then
# ModelConfig's (the model and LoRA, as TRL's examples/scripts/prm.py reads them).
TRL_FIELDS: dict[str, TrlField] = {
    "learning_rate": TrlField("lr", "lr"),
    "max_length": TrlField(
        "max_length",
        "max_length (a packed row's tokens: problem, path and alternatives; null refused)",
        accepts=lambda v: v is not None,
    ),
    "max_prompt_length": TrlField(
        "",
        "refused: removed from PRMConfig before TRL 1.13; we never cut the problem apart from "
        "its steps (max_length covers both)",
        accepts=_never,
    ),
    "max_completion_length": TrlField(
        "",
        "refused unless null: we cut rows at max_length alone, never the steps apart from the "
        "problem",
        accepts=_is(None),
    ),
    "disable_dropout": TrlField(
        "",
        "ignored: our head has no dropout; a backbone's own stays (0 in Llama, Qwen2, SmolLM2)",
    ),
    "step_separator": TrlField("step_separator", "step_separator"),
    "train_on_last_step_only": TrlField("train_on_last_step_only", "train_on_last_step_only"),
    "dataset_num_proc": TrlField(
        "",
        "ignored: we tokenize in one process (the same rows)",
    ),
    "num_train_epochs": TrlField("epochs", "epochs"),
    "max_steps": TrlField("max_steps", "max_steps (-1: unset)", convert=_steps),
    "per_device_train_batch_size": TrlField(
        "batch_tokens",
        "batch_tokens = per_device_train_batch_size × max_length (our batches are counted in "
        "padded tokens)",
        convert=_batch_tokens,
    ),
    "gradient_accumulation_steps": TrlField("grad_accum", "grad_accum"),
    "warmup_ratio": TrlField("warmup_ratio", "warmup_ratio"),
    "warmup_steps": TrlField(
        "",
        "refused unless 0: give warmup_ratio (our warmup is a share of the steps)",
        accepts=_is(0),
    ),
    "lr_scheduler_type": TrlField(
        "decay", "decay (linear or cosine; others refused)", accepts=_is("linear", "cosine")
    ),
    "weight_decay": TrlField("weight_decay", "weight_decay"),
    "max_grad_norm": TrlField("grad_clip", "grad_clip"),
    "optim": TrlField(
        "",
        "refused unless adamw_torch or adamw_torch_fused: we train with torch's AdamW",
        accepts=_is("adamw_torch", "adamw_torch_fused"),
    ),
    "seed": TrlField("seed", "seed"),
    "output_dir": TrlField("output_dir", "output_dir"),
    "bf16": TrlField("bf16", "bf16 (true, false; null: auto)", convert=_bf16),
    "fp16": TrlField(
        "", "refused unless false: we have no fp16 training (use bf16)", accepts=_is(False)
    ),
    "gradient_checkpointing": TrlField("gradient_checkpointing", "gradient_checkpointing"),
    "torch_compile": TrlField("compile", "compile"),
    "dataloader_num_workers": TrlField("num_workers", "num_workers"),
    "logging_steps": TrlField(
        "log_every",
        "log_every (whole steps; a ratio under 1 refused)",
        convert=_whole,
        accepts=_ratio_free_logging,
    ),
    "save_steps": TrlField("checkpoint_every", "checkpoint_every (whole steps)", convert=_whole),
    "use_cpu": TrlField("device", "device (true: cpu; false: auto)", convert=_cpu),
    "save_strategy": TrlField(
        "",
        "ignored: a run always checkpoints every checkpoint_every steps",
    ),
    "logging_strategy": TrlField("", "ignored: the loss is kept for every step"),
    "report_to": TrlField(
        "",
        "ignored: metrics go to metrics.json and the run's page",
    ),
    "logging_dir": TrlField("", "ignored: as report_to"),
    "run_name": TrlField("", "ignored: name a run on the page or the API"),
    "eval_strategy": TrlField(
        "",
        "refused unless no: hold problems out with --holdout-fraction, then `cli evaluate`",
        accepts=_is("no"),
    ),
    "push_to_hub": TrlField(
        "",
        "refused unless false: `cli export` writes the Hugging Face folder to upload",
        accepts=_is(False),
    ),
    "model_name_or_path": TrlField("backbone", "backbone"),
    "use_peft": TrlField("mode", "mode (true: lora; false: full)", convert=_use_peft),
    "lora_r": TrlField("lora_r", "lora_r"),
    "lora_alpha": TrlField("lora_alpha", "lora_alpha"),
    "lora_dropout": TrlField("lora_dropout", "lora_dropout"),
    "lora_task_type": TrlField(
        "", "refused unless TOKEN_CLS (what TRL's script asks for)", accepts=_is("TOKEN_CLS")
    ),
    "dataset_name": TrlField(
        "", "refused: give the local file with --data (nothing is downloaded)", accepts=_never
    ),
}

# TRL 1.13's values for the fields that shape the recipe, taken where the file leaves them
# out (PRMConfig's overrides of TrainingArguments, and TrainingArguments' own).
TRL_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-5,
    "num_train_epochs": 3.0,
    "max_length": 1024,
    "step_separator": "\n",
    "per_device_train_batch_size": 8,
    "lr_scheduler_type": "linear",
    "warmup_ratio": 0.0,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "seed": 42,
    "gradient_checkpointing": True,
    "use_peft": False,
}
# Not PRMConfig fields: how TRL's scripts build the model (AutoModelForTokenClassification
# with num_labels=2; a step is good or not).
TRL_RECIPE: dict[str, Any] = {"num_labels": 2}


def read_trl_file(path: str | Path) -> dict[str, Any]:
    """The file's fields: JSON, or YAML (by its suffix .yaml/.yml)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrlConfigError(f"{path}: cannot read it ({exc})") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml  # lazy: transformers brings it, the training core does not need it

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TrlConfigError(f"{path}: not valid YAML ({one_line(exc)})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrlConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TrlConfigError(f"{path}: must hold an object of PRMConfig fields")
    return data


def train_config_fields(path: str | Path) -> dict[str, Any]:
    """TrainConfig fields from a TRL config file: its fields mapped through TRL_FIELDS over
    TRL_DEFAULTS, plus TRL_RECIPE. An unknown or refused field is a TrlConfigError naming it."""
    given = read_trl_file(path)
    for name, value in given.items():
        rule = TRL_FIELDS.get(name)
        if rule is None:
            raise TrlConfigError(
                f"{path}: field {name!r} is not supported (not a PRMConfig field Stepwise "
                "reads; docs/training.md lists them)"
            )
        if rule.accepts is not None and not rule.accepts(value):
            raise TrlConfigError(f"{path}: field {name!r} = {value!r}: {rule.doc}")
    values = {**TRL_DEFAULTS, **given}
    fields: dict[str, Any] = dict(TRL_RECIPE)
    for name, value in values.items():
        rule = TRL_FIELDS[name]
        if rule.ours:
            fields[rule.ours] = rule.convert(value, values) if rule.convert else value
    return fields
