"""Training data in every common PRM dataset shape, read into `LabeledSolution` records.

Shapes, told apart by their columns (the first row's keys, or the schema):

- PRM800K label lines (`question`, `label`): `data.examples_from_prm800k`.
- the stepwise-critic Parquet (`instruction`, `responses`, `next_response`, `rating`,
  `is_preferred_response`): `data.examples_from_critic_rows`.
- TRL's stepwise supervision (`prompt`, `completions`, `labels`): a boolean label is +1 (True)
  or -1 (False); an integer label is a rating as it is (-1, 0 neutral, +1).
- Math-Shepherd (`input` whose steps end in the tag "ки", `label` the same text with each tag
  replaced by "+" or "-"; `task` optional): split into problem and steps as TRL's conversion
  script did (the problem ends where "Step 1:" begins, else at its one "?").

Containers, told apart by content, not by the file's name: JSON lines (or one JSON array),
Parquet (its "PAR1" magic), or a folder written by `datasets`' `save_to_disk` (a DatasetDict's
"train" split, or a single Dataset). Extra columns are ignored. TRL and Math-Shepherd rows of one
problem that repeat a longer row's steps and labels and differ only in their last step are one
tree (the longer row's path, the other last steps its alternatives), as Stepwise's own TRL export
writes a labeling's alternatives; each distinct label is trained on once.

An outcome model's data, graded solutions (`read_graded`), comes in its own shapes, detected the
same way: graded JSONL (`problem`, `steps`, `correct`), ProcessBench (`final_answer_correct`), a
best-of-N samples file (`problem`, `answer`, `samples`) and PRM800K lines with the problem's
`ground_truth_answer`; the last two graded by an answer checker the caller passes.

Anything else is a `DataFormatError`: one line naming the file, the row (1-based; a JSONL file's
line number) and the column. pyarrow is loaded only to read Parquet or a datasets folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .data import (
    Alternative,
    GradedSolution,
    LabeledSolution,
    example_from_prm800k,
    examples_from_critic_rows,
)

STEP_TAG = "ки"  # Math-Shepherd's end-of-step tag

PRM800K = "prm800k"
CRITIC = "critic"
TRL = "trl"
MATH_SHEPHERD = "math-shepherd"
GRADED = "graded"
PROCESSBENCH = "processbench"
BEST_OF_N = "best-of-n"
SHAPE_NAMES = {
    PRM800K: "PRM800K",
    CRITIC: "stepwise-critic",
    TRL: "TRL stepwise supervision",
    MATH_SHEPHERD: "Math-Shepherd",
    GRADED: "graded solutions",
    PROCESSBENCH: "ProcessBench",
    BEST_OF_N: "best-of-N samples",
}
SHAPE_COLUMNS = {
    TRL: ("prompt", "completions", "labels"),
    MATH_SHEPHERD: ("input", "label"),
    PRM800K: ("question", "label"),
    CRITIC: ("instruction", "responses", "next_response", "rating", "is_preferred_response"),
}
CONTAINER_NAMES = {
    "jsonl": "JSONL",
    "json": "JSON array",
    "parquet": "Parquet",
    "datasets": "datasets folder",
}


class DataFormatError(ValueError):
    """A training data file that cannot be read; its message is one line naming the file, the
    row and the column."""


@dataclass(frozen=True)
class DataFormat:
    shape: str  # PRM800K, CRITIC, TRL or MATH_SHEPHERD
    container: str  # jsonl, json, parquet or datasets
    split: str | None = None  # a DatasetDict's split read
    other_splits: tuple[str, ...] = ()  # and those not read

    def __str__(self) -> str:
        where = CONTAINER_NAMES[self.container]
        if self.split is not None:
            where += f", split {self.split!r}"
            if self.other_splits:
                where += f"; not read: {', '.join(self.other_splits)}"
        return f"{SHAPE_NAMES[self.shape]} ({where})"


@dataclass
class TrainingData:
    """What one file gave: its solutions, and the counts the summary line reports."""

    path: str
    format: DataFormat
    rows: int
    solutions: list[LabeledSolution]
    notes: list[str] = field(default_factory=list)

    @property
    def step_labels(self) -> int:
        return sum(s.n_labels() for s in self.solutions)

    def summary(self) -> str:
        return (
            f"{self.path}: read as {self.format} ({self.rows:,} rows -> "
            f"{len(self.solutions):,} solutions, {self.step_labels:,} step labels)"
        )


# --- detecting ---------------------------------------------------------------------------


def detect_format(path: str | Path, shape: str | None = None) -> DataFormat:
    """The container (from the content) and the shape (from the columns) of a data file or
    folder; `shape` forces the shape (its columns are still checked)."""
    container, split, others = _container(Path(path))
    columns, where = _columns(Path(path), container, split)
    if shape is None:
        shape = _shape_of(columns, where)
    missing = [c for c in SHAPE_COLUMNS[shape] if c not in columns]
    if missing:
        raise DataFormatError(
            f"{where}: no column {', '.join(map(repr, missing))}, which {SHAPE_NAMES[shape]} "
            f"rows have (columns: {', '.join(columns) or 'none'})"
        )
    return DataFormat(shape, container, split, others)


def _container(path: Path) -> tuple[str, str | None, tuple[str, ...]]:
    if "\x00" in str(path):
        raise DataFormatError(f"{str(path)!r}: not a usable file name (a NUL character)")
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            splits = _json_file(path / "dataset_dict.json").get("splits")
            if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
                raise DataFormatError(f"{path}/dataset_dict.json: no list of splits")
            if "train" not in splits:
                raise DataFormatError(
                    f"{path}: a datasets folder whose splits ({', '.join(splits) or 'none'}) "
                    "hold no 'train' split"
                )
            return "datasets", "train", tuple(s for s in splits if s != "train")
        if (path / "state.json").is_file():
            return "datasets", None, ()
        raise DataFormatError(
            f"{path}: a folder, but not one written by datasets' save_to_disk "
            "(no dataset_dict.json or state.json)"
        )
    try:
        with path.open("rb") as f:
            head = f.read(4)
            if head == b"PAR1":
                return "parquet", None, ()
            f.seek(0)
            while chunk := f.read(1 << 16):
                text = chunk.lstrip()
                if text:
                    if text[:1] == b"[":
                        return "json", None, ()
                    if text[:1] == b"{":
                        return "jsonl", None, ()
                    raise DataFormatError(
                        f"{path}: not JSON lines, a JSON array, Parquet or a datasets folder "
                        f"(it starts with {text[:20]!r})"
                    )
    except FileNotFoundError:
        raise DataFormatError(f"{path}: no such file or folder") from None
    except IsADirectoryError:
        raise DataFormatError(f"{path}: not a readable file") from None
    except OSError as exc:
        raise DataFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    raise DataFormatError(f"{path}: empty file")


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise DataFormatError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise DataFormatError(f"{path}: not a JSON object")
    return value


def _columns(path: Path, container: str, split: str | None) -> tuple[list[str], str]:
    """The column names and where they were found (for messages)."""
    if container in ("parquet", "datasets"):
        names = _arrow_schema(path, container, split).names
        return list(names), str(path)
    for number, row in _json_rows(path, container):
        return list(row), f"{path}: row {number}"
    raise DataFormatError(f"{path}: empty file")


def _shape_of(columns: list[str], where: str) -> str:
    present = set(columns)
    for shape, needed in SHAPE_COLUMNS.items():
        if set(needed) <= present and not (shape == MATH_SHEPHERD and "question" in present):
            return shape
    known = "; ".join(f"{SHAPE_NAMES[s]}: {', '.join(c)}" for s, c in SHAPE_COLUMNS.items())
    raise DataFormatError(
        f"{where}: columns {', '.join(columns) or 'none'} match no known shape ({known})"
    )


# --- rows from each container ----------------------------------------------------------------


def _rows(path: Path, fmt: DataFormat) -> Iterator[tuple[int, dict[str, Any]]]:
    if fmt.container in ("jsonl", "json"):
        return _json_rows(path, fmt.container)
    return _arrow_rows(path, fmt.container, fmt.split)


def _json_rows(path: Path, container: str) -> Iterator[tuple[int, dict[str, Any]]]:
    if container == "json":
        try:
            items = json.loads(path.read_bytes())
        except UnicodeDecodeError:
            raise DataFormatError(f"{path}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise DataFormatError(
                f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, character {exc.colno})"
            ) from None
        except RecursionError:
            raise DataFormatError(f"{path}: JSON nested too deeply to be rows") from None
        if not isinstance(items, list):
            raise DataFormatError(f"{path}: a JSON array of rows was expected")
        for number, item in enumerate(items, 1):
            yield number, _object(item, path, number)
        return
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                item = json.loads(raw)
            except UnicodeDecodeError:
                raise DataFormatError(f"{path}: row {number}: not UTF-8 text") from None
            except json.JSONDecodeError as exc:
                raise DataFormatError(
                    f"{path}: row {number}: not valid JSON ({exc.msg} at character {exc.colno})"
                ) from None
            except RecursionError:
                raise DataFormatError(f"{path}: row {number}: JSON nested too deeply") from None
            yield number, _object(item, path, number)


def _object(item: Any, path: Path, number: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise DataFormatError(
            f"{path}: row {number}: a JSON object was expected, not {_type_name(item)}"
        )
    return item


def _arrow_files(path: Path, split: str | None) -> list[Path]:
    folder = path / split if split is not None else path
    state = _json_file(folder / "state.json")
    files = state.get("_data_files")
    if not isinstance(files, list) or not files:
        raise DataFormatError(f"{folder}/state.json: no data files listed")
    names = [entry.get("filename") if isinstance(entry, dict) else None for entry in files]
    for name in names:  # a plain name in the folder: never a path out of it
        if not isinstance(name, str) or not name or Path(name).name != name or name == "..":
            raise DataFormatError(f"{folder}/state.json: {name!r} is not a data file's name")
    return [folder / str(name) for name in names]


def _arrow_schema(path: Path, container: str, split: str | None) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if container == "parquet":
            return pq.read_schema(path)
        with pa.memory_map(str(_arrow_files(path, split)[0])) as source:
            return pa.ipc.open_stream(source).schema
    except (pa.ArrowException, OSError) as exc:
        raise DataFormatError(f"{path}: not readable ({one_line(exc)})") from None


def _arrow_rows(
    path: Path, container: str, split: str | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    number = 0
    try:
        if container == "parquet":
            batches: Iterable[Any] = pq.ParquetFile(path).iter_batches(batch_size=4096)
            for batch in batches:
                for row in batch.to_pylist():
                    number += 1
                    yield number, row
            return
        for file in _arrow_files(path, split):
            with pa.memory_map(str(file)) as source:
                for batch in pa.ipc.open_stream(source):
                    for row in batch.to_pylist():
                        number += 1
                        yield number, row
    except (pa.ArrowException, OSError) as exc:
        raise DataFormatError(f"{path}: row {number + 1}: not readable ({one_line(exc)})") from None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# --- reading -----------------------------------------------------------------------------------


def read_training_data(path: str | Path, shape: str | None = None) -> TrainingData:
    """Every solution a file (or datasets folder) holds; `shape` forces a shape (the CLI's
    --prm800k and --parquet). A file that cannot be read raises DataFormatError."""
    path = Path(path)
    fmt = detect_format(path, shape)
    rows = 0

    def counted() -> Iterator[tuple[int, dict[str, Any]]]:
        nonlocal rows
        for number, row in _rows(path, fmt):
            rows += 1
            yield number, row

    notes: list[str] = []
    solutions: list[LabeledSolution]
    if fmt.shape == PRM800K:
        solutions = []
        for number, row in counted():
            example = _prm800k_example(row, _Where(path, number))
            if example is not None:
                solutions.append(example)
    elif fmt.shape == CRITIC:
        solutions = examples_from_critic_rows(
            _critic_row(row, _Where(path, number)) for number, row in counted()
        )
    else:
        read = _trl_path if fmt.shape == TRL else _math_shepherd_path
        labels = _LabelKinds()
        paths = [read(row, _Where(path, number), labels) for number, row in counted()]
        solutions = trees(paths)
        if labels.ints and labels.zero and not labels.minus_one:
            notes.append(
                f"{path}: integer labels are 0 or 1 and never -1: read as ratings (0 neutral, "
                "1 good); if 0 means a bad step (TRL's class ids), write the labels as booleans"
            )
    if not rows:
        raise DataFormatError(f"{path}: no rows")
    return TrainingData(str(path), fmt, rows, solutions, notes)


def read_many(
    paths: Iterable[str | Path],
    shape: str | None = None,
    report: Callable[[str], None] | None = None,
) -> list[LabeledSolution]:
    """The solutions of several files, in order; `report` gets each file's summary (and notes)."""
    solutions: list[LabeledSolution] = []
    for path in paths:
        data = read_training_data(path, shape)
        if report is not None:
            for line in (data.summary(), *data.notes):
                report(line)
        solutions += data.solutions
    return solutions


