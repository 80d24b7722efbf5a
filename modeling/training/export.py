"""Export a saved PRM as a self-contained Hugging Face token-classification checkpoint.

    python -m modeling.training.cli export --model runs/prm --format hf --output prm-hf

Layout written to OUT (what `import_prm` reads back)::

    OUT/config.json        the backbone's config with only the kept blocks
                           (num_hidden_layers = backbone_layers), and:
                             architectures  ["<Family>ForTokenClassification"]
                             id2label       {"0": "-1", "1": "0", "2": "+1"}; a 2-class
                                            model: {"0": "LABEL_0", "1": "LABEL_1"} (bad,
                                            good: the names TRL's models carry)
                             label2id       the reverse
                             step_separator the model's (the text that ends the problem and
                                            every step; default "\\n\\n")
                             is_decoder     true, on encoders only (BERT-like): causal attention,
                                            as in training
                             stepwise       {"format": "stepwise-prm-hf/1", "label_at":
                                            "last token of each step's text + step_separator",
                                            "source_format", "mode", "backbone",
                                            "backbone_layers", "dataset_version", "max_length",
                                            "step_score": "P(0) + P(+1)" (2 classes:
                                            "P(1)"),
                                            "solution_score": "product"}
    OUT/model.safetensors  fp32 weights: the backbone (LoRA merged in, mode "lora"; fine-tuned,
                           mode "full") and the head as the family's token-classification
                           Linear (`score` for Llama/Qwen2/SmolLM2, `classifier` for BERT), bias
                           included
    OUT/tokenizer files    the training tokenizer; an encoder's [CLS] is also its bos_token
    OUT/README.md          model card: data version, training config, held-out figures, input

Input format (TRL PRMTrainer's layout, with step_separator "\\n\\n"): token ids =
[bos] + tok(problem.strip() + "\\n\\n") + for each step (tok(step.strip()) + tok("\\n\\n")),
every piece tokenized on its own without special tokens. Step k's probabilities are the
softmax of the logits at the last token of its piece (the separator's last token). Our
training reads the label at the last token of tok(step.strip() + "\\n\\n"); for byte-level
BPE tokenizers (Llama 3, Qwen2, SmolLM2) "\\n\\n" at a text's end is a pre-token of its own,
so the two are the same ids. The export checks this on a probe solution, and that the
exported model gives `cli score`'s probabilities (within 1e-4), before it writes anything.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .data import SEPARATOR, Solution, start_ids
from .model import FORMAT, ProcessRewardModel, three_way

HF_FORMAT = "stepwise-prm-hf/1"
ID2LABEL = {0: "-1", 1: "0", 2: "+1"}
# A 2-class head as TRL trains it (class 1 = a good step), under the names transformers gives
# TRL's num_labels=2 models, so TRL-style scoring code reads it unchanged.
ID2LABEL_TWO = {0: "LABEL_0", 1: "LABEL_1"}
LABEL_AT = "last token of each step's text + step_separator"
TOLERANCE = 1e-4
PROBE = Solution(
    "What is 12 + 30, divided by 6?",
    ["12 + 30 = 42.", "42 / 6 = 7.", "# Answer\n\n7"],
)


class ExportError(ValueError):
    """The model cannot be exported (not a saved PRM, or the export would not score alike)."""


def step_inputs(
    tokenizer: Any, problem: str, steps: Sequence[str], separator: str = SEPARATOR
) -> tuple[list[int], list[int]]:
    """(input ids, step-end positions) in the exported layout: TRL's tokenize_row with the
    problem, plus the separator, as the prompt."""
    ids = (
        start_ids(tokenizer)
        + tokenizer(problem.strip() + separator, add_special_tokens=False)["input_ids"]
    )
    sep = tokenizer(separator, add_special_tokens=False)["input_ids"]
    ends = []
    for step in steps:
        ids += tokenizer(step.strip(), add_special_tokens=False)["input_ids"] + sep
        ends.append(len(ids) - 1)
    return ids, ends


def load_saved(model_dir: str | Path) -> ProcessRewardModel:
    """The saved model on the CPU in fp32, or an ExportError that says what is wrong."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ExportError(f"{path} is not a folder: give the output folder of `cli train`")
    if not (path / "prm.json").is_file():
        raise ExportError(f"{path} has no prm.json: it is not a model saved by `cli train`")
    try:
        return ProcessRewardModel.load(path, device="cpu")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"{path} is not a loadable {FORMAT} model: {exc}") from exc


