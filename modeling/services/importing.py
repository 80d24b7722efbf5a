"""Bring your own PRM: a model trained elsewhere registered as a ModelVersion, then scored,
gated and activated like one trained here (`import_prm`, POST /api/models/import/).

Invariants:
- A folder is checked before anything is written (`training.external.describe`: config.json,
  the architecture and its labels, weights present, the tokenizer's pieces). A refusal is a
  ModelImportError and leaves no row and no files.
- The model's files are copied (not linked: the source may change or vanish) into
  MEDIA_ROOT/models/, with `external.json` saying how to read them; the row comes last.
- A request (the API) names only an uploaded archive or a folder under STEPWISE_MODELS_ROOT, and
  a link in it must stay under that root: it never reads other server folders. The operator's
  command may name any folder.
- An imported model passes its evaluation only through `gate_model_version`: the same gate as
  a run's, on the current evaluation set (made first when there is none, as a run does),
  against the active model; without a set it is not gated and not activated.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction

from modeling.models import ModelVersion
from modeling.services import evaluation_sets
from modeling.training.backbones import folder_under
from modeling.training.external import (
    MATH_SHEPHERD,
    STEP_TAG,
    ExternalModelError,
    describe,
    write_manifest,
)
from stepwise.celery import start_on_commit

IMPORTS_DIR = "models"  # under MEDIA_ROOT
MAX_UNPACKED_BYTES = 64 * 2**30  # an uploaded archive may unpack to at most this
GATE_TASK = "modeling.tasks.gpu_gate_model"


class ModelImportError(Exception):
    """A model that cannot be imported; the message says why (CLI: CommandError, API: 400)."""


def allowed_model_folder(name: str) -> Path:
    """The folder a request may import from: one under STEPWISE_MODELS_ROOT (the rule of
    runs.allowed_backbone). Anything else is refused with one message, whether or not it
    exists, so a request cannot probe which folders the server has."""
    root = Path(settings.STEPWISE_MODELS_ROOT)
    folder = folder_under(name, root) if 0 < len(name) <= 1000 and "\x00" not in name else None
    if folder is None:
        shown = name if len(name) <= 80 else f"{name[:80]}…"
        raise ModelImportError(
            f"{shown!r} is not a model folder under the models root (STEPWISE_MODELS_ROOT); "
            "upload the folder as a zip or tar archive instead"
        )
    return folder


def import_model_version(
    *,
    folder: str | Path,
    name: str = "",
    source: str = "",
    step_separator: str | None = None,
    step_tag: str = MATH_SHEPHERD["step_tag"],
    good_token: str = MATH_SHEPHERD["good_token"],
    bad_token: str = MATH_SHEPHERD["bad_token"],
    links_within: Path | None = None,
    check_load: bool = False,
) -> ModelVersion:
    """Check the folder, copy it into the artifacts and write its ModelVersion (not passed,
    not active: `gate_model_version` decides). `links_within`: a link in the folder must
    resolve under it (a request's folder), else the import is refused. `check_load`: load the
    weights before the row is written (the command does; the web process loads no model)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelImportError(f"{folder} is not a folder")
    try:
        manifest = describe(
            folder,
            step_separator=step_separator,
            step_tag=step_tag,
            good_token=good_token,
            bad_token=bad_token,
        )
    except ExternalModelError as exc:
        raise ModelImportError(f"cannot import {folder.name or folder}: {exc}") from None
    imports = Path(settings.MEDIA_ROOT) / IMPORTS_DIR
    imports.mkdir(parents=True, exist_ok=True)
    target = imports / f"imported-{uuid.uuid4().hex[:12]}"
    partial = target.with_name(target.name + ".partial")
    try:
        _copy(folder, partial, links_within)
        write_manifest(partial, manifest)
        if check_load:
            _check_loads(partial)
        partial.rename(target)
        kind = ModelVersion.Kind.STEP_TAG if manifest["kind"] == STEP_TAG else None
        with transaction.atomic():
            return ModelVersion.objects.create(
                name=(name or f"imported {folder.name}")[:200],
                backbone=manifest["architecture"][:300],
                artifact_path=str(target),
                kind=kind or ModelVersion.Kind.TOKEN_CLASSIFICATION,
                source=(source or str(folder))[:500],
                metrics={"imported": manifest},
            )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        raise


def _check_loads(folder: Path) -> None:
    # torch loads only where a model trains or scores, never in the web process
    from modeling.training.external import load_prm

    try:
        load_prm(folder, device="cpu")
    except Exception as exc:  # transformers raises many kinds for broken weights
        raise ModelImportError(
            f"the model does not load ({exc.__class__.__name__}: {str(exc)[:500]})"
        ) from None


def _copy(folder: Path, target: Path, links_within: Path | None) -> None:
    """Copy the files a link points at, not the link; refuse a link out of `links_within`."""

    def copy(src: str, dst: str) -> Any:
        if links_within is not None and not Path(src).resolve().is_relative_to(
            links_within.resolve()
        ):
            raise ModelImportError(f"{Path(src).name} links out of the models root: not imported")
        return shutil.copy2(src, dst)

    shutil.copytree(folder, target, copy_function=copy)


def import_model_archive(*, archive: IO[bytes], **options: Any) -> ModelVersion:
    """An uploaded zip or tar of the model folder (its files at the top, or in one folder):
    unpacked under MEDIA_ROOT, imported, and the unpacked files removed."""
    imports = Path(settings.MEDIA_ROOT) / IMPORTS_DIR
    imports.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=imports, prefix=".upload-") as tmp:
        unpacked = Path(tmp)
        _unpack(archive, unpacked)
        folder = unpacked
        if not (folder / "config.json").exists():
            inner = [p for p in unpacked.iterdir() if p.is_dir()]
            if len(inner) == 1 and (inner[0] / "config.json").exists():
                folder = inner[0]
        return import_model_version(folder=folder, links_within=unpacked, **options)


