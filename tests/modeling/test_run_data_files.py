"""Training runs on data files (any shape `modeling.training.inputs` reads) under the data root:
the page and the API take only files there (one validator, ProcessBench's), a run freezes their
solutions into its data.jsonl beside its labelings (or alone), and a file that cannot be read
fails the run at freeze in one line that names the file under its root's setting."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.urls import reverse

from labeling.models import Problem
from labeling.services.importing import import_prm800k
from modeling.models import ModelVersion, TrainingRun
from modeling.services import evaluation_sets, execution, run_data, runs
from modeling.training.data import LabeledSolution, examples_from_prm800k, read_jsonl
from tests.helpers.tiny_models import SAMPLES
from tests.modeling.loop_helpers import make_tiny_backbone
from tests.modeling.test_runs import tiny
from tests.modeling.test_runs_pages import start_form

pytestmark = pytest.mark.django_db

TRL_ROWS = [
    {
        "prompt": "What is 2+3?",
        "completions": ["2+3=5.", "The answer is 5."],
        "labels": [True, True],
    },
    {"prompt": "What is 7-4?", "completions": ["7-4=2.", "So 2."], "labels": [False, False]},
]


@pytest.fixture(scope="module")
def backbone(tmp_path_factory) -> str:
    return make_tiny_backbone(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def data_root(settings, tmp_path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    settings.STEPWISE_DATA_ROOT = root
    (root / "trl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRL_ROWS))
    (root / "folder").mkdir()
    (root / "folder" / "state.json").write_text("{}")
    (tmp_path / "outside.jsonl").write_text((root / "trl.jsonl").read_text())
    return root


REFUSED = {
    "absolute, outside": ("{tmp}/outside.jsonl", "are named under the data root"),
    "dot-dot, outside": ("../outside.jsonl", "are named under the data root"),
    "server file": ("/etc/passwd", "are named under the data root"),
    "missing": ("none.jsonl", "no such file or folder under the data root"),
    "the root itself": ("{tmp}/data", "no such file or folder under the data root"),
    "past the name limit": ("x" * 5000, "not a usable file name"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_api_and_the_page_refuse_a_data_file_outside_the_root_or_missing_alike(
    client, researcher, data_root, tmp_path, case
):
    name, why = REFUSED[case]
    name = name.format(tmp=tmp_path)
    client.force_login(researcher)
    api = client.post(
        "/p/default/api/runs/",
        {"data_files": [name], "use_labelings": False},
        content_type="application/json",
    )
    page = client.post(reverse("modeling_runs:list"), start_form(data="none", data_files=name))
    assert api.status_code == 400 and page.status_code == 200
    (message,) = api.json()["data_files"]
    assert why in message and message.startswith(name[:200])
    # Where the root is stays on the server: the message quotes only the name sent.
    assert str(data_root) not in message.removeprefix(name[:200])
    assert page.context["form"].errors["data_files"] == [message]  # the one validator
    assert not TrainingRun.objects.exists()


def test_a_run_with_neither_labelings_nor_files_is_refused_when_started(
    client, researcher, data_root
):
    client.force_login(researcher)
    api = client.post(
        "/p/default/api/runs/", {"use_labelings": False}, content_type="application/json"
    )
    page = client.post(reverse("modeling_runs:list"), start_form(data="none"))
    assert api.status_code == 400 and "given neither" in api.json()["detail"]
    assert "name at least one data file" in " ".join(page.context["form"].errors["data_files"])
    with pytest.raises(runs.RunError, match="given neither"):
        runs.create_training_run(config={}, use_labelings=False)
    assert not TrainingRun.objects.exists()


def test_the_api_and_the_page_take_files_and_folders_under_the_root(
    client, researcher, data_root, django_capture_on_commit_callbacks
):
    client.force_login(researcher)
    with django_capture_on_commit_callbacks(execute=False):  # queued, not trained here
        api = client.post(
            "/p/default/api/runs/",
            {"data_files": ["trl.jsonl", str(data_root / "folder")], "use_labelings": False},
            content_type="application/json",
        )
        page = client.post(
            reverse("modeling_runs:list"), start_form(data_files="trl.jsonl\n\nfolder\n")
        )
    assert api.status_code == 201, api.content
    assert page.status_code == 302, page.context["form"].errors
    assert api.json()["dataset_description"]["data_files"] == [
        "STEPWISE_DATA_ROOT/trl.jsonl",
        "STEPWISE_DATA_ROOT/folder",
    ]
    files_only, both = TrainingRun.objects.order_by("pk")
    expected = [str(data_root / "trl.jsonl"), str(data_root / "folder")]
    assert files_only.dataset_description["data_files"] == expected
    assert files_only.dataset_description["use_labelings"] is False
    assert both.dataset_description["data_files"] == expected
    assert both.dataset_description["use_labelings"] is True


def test_a_run_started_with_a_data_file_trains_on_it_and_its_labelings_end_to_end(
    data_root, backbone, open_evaluation_gate, client, researcher
):
    import_prm800k(SAMPLES)  # six completed labelings
    current = evaluation_sets.create_evaluation_set(count=1, seed=0)
    held_out = Problem.objects.get(pk=current.problem_ids[0]).text
    rows = [*TRL_ROWS, {"prompt": held_out, "completions": ["x"], "labels": [True]}]
    (data_root / "trl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = runs.create_training_run(
        config=tiny(backbone), data_files=[runs.data_root_path("trl.jsonl", what="Data files")]
    )

    version = execution.execute_training_run(run.pk)

    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert version == ModelVersion.objects.get(run=run)
    frozen = Path(run.output_dir) / run_data.DATA_FILE
    assert run.dataset_version == hashlib.sha256(frozen.read_bytes()).hexdigest()
    (read,) = run.dataset_description["data_files_read"]
    assert read == {
        "path": "STEPWISE_DATA_ROOT/trl.jsonl",
        "format": "TRL stepwise supervision (JSONL)",
        "rows": 3,
        "solutions": 2,
        "step_labels": 4,
        "left_out": 1,  # the evaluation set's problem, as its labelings are
    }
    assert run.dataset_description["labelings"] == 5  # six, less the evaluation set's
    examples = examples_from_prm800k(read_jsonl(frozen))
    assert examples[-2:] == [
        LabeledSolution("What is 2+3?", ["2+3=5.", "The answer is 5."], [1, 1]),
        LabeledSolution("What is 7-4?", ["7-4=2.", "So 2."], [-1, -1]),
    ]
    described = run.dataset_description
    assert described["train_solutions"] + described["held_out_solutions"] == 7
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    assert (
        "<code>STEPWISE_DATA_ROOT/trl.jsonl</code>: TRL stepwise supervision (JSONL), 3 rows → "
        "2 solutions, 4 step labels (1 left out: the evaluation set's)"
    ) in page


def test_a_data_file_that_cannot_be_read_fails_the_run_at_freeze_in_one_line(
    data_root, backbone, tmp_path, client, researcher
):
    (data_root / "bad.jsonl").write_text(
        json.dumps({"prompt": "P?", "completions": ["a", "b"], "labels": [True]}) + "\n"
    )
    run = runs.create_training_run(
        config=tiny(backbone),
        data_files=[runs.data_root_path("bad.jsonl", what="Data files")],
        use_labelings=False,
    )
    assert execution.execute_training_run(run.pk) is None
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.FAILED and run.resumable is False
    assert run.error.startswith(
        "Cannot start: STEPWISE_DATA_ROOT/bad.jsonl: row 1, column 'labels': 1 labels for 2 "
        "completions"
    )
    assert "\n" not in run.error and str(tmp_path) not in run.error
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[run.pk])).content.decode()
    assert "STEPWISE_DATA_ROOT/bad.jsonl: row 1" in page and "Traceback" not in page
    assert "none: data files only" in page and '1, <span class="muted">read when' in page


def test_train_prm_takes_data_files_beside_or_instead_of_labelings(tmp_path):
    from django.core.management import CommandError, call_command

    data = tmp_path / "trl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in TRL_ROWS))
    with pytest.raises(CommandError, match="it was given neither"):
        call_command("train_prm", "--no-labelings", "--queue")
    with pytest.raises(CommandError, match="this run trains on data files only"):
        call_command("train_prm", "--no-labelings", "--data", str(data), "--batch", "1", "--queue")
    with pytest.raises(CommandError, match="data file not found"):
        call_command("train_prm", "--data", str(tmp_path / "none.jsonl"), "--queue")
    assert not TrainingRun.objects.exists()
    call_command("train_prm", "--no-labelings", "--data", str(data), "--queue")
    run = TrainingRun.objects.get()
    assert run.dataset_description["data_files"] == [str(data.resolve())]
    assert run.dataset_description["use_labelings"] is False
    assert run.dataset_description["filters"] == {}
