"""Training data in every common PRM shape (`modeling.training.inputs`): each reads to the
solutions it holds, detected from its content, and trains a tiny model through `cli train
--data`; a malformed file of each shape is one line naming the file, the row and the column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modeling.training import cli, inputs
from modeling.training.data import (
    Alternative,
    LabeledSolution,
    example_from_prm800k,
    examples_from_critic_rows,
    examples_from_prm800k,
)
from tests.helpers.tiny_models import SAMPLES

TRL_ROWS = [
    {
        "prompt": "What is 2+3?",
        "completions": ["2+3=5.", "The answer is 5."],
        "labels": [True, True],
    },
    # an alternative to the second step: the first row's step and label, then another
    {
        "prompt": "What is 2+3?",
        "completions": ["2+3=5.", "The answer is 6."],
        "labels": [True, False],
    },
    {"prompt": "What is 7-4?", "completions": ["7-4=2.", "So 2."], "labels": [False, False]},
]
TRL_SOLUTIONS = [
    LabeledSolution(
        "What is 2+3?",
        ["2+3=5.", "The answer is 5."],
        [1, 1],
        [Alternative(1, "The answer is 6.", -1)],
    ),
    LabeledSolution("What is 7-4?", ["7-4=2.", "So 2."], [-1, -1]),
]
SHEPHERD_ROWS = [
    {
        "input": "Tom has 3 apples and buys 2. How many? Step 1: 3+2=5 ки\nStep 2: The answer is 5 ки",
        "label": "Tom has 3 apples and buys 2. How many? Step 1: 3+2=5 +\nStep 2: The answer is 5 +",
        "task": "GSM8K",
    },
    {  # no "Step 1:": the problem ends at its one "?"
        "input": "What is 6 times 7? 6*7=42 ки The answer is 41 ки",
        "label": "What is 6 times 7? 6*7=42 + The answer is 41 -",
        "task": "GSM8K",
    },
]
SHEPHERD_SOLUTIONS = [
    LabeledSolution(
        "Tom has 3 apples and buys 2. How many?",
        ["Step 1: 3+2=5", "Step 2: The answer is 5"],
        [1, 1],
    ),
    LabeledSolution("What is 6 times 7?", ["6*7=42", "The answer is 41"], [1, -1]),
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_datasets_folder(path: Path, rows: list[dict], test_rows: list[dict]) -> Path:
    """A DatasetDict written by the real `datasets` save_to_disk."""
    from datasets import Dataset, DatasetDict

    DatasetDict(
        {"train": Dataset.from_list(rows), "test": Dataset.from_list(test_rows)}
    ).save_to_disk(str(path))
    return path


def int_labels(rows: list[dict]) -> list[dict]:
    return [{**row, "labels": [1 if label else -1 for label in row["labels"]]} for row in rows]


# --- each shape reads to the solutions it holds ----------------------------------------------


@pytest.fixture
def shaped_files(tmp_path, shared_data) -> dict[str, tuple[Path, str, list[LabeledSolution]]]:
    """name -> (path, expected format text, expected solutions). Names say nothing of the
    content on purpose where the content alone must tell."""
    critic_rows = [
        {
            "instruction": "What is 1+1?",
            "responses": [],
            "next_response": "1+1=2.",
            "rating": 1,
            "is_preferred_response": True,
        },
        {
            "instruction": "What is 1+1?",
            "responses": [],
            "next_response": "1+1=3.",
            "rating": -1,
            "is_preferred_response": False,
        },
    ]
    return {
        "trl-jsonl-bool": (
            write_jsonl(tmp_path / "trl.data", TRL_ROWS),
            "TRL stepwise supervision (JSONL)",
            TRL_SOLUTIONS,
        ),
        "trl-parquet-int": (
            write_parquet(
                tmp_path / "trl-int.jsonl", int_labels(TRL_ROWS)
            ),  # Parquet, named .jsonl
            "TRL stepwise supervision (Parquet)",
            TRL_SOLUTIONS,
        ),
        "trl-datasets-folder": (
            write_datasets_folder(tmp_path / "trl-folder", TRL_ROWS, TRL_ROWS[2:]),
            "TRL stepwise supervision (datasets folder, split 'train'; not read: test)",
            TRL_SOLUTIONS,
        ),
        "math-shepherd-jsonl": (
            write_jsonl(tmp_path / "shepherd.jsonl", SHEPHERD_ROWS),
            "Math-Shepherd (JSONL)",
            SHEPHERD_SOLUTIONS,
        ),
        "math-shepherd-parquet": (
            write_parquet(tmp_path / "shepherd.parquet", SHEPHERD_ROWS),
            "Math-Shepherd (Parquet)",
            SHEPHERD_SOLUTIONS,
        ),
        "prm800k": (
            SAMPLES,
            "PRM800K (JSONL)",
            examples_from_prm800k(json.loads(line) for line in SAMPLES.read_text().splitlines()),
        ),
        "critic-parquet": (
            write_parquet(tmp_path / "critic.bin", critic_rows),
            "stepwise-critic (Parquet)",
            [LabeledSolution("What is 1+1?", ["1+1=2."], [1], [Alternative(0, "1+1=3.", -1)])],
        ),
    }


SHAPES = [
    "trl-jsonl-bool",
    "trl-parquet-int",
    "trl-datasets-folder",
    "math-shepherd-jsonl",
    "math-shepherd-parquet",
    "prm800k",
    "critic-parquet",
]


@pytest.mark.parametrize("name", SHAPES)
def test_each_shape_reads_to_its_solutions_and_says_what_it_read(shaped_files, name):
    path, described, expected = shaped_files[name]
    data = inputs.read_training_data(path)
    assert str(inputs.detect_format(path)) == str(data.format) == described
    assert data.solutions == expected
    labels = sum(s.n_labels() for s in expected)
    assert data.summary() == (
        f"{path}: read as {described} ({data.rows:,} rows -> {len(expected):,} solutions, "
        f"{labels:,} step labels)"
    )


def test_the_critic_parquet_reads_as_the_existing_reader_does(critic_rows, tmp_path):
    path = write_parquet(tmp_path / "critic.parquet", critic_rows)
    assert inputs.read_training_data(path).solutions == examples_from_critic_rows(critic_rows)


def test_a_dataset_saved_in_shards_after_a_selection_reads_its_rows_in_order(tmp_path):
    from datasets import Dataset

    rows = [{"prompt": f"P{i}?", "completions": ["a"], "labels": [i % 2 == 0]} for i in range(9)]
    Dataset.from_list(rows).select([8, 1, 4, 5]).save_to_disk(str(tmp_path / "d"), num_shards=2)
    data = inputs.read_training_data(tmp_path / "d")
    assert str(data.format) == "TRL stepwise supervision (datasets folder)"
    assert [(s.problem, s.ratings) for s in data.solutions] == [
        ("P8?", [1]),
        ("P1?", [-1]),
        ("P4?", [1]),
        ("P5?", [-1]),
    ]


def test_integer_labels_keep_zero_as_neutral_and_say_when_they_may_be_class_ids(tmp_path):
    rows = [{"prompt": "P?", "completions": ["a", "b"], "labels": [1, 0]}]
    data = inputs.read_training_data(write_jsonl(tmp_path / "x.jsonl", rows))
    assert data.solutions == [LabeledSolution("P?", ["a", "b"], [1, 0])]
    assert len(data.notes) == 1 and "never -1" in data.notes[0]
    rows.append({"prompt": "Q?", "completions": ["c"], "labels": [-1]})
    assert inputs.read_training_data(write_jsonl(tmp_path / "y.jsonl", rows)).notes == []


def test_a_math_shepherd_tag_inside_the_problem_drops_its_label_and_keeps_the_text(tmp_path):
    row = {
        "input": "Let $x=1$. ки Find $x+1$. Step 1: $x+1=2$ ки",
        "label": "Let $x=1$. + Find $x+1$. Step 1: $x+1=2$ -",
    }
    data = inputs.read_training_data(write_jsonl(tmp_path / "s.jsonl", [row]))
    assert data.solutions == [LabeledSolution("Let $x=1$.  Find $x+1$.", ["Step 1: $x+1=2$"], [-1])]


def test_a_solution_round_trips_through_a_prm800k_line(critic_rows):
    solutions = [
        *examples_from_critic_rows(critic_rows),
        LabeledSolution(
            "P", ["a", "b"], [None, 0], [Alternative(0, "x", 1), Alternative(2, "y", -1)]
        ),
        LabeledSolution("Q", [], [], [Alternative(0, "only", -1)]),
    ]
    for solution in solutions:
        line = json.loads(json.dumps(inputs.prm800k_record(solution)))
        assert example_from_prm800k(line) == solution


def test_folders_hash_as_their_files_in_sorted_order(tmp_path):
    folder = write_datasets_folder(tmp_path / "d", TRL_ROWS, TRL_ROWS)
    first = cli.files_sha256([str(folder)])
    assert first == cli.files_sha256([str(folder)])
    (folder / "train" / "extra.txt").write_text("changed")
    assert cli.files_sha256([str(folder)]) != first


# --- malformed files: one line naming the file, the row and the column -----------------------

GOOD_TRL = {"prompt": "P?", "completions": ["a"], "labels": [True]}
GOOD_PRM800K = json.loads(SAMPLES.read_text().splitlines()[0]) if SAMPLES.exists() else {}


def broken_prm800k() -> dict:
    record = json.loads(json.dumps(GOOD_PRM800K))
    record["label"]["steps"][1]["completions"][0]["rating"] = 2
    return record


MALFORMED = {
    "trl lengths differ": (
        "jsonl",
        [GOOD_TRL, {"prompt": "P?", "completions": ["a", "b"], "labels": [True]}],
        "row 2, column 'labels': 1 labels for 2 completions",
    ),
    "trl label not a rating": (
        "parquet",
        [{"prompt": "P?", "completions": ["a", "b"], "labels": [1, 2]}],
        "row 1, column 'labels[1]': 2 is not a boolean or a rating -1, 0 or 1",
    ),
    "trl completions wrong type": (
        "jsonl",
        [GOOD_TRL, GOOD_TRL, {"prompt": "P?", "completions": "a", "labels": [True]}],
        "row 3, column 'completions': a list of strings was expected, not a string",
    ),
    "trl column missing in a later row": (
        "jsonl",
        [GOOD_TRL, {"prompt": "P?", "completions": ["a"]}],
        "row 2, column 'labels': missing",
    ),
    "trl conversational prompt": (
        "jsonl",
        [{"prompt": [{"role": "user", "content": "P?"}], "completions": ["a"], "labels": [True]}],
        "row 1, column 'prompt': a string was expected, not a list",
    ),
    "math-shepherd sign missing": (
        "jsonl",
        [{"input": "Q? Step 1: a ки", "label": "Q? Step 1: a ки"}],
        "row 1, column 'label': step 1: 'к' where the input's tag is (character 14)",
    ),
    "math-shepherd no tag": (
        "parquet",
        [{"input": "Q? Step 1: a", "label": "Q? Step 1: a"}],
        "row 1, column 'input': no step ends in the step tag 'ки'",
    ),
    "prm800k bad rating": (
        "jsonl",
        [GOOD_PRM800K, broken_prm800k()] if GOOD_PRM800K else [],
        "row 2, column 'label.steps[1].completions[0].rating': 2 is not a rating -1, 0, 1",
    ),
    "critic preferred not a boolean": (
        "parquet",
        [
            {
                "instruction": "P",
                "responses": [],
                "next_response": "a",
                "rating": 1,
                "is_preferred_response": "yes",
            }
        ],
        "row 1, column 'is_preferred_response': a boolean was expected, not a string",
    ),
    "unknown columns": (
        "jsonl",
        [{"question": "P?", "answer": "4"}],
        "row 1: columns question, answer match no known shape",
    ),
}


def write_rows(path: Path, container: str, rows: list[dict]) -> Path:
    return write_parquet(path, rows) if container == "parquet" else write_jsonl(path, rows)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_file_is_one_line_naming_file_row_and_column(
    tmp_path, shared_data, case, capsys
):
    container, rows, why = MALFORMED[case]
    path = write_rows(tmp_path / f"data.{container}", container, rows)
    with pytest.raises(inputs.DataFormatError) as raised:
        inputs.read_training_data(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and why in message and "\n" not in message

    assert cli.main(["train", "--data", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"train: error: {message}\n"  # one line, no traceback
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no such file or folder"),
        ("", "empty file"),
        ("  \n\n", "empty file"),
        (
            '{"prompt": "P?", "completions": ["a"], "labels": [true]}\n{"prompt": ',
            "row 2: not valid JSON",
        ),
        (
            "prompt,completions,labels\n",
            "not JSON lines, a JSON array, Parquet or a datasets folder",
        ),
        ('["a"]', "row 1: a JSON object was expected, not a string"),
        ("PAR1 but not really", "not readable"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "row 1: JSON nested too deeply"),
    ],
)
def test_files_no_shape_can_be_read_from_are_one_line_too(tmp_path, content, why):
    path = tmp_path / "data.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(inputs.DataFormatError) as raised:
        inputs.read_training_data(path)
    assert str(raised.value).startswith(f"{path}") and why in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_datasets_folder_without_a_train_split_names_its_splits(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict({"validation": Dataset.from_list([GOOD_TRL])}).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(inputs.DataFormatError, match="splits \\(validation\\) hold no 'train'"):
        inputs.read_training_data(tmp_path / "d")
    with pytest.raises(inputs.DataFormatError, match="not one written by datasets"):
        inputs.read_training_data(tmp_path)


def test_a_parquet_file_without_rows_or_a_folder_naming_files_elsewhere_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("prompt", pa.string()), ("completions", pa.list_(pa.string()))])
    pq.write_table(
        pa.Table.from_pylist([], schema=schema.append(pa.field("labels", pa.list_(pa.bool_())))),
        tmp_path / "empty.parquet",
    )
    with pytest.raises(inputs.DataFormatError, match="empty.parquet: no rows$"):
        inputs.read_training_data(tmp_path / "empty.parquet")
    folder = write_datasets_folder(tmp_path / "d", TRL_ROWS, TRL_ROWS)
    state = json.loads((folder / "train" / "state.json").read_text())
    state["_data_files"] = [{"filename": "../test/data-00000-of-00001.arrow"}]
    (folder / "train" / "state.json").write_text(json.dumps(state))
    with pytest.raises(inputs.DataFormatError, match="is not a data file's name"):
        inputs.read_training_data(folder)


def test_forcing_a_shape_checks_its_columns(tmp_path):
    path = write_jsonl(tmp_path / "trl.jsonl", TRL_ROWS)
    with pytest.raises(inputs.DataFormatError, match="row 1: no column 'question', 'label'"):
        inputs.read_training_data(path, inputs.PRM800K)


# --- each shape trains a tiny model through the CLI --------------------------------------------


def train_argv(tiny_llama: str, out: Path, *data: Path) -> list[str]:
    argv = ["train", "--backbone", tiny_llama, "--output-dir", str(out), "--device", "cpu"]
    argv += ["--max-steps", "2", "--lr", "1e-2", "--batch-tokens", "2048", "--max-length", "256"]
    argv += ["--checkpoint-every", "1000"]
    for path in data:
        argv += ["--data", str(path)]
    return argv


@pytest.mark.parametrize("num_labels", [3, 2])
@pytest.mark.parametrize("name", SHAPES)
def test_each_shape_trains_a_tiny_model_through_cli_train_data(
    shaped_files, name, num_labels, tiny_llama, tmp_path, capsys
):
    path, described, expected = shaped_files[name]
    out = tmp_path / "model"
    argv = [*train_argv(tiny_llama, out, path), "--num-labels", str(num_labels)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert f"{path}: read as {described}" in captured.err
    saved = json.loads((out / "prm.json").read_text())
    assert saved["config"]["dataset_version"] == cli.files_sha256([str(path)])
    assert saved["config"]["num_labels"] == num_labels
    labels = sum(s.n_labels() for s in expected)
    assert json.loads(captured.out)["labels"] > 0 and labels > 0


def test_evaluate_data_scores_the_held_out_problems_of_a_trl_file(tiny_llama, tmp_path, capsys):
    rows = [
        {
            "prompt": f"What is {n}+1?",
            "completions": [f"{n}+1={n + 1}.", "Done."],
            "labels": [True, n % 2 == 0],
        }
        for n in range(8)
    ]
    path = write_parquet(tmp_path / "trl.parquet", rows)
    out = tmp_path / "model"
    assert cli.main([*train_argv(tiny_llama, out, path), "--holdout-fraction", "0.25"]) == 0
    held_out = len(json.loads((out / "split.json").read_text())["test_problems"])
    capsys.readouterr()
    argv = ["evaluate", "--model", str(out), "--data", str(path), "--device", "cpu"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert f"{path}: read as TRL stepwise supervision (Parquet)" in captured.err
    assert json.loads(captured.out)["steps"]["solutions"] == held_out == 2
    assert cli.main(["evaluate", "--model", str(out), "--data", str(tmp_path / "none")]) == 2
    assert (
        capsys.readouterr().err == f"evaluate: error: {tmp_path / 'none'}: no such file or folder\n"
    )


# --- Stepwise's own TRL export trains unchanged -------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["stepwise_jsonl", "stepwise_parquet"])
def test_stepwise_own_trl_export_trains_through_cli_train_unchanged(
    shared_data, tiny_llama, tmp_path, fmt, capsys
):
    from labeling.services.exporting import ExportFilters, select_labelings, write_export_file
    from labeling.services.importing import import_prm800k

    import_prm800k(SAMPLES)  # six completed labelings
    export = tmp_path / f"export.{fmt.split('_')[1]}"
    written = write_export_file(export, fmt, select_labelings(ExportFilters()))
    assert written.rows > 6  # the paths and their alternatives, one row each

    data = inputs.read_training_data(export)
    assert (data.format.shape, data.rows) == (inputs.TRL, written.rows)
    # Each alternative row repeats its path's labels: read as trees, each label counts once.
    assert 6 <= len(data.solutions) < written.rows and data.step_labels < written.step_labels
    out = tmp_path / "model"
    assert cli.main(train_argv(tiny_llama, out, export)) == 0
    err = capsys.readouterr().err
    assert f"{export}: read as TRL stepwise supervision" in err
    assert (out / "prm.json").exists()
