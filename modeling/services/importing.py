"""Bring your own PRM: a model trained elsewhere registered as a ModelVersion, then scored,
gated and activated like one trained here (`import_prm`, POST /api/models/import/).

Invariants:
- A folder is checked before anything is written or loaded (`training.external.describe`:
  config.json, no code of its own (`auto_map`), the architecture and its labels, weights
  present, its size against STEPWISE_MAX_IMPORT_PARAMETERS from config.json and the weights'
  headers, the tokenizer's pieces, the step separator: config.json's or the one given, never
  a default). A refusal is a ModelImportError and leaves no row and no files.
- A LoRA adapter alone (adapter_config.json, no config.json) is checked the same way with its
  base (`external.read_adapter`), then merged into that base in place of the copy, in a child
  process (`cli merge-adapter`: the web process never loads the model). A request
  never names the base: only the operator's command may (`base`); otherwise it is what the
  adapter names, if that is a named offline backbone or a model in the local HF cache.
- A version's name is the one given (refused when another version has it), else `imported`
  and the folder's name, or the upload's file name without its archive suffix, made distinct
  with ` (2)`, ` (3)`, … when another version has it.
- An uploaded archive is refused by its size (STEPWISE_MODEL_UPLOAD_MAX_BYTES), then by what its
  headers declare (entries, unpacked bytes, compression ratio) before anything is unpacked, and
  unpacked with each entry held to the bytes it declared; a refusal leaves nothing under
  MEDIA_ROOT.
- The model's files are copied (not linked: the source may change or vanish; an upload's own
  unpacked folder is moved) into MEDIA_ROOT/models/, with `external.json` saying how to read
  them; the row comes last.
- A request (the API) names only an uploaded archive or a folder under STEPWISE_MODELS_ROOT, and
  a link in it must stay under that root: it never reads other server folders. The operator's
  command may name any folder. Messages name the folder as the request did, never by the
  server's absolute path.
- An imported model passes its evaluation only through `gate_model_version`: the same gate as
  a run's, on the current evaluation set (made first when there is none, as a run does),
  against the active model; without a set it is not gated and not activated. A gate that
  cannot score the model records why and does not pass.
"""

from __future__ import annotations

import logging
import shutil
import struct
import subprocess
import tarfile
import tempfile
import uuid
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.conf import settings
from django.db import transaction

from labeling.models.projects import default_project_id
from modeling.models import EvaluationSet, ModelVersion
from modeling.services import evaluation_sets, torchrun
from modeling.training.backbones import folder_under
from modeling.training.external import (
    ADAPTER_CONFIG,
    MATH_SHEPHERD,
    Adapter,
    ExternalModelError,
    ModelTooLarge,
    describe,
    is_adapter,
    load_prm,
    read_adapter,
    write_manifest,
)
from stepwise.celery import start_on_commit
from stepwise.paths import without_roots

log = logging.getLogger(__name__)