@dataclass
class _Where:
    path: Path
    row: int

    def error(self, column: str, what: str) -> DataFormatError:
        return DataFormatError(f"{self.path}: row {self.row}, column {column!r}: {what}")


def _type_name(value: Any) -> str:
    return {type(None): "null", bool: "a boolean", int: "an integer", float: "a number"}.get(
        type(value),
        "a string"
        if isinstance(value, str)
        else "a list"
        if isinstance(value, list)
        else "an object"
        if isinstance(value, dict)
        else type(value).__name__,
    )


def _string(value: Any, where: _Where, column: str) -> str:
    if not isinstance(value, str):
        raise where.error(column, f"a string was expected, not {_type_name(value)}")
    return value


def _strings(value: Any, where: _Where, column: str) -> list[str]:
    if not isinstance(value, list):
        raise where.error(column, f"a list of strings was expected, not {_type_name(value)}")
    return [_string(item, where, f"{column}[{i}]") for i, item in enumerate(value)]


def _field(row: dict[str, Any], name: str, where: _Where) -> Any:
    if name not in row:
        raise where.error(name, "missing")
    return row[name]


# --- TRL stepwise supervision and Math-Shepherd -------------------------------------------------

Path_ = tuple[str, list[str], list[int]]  # problem, steps, a rating per step


