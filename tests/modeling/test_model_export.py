"""The model versions page's download: a Hugging Face checkpoint zip, built once and kept."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.urls import reverse

from modeling.models import ModelVersion
from tests.helpers.tiny_models import save_tiny_llama
from tests.modeling.training.test_export import save_model

pytestmark = pytest.mark.django_db

METRICS = {"auroc": 0.8123, "held_out": {"n": 52, "n_negative": 12, "auroc_negative": 0.8123}}


def version_at(path: str) -> ModelVersion:
    return ModelVersion.objects.create(
        name="tiny #1",
        backbone="tiny",
        artifact_path=path,
        dataset_version="d" * 64,
        metrics=METRICS,
        passed_evaluation=True,
    )


def test_download_button_gives_a_zip_of_the_hf_export_built_once(client, researcher, tmp_path):
    model_dir = save_model(save_tiny_llama(tmp_path / "llama"), "lora", tmp_path)
    version = version_at(model_dir)
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:models")).content.decode()
    url = reverse("modeling_runs:export", args=[version.pk])
    assert f'id="export-{version.pk}" href="{url}"' in page

    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="tiny-1-{version.pk}-hf.zip"'
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    names = set(archive.namelist())
    assert {
        "hf-export/config.json",
        "hf-export/model.safetensors",
        "hf-export/tokenizer.json",
        "hf-export/tokenizer_config.json",
        "hf-export/README.md",
    } <= names
    config = json.loads(archive.read("hf-export/config.json"))
    assert config["id2label"] == {"0": "-1", "1": "0", "2": "+1"}
    assert config["step_separator"] == "\n\n"
    card = archive.read("hf-export/README.md").decode()
    assert "| auroc_negative | 0.8123 |" in card and "d" * 64 in card

    # Kept in the version's artifact folder: the second download builds nothing.
    built = tmp_path / "model" / "hf-export.zip"
    stamp = built.stat().st_mtime_ns
    again = client.get(url)
    assert again.status_code == 200 and built.stat().st_mtime_ns == stamp
    assert b"".join(again.streaming_content) == built.read_bytes()
    assert ModelVersion.objects.get(pk=version.pk).metrics == METRICS


def test_download_of_a_version_whose_files_are_gone_says_so_and_writes_nothing(
    client, lead, tmp_path
):
    version = version_at(str(tmp_path / "gone"))
    client.force_login(lead)
    response = client.get(reverse("modeling_runs:export", args=[version.pk]), follow=True)
    assert response.status_code == 200
    assert "are not on this server" in response.content.decode()
    assert list(tmp_path.iterdir()) == []


def test_download_is_refused_to_labelers(client, labeler, tmp_path):
    version = version_at(str(tmp_path))
    client.force_login(labeler)
    assert client.get(reverse("modeling_runs:export", args=[version.pk])).status_code == 403
    assert list(tmp_path.iterdir()) == []