def _unpack(archive: IO[bytes], target: Path) -> None:
    """Unpack a zip (zipfile drops `..` and absolute parts, makes no links) or a tar (the
    "data" filter refuses paths out of the target and links out of it)."""
    archive.seek(0)
    if zipfile.is_zipfile(archive):
        archive.seek(0)
        with zipfile.ZipFile(archive) as zipped:
            if sum(i.file_size for i in zipped.infolist()) > MAX_UNPACKED_BYTES:
                raise ModelImportError("the archive unpacks to more than 64 GiB")
            zipped.extractall(target)
        return
    archive.seek(0)
    try:
        with tarfile.open(fileobj=archive, mode="r:*") as tarred:
            members = tarred.getmembers()
            if sum(m.size for m in members) > MAX_UNPACKED_BYTES:
                raise ModelImportError("the archive unpacks to more than 64 GiB")
            tarred.extractall(target, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ModelImportError(
            f"the upload is not a zip or tar archive of a model ({exc})"
        ) from None


def gate_model_version(version_id: int, *, activate: bool = False) -> ModelVersion:
    """Score the model and the active one on the current evaluation set (made first when there
    is none and can be) and record the gate, as a run's end does; make it active when asked and
    it passed."""
    # Scoring loads torch and scikit-learn: on the worker that gates, not where pages import this.
    from modeling.services import evaluation

    version = ModelVersion.objects.get(pk=version_id)
    active = ModelVersion.active()
    if active is not None and active.pk == version.pk:
        active = None  # measured again: against nothing
    # The same set as a run's gate: the current one, made first when there is none and can be.
    evaluation_set, missing = evaluation_sets.ensure_evaluation_set()
    metrics: dict[str, Any] = {}
    if evaluation_set is not None:
        metrics["evaluation_set"] = evaluation.evaluate_on_evaluation_set(
            evaluation_set.reference(), version.artifact_path, active
        )
    # Without a set an imported model has nothing to be measured on (no held-out split).
    gate = evaluation.evaluation_gate(metrics, active, missing=missing)
    with transaction.atomic():
        version = ModelVersion.objects.select_for_update().get(pk=version_id)
        version.metrics = {**(version.metrics or {}), **metrics, "gate": gate}
        version.passed_evaluation = gate["passed"]
        version.save(update_fields=["metrics", "passed_evaluation"])
        if activate and gate["passed"]:
            version.activate()
    return version


def gate_in_background(version: ModelVersion, *, activate: bool = False) -> None:
    """`gate_model_version` on the gpu worker (a thread of this process in the embedded
    default) once the transaction commits: it loads and scores models."""
    start_on_commit(GATE_TASK, version.pk, activate)