IMPORTS_DIR = "models"  # under MEDIA_ROOT
MERGE_TIMEOUT_S = 900
GATE_TASK = "modeling.tasks.gpu_gate_model"
UNPACK_CHUNK = 2**20
# An entry this small is held only by the archive's total ratio: a JSON file of a few KB may
# compress far better than weights, and cannot make a bomb by itself.
RATIO_CHECKED_FROM = 2**20
# A zip's central directory is read whole before its entries are counted: at most this much
# per allowed entry (a name of up to about 1 KB), so a directory of millions of entries is
# refused from its size in the end record, before it is read.
ZIP_DIRECTORY_BYTES_PER_ENTRY = 1024
ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tbz2", ".txz", ".tar", ".zip")
NAME_CHARS = 200  # ModelVersion.name's length


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
    shown: str = "",
    step_separator: str | None = None,
    step_tag: str = MATH_SHEPHERD["step_tag"],
    good_token: str = MATH_SHEPHERD["good_token"],
    bad_token: str = MATH_SHEPHERD["bad_token"],
    links_within: Path | None = None,
    check_load: bool = False,
    move: bool = False,
    base: Path | None = None,
    default_name: str = "",
    project_id: int | None = None,
) -> ModelVersion:
    """Check the folder, copy it into the artifacts (a LoRA adapter: merge it into its base
    there) and write its ModelVersion (not passed, not active: `gate_model_version` decides).
    `shown`: a request's name for the folder, which its messages use, naming no server path;
    without it (the command) they name the folder as given. `links_within`: a link in the folder
    must resolve under it (a request's folder), else the import is refused. `check_load`: load
    the weights before the row is written (the command does; the web process loads no model:
    a LoRA adapter is merged in a child process, `_merge`). `move`: the folder is this import's own (an
    unpacked upload), moved into place. `base`: the folder a LoRA adapter is merged into (the
    operator's command only). `default_name`: the name when none is given (else `imported` and
    the folder's name). `project_id`: the project it is a model of (the Default one where None
    is named)."""
    folder = Path(folder)
    named = shown or str(folder)

    def refused(message: str) -> ModelImportError:
        if shown:  # a request's: no server path in what it is told
            message = without_roots(message.replace(str(folder), shown))
        return ModelImportError(message)

    if not folder.is_dir():
        raise refused(f"{named} is not a folder")

    def described(path: Path) -> dict[str, Any]:
        return describe(
            path,
            step_separator=step_separator,
            step_tag=step_tag,
            good_token=good_token,
            bad_token=bad_token,
            max_parameters=settings.STEPWISE_MAX_IMPORT_PARAMETERS,
        )

    adapter = None
    try:
        if is_adapter(folder):
            if links_within is not None:
                _refuse_links_out(folder, links_within)
            adapter = read_adapter(
                folder,
                base=base,
                step_separator=step_separator,
                max_parameters=settings.STEPWISE_MAX_IMPORT_PARAMETERS,
            )
        else:
            manifest = described(folder)
    except ModelTooLarge as exc:
        raise refused(f"cannot import {named}: {exc} (STEPWISE_MAX_IMPORT_PARAMETERS)") from None
    except ExternalModelError as exc:
        raise refused(f"cannot import {named}: {exc}") from None
    name = _version_name(name, default_name or f"imported {folder.name}")
    imports = Path(settings.MEDIA_ROOT) / IMPORTS_DIR
    imports.mkdir(parents=True, exist_ok=True)
    target = imports / f"imported-{uuid.uuid4().hex[:12]}"
    partial = target.with_name(target.name + ".partial")
    try:
        if adapter is not None:
            _merge(adapter, partial)
            try:
                merged_into = {"base_folder": str(base)} if base is not None else {}
                manifest = {
                    **described(partial),
                    "adapter": {**adapter.summary(), **merged_into},
                }
            except ExternalModelError as exc:
                raise refused(f"cannot import {named} merged into its base: {exc}") from None
        elif move:
            folder.rename(partial)
        else:
            _copy(folder, partial, links_within)
        write_manifest(partial, manifest)
        if check_load:
            _check_loads(partial)
        partial.rename(target)
        kind = ModelVersion.Kind(manifest["kind"])
        with transaction.atomic():
            return ModelVersion.objects.create(
                name=name,
                backbone=manifest["architecture"][:300],
                artifact_path=str(target),
                kind=kind,
                objective=imported_objective(manifest),
                source=(source or str(folder))[:500],
                metrics={"imported": manifest},
                project_id=project_id if project_id is not None else default_project_id(),
            )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        raise


def imported_objective(manifest: dict[str, Any]) -> str:
    """An imported model is a PRM unless its layout says it classifies whole sequences (an
    ORM's Hugging Face export: one score per solution)."""
    layout = str(manifest.get("layout") or manifest.get("kind") or "")
    if "sequence_classification" in layout or "ForSequenceClassification" in str(
        manifest.get("architecture") or ""
    ):
        return ModelVersion.Objective.OUTCOME
    return ModelVersion.Objective.PROCESS


def _version_name(given: str, default: str) -> str:
    """The name given, refused when a version has it; else `default` (made printable), with
    ` (2)`, ` (3)`, … after it while a version has that."""
    given = given[:NAME_CHARS]
    if given:
        taken = ModelVersion.objects.filter(name=given).values_list("pk", flat=True).first()
        if taken is not None:
            raise ModelImportError(
                f"model version {taken} is named {given!r} already: give another name"
            )
        return given
    base = " ".join("".join(c if c.isprintable() else " " for c in default).split())
    base = base[:NAME_CHARS] or "imported"
    names = set(
        ModelVersion.objects.filter(name__startswith=base[: NAME_CHARS - 8]).values_list(
            "name", flat=True
        )
    )
    name, n = base, 1
    while name in names:
        n += 1
        suffix = f" ({n})"
        name = base[: NAME_CHARS - len(suffix)] + suffix
    return name