def token_classifier(model: ProcessRewardModel) -> Any:
    """An AutoModelForTokenClassification with the model's (merged) backbone and head."""
    from transformers import AutoModelForTokenClassification

    backbone: Any = model.backbone
    if model.config.mode == "lora":
        backbone = copy.deepcopy(backbone).merge_and_unload()  # a copy: `model` stays to compare
    config = copy.deepcopy(backbone.config)
    config.id2label = dict(ID2LABEL if model.config.num_labels == 3 else ID2LABEL_TWO)
    config.label2id = {v: k for k, v in config.id2label.items()}
    if getattr(config, "is_decoder", None) is False:
        config.is_decoder = True  # an encoder trained with causal attention: keep it causal
    classifier = AutoModelForTokenClassification.from_config(
        config, dtype=torch.float32, attn_implementation=backbone.config._attn_implementation
    ).eval()
    base = getattr(classifier, classifier.base_model_prefix)
    missing, unexpected = base.load_state_dict(backbone.state_dict(), strict=False)
    # An encoder's pooler is not part of a token classifier (and was never used).
    unexpected = [k for k in unexpected if not k.startswith("pooler.")]
    if missing or unexpected:
        raise ExportError(
            f"{type(classifier).__name__} does not take the backbone's weights "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    head = getattr(classifier, "score", None) or getattr(classifier, "classifier", None)
    if not isinstance(head, torch.nn.Linear) or head.bias is None:
        raise ExportError(f"{type(classifier).__name__} has no biased `score`/`classifier` Linear")
    head.load_state_dict(model.head.state_dict())
    return classifier.float()


@torch.no_grad()
def check_same_scores(model: ProcessRewardModel, classifier: Any, tokenizer: Any) -> None:
    """Raise ExportError unless the exported layout gives `cli score`'s step probabilities."""
    from .score import score_solutions

    ids, ends = step_inputs(tokenizer, PROBE.problem, PROBE.steps, model.config.step_separator)
    if len(ids) > model.config.max_length:
        return  # a model that scores nothing this long: nothing to compare
    expected = score_solutions(model, [PROBE])[0]
    logits = classifier(input_ids=torch.tensor([ids])).logits[0, ends].float()
    got = three_way(logits).numpy()
    worst = float(abs(got - expected).max())
    if not worst <= TOLERANCE:
        raise ExportError(
            f"the exported model's step probabilities differ from `cli score` by {worst:.2e} "
            "(this tokenizer may not split the step separator off a step's end)"
        )


def export_hf(
    model_dir: str | Path, out_dir: str | Path, *, metrics: dict[str, Any] | None = None
) -> Path:
    """Write the layout above to out_dir (new or empty): built in a temporary folder beside it
    and renamed, so a half-written export never exists. `metrics` (held-out figures: a model
    version's metrics or an `evaluate` report) go into the model card; without them the
    model folder's metrics.json, when present."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: give a new output folder")
    model = load_saved(model_dir)
    meta = json.loads((Path(model_dir) / "prm.json").read_text())
    if metrics is None and (Path(model_dir) / "metrics.json").is_file():
        metrics = json.loads((Path(model_dir) / "metrics.json").read_text())
    tokenizer = copy.deepcopy(model.tokenizer)
    if tokenizer.bos_token is None and tokenizer.cls_token is not None:
        # TRL and most scripts prepend bos_token when there is one: an encoder's start is [CLS].
        tokenizer.bos_token = tokenizer.cls_token
    classifier = token_classifier(model)
    check_same_scores(model, classifier, tokenizer)

    config = classifier.config
    config.step_separator = model.config.step_separator
    config.stepwise = {
        "format": HF_FORMAT,
        "label_at": LABEL_AT,
        "source_format": meta.get("format", FORMAT),
        "mode": model.config.mode,
        "backbone": model.config.backbone,
        "backbone_layers": config.num_hidden_layers,
        "dataset_version": model.config.dataset_version,
        "max_length": model.config.max_length,
        "step_score": "P(0) + P(+1)" if model.config.num_labels == 3 else "P(1)",
        "solution_score": "product",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        classifier.save_pretrained(tmp, safe_serialization=True)
        # transformers leaves out labels equal to its defaults (a 2-class head's LABEL_0 and
        # LABEL_1): written anyway, so that config.json itself says how many classes there are.
        written = json.loads((tmp / "config.json").read_text())
        written.setdefault("id2label", {str(k): v for k, v in config.id2label.items()})
        written.setdefault("label2id", dict(config.label2id))
        (tmp / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
        tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(model_card(meta, config, metrics or {}))
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


HEADS = {
    3: "3-class head: `id2label` = {}, the step's rating -1 (wrong), 0 (neutral), +1 (right).",
    2: "2-class head as TRL's PRMTrainer trains it: `id2label` = {}, class 1 a good step, "
    "class 0 a bad one.",
}
STEP_SCORES = {
    3: "step_scores = probs[:, 1] + probs[:, 2]  # P(0) + P(+1), columns follow id2label",
    2: "step_scores = probs[:, 1]  # P(good), columns follow id2label",
}


def model_card(meta: dict[str, Any], config: Any, metrics: dict[str, Any]) -> str:
    """README.md: what it is, the data and training config, held-out figures, how to call it."""
    stepwise = config.stepwise
    # A model version's metrics hold them under "held_out", an `evaluate` report under "steps".
    key = next((k for k in ("held_out", "steps") if isinstance(metrics.get(k), dict)), "")
    held_out = metrics.get(key) or {}
    figures = {k: v for k, v in held_out.items() if isinstance(v, int | float)}
    if isinstance(metrics.get("auroc"), int | float):
        figures.setdefault("auroc", metrics["auroc"])
    rows = "\n".join(f"| {k} | {v:.4g} |" for k, v in sorted(figures.items()))
    held = (
        f"| figure | value |\n|---|---|\n{rows}"
        if figures
        else "No held-out figures were saved with this model."
    )
    training = {
        k: v for k, v in metrics.items() if k != key and isinstance(v, str | int | float | None)
    }
    return f"""---
library_name: transformers
pipeline_tag: token-classification
tags: [process-reward-model, prm, stepwise]
---

# Stepwise process reward model

A process reward model (PRM) exported from Stepwise: `{config.architectures[0]}` with
{config.num_hidden_layers} transformer blocks of `{stepwise["backbone"]}` (trained in
`{stepwise["mode"]}` mode{", LoRA merged" if stepwise["mode"] == "lora" else ""}) and a
{HEADS[len(config.id2label)].format(json.dumps({str(k): v for k, v in config.id2label.items()}))}

- Data version (sha256 of the training data): `{stepwise["dataset_version"] or "not recorded"}`
- Step score: {stepwise["step_score"]}; solution score: the product over steps (min, last, mean also work).
- Longest input scored in training: {stepwise["max_length"]} tokens.

## Input format

`step_separator` (in config.json) is `{json.dumps(config.step_separator)}`. Token ids are

    [bos_token_id] + tok(problem.strip() + step_separator)
                   + tok(step_1.strip()) + tok(step_separator)
                   + tok(step_2.strip()) + tok(step_separator) + ...

each piece tokenized on its own with `add_special_tokens=False` (joined text tokenizes
differently). Step k's probabilities are the softmax of the logits at the last token of
`tok(step_separator)` after step k. This is TRL PRMTrainer's layout with
`prompt = problem.strip() + step_separator` and `step_separator = {json.dumps(config.step_separator)}`.
Attention is causal: a step's score never depends on later steps.

```python
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

tok = AutoTokenizer.from_pretrained("PATH")
model = AutoModelForTokenClassification.from_pretrained("PATH").eval()
sep = model.config.step_separator
enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]
ids = ([tok.bos_token_id] if tok.bos_token_id is not None else []) + enc(problem.strip() + sep)
ends = []
for step in steps:
    ids += enc(step.strip()) + enc(sep)
    ends.append(len(ids) - 1)
with torch.no_grad():
    probs = model(input_ids=torch.tensor([ids])).logits[0, ends].float().softmax(-1)
{STEP_SCORES[len(config.id2label)]}
```

## Held-out figures

{held}

## Training

Training metrics: `{json.dumps(training, sort_keys=True)}`

```json
{json.dumps(meta.get("config", {}), indent=2, sort_keys=True)}
```
"""