@dataclass
class _LabelKinds:
    """Which kinds of labels a file used: integer 0/1 labels with no -1 may be TRL class ids."""

    ints: bool = False
    zero: bool = False
    minus_one: bool = False


def _trl_path(row: dict[str, Any], where: _Where, kinds: _LabelKinds) -> Path_:
    prompt = _string(_field(row, "prompt", where), where, "prompt")
    completions = _strings(_field(row, "completions", where), where, "completions")
    labels = _field(row, "labels", where)
    if not isinstance(labels, list):
        raise where.error("labels", f"a list was expected, not {_type_name(labels)}")
    if len(labels) != len(completions):
        raise where.error(
            "labels", f"{len(labels)} labels for {len(completions)} completions (one per step)"
        )
    ratings = []
    for i, label in enumerate(labels):
        if isinstance(label, bool):
            ratings.append(1 if label else -1)
        elif isinstance(label, int) and label in (-1, 0, 1):
            kinds.ints = True
            kinds.zero |= label == 0
            kinds.minus_one |= label == -1
            ratings.append(label)
        else:
            raise where.error(f"labels[{i}]", f"{label!r} is not a boolean or a rating -1, 0 or 1")
    return prompt, completions, ratings


def _math_shepherd_path(row: dict[str, Any], where: _Where, kinds: _LabelKinds) -> Path_:
    text = _string(_field(row, "input", where), where, "input")
    label = _string(_field(row, "label", where), where, "label")
    parts = text.split(STEP_TAG)
    if len(parts) < 2:
        raise where.error("input", f"no step ends in the step tag {STEP_TAG!r}")
    ratings: list[int] = []
    at = 0  # where the tag's sign is in `label`: each tag is one character there
    for part in parts[:-1]:
        at += len(part)
        sign = label[at : at + 1]
        if sign not in ("+", "-"):
            raise where.error(
                "label",
                f"step {len(ratings) + 1}: {sign or 'the end'!r} where the input's tag is "
                f"(character {at + 1}); '+' or '-' was expected",
            )
        ratings.append(1 if sign == "+" else -1)
        at += 1
    steps = parts[:-1]  # text after the last tag has no label (TRL's script drops it too)
    # The problem ends where "Step 1:" begins; a tag before it is an annotation inside the
    # problem (a few rows of the released set), whose label says nothing about a step.
    for marker in ("Step 1:", "step 1:"):
        first = next((k for k, s in enumerate(steps) if marker in s), None)
        if first is not None:
            before, _, after = steps[first].partition(marker)
            problem = "".join(steps[:first]) + before
            steps = [marker + after, *steps[first + 1 :]]
            ratings = ratings[first:]
            break
    else:
        if steps[0].count("?") != 1:
            raise where.error(
                "input",
                "cannot tell the problem from its first step: no 'Step 1:', and not exactly "
                "one '?' before the first tag",
            )
        problem, _, after = steps[0].partition("?")
        problem += "?"
        steps = [after, *steps[1:]]
    return problem.strip(), [s.strip() for s in steps], ratings


