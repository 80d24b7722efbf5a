"""Export a saved PRM as a self-contained Hugging Face token-classification checkpoint; an
imported one (external.py) is saved again in its own shape (`export_imported`).

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

An outcome model (TrainConfig.objective "outcome", an ORM) exports as a sequence classifier
instead (`export_outcome`): architectures ["<Family>ForSequenceClassification"], id2label
{"0": "wrong", "1": "correct"}, pad_token_id set, stepwise.format "stepwise-orm-hf/1"; the same
token layout, whose softmax[1] at the last token (the separator's after the last step, where
transformers' sequence classifiers read) is `score.solution_score(step_probs, "last")`, checked
within 1e-4 before anything is written. Decoder backbones only: an encoder's sequence classifier
reads its [CLS] token through a pooler.

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .data import SEPARATOR, Solution, start_ids
from .external import (
    MANIFEST,
    SEQUENCE_CLASSIFICATION,
    STEP_TAG,
    STEPWISE_HF_FORMAT,
    STEPWISE_ORM_HF_FORMAT,
    TOKEN_CLASSIFICATION,
    ExternalModelError,
    read_manifest,
)
from .model import FORMAT, ProcessRewardModel, three_way
from .score import solution_score

HF_FORMAT = STEPWISE_HF_FORMAT
# An imported model's export in a layout of its own (TRL's, Math-Shepherd's): not HF_FORMAT,
# which external.py reads in our layout.
IMPORTED_FORMAT = "stepwise-imported-prm-hf/1"
STEPWISE_LAYOUT, TRL_LAYOUT, STEP_TAG_LAYOUT = "stepwise", "trl", "math_shepherd"
ID2LABEL = {0: "-1", 1: "0", 2: "+1"}
# A 2-class head as TRL trains it (class 1 = a good step), under the names transformers gives
# TRL's num_labels=2 models, so TRL-style scoring code reads it unchanged.
ID2LABEL_TWO = {0: "LABEL_0", 1: "LABEL_1"}
# What vLLM needs to serve a token classifier (docs/training.md; untested here).
VLLM_TOKEN_CLASSIFICATION = {
    "runner": "pooling",
    "convert": "classify",
    "pooling_task": "token_classify",
}
LABEL_AT = "last token of each step's text + step_separator"
# An outcome model's export: a sequence classifier in a format of its own (external.py's
# imports read HF_FORMAT as a token classifier).
OUTCOME_FORMAT = STEPWISE_ORM_HF_FORMAT
OUTCOME_LAYOUT = "stepwise_outcome"
ID2LABEL_OUTCOME = {0: "wrong", 1: "correct"}
OUTCOME_LABEL_AT = "last token: the step_separator's after the last step"
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

    backbone = _merged_backbone(model)
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


def _merged_backbone(model: ProcessRewardModel) -> Any:
    backbone: Any = model.backbone
    if model.config.mode == "lora":
        backbone = copy.deepcopy(backbone).merge_and_unload()  # a copy: `model` stays to compare
    return backbone


def sequence_classifier(model: ProcessRewardModel) -> Any:
    """An AutoModelForSequenceClassification with an outcome model's (merged) backbone and its
    bias-free head as `score`, read at the last non-pad token as the model reads its label."""
    from transformers import AutoModelForSequenceClassification

    backbone = _merged_backbone(model)
    config = copy.deepcopy(backbone.config)
    config.id2label = dict(ID2LABEL_OUTCOME)
    config.label2id = {v: k for k, v in config.id2label.items()}
    config.pad_token_id = model.pad_id
    classifier = AutoModelForSequenceClassification.from_config(
        config, dtype=torch.float32, attn_implementation=backbone.config._attn_implementation
    ).eval()
    head = getattr(classifier, "score", None)
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        raise ExportError(
            f"{type(classifier).__name__} does not read the last token with a `score` Linear "
            "(an encoder's sequence classifier reads [CLS]): an outcome model exports from a "
            "decoder backbone only"
        )
    base = getattr(classifier, classifier.base_model_prefix)
    missing, unexpected = base.load_state_dict(backbone.state_dict(), strict=False)
    if missing or unexpected:
        raise ExportError(
            f"{type(classifier).__name__} does not take the backbone's weights "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    head.load_state_dict(model.head.state_dict())
    return classifier.float()


@torch.no_grad()
def check_same_outcome_scores(model: ProcessRewardModel, classifier: Any, tokenizer: Any) -> None:
    """Raise ExportError unless the exported classifier's softmax[1] is the outcome model's
    score (P(correct) at the last step's end) on a probe solution."""
    from .score import score_solutions

    ids, _ = step_inputs(tokenizer, PROBE.problem, PROBE.steps, model.config.step_separator)
    if len(ids) > model.config.max_length:
        return  # a model that scores nothing this long: nothing to compare
    expected = solution_score(score_solutions(model, [PROBE])[0][-1:], "last")
    logits = classifier(input_ids=torch.tensor([ids])).logits[0].float()
    got = float(torch.softmax(logits, dim=-1)[1])
    if not abs(got - expected) <= TOLERANCE:
        raise ExportError(
            f"the exported sequence classifier's P(correct) differs from `cli score`'s by "
            f"{abs(got - expected):.2e} (this tokenizer may not split the step separator off a "
            "step's end, or the pad token occurs in the text)"
        )


Progress = Callable[[str], None]  # told each phase as it begins (PHASES)
PHASES = ("loading", "writing weights", "tokenizer", "card")


def export_hf(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    metrics: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Write a Hugging Face checkpoint of the model in `model_dir` to out_dir (new or empty):
    built in a temporary folder beside it and renamed, so a half-written export never exists.
    A model trained here (prm.json) gets the layout above; one imported (external.json) is
    loaded with transformers and saved again (`export_imported`). `metrics` (held-out figures:
    a model version's metrics or an `evaluate` report) go into the model card; without them the
    model folder's metrics.json, when present. `progress` is told each phase as it begins."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: give a new output folder")
    report = progress or (lambda phase: None)
    if (Path(model_dir) / MANIFEST).is_file():
        return export_imported(model_dir, out, metrics=metrics or {}, progress=report)
    report("loading")
    model = load_saved(model_dir)
    meta = json.loads((Path(model_dir) / "prm.json").read_text())
    if metrics is None and (Path(model_dir) / "metrics.json").is_file():
        metrics = json.loads((Path(model_dir) / "metrics.json").read_text())
    tokenizer = copy.deepcopy(model.tokenizer)
    if tokenizer.bos_token is None and tokenizer.cls_token is not None:
        # TRL and most scripts prepend bos_token when there is one: an encoder's start is [CLS].
        tokenizer.bos_token = tokenizer.cls_token
    if model.config.objective == "outcome":
        return export_outcome(model, meta, metrics, tokenizer, out, report)
    classifier = token_classifier(model)
    check_same_scores(model, classifier, tokenizer)

    config = classifier.config
    config.step_separator = model.config.step_separator
    config.stepwise = {
        "format": HF_FORMAT,
        "layout": STEPWISE_LAYOUT,
        "label_at": LABEL_AT,
        "source_format": meta.get("format", FORMAT),
        "mode": model.config.mode,
        "backbone": model.config.backbone,
        "backbone_layers": config.num_hidden_layers,
        "dataset_version": model.config.dataset_version,
        "max_length": model.config.max_length,
        "step_score": "P(0) + P(+1)" if model.config.num_labels == 3 else "P(1)",
        "solution_score": "product",
        "vllm": VLLM_TOKEN_CLASSIFICATION,
    }
    training = {"config": meta.get("config", {}), "metrics": metrics or {}}
    return _write(out, classifier, tokenizer, training, report)


def export_outcome(
    model: ProcessRewardModel,
    meta: dict[str, Any],
    metrics: dict[str, Any] | None,
    tokenizer: Any,
    out: Path,
    progress: Progress,
) -> Path:
    """An outcome model as a sequence classifier (the module docstring), checked to score
    alike before it is written."""
    classifier = sequence_classifier(model)
    check_same_outcome_scores(model, classifier, tokenizer)
    config = classifier.config
    config.step_separator = model.config.step_separator
    config.stepwise = {
        "format": OUTCOME_FORMAT,
        "layout": OUTCOME_LAYOUT,
        "objective": "outcome",
        "label_at": OUTCOME_LABEL_AT,
        "source_format": meta.get("format", FORMAT),
        "mode": model.config.mode,
        "backbone": model.config.backbone,
        "backbone_layers": config.num_hidden_layers,
        "dataset_version": model.config.dataset_version,
        "max_length": model.config.max_length,
        "solution_score": "softmax[1]: P(the final answer is correct)",
    }
    training = {"config": meta.get("config", {}), "metrics": metrics or {}}
    return _write(out, classifier, tokenizer, training, progress)


def export_imported(
    model_dir: str | Path, out: Path, *, metrics: dict[str, Any], progress: Progress
) -> Path:
    """An imported model (external.py's folder) as a checkpoint of its own shape: loaded with
    transformers (never its own code), given our config fields (step_separator and labels, or
    the step tag and its tokens) and saved again with save_pretrained in the dtype it came in.
    The uploaded files themselves are never copied."""
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    folder = Path(model_dir)
    try:
        manifest = read_manifest(folder)
    except ExternalModelError as exc:
        raise ExportError(str(exc)) from None
    kind = manifest["kind"]
    progress("loading")
    auto = {
        STEP_TAG: AutoModelForCausalLM,
        SEQUENCE_CLASSIFICATION: AutoModelForSequenceClassification,
    }.get(kind, AutoModelForTokenClassification)
    try:
        model = auto.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=False, dtype="auto"
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:  # transformers raises many kinds for files it cannot read
        raise ExportError(
            f"the imported model cannot be loaded ({type(exc).__name__}: {exc})"
        ) from None
    config = model.config
    previous = getattr(config, "stepwise", None)
    stepwise: dict[str, Any] = {**(previous if isinstance(previous, dict) else {})}
    stepwise.update(imported=True, solution_score="product")
    if kind == SEQUENCE_CLASSIFICATION:
        config.step_separator = manifest["step_separator"]
        layout = manifest.get("layout") or TRL_LAYOUT
        one = int(manifest["labels"]) == 1
        stepwise.update(
            format=OUTCOME_FORMAT if layout == STEPWISE_LAYOUT else IMPORTED_FORMAT,
            layout=OUTCOME_LAYOUT if layout == STEPWISE_LAYOUT else TRL_LAYOUT,
            objective="outcome",
            label_at=OUTCOME_LABEL_AT,
            solution_score="sigmoid of the score" if one else "softmax[1]: P(correct)",
        )
    elif kind == TOKEN_CLASSIFICATION:
        labels = int(manifest["labels"])
        id2label = ID2LABEL if labels == 3 else ID2LABEL_TWO
        config.id2label = dict(id2label)
        config.label2id = {v: k for k, v in id2label.items()}
        config.step_separator = manifest["step_separator"]
        layout = manifest.get("layout") or TRL_LAYOUT
        # Our own layout keeps our format (external.py reads it so again); TRL's must not.
        stepwise.update(
            format=HF_FORMAT if layout == STEPWISE_LAYOUT else IMPORTED_FORMAT,
            layout=layout,
            step_score="P(0) + P(+1)" if labels == 3 else "P(1)",
            vllm=VLLM_TOKEN_CLASSIFICATION,
        )
    else:
        for name in ("step_tag", "good_token", "bad_token"):
            setattr(config, name, manifest[name])
            setattr(config, f"{name}_id", int(manifest[f"{name}_id"]))
        stepwise.update(
            format=IMPORTED_FORMAT,
            layout=STEP_TAG_LAYOUT,
            step_score="softmax over the good and the bad token's logits at the tag: P(good)",
            vllm=_vllm_step_tag(config),
        )
    config.stepwise = stepwise
    training = {"imported": True, "metrics": metrics}
    return _write(out, model, tokenizer, training, progress)


def _vllm_step_tag(config: Any) -> dict[str, Any]:
    return {
        "runner": "pooling",
        "pooler_config": {
            "pooling_type": "STEP",
            "step_tag_id": config.step_tag_id,
            "returned_token_ids": [config.good_token_id, config.bad_token_id],
        },
        "pooling_task": "token_classify",
    }


def _write(
    out: Path, model: Any, tokenizer: Any, training: dict[str, Any], progress: Progress
) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        progress("writing weights")
        model.save_pretrained(tmp, safe_serialization=True)
        if hasattr(model.config, "step_separator"):
            # transformers leaves out labels equal to its defaults (a 2-class head's LABEL_0 and
            # LABEL_1): written anyway, so that config.json itself says how many classes there are.
            written = json.loads((tmp / "config.json").read_text())
            written.setdefault("id2label", {str(k): v for k, v in model.config.id2label.items()})
            written.setdefault("label2id", dict(model.config.label2id))
            (tmp / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
        progress("tokenizer")
        tokenizer.save_pretrained(tmp)
        progress("card")
        (tmp / "README.md").write_text(model_card(model.config, training, folder=out.name))
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


# --- the model card --------------------------------------------------------------------------

# Each layout's scoring snippet: plain torch + transformers, giving `cli score`'s probabilities
# (tests/modeling/training/test_model_card.py runs it from the README in a bare process).
_TOKEN_SNIPPET = """\
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

tok = AutoTokenizer.from_pretrained("{folder}")
model = AutoModelForTokenClassification.from_pretrained("{folder}", dtype=torch.float32).eval()
sep = model.config.step_separator
enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
ids, ends = [tok.bos_token_id] * (tok.bos_token_id is not None) + enc({prompt}), []
for step in steps:
    ids += enc({step}) + enc(sep)
    ends.append(len(ids) - 1)
with torch.no_grad():
    probs = model(input_ids=torch.tensor([ids])).logits[0, ends].softmax(-1)
good = probs[:, 1:].sum(-1)  # P(good step): softmax[1] with 2 labels, P(0) + P(+1) with 3
"""
_STEP_TAG_SNIPPET = """\
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("{folder}")  # a fast tokenizer: it gives offsets
model = AutoModelForCausalLM.from_pretrained("{folder}", dtype=torch.float32).eval()
c = model.config
text, tag_ends = problem + " ", []
for k, step in enumerate(steps):
    text += step.replace(c.step_tag, "") + " " + c.step_tag
    tag_ends.append(len(text))
    text += "\\n" if k < len(steps) - 1 else ""
enc = tok(text, return_offsets_mapping=True)
ends = [max(i for i, (a, _) in enumerate(enc["offset_mapping"]) if a < e) for e in tag_ends]
with torch.no_grad():
    logits = model(input_ids=torch.tensor([enc["input_ids"]])).logits[0, ends]
good = logits[:, [c.good_token_id, c.bad_token_id]].softmax(-1)[:, 0]  # P(good step)
"""


def scoring_snippet(config: Any, folder: str) -> str:
    """The card's scoring code for this checkpoint's layout; it expects `problem` (a string) and
    `steps` (a list of strings) and leaves `good`, each step's P(good), and (token
    classifiers) `probs`, the softmax over the labels."""
    layout = (getattr(config, "stepwise", None) or {}).get("layout", STEPWISE_LAYOUT)
    if layout == STEP_TAG_LAYOUT:
        return _STEP_TAG_SNIPPET.format(folder=folder)
    if layout == TRL_LAYOUT:  # TRL's tokenize_row: the prompt and the steps as they are
        return _TOKEN_SNIPPET.format(folder=folder, prompt="problem", step="step")
    return _TOKEN_SNIPPET.format(folder=folder, prompt="problem.strip() + sep", step="step.strip()")


def vllm_command(config: Any, folder: str) -> str:
    vllm = (getattr(config, "stepwise", None) or {}).get("vllm") or VLLM_TOKEN_CLASSIFICATION
    command = f"vllm serve {folder} --runner {vllm['runner']}"
    if "convert" in vllm:
        command += f" --convert {vllm['convert']}"
    if "pooler_config" in vllm:
        command += f" --pooler-config '{json.dumps(vllm['pooler_config'])}'"
    return command


def model_card(config: Any, training: dict[str, Any], *, folder: str = "PATH") -> str:
    """README.md: what it is, how to score with it (plain transformers; vLLM), its data and
    training config, held-out figures. `training` holds the model's "config" (a TrainConfig as
    saved) and "metrics" (held-out figures), or "imported": true."""
    stepwise = config.stepwise
    layout = stepwise.get("layout", STEPWISE_LAYOUT)
    held, scalars = _held_out(training.get("metrics") or {})
    if layout == OUTCOME_LAYOUT:
        return _outcome_card(config, stepwise, training, held, scalars, folder)
    return f"""---
library_name: transformers
pipeline_tag: {"text-generation" if layout == STEP_TAG_LAYOUT else "token-classification"}
tags: [process-reward-model, prm, stepwise]
---

# Stepwise process reward model

{_what_it_is(config, stepwise)}

- Step score: {stepwise.get("step_score")}; solution score: the product over steps (min, last,
  mean also work).

## Input format

{_input_format(config, layout)}

## Scoring in plain transformers

With `problem` (a string) and `steps` (a list of strings), this gives each step's probabilities
exactly as `python -m modeling.training.cli score` does (on a CPU, in float32; on a GPU load it
in bfloat16 for speed):

```python
{scoring_snippet(config, folder)}```

## Serving with vLLM

Untested here: vLLM does not run on the machines Stepwise is tested on. From vLLM's pooling
documentation, the command is

    {vllm_command(config, folder)}

{_vllm_reading(layout)}

## Held-out figures

{held}

## Training

{_training(stepwise, training, scalars)}
"""


def _held_out(metrics: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The card's held-out table and the metrics' other scalars."""
    # A model version's metrics hold them under "held_out", an `evaluate` report under "steps"
    # (an outcome model's under "solutions").
    key = next(
        (k for k in ("held_out", "steps", "solutions") if isinstance(metrics.get(k), dict)), ""
    )
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
    scalars = {
        k: v for k, v in metrics.items() if k != key and isinstance(v, str | int | float | None)
    }
    return held, scalars


# An outcome model's scoring code: plain torch + transformers, giving P(correct) as `cli score`'s
# "last" rule does (tests/modeling/training/test_outcome.py runs it).
_OUTCOME_SNIPPET = """\
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

tok = AutoTokenizer.from_pretrained("{folder}")
model = AutoModelForSequenceClassification.from_pretrained("{folder}", dtype=torch.float32).eval()
sep = model.config.step_separator
enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
ids = [tok.bos_token_id] * (tok.bos_token_id is not None) + enc(problem.strip() + sep)
for step in steps:
    ids += enc(step.strip()) + enc(sep)
with torch.no_grad():
    correct = model(input_ids=torch.tensor([ids])).logits[0].softmax(-1)[1].item()
"""


def _outcome_card(
    config: Any,
    stepwise: dict[str, Any],
    training: dict[str, Any],
    held: str,
    scalars: dict[str, Any],
    folder: str,
) -> str:
    sep = json.dumps(config.step_separator)
    lora = ", LoRA merged" if stepwise.get("mode") == "lora" else ""
    return f"""---
library_name: transformers
pipeline_tag: text-classification
tags: [outcome-reward-model, orm, stepwise]
---

# Stepwise outcome reward model

An outcome reward model (ORM) exported from Stepwise: {config.num_hidden_layers} transformer
blocks of `{stepwise.get("backbone")}` (trained in `{stepwise.get("mode")}` mode{lora}) as
`{config.architectures[0]}`, `id2label` = {{"0": "wrong", "1": "correct"}}. It was trained on
one label per solution, whether its final answer is correct, read at the solution's last token.

- Solution score: softmax[1], P(the final answer is correct).
- Data version (sha256 of the training data): `{stepwise.get("dataset_version") or "not recorded"}`
- Longest input scored in training: {stepwise.get("max_length")} tokens.

## Input format

`step_separator` (in config.json) is {sep}. Token ids are

    [bos_token_id] + tok(problem.strip() + step_separator)
                   + tok(step_1.strip()) + tok(step_separator)
                   + tok(step_2.strip()) + tok(step_separator) + ...

each piece tokenized on its own with `add_special_tokens=False` (joined text tokenizes
differently), ending with the separator after the last step: the classifier reads the last
token that is not `pad_token_id`, where the label was trained.

## Scoring in plain transformers

With `problem` (a string) and `steps` (a list of strings), this gives the solution's
P(correct) exactly as `python -m modeling.training.cli score` does (its `last` score):

```python
{_OUTCOME_SNIPPET.format(folder=folder)}```

## Held-out figures

{held}

## Training

{_training(stepwise, training, scalars)}
"""


HEADS = {
    3: "3-class head: `id2label` = {}, the step's rating -1 (wrong), 0 (neutral), +1 (right).",
    2: "2-class head as TRL's PRMTrainer trains it: `id2label` = {}, class 1 a good step, "
    "class 0 a bad one.",
}


def _what_it_is(config: Any, stepwise: dict[str, Any]) -> str:
    architecture = config.architectures[0]
    if stepwise.get("layout") == STEP_TAG_LAYOUT:
        return (
            f"A process reward model (PRM) imported into Stepwise and exported again: "
            f"`{architecture}` read at a step tag (Math-Shepherd's layout). config.json holds "
            f"`step_tag` {json.dumps(config.step_tag)} and the good and bad tokens "
            f"({json.dumps(config.good_token)}, {json.dumps(config.bad_token)}) with their ids."
        )
    labels = json.dumps({str(k): v for k, v in config.id2label.items()})
    origin = (
        "imported into Stepwise and exported again"
        if stepwise.get("imported")
        else (
            f"exported from Stepwise: {config.num_hidden_layers} transformer blocks of "
            f"`{stepwise.get('backbone')}` (trained in `{stepwise.get('mode')}` mode"
            f"{', LoRA merged' if stepwise.get('mode') == 'lora' else ''})"
        )
    )
    lines = [
        f"A process reward model (PRM) {origin}: `{architecture}` with a "
        f"{HEADS[len(config.id2label)].format(labels)}"
    ]
    if not stepwise.get("imported"):
        lines.append(
            f"\n- Data version (sha256 of the training data): "
            f"`{stepwise.get('dataset_version') or 'not recorded'}`\n"
            f"- Longest input scored in training: {stepwise.get('max_length')} tokens."
        )
    return "".join(lines)


def _input_format(config: Any, layout: str) -> str:
    if layout == STEP_TAG_LAYOUT:
        return (
            'The text is `problem + " " + step_1 + " " + TAG + "\\n" + step_2 + " " + TAG ...`'
            " (a tag inside a step is dropped), tokenized whole. At each tag's last token, the\n"
            "softmax over the logits of the good and the bad token gives P(good)."
        )
    sep = json.dumps(config.step_separator)
    if layout == TRL_LAYOUT:
        return f"""TRL PRMTrainer's layout, with `step_separator` (in config.json) {sep}. Token ids are

    [bos_token_id] + tok(problem) + tok(step_1) + tok(step_separator)
                   + tok(step_2) + tok(step_separator) + ...

each piece tokenized on its own with `add_special_tokens=False`; step k's probabilities are the
softmax of the logits at the last token of `tok(step_separator)` after step k."""
    return f"""`step_separator` (in config.json) is {sep}. Token ids are

    [bos_token_id] + tok(problem.strip() + step_separator)
                   + tok(step_1.strip()) + tok(step_separator)
                   + tok(step_2.strip()) + tok(step_separator) + ...

each piece tokenized on its own with `add_special_tokens=False` (joined text tokenizes
differently). Step k's probabilities are the softmax of the logits at the last token of
`tok(step_separator)` after step k. This is TRL PRMTrainer's layout with
`prompt = problem.strip() + step_separator`: a scorer that leaves the separator after the
problem out, or `pipeline("token-classification")` on the joined text, scores differently.
Attention is causal: a step's score never depends on later steps."""


def _vllm_reading(layout: str) -> str:
    if layout == STEP_TAG_LAYOUT:
        return (
            "STEP pooling returns, at each token equal to `step_tag_id`, the softmax over\n"
            "`returned_token_ids` (the good token first): its first column is P(good). Send the\n"
            "text built as in the snippet."
        )
    return (
        "`--convert classify` makes the token classifier a pooling model (its `score` weight\n"
        'and bias); POST the snippet\'s `ids` to `/pooling` with `"task": "token_classify"`\n'
        "and read the rows at the snippet's `ends`: each is the softmax over the labels. (STEP\n"
        "pooling at the separator's token would also read wherever that token occurs inside a\n"
        "step or after the problem.)"
    )


def _training(stepwise: dict[str, Any], training: dict[str, Any], scalars: dict[str, Any]) -> str:
    if training.get("imported"):
        return "Trained elsewhere and imported; its training is not recorded here."
    return f"""Training metrics: `{json.dumps(scalars, sort_keys=True)}`

```json
{json.dumps(training.get("config", {}), indent=2, sort_keys=True)}
```"""
