"""A model version as a Hugging Face checkpoint to download (modeling/training/export.py's layout).

Built once into the version's artifact folder, by the training CLI in a child process (torch
loads only where a model trains or scores, never in the web process), then zipped once; later
downloads read the same zip. Both are written under temporary names and renamed, so two
concurrent requests never serve a half-written file. Only a model trained here is exported: an
imported one's folder holds what its uploader put there, which is never served as an export.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from modeling.models import ModelVersion
from stepwise.paths import shown_path, without_roots

ROOT = Path(__file__).resolve().parents[2]  # the checkout: `-m modeling.training.cli` from here
EXPORT_DIR = "hf-export"
EXPORT_TIMEOUT_S = 900
STDERR_TAIL_CHARS = 2000


class ExportFailed(RuntimeError):
    """The version's model could not be exported (its files are gone or unreadable)."""


def hf_export_archive(*, version: ModelVersion) -> Path:
    """The zip of the version's Hugging Face export (one folder named after the version)."""
    if version.kind != ModelVersion.Kind.TRAINED:
        raise ExportFailed(
            f"{version.name} was imported (from {shown_path(version.source)}); only models "
            "trained here are exported"
        )
    model_dir = Path(version.artifact_path)
    archive = model_dir / f"{EXPORT_DIR}.zip"
    if archive.is_file():
        return archive
    if not (model_dir / "prm.json").is_file():
        raise ExportFailed(
            f"the files of {version.name} are not on this server ({shown_path(model_dir)})"
        )
    export = build_hf_export(version=version)
    fd, tmp = tempfile.mkstemp(prefix=f".{EXPORT_DIR}-", suffix=".zip", dir=model_dir)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zf:
            for path in sorted(export.iterdir()):
                # Weights do not compress; the tokenizer and card do.
                method = (
                    zipfile.ZIP_STORED if path.suffix == ".safetensors" else zipfile.ZIP_DEFLATED
                )
                zf.write(path, f"{EXPORT_DIR}/{path.name}", compress_type=method)
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return archive


def build_hf_export(*, version: ModelVersion) -> Path:
    """The export folder in the version's artifact folder, built by `cli export` if missing.
    The model card gets the version's metrics (held-out figures, gate) and data version."""
    model_dir = Path(version.artifact_path)
    out = model_dir / EXPORT_DIR
    if (out / "config.json").is_file():
        return out
    metrics = {**version.metrics, "dataset_version": version.dataset_version}
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=model_dir, delete=False) as f:
        json.dump(metrics, f)
    command = [
        sys.executable,
        "-m",
        "modeling.training.cli",
        "export",
        "--model",
        str(model_dir),
        "--format",
        "hf",
        "--output",
        str(out),
        "--metrics",
        f.name,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    try:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=EXPORT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise ExportFailed(f"the export took over {EXPORT_TIMEOUT_S} s") from exc
    finally:
        Path(f.name).unlink(missing_ok=True)
    # A concurrent request may have built it first (ours then refuses the non-empty folder).
    if (out / "config.json").is_file():
        return out
    raise ExportFailed(
        without_roots(f"the export failed: {done.stderr[-STDERR_TAIL_CHARS:].strip()}")
    )