def trees(paths: Iterable[Path_]) -> list[LabeledSolution]:
    """Rated paths -> solutions: a path of a problem that repeats another's steps and ratings
    up to its last step becomes that one's alternative there (or nothing, when that last step
    and its rating are there already); the rest are solutions of their own, in file order."""
    by_problem: dict[str, list[tuple[list[str], list[int]]]] = {}
    for problem, steps, ratings in paths:
        if steps:
            by_problem.setdefault(problem, []).append((steps, ratings))
    solutions: list[LabeledSolution] = []
    for problem, rated in by_problem.items():
        mine: list[LabeledSolution] = []
        for steps, ratings in sorted(rated, key=lambda p: -len(p[0])):  # stable: file order
            k = len(steps) - 1
            home = next(
                (s for s in mine if s.steps[:k] == steps[:k] and s.ratings[:k] == ratings[:k]),
                None,
            )
            if home is None:
                mine.append(LabeledSolution(problem, list(steps), list(ratings)))
            elif len(home.steps) > k and (home.steps[k], home.ratings[k]) == (steps[k], ratings[k]):
                continue
            elif not any(
                (a.after, a.text, a.rating) == (k, steps[k], ratings[k]) for a in home.alternatives
            ):
                home.alternatives.append(Alternative(k, steps[k], ratings[k]))
        for solution in mine:
            solution.alternatives.sort(key=lambda a: a.after)
        solutions += mine
    return solutions


