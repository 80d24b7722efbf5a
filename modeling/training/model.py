"""The process reward model: a transformers backbone + a 3-class (or TRL's 2-class) head at step
ends.

Causal LMs are the main case (the base model of a causal LM, via AutoModel). Encoders
work too: every backbone gets the tree mask of `batching.attention_mask_4d` (or, with attention
"flex", the same rule as a FlexAttention block mask, `batching.tree_block_mask`), which is causal
along the path, so no position sees a later step even in an encoder (a bidirectional
encoder then runs with a mask it was not pre-trained with: weaker features, no leak).

Saved layout (safetensors throughout, nothing fetched on load)::

    out/prm.json            effective TrainConfig, objective (process or outcome; missing in
                            older models: process), dataset_version, backbone, layout (the step
                            separator and classes: what scoring reads back), the world_size
                            and global batch it was trained with, and "training" (the problems,
                            optimizer steps and solutions trained on; missing: unknown)
    out/head.safetensors    the head
    out/backbone/           mode "full": the whole fine-tuned backbone
    out/adapter/            mode "lora": the peft adapter
    out/tokenizer/          the tokenizer
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .backbones import resolve_backbone
from .batching import Batch, attention_mask_4d, tree_block_mask
from .config import TrainConfig
from .data import SEPARATOR

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

    Backbone = PreTrainedModel | PeftModel  # PeftModel in lora mode

FORMAT = "stepwise-prm/1"
# What each head's classes mean, in prm.json's layout: ratings, or TRL's bad/good.
CLASSES: dict[int, list[Any]] = {3: [-1, 0, 1], 2: ["bad", "good"]}
# An outcome model's two classes: the final answer is wrong, or correct.
OUTCOME_CLASSES = ["wrong", "correct"]
# Not cuDNN attention (PyTorch's pick on Hopper for a masked SDPA): it builds a graph for
# every new (batch, length) shape, and length-bucketed batches rarely repeat one. On an H100
# that made head mode's feature pass 4x and LoRA's first epoch 5x slower than these.
SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def three_way(logits: torch.Tensor) -> torch.Tensor:
    """Per step [P(-1), P(0), P(+1)] from a head's logits: a 3-class head's softmax, a 2-class
    one's [1 - P(good), 0, P(good)] (as external.py reads 2-label imports)."""
    probs = torch.softmax(logits.float(), dim=-1)
    if probs.shape[-1] == 3:
        return probs
    good = probs[..., 1]
    return torch.stack([1 - good, torch.zeros_like(good), good], dim=-1)


def resolve_device(device: str) -> torch.device:
    resolved = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    )
    if resolved.type == "cuda" and resolved.index is None:
        # A bare "cuda" names no GPU, and torch.cuda.set_device refuses it (torch 2.11 on
        # the H100): pin it to the current one.
        resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


def load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        resolve_backbone(name), local_files_only=True, trust_remote_code=False
    )


def storage_dtype(config: TrainConfig, device: torch.device) -> torch.dtype:
    """The dtype the backbone's weights are kept in (config.dtype; "auto": bf16 where they
    are frozen or only adapted on CUDA, fp32 master weights for full fine-tuning and CPUs)."""
    if config.dtype == "auto":
        frozen = config.mode in ("head", "lora")
        return torch.bfloat16 if frozen and device.type == "cuda" else torch.float32
    return getattr(torch, config.dtype)


# FlexAttention's CUDA (Triton) kernels tile the head dimension in blocks of 16: a smaller
# one fails to compile ("NYI: embedding dimension", seen on an H200 with head_dim 8).
FLEX_MIN_HEAD_DIM = 16


def attention_for(config: TrainConfig, device: torch.device, training: bool = True) -> str:
    """config.attention resolved for this backbone and device: "sdpa" or "flex".

    FlexAttention has no backward pass on a CPU (torch refuses it), no attention dropout
    (transformers refuses it while training) and no CUDA kernel for heads narrower than 16, so
    an explicit "flex" that would meet any of them is refused here, before a run starts;
    "auto" takes sdpa there instead.
    """
    if config.attention == "sdpa":
        return "sdpa"
    trains_backbone = training and config.mode != "head"
    backbone = backbone_config(config.backbone)
    if trains_backbone and attention_dropout(backbone) > 0:
        reason = "the backbone uses attention dropout, which FlexAttention does not support"
    elif trains_backbone and device.type != "cuda":
        reason = "torch has no FlexAttention backward pass on the CPU (head mode works there)"
    elif config.attention == "auto" and device.type != "cuda":
        return "sdpa"  # sdpa is the faster of the two on a CPU
    elif device.type == "cuda" and head_dim(backbone) < FLEX_MIN_HEAD_DIM:
        reason = (
            f"FlexAttention's CUDA kernels need a head dimension of at least {FLEX_MIN_HEAD_DIM}"
            f" and this backbone's is {head_dim(backbone)}"
        )
    else:
        return "flex"
    if config.attention == "flex":
        raise ValueError(f"attention flex cannot train this {config.mode} model: {reason}")
    return "sdpa"


