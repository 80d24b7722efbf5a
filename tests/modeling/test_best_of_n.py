"""`evaluate_prm --best-of-n`: the PRM's pick, the last step's and majority vote on a sample file.

The model is a tiny random Llama whose head always says P(-1) = P(0) = P(+1) = 1/3, so every
step scores 2/3: the product rule prefers the sample with the fewest steps (ties split the
credit) and the last-step rule ties all samples. With 4 samples a problem, every subset at
N = 1, 2, 4 is enumerated, so the table is computed by hand (tests/modeling/data/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from modeling.models import ModelVersion
from tests.modeling.loop_helpers import make_tiny_backbone

SAMPLES = Path(__file__).parent / "data" / "best_of_n_samples.jsonl"

# By hand, per problem (half, ten, three) then their mean; see the data README.
EXPECTED = {
    1: {"prm": (0.25 + 0.75 + 0.75) / 3, "last": 1.75 / 3, "majority": 1.75 / 3},
    2: {"prm": (0.5 + 3.5 / 6 + 0.5) / 3, "last": 1.75 / 3, "majority": 1.75 / 3},
    4: {"prm": (1 + 0.5 + 0) / 3, "last": 1.75 / 3, "majority": (0 + 1 + 1) / 3},
}


@pytest.fixture(scope="module")
def constant_model(tmp_path_factory) -> str:
    import torch

    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    folder = tmp_path_factory.mktemp("constant-prm")
    config = TrainConfig(backbone=make_tiny_backbone(folder / "backbone"), device="cpu")
    model = ProcessRewardModel.from_config(config)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    return str(model.save(folder / "model"))


@pytest.fixture
def version(db, constant_model) -> ModelVersion:
    return ModelVersion.objects.create(
        name="constant", backbone="tiny", artifact_path=constant_model, metrics={"auroc": 0.7}
    )


def table_rows(out: str) -> dict[int, list[str]]:
    lines = out[: out.index("{")].splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["N"])
    return {int(line.split()[0]): line.split()[1:] for line in lines[start + 1 :] if line.strip()}


def test_best_of_n_prints_the_table_and_stores_the_curve(version, capsys):
    call_command("evaluate_prm", "--best-of-n", str(SAMPLES), "--model-version", str(version.pk))
    out = capsys.readouterr().out
    assert "Best of N on best_of_n_samples.jsonl" in out
    rows = table_rows(out)
    assert sorted(rows) == [1, 2, 4]
    for n, expected in EXPECTED.items():
        printed = [f"{expected[m]:.3f}" for m in ("prm", "last", "majority")] + ["3"]
        assert rows[n] == printed, n
    assert rows[2] == ["0.528", "0.583", "0.583", "3"]  # the same numbers, written out

    version.refresh_from_db()
    stored = version.metrics["evaluation"]["best_of_n"]
    assert version.metrics["auroc"] == 0.7  # the rest of the metrics stay
    assert (stored["problems"], stored["samples"]) == (3, 12)
    assert [row["n"] for row in stored["curve"]] == [1, 2, 4]
    for row in stored["curve"]:
        for method in ("prm", "last", "majority"):
            assert row[method] == pytest.approx(EXPECTED[row["n"]][method])
    assert json.loads(out[out.index("{") :])["best_of_n"] == stored


def test_best_of_n_is_stored_for_the_current_evaluation_set_and_the_page_says_which(
    version, capsys, client, researcher
):
    from django.urls import reverse

    from modeling.models import EvaluationSet, TrainingRun

    evaluation_set = EvaluationSet.objects.create(
        version=3, problem_ids=[1, 2, 4], file_path="x.jsonl", sha256="e" * 64, is_current=True
    )
    version.run = TrainingRun.objects.create(status=TrainingRun.Status.SUCCEEDED)
    version.save(update_fields=["run"])

    call_command("evaluate_prm", "--best-of-n", str(SAMPLES), "--model-version", str(version.pk))

    version.refresh_from_db()
    assert version.metrics["evaluation"]["best_of_n"]["evaluation_set"] == {
        "id": evaluation_set.pk, "version": 3, "sha256": "e" * 64, "problems": 3,
    }  # fmt: skip
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[version.run.pk])).content.decode()
    said = page.split('id="best-of-n-set">')[1].split("</p>")[0]
    assert "evaluation set v3 (3 problems" in said and "e" * 12 in said


def test_best_of_n_no_save_and_chosen_sizes(version, capsys):
    call_command(
        "evaluate_prm", "--best-of-n", str(SAMPLES), "--model-version", str(version.pk),
        "--n", "4", "--no-save",
    )  # fmt: skip
    rows = table_rows(capsys.readouterr().out)
    assert rows == {4: ["0.500", "0.583", "0.667", "3"]}
    version.refresh_from_db()
    assert "evaluation" not in version.metrics


def test_best_of_n_reports_a_bad_line(version, tmp_path):
    from django.core.management import CommandError

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"problem": "1+1?", "answer": "2", "samples": [{"steps": ["2"]}]}\n{"oops": 1}\n'
    )
    with pytest.raises(CommandError, match="bad.jsonl, line 2: KeyError"):
        call_command("evaluate_prm", "--best-of-n", str(bad), "--model-version", str(version.pk))