def archive_stem(filename: str) -> str:
    """An uploaded archive's name without its folder and archive suffix: `my-prm.tar.gz` is
    `my-prm`."""
    stem = Path(filename).name
    for suffix in ARCHIVE_SUFFIXES:
        if stem.lower().endswith(suffix) and len(stem) > len(suffix):
            return stem[: -len(suffix)]
    return stem


def _merge(adapter: Adapter, out: Path) -> None:
    """`cli merge-adapter` in a child process: the base and the adapter are loaded there, never
    in this (web or command) process, which keeps no model's memory and never imports torch."""
    command = torchrun.cli_command(
        "merge-adapter",
        "--adapter",
        str(adapter.folder),
        "--base",
        str(adapter.base),
        "--task",
        adapter.task_type,
        "--output",
        str(out),
    )
    if adapter.labels is not None:
        command += ["--labels", str(adapter.labels)]
    try:
        done = subprocess.run(
            command,
            cwd=torchrun.ROOT,
            env=torchrun.cli_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=MERGE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ModelImportError(f"merging the adapter took over {MERGE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        # The child's last line is the exception (peft and transformers raise many kinds for a
        # mismatched pair); its traceback stays out of the message.
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        reason = lines[-1][:500] if lines else f"exit code {done.returncode}"
        raise ModelImportError(
            without_roots(f"the adapter does not merge into its base ({reason})")
        )


def _refuse_links_out(folder: Path, within: Path) -> None:
    """A request's adapter folder may link only under `within` (as `_copy` holds a model's)."""
    for path in folder.rglob("*"):
        if not path.resolve().is_relative_to(within.resolve()):
            raise ModelImportError(f"{path.name} links out of the models root: not imported")


def _check_loads(folder: Path) -> None:
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
    checked, unpacked under MEDIA_ROOT, imported (moved into place, not copied), and anything
    left of it removed."""
    shown = Path(getattr(archive, "name", None) or "the upload").name[:NAME_CHARS]
    size = archive_size(archive)
    limit = settings.STEPWISE_MODEL_UPLOAD_MAX_BYTES
    if size > limit:
        raise ModelImportError(
            f"{shown} is {size:,} bytes; an uploaded model may have at most {limit:,} "
            "(STEPWISE_MODEL_UPLOAD_MAX_BYTES)"
        )
    imports = Path(settings.MEDIA_ROOT) / IMPORTS_DIR
    imports.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=imports, prefix=".upload-") as tmp:
        unpacked = Path(tmp) / "unpacked"  # moved into place: never the folder `tmp` removes
        unpacked.mkdir()
        _unpack(archive, unpacked, size, shown)
        folder = unpacked
        if not _a_model_folder(folder):
            inner = [p for p in unpacked.iterdir() if p.is_dir()]
            if len(inner) == 1 and _a_model_folder(inner[0]):
                folder = inner[0]
        return import_model_version(
            folder=folder,
            links_within=unpacked,
            shown=shown,
            move=True,
            default_name=f"imported {archive_stem(shown)}",
            **options,
        )


def _a_model_folder(folder: Path) -> bool:
    return (folder / "config.json").exists() or (folder / ADAPTER_CONFIG).exists()


def archive_size(archive: IO[bytes]) -> int:
    """An upload's size in bytes: Django's count, else the file's end."""
    size = getattr(archive, "size", None)
    if isinstance(size, int):
        return size
    return archive.seek(0, 2)


def _unpack(archive: IO[bytes], target: Path, size: int, shown: str) -> None:
    """Unpack a zip or a tar (plain or compressed) into `target`, once what it declares passed
    the limits: entries, unpacked bytes, compression ratio. Only files and folders, named
    inside the archive's folder; each entry is cut off at the size it declared, so a header
    that lies unpacks no more than it said."""
    limits = _ArchiveLimits(size, shown)
    archive.seek(0)
    if zipfile.is_zipfile(archive):
        _unpack_zip(archive, target, size, limits)
        return
    archive.seek(0)
    try:
        with tarfile.open(fileobj=archive, mode="r:*") as tarred:
            members = []
            for member in tarred:  # headers only: each member's data is skipped over
                members.append(member)
                limits.count(len(members))
                limits.add(member.name, member.size, None)
                if not (member.isfile() or member.isdir()):
                    raise ModelImportError(
                        f"{shown}: {member.name[:100]!r} is a link or a special file; an "
                        "archive of a model holds files and folders only"
                    )
                _member_path(target, member.name, shown)
            for member in members:
                path = _member_path(target, member.name, shown)
                if member.isdir():
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                source = tarred.extractfile(member)
                assert source is not None  # a regular file always has its data
                _write(source, path, member.size, member.name, shown)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ModelImportError(
            without_roots(f"{shown} is not a zip or tar archive of a model ({exc})")
        ) from None


def _unpack_zip(archive: IO[bytes], target: Path, size: int, limits: _ArchiveLimits) -> None:
    entries, directory_bytes = _zip_directory(archive, size)
    limits.count(entries)
    most = settings.STEPWISE_MODEL_ARCHIVE_MAX_ENTRIES * ZIP_DIRECTORY_BYTES_PER_ENTRY
    if directory_bytes > most:
        raise ModelImportError(
            f"{limits.shown}'s list of entries is {directory_bytes:,} bytes, more than "
            f"{settings.STEPWISE_MODEL_ARCHIVE_MAX_ENTRIES:,} entries need "
            "(STEPWISE_MODEL_ARCHIVE_MAX_ENTRIES)"
        )
    archive.seek(0)
    try:
        with zipfile.ZipFile(archive) as zipped:
            infos = zipped.infolist()
            limits.count(len(infos))  # the end record's count may lie
            for info in infos:
                limits.add(info.filename, info.file_size, info.compress_size)
                _member_path(target, info.filename, limits.shown)
            for info in infos:
                path = _member_path(target, info.filename, limits.shown)
                if info.is_dir():
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                with zipped.open(info) as source:
                    _write(source, path, info.file_size, info.filename, limits.shown)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError) as exc:
        # RuntimeError: an encrypted entry, or (NotImplementedError) a compression zipfile lacks
        raise ModelImportError(
            without_roots(f"{limits.shown} is not a readable zip archive ({exc})")
        ) from None


class _ArchiveLimits:
    """What an archive's headers declare, held to the settings as each header is read."""

    def __init__(self, size: int, shown: str) -> None:
        self.size, self.shown, self.declared = max(size, 1), shown, 0

    def count(self, entries: int) -> None:
        most = settings.STEPWISE_MODEL_ARCHIVE_MAX_ENTRIES
        if entries > most:
            raise ModelImportError(
                f"{self.shown} has more than {most:,} entries "
                "(STEPWISE_MODEL_ARCHIVE_MAX_ENTRIES); a model folder has tens"
            )

    def add(self, name: str, size: int, compressed: int | None) -> None:
        """One entry's declared size (and, in a zip, its compressed size)."""
        ratio = settings.STEPWISE_MODEL_ARCHIVE_MAX_RATIO
        self.declared += size
        most = settings.STEPWISE_MODEL_UNPACKED_MAX_BYTES
        if self.declared > most:
            raise ModelImportError(
                f"{self.shown} unpacks to more than {most:,} bytes "
                "(STEPWISE_MODEL_UNPACKED_MAX_BYTES)"
            )
        if (
            compressed is not None
            and size >= RATIO_CHECKED_FROM
            and size > ratio * max(compressed, 1)
        ):
            raise ModelImportError(
                f"{self.shown}: {name[:100]!r} unpacks to {size:,} bytes from {compressed:,}, "
                f"more than {ratio:g} times (STEPWISE_MODEL_ARCHIVE_MAX_RATIO)"
            )
        if self.declared >= RATIO_CHECKED_FROM and self.declared > ratio * self.size:
            raise ModelImportError(
                f"{self.shown} unpacks to more than {ratio:g} times its {self.size:,} bytes "
                "(STEPWISE_MODEL_ARCHIVE_MAX_RATIO)"
            )


def _zip_directory(archive: IO[bytes], size: int) -> tuple[int, int]:
    """(entries, bytes of the central directory) as a zip's end record declares them (zip64's
    when it has one), read from its last 64 KB; (0, 0) where there is none to read."""
    tail_bytes = min(size, 22 + 2**16)
    archive.seek(size - tail_bytes)
    tail = archive.read(tail_bytes)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return 0, 0
    entries, directory_bytes = struct.unpack("<HI", tail[at + 10 : at + 16])
    if at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":  # zip64: its end record's counts
        (offset,) = struct.unpack("<Q", tail[at - 12 : at - 4])
        if offset + 56 <= size:
            archive.seek(offset)
            record = archive.read(56)
            if record[:4] == b"PK\x06\x06":
                entries, directory_bytes = struct.unpack("<QQ", record[32:48])
    return entries, directory_bytes


def _member_path(target: Path, name: str, shown: str) -> Path:
    """Where an entry is unpacked: under `target`, or refused (an absolute name or `..`)."""
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or ".." in parts or "\x00" in name:
        raise ModelImportError(
            f"{shown}: the entry {name[:100]!r} points out of the archive's folder"
        )
    return target.joinpath(*parts)


def _write(source: IO[bytes], path: Path, declared: int, name: str, shown: str) -> None:
    """Copy an entry to `path` in chunks, refused once it passes the size it declared."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        out = path.open("xb")
    except FileExistsError:
        raise ModelImportError(f"{shown}: {name[:100]!r} comes twice in the archive") from None
    with out:
        while chunk := source.read(UNPACK_CHUNK):
            written += len(chunk)
            if written > declared:
                raise ModelImportError(
                    f"{shown}: {name[:100]!r} unpacks to more than the {declared:,} bytes it "
                    "declares"
                )
            out.write(chunk)


def gate_model_version(version_id: int, *, activate: bool = False) -> ModelVersion:
    """Score the model and the active one on the current evaluation set (made first when there
    is none and can be) and record the gate, as a run's end does; make it active when asked and
    it passed."""
    # Scoring loads torch and scikit-learn: on the worker that gates, not where pages import this.
    from modeling.services import evaluation

    version = ModelVersion.objects.get(pk=version_id)
    active = ModelVersion.active(version.project_id)
    if active is not None and active.pk == version.pk:
        active = None  # measured again: against nothing
    # The same set as a run's gate: the current one, made first when there is none and can be.
    evaluation_set, missing = evaluation_sets.ensure_evaluation_set(version.project_id)
    metrics: dict[str, Any] = {}
    if version.is_outcome:
        return _gate_outcome(version, evaluation_set, missing)
    if evaluation_set is not None:
        try:
            metrics["evaluation_set"] = evaluation.evaluate_on_evaluation_set(
                evaluation_set.reference(), version.artifact_path, active
            )
        except Exception as exc:  # a model that does not load or score (or the time limit)
            log.exception("the gate of model version %s could not score it", version_id)
            said = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
            metrics["evaluation_set"] = {
                **evaluation_set.reference(),
                "new_auroc": None,
                "active_auroc": None,
                "active_model": active.pk if active else None,
                "error": without_roots(
                    f"the model could not be scored on evaluation set v{evaluation_set.version} "
                    f"({said[:1000]})"
                ),
            }
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


def _gate_outcome(
    version: ModelVersion, evaluation_set: EvaluationSet | None, missing: str
) -> ModelVersion:
    """An imported ORM's gate, as a trained one's: solution AUROC of correctness on the
    evaluation set's graded solutions (`outcome_gate`); never compared with the active PRM, never
    activated."""
    from modeling.services import evaluation

    metrics: dict[str, Any] = {}
    if evaluation_set is not None:
        reference = evaluation_set.reference()
        try:
            metrics["evaluation_set"] = evaluation.evaluate_outcome_on_evaluation_set(
                reference, version.artifact_path
            )
        except Exception as exc:  # a model that does not load or score (or the time limit)
            log.exception("the gate of model version %s could not score it", version.pk)
            said = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
            metrics["evaluation_set"] = {
                **reference,
                "solution_auroc": None,
                "error": without_roots(
                    f"the model could not be scored on evaluation set v{evaluation_set.version} "
                    f"({said[:1000]})"
                ),
            }
    gate = evaluation.outcome_gate(metrics, missing=missing)
    with transaction.atomic():
        version = ModelVersion.objects.select_for_update().get(pk=version.pk)
        version.metrics = {**(version.metrics or {}), **metrics, "gate": gate}
        version.passed_evaluation = gate["passed"]
        version.save(update_fields=["metrics", "passed_evaluation"])
    return version


def gate_in_background(version: ModelVersion, *, activate: bool = False) -> None:
    """`gate_model_version` on the gpu worker (a thread of this process in the embedded
    default) once the transaction commits: it loads and scores models."""
    start_on_commit(GATE_TASK, version.pk, activate)