def backbone_config(name: str) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(
        resolve_backbone(name), local_files_only=True, trust_remote_code=False
    )


def attention_dropout(backbone: Any) -> float:
    """The backbone config's attention dropout (Llama/Qwen2 and BERT spell it differently)."""
    for key in ("attention_dropout", "attention_probs_dropout_prob"):
        if getattr(backbone, key, None):
            return float(getattr(backbone, key))
    return 0.0


def head_dim(backbone: Any) -> int:
    """Width of one attention head: the config's own (Qwen3, Gemma) or hidden / heads."""
    explicit = getattr(backbone, "head_dim", None)
    return int(explicit or backbone.hidden_size // backbone.num_attention_heads)


def load_backbone(
    name: str,
    layers: int | None = None,
    dtype: torch.dtype = torch.float32,
    attention: str = "sdpa",
) -> PreTrainedModel:
    """The base model (no LM head) for a backbone name, from local files only; `attention`
    "flex" loads it with transformers' flex_attention (refused when the model has none)."""
    from transformers import AutoModel

    path = resolve_backbone(name)
    if attention == "flex":
        try:
            model = AutoModel.from_pretrained(
                path,
                local_files_only=True,
                dtype=dtype,
                attn_implementation="flex_attention",
                trust_remote_code=False,
            )
        except (ValueError, ImportError) as exc:
            raise ValueError(
                f"backbone {name!r} has no FlexAttention support in transformers: use "
                f"attention sdpa ({exc})"
            ) from exc
        if layers is not None:
            keep_first_layers(model, layers)
        return model
    try:
        model = AutoModel.from_pretrained(
            path,
            local_files_only=True,
            dtype=dtype,
            attn_implementation="sdpa",
            trust_remote_code=False,
        )
    except (ValueError, ImportError):  # architectures without SDPA support
        model = AutoModel.from_pretrained(
            path,
            local_files_only=True,
            dtype=dtype,
            attn_implementation="eager",
            trust_remote_code=False,
        )
    if layers is not None:
        keep_first_layers(model, layers)
    return model


def keep_first_layers(model: PreTrainedModel, n: int) -> None:
    """Drop the transformer blocks after the first n (the block list is the ModuleList
    as long as config.num_hidden_layers)."""
    total = model.config.num_hidden_layers
    if not 0 < n <= total:
        raise ValueError(f"backbone_layers must be in 1..{total}, not {n}")
    del transformer_blocks(model)[n:]
    model.config.num_hidden_layers = n


def transformer_blocks(model: PreTrainedModel) -> nn.ModuleList:
    """The ModuleList of the model's blocks: the one as long as config.num_hidden_layers."""
    total = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == total:
            return module
    raise ValueError(f"cannot find the {total} transformer blocks of {type(model).__name__}")


def add_lora(backbone: PreTrainedModel, config: TrainConfig) -> PeftModel:
    from peft import LoraConfig, get_peft_model

    targets: str | list[str] = "all-linear"
    if config.lora_blocks is not None:
        blocks = transformer_blocks(backbone)
        if config.lora_blocks > len(blocks):
            raise ValueError(f"lora_blocks must be at most the backbone's {len(blocks)} blocks")
        # The linear layers of the last blocks by full name (peft's layers_to_transform
        # cannot be combined with "all-linear").
        last = {id(m) for block in blocks[-config.lora_blocks :] for m in block.modules()}
        targets = [
            name
            for name, m in backbone.named_modules()
            if isinstance(m, nn.Linear) and id(m) in last
        ]
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
    )
    return get_peft_model(backbone, lora)