# --- PRM800K and stepwise-critic rows -------------------------------------------------------


def _rating(value: Any, where: _Where, column: str, *, nan: bool = False) -> None:
    """None (or NaN, from pandas, where `nan`) or -1, 0, 1 (a float only where `nan`)."""
    if value is None or (nan and isinstance(value, float) and math.isnan(value)):
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in (-1, 0, 1):
        raise where.error(column, f"{value!r} is not a rating -1, 0, 1 or null")
    if isinstance(value, float) and not nan:
        raise where.error(column, f"{value!r} is not a rating -1, 0, 1 or null")


def _prm800k_example(row: dict[str, Any], where: _Where) -> LabeledSolution | None:
    """The row checked (every field example_from_prm800k reads), then read."""
    question = _field(row, "question", where)
    if not isinstance(question, dict):
        raise where.error("question", f"an object was expected, not {_type_name(question)}")
    _string(question.get("problem"), where, "question.problem")
    label = _field(row, "label", where)
    if not isinstance(label, dict):
        raise where.error("label", f"an object was expected, not {_type_name(label)}")
    if label.get("finish_reason") == "bad_problem":
        return None
    steps = label.get("steps")
    if not isinstance(steps, list):
        raise where.error("label.steps", f"a list was expected, not {_type_name(steps)}")
    for i, step in enumerate(steps):
        column = f"label.steps[{i}]"
        if not isinstance(step, dict):
            raise where.error(column, f"an object was expected, not {_type_name(step)}")
        completions = step.get("completions") or []
        if not isinstance(completions, list):
            raise where.error(f"{column}.completions", "a list was expected")
        for j, completion in enumerate(completions):
            name = f"{column}.completions[{j}]"
            if not isinstance(completion, dict):
                raise where.error(name, f"an object was expected, not {_type_name(completion)}")
            _string(completion.get("text"), where, f"{name}.text")
            _rating(completion.get("rating"), where, f"{name}.rating")
        chosen = step.get("chosen_completion")
        if chosen is not None and (
            isinstance(chosen, bool)
            or not isinstance(chosen, int)
            or not 0 <= chosen < len(completions)
        ):
            raise where.error(
                f"{column}.chosen_completion",
                f"{chosen!r} is not null or the index of one of its {len(completions)} completions",
            )
        human = step.get("human_completion")
        if human:
            if not isinstance(human, dict):
                raise where.error(f"{column}.human_completion", "an object was expected")
            _string(human.get("text"), where, f"{column}.human_completion.text")
    return example_from_prm800k(row)


