"""Hostile files: whatever bytes arrive, an importer either imports or names the line and field
of what is wrong, and an error leaves nothing behind (no batch, no rows)."""

import json
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from labeling.models import Batch, Labeling, Problem, Solution, StepLabel
from labeling.services.importing import (
    LineError,
    NoRecords,
    import_math,
    import_prm800k,
    import_samples,
)

pytestmark = pytest.mark.django_db

IMPORTERS = {
    "math": lambda path: import_math(path),
    "samples": lambda path: import_samples(path, batch_name="fuzz"),
    "prm800k": lambda path: import_prm800k(path),
}
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples on every run: a failure reproduces, CI never flakes
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


def _counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Batch, Problem, Solution, Labeling, StepLabel))


def _import_bytes(kind: str, content: bytes) -> None:
    """Import `content`; it must succeed or raise a named error, and an error writes nothing."""
    before = _counts()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "upload.jsonl"
        path.write_bytes(content)
        try:
            IMPORTERS[kind](path)
        except LineError as error:
            assert error.line >= 1 and error.field and error.message
            assert _counts() == before, f"a failed {kind} import wrote rows"
        except NoRecords:
            assert _counts() == before


def _real_lines(shared_data) -> dict[str, list[str]]:
    return {
        "prm800k": (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines(),
        "math": (shared_data / "math" / "math500.jsonl").read_text().splitlines()[:20],
    }


@pytest.mark.parametrize("kind", IMPORTERS)
@FUZZ
@given(content=st.binary(max_size=300))
@example(content=b'{"problem": "\xff", "steps": ["x"]}\n')
@example(content=b"[" * 5000 + b"]" * 5000 + b"\n")
def test_random_bytes_import_cleanly_or_fail_cleanly(kind, content):
    _import_bytes(kind, content)


@pytest.mark.parametrize("kind", IMPORTERS)
@FUZZ
@given(value=json_values)
def test_random_json_imports_cleanly_or_fails_cleanly(kind, value):
    _import_bytes(kind, (json.dumps(value) + "\n").encode())


def _mutate(obj, rng: random.Random, replacement):
    """Replace one value somewhere inside `obj` (a dict or list) with `replacement`."""
    node = obj
    while True:
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return obj
        key = rng.choice(keys)
        child = node[key]
        if isinstance(child, dict | list) and child and rng.random() < 0.7:
            node = child
            continue
        node[key] = replacement
        return obj


@pytest.mark.parametrize("kind", ["prm800k", "math"])
@FUZZ
@given(seed=st.integers(0, 2**32 - 1), replacement=json_values)
def test_mutated_real_lines_import_cleanly_or_fail_cleanly(shared_data, kind, seed, replacement):
    rng = random.Random(seed)
    lines = _real_lines(shared_data)[kind]
    good = [json.loads(line) for line in rng.sample(lines, 3)]
    broken = _mutate(good[1], rng, replacement)
    content = "\n".join(json.dumps(obj) for obj in (good[0], broken, good[2])) + "\n"
    _import_bytes(kind, content.encode())


def _set(obj: dict, path: tuple, value) -> dict:
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("kind", "path", "value", "field"),
    [
        ("prm800k", ("label", "total_time"), 2**40, "label.total_time"),
        ("prm800k", ("generation",), 2**40, "generation"),
        ("prm800k", ("generation",), 2**70, "generation"),
        ("prm800k", ("question", "problem"), "a\x00b", "question.problem"),
        ("prm800k", ("question", "problem"), "a\ud800b", "question.problem"),
        ("math", ("level",), 10**6, "level"),
        ("math", ("problem",), "x\x00", "problem"),
    ],
)
def test_a_value_no_column_can_hold_is_named_and_nothing_is_written(
    shared_data, kind, path, value, field
):
    lines = _real_lines(shared_data)[kind]
    broken = _set(json.loads(lines[1]), path, value)
    content = "\n".join([lines[0], json.dumps(broken), lines[2]]) + "\n"
    before = _counts()
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "upload.jsonl"
        file.write_text(content)
        with pytest.raises(LineError) as caught:
            IMPORTERS[kind](file)
    assert (caught.value.line, caught.value.field) == (2, field)
    assert _counts() == before