class ProcessRewardModel(nn.Module):
    """Backbone + linear head; `forward(batch)` gives (N, num_labels) logits at the batch's step
    ends."""

    backbone: Backbone

    def __init__(self, backbone: Backbone, tokenizer: Any, config: TrainConfig) -> None:
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer  # not a module: travels with the model for scoring
        self.config = config
        # An outcome head has no bias, as transformers' sequence classifiers' `score` has none:
        # so the export (AutoModelForSequenceClassification) scores exactly alike.
        self.head = nn.Linear(
            backbone.config.hidden_size, config.num_labels, bias=config.objective != "outcome"
        )
        if config.mode == "head":
            self.backbone.requires_grad_(False)

    @classmethod
    def from_config(
        cls, config: TrainConfig, device: torch.device | None = None
    ) -> ProcessRewardModel:
        """A fresh model: pretrained backbone in its storage dtype for `device`, activation
        checkpointing, mode and compilation applied, new head (seeded by the caller)."""
        device = device or torch.device("cpu")
        dtype = storage_dtype(config, device)
        attention = attention_for(config, device)
        backbone = load_backbone(config.backbone, config.backbone_layers, dtype, attention)
        tokenizer = load_tokenizer(config.backbone)
        if config.gradient_checkpointing and config.mode != "head":
            # Non-reentrant: works with frozen inputs (LoRA) and with FSDP2.
            backbone.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        blocks = transformer_blocks(backbone)
        model = cls(
            add_lora(backbone, config) if config.mode == "lora" else backbone, tokenizer, config
        )
        if config.compile:
            # Block by block (as torchtitan does): one compiled graph serves every block, and
            # FSDP2 still wraps each block. Dynamic: length-bucketed batches vary in shape.
            for block in blocks:
                block.compile(dynamic=True)
        return model

    @property
    def pad_id(self) -> int:
        for token_id in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if token_id is not None:
                return int(token_id)
        return 0

    def train(self, mode: bool = True) -> ProcessRewardModel:
        super().train(mode)
        if self.config.mode == "head":
            self.backbone.eval()  # frozen: no dropout, features match the cached ones
        return self

    def features(self, batch: Batch) -> torch.Tensor:
        """Backbone hidden states at the batch's step ends, (N, hidden), float32."""
        implementation = self.backbone.config._attn_implementation
        mask: Any
        shapes: Any = nullcontext()
        if implementation == "flex_attention":
            mask = tree_block_mask(batch.segment, batch.visible, batch.document)
            if batch.input_ids.device.type == "cpu":
                # torch 2.13's CPU (C++) flex kernel fails to build for dynamic shapes, which
                # dynamo turns to at the second batch length: compile each length on its own.
                shapes = torch._dynamo.config.patch(automatic_dynamic_shapes=False)
        else:
            mask = attention_mask_4d(batch.segment, batch.visible, batch.document)
        if implementation == "eager":
            # Eager attention adds the mask to the scores: 0 where allowed, -inf-ish elsewhere.
            mask = torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, -1e30)
        grad = torch.is_grad_enabled() and self.config.mode != "head"
        with torch.set_grad_enabled(grad), sdpa_kernel(SDPA_BACKENDS), shapes:
            # No KV cache: a scoring pass never decodes, and transformers would otherwise
            # build one per forward (memory, and a graph break under torch.compile).
            out = self.backbone(
                input_ids=batch.input_ids,
                attention_mask=mask,
                position_ids=batch.position_ids,
                use_cache=False,
            )
        hidden = out.last_hidden_state
        return hidden.reshape(-1, hidden.shape[-1])[batch.ends].float()

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.head(self.features(batch))

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The parameters this mode trains, by name (what a checkpoint must hold)."""
        return {n: p.detach() for n, p in self.named_parameters() if p.requires_grad}

    # --------------------------------------------------------------- save / load

    def save(self, out_dir: str | Path, run: dict[str, Any] | None = None) -> Path:
        """Write the layout above; `run` (how it was trained: processes, global batch) goes
        into prm.json as it is."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.contiguous().cpu() for k, v in self.head.state_dict().items()},
            out / "head.safetensors",
        )
        if self.config.mode == "full":
            self.backbone.save_pretrained(str(out / "backbone"), safe_serialization=True)
        elif self.config.mode == "lora":
            self.backbone.save_pretrained(str(out / "adapter"), safe_serialization=True)
        self.tokenizer.save_pretrained(out / "tokenizer")
        meta = {
            "format": FORMAT,
            "objective": self.config.objective,
            "mode": self.config.mode,
            "backbone": self.config.backbone,
            "dataset_version": self.config.dataset_version,
            "layout": {
                "separator": self.config.step_separator,
                "classes": (
                    OUTCOME_CLASSES
                    if self.config.objective == "outcome"
                    else CLASSES[self.config.num_labels]
                ),
                "label_at": "solution end" if self.config.objective == "outcome" else "step end",
            },
            "config": self.config.to_dict(),
            **(run or {}),
        }
        (out / "prm.json").write_text(json.dumps(meta, indent=2) + "\n")
        return out

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> ProcessRewardModel:
        """A saved model, in eval mode on `device` ("auto" picks CUDA when present)."""
        path = Path(path)
        meta = json.loads((path / "prm.json").read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path} is not a {FORMAT} model")
        config = TrainConfig.from_dict(
            # The layout's separator is the one it was trained with (older models: the only one).
            {**meta["config"], "step_separator": meta.get("layout", {}).get("separator", SEPARATOR)}
        )
        backbone: Backbone
        attention = attention_for(config, resolve_device(device), training=False)
        if config.mode == "full":
            backbone = load_backbone(str(path / "backbone"), attention=attention)
        else:
            backbone = load_backbone(config.backbone, config.backbone_layers, attention=attention)
        if config.mode == "lora":
            from peft import PeftModel

            backbone = PeftModel.from_pretrained(backbone, str(path / "adapter"))
        model = cls(backbone, load_tokenizer(str(path / "tokenizer")), config)
        model.head.load_state_dict(load_file(path / "head.safetensors"))
        return model.to(resolve_device(device)).eval()