def _critic_row(row: dict[str, Any], where: _Where) -> dict[str, Any]:
    _string(_field(row, "instruction", where), where, "instruction")
    _strings(_field(row, "responses", where), where, "responses")
    _string(_field(row, "next_response", where), where, "next_response")
    _rating(_field(row, "rating", where), where, "rating", nan=True)
    preferred = _field(row, "is_preferred_response", where)
    if not isinstance(preferred, bool):
        raise where.error(
            "is_preferred_response", f"a boolean was expected, not {_type_name(preferred)}"
        )
    return row


# --- a solution as a PRM800K line ---------------------------------------------------------------


def prm800k_record(solution: LabeledSolution) -> dict[str, Any]:
    """The solution as a PRM800K label line that `example_from_prm800k` reads back to it: each
    path step its chosen completion 0, the alternatives after it as more rated completions, and
    alternatives after the whole path (or with no path) in a last step that chooses none.
    Alternatives come back ordered by the step they follow."""
    steps: list[dict[str, Any]] = []
    for k in range(len(solution.steps) + 1):
        completions = [
            {"text": a.text, "rating": a.rating} for a in solution.alternatives if a.after == k
        ]
        if k < len(solution.steps):
            chosen = {"text": solution.steps[k], "rating": solution.ratings[k]}
            steps.append(
                {
                    "completions": [chosen, *completions],
                    "chosen_completion": 0,
                    "human_completion": None,
                }
            )
        elif completions:
            steps.append(
                {"completions": completions, "chosen_completion": None, "human_completion": None}
            )
    return {"question": {"problem": solution.problem}, "label": {"steps": steps}}


# --- graded solutions: an outcome model's data ------------------------------------------------

# Shapes of graded data, told apart by their columns as above (first match wins).
GRADED_SHAPE_COLUMNS = {
    GRADED: ("problem", "steps", "correct"),
    PROCESSBENCH: ("problem", "steps", "final_answer_correct"),
    BEST_OF_N: ("problem", "answer", "samples"),
    PRM800K: ("question", "label"),
}
# The answer checker a caller passes where answers must be graded (best-of-N samples, PRM800K
# lines): (the solution's steps, its answer where the file gives one, the ground truth) ->
# whether the final answer is correct. The CLI's wraps modeling.grading.
Grade = Callable[[Sequence[str], str | None, str], bool]


@dataclass
class GradedData:
    """What one graded file gave: its solutions, and the counts the summary line reports."""

    path: str
    format: DataFormat
    rows: int
    solutions: list[GradedSolution]
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        correct = sum(s.correct for s in self.solutions)
        return (
            f"{self.path}: read as {self.format} ({self.rows:,} rows -> "
            f"{len(self.solutions):,} graded solutions, {correct:,} correct)"
        )


def read_graded(path: str | Path, grade: Grade | None = None) -> list[GradedSolution]:
    """Every graded solution a file holds, its shape detected from the content: graded JSONL
    (`problem`, `steps`, `correct`), ProcessBench (`final_answer_correct`), a best-of-N samples
    file (evaluate.read_best_of_n's: `problem`, `answer`, `samples`) or PRM800K label lines
    whose `question.ground_truth_answer` is present. The last two need `grade`, the answer
    checker. A file that cannot be read raises DataFormatError (one line)."""
    return read_graded_data(path, grade).solutions


def read_graded_data(path: str | Path, grade: Grade | None = None) -> GradedData:
    path = Path(path)
    container, split, others = _container(path)
    columns, where = _columns(path, container, split)
    shape = next(
        (s for s, needed in GRADED_SHAPE_COLUMNS.items() if set(needed) <= set(columns)), None
    )
    if shape is None:
        known = "; ".join(
            f"{SHAPE_NAMES[s]}: {', '.join(c)}" for s, c in GRADED_SHAPE_COLUMNS.items()
        )
        raise DataFormatError(
            f"{where}: columns {', '.join(columns) or 'none'} match no graded shape ({known})"
        )
    if shape in (BEST_OF_N, PRM800K) and grade is None:
        raise DataFormatError(
            f"{path}: {SHAPE_NAMES[shape]} answers must be graded, and no answer checker was given"
        )
    fmt = DataFormat(shape, container, split, others)
    solutions: list[GradedSolution] = []
    rows = 0
    skipped: dict[str, int] = {}
    for number, row in _rows(path, fmt):
        rows += 1
        here = _Where(path, number)
        if shape == GRADED:
            solutions.append(_graded_row(row, here, "correct"))
        elif shape == PROCESSBENCH:
            solutions.append(_graded_row(row, here, "final_answer_correct"))
        elif shape == BEST_OF_N:
            assert grade is not None
            solutions += _best_of_n_row(row, here, grade)
        else:
            assert grade is not None
            graded, reason = _prm800k_graded(row, here, grade)
            if graded is None:
                skipped[reason] = skipped.get(reason, 0) + 1
            else:
                solutions.append(graded)
    if not rows:
        raise DataFormatError(f"{path}: no rows")
    notes = [f"{path}: {n:,} lines left out: {reason}" for reason, n in sorted(skipped.items())]
    return GradedData(str(path), fmt, rows, solutions, notes)


def read_graded_many(
    paths: Iterable[str | Path],
    grade: Grade | None = None,
    report: Callable[[str], None] | None = None,
) -> list[GradedSolution]:
    """The graded solutions of several files, in order; `report` gets each file's summary."""
    solutions: list[GradedSolution] = []
    for path in paths:
        data = read_graded_data(path, grade)
        if report is not None:
            for line in (data.summary(), *data.notes):
                report(line)
        solutions += data.solutions
    return solutions


def _steps(value: Any, where: _Where, column: str) -> list[str]:
    steps = _strings(value, where, column)
    if not steps:
        raise where.error(
            column, "no steps: a graded solution needs one (its last carries the label)"
        )
    return steps


def _boolean(value: Any, where: _Where, column: str) -> bool:
    if not isinstance(value, bool):
        raise where.error(column, f"true or false was expected, not {_type_name(value)}")
    return value


def _graded_row(row: dict[str, Any], where: _Where, correct: str) -> GradedSolution:
    problem = _string(_field(row, "problem", where), where, "problem")
    steps = _steps(_field(row, "steps", where), where, "steps")
    return GradedSolution(problem, steps, _boolean(_field(row, correct, where), where, correct))


def _best_of_n_row(row: dict[str, Any], where: _Where, grade: Grade) -> list[GradedSolution]:
    problem = _string(_field(row, "problem", where), where, "problem")
    truth = _string(_field(row, "answer", where), where, "answer")
    samples = _field(row, "samples", where)
    if not isinstance(samples, list):
        raise where.error("samples", f"a list was expected, not {_type_name(samples)}")
    graded = []
    for i, sample in enumerate(samples):
        column = f"samples[{i}]"
        if not isinstance(sample, dict):
            raise where.error(column, f"an object was expected, not {_type_name(sample)}")
        if "steps" not in sample:
            raise where.error(f"{column}.steps", "missing")
        steps = _steps(sample["steps"], where, f"{column}.steps")
        answer = sample.get("answer")
        if answer is not None:
            _string(answer, where, f"{column}.answer")
        graded.append(GradedSolution(problem, steps, bool(grade(steps, answer, truth))))
    return graded


def _prm800k_graded(
    row: dict[str, Any], where: _Where, grade: Grade
) -> tuple[GradedSolution | None, str]:
    """A PRM800K line's path graded by its final step's answer against the problem's
    ground_truth_answer; (None, why) for a line that has no final answer to grade."""
    example = _prm800k_example(row, where)  # checks every field it reads
    truth = row["question"].get("ground_truth_answer")
    if truth is None:
        return None, "no question.ground_truth_answer"
    truth = _string(truth, where, "question.ground_truth_answer")
    finish = row["label"].get("finish_reason")
    if finish != "solution":
        return None, f"finish_reason {finish!r}, not 'solution' (no final answer reached)"
    if example is None or not example.steps:
        return None, "no steps"
    steps = example.steps
    return GradedSolution(example.problem, steps, bool(grade(steps[-1:], None, truth))), ""
