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


# --- huge integers, deep nesting and oversized solutions, on every import path ----------------

HUGE = "9" * 5000  # past Python's 4,300-digit limit on int(): json.loads raised ValueError


def _line_with(kind: str, lines: dict[str, list[str]], key: str, raw: str) -> str:
    """A real line of `kind` with `raw` (JSON text) spliced in as the value of a new key."""
    if kind == "samples":
        base = '{"problem": "1+1?", "steps": ["2"]}'
    else:
        base = lines[kind][0]
    return base[:-1] + f', "{key}": {raw}}}'


HOSTILE = {  # JSON text for a value, and the field and message start its line is refused with
    "huge integer": (HUGE, "extra", "integer of 5,000 digits, beyond the 64-bit range"),
    "huge integer deep in a list": (f"[1, [{HUGE}]]", "extra[1][0]", "integer of 5,000 digits"),
    "nested 5,000 deep": ("[" * 5000 + "]" * 5000, "line", "not valid JSON: nested too deeply"),
    "objects nested 5,000 deep": (
        '{"a": ' * 5000 + "1" + "}" * 5000,
        "line",
        "not valid JSON: nested too deeply",
    ),
    "nested 900 deep (decodes)": ("[" * 900 + "]" * 900, "line", "not valid JSON: nested too"),
}


@pytest.mark.parametrize("kind", IMPORTERS)
@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_value_is_a_line_error_naming_line_and_field_and_writes_nothing(
    shared_data, kind, case
):
    raw, field, message = HOSTILE[case]
    lines = _real_lines(shared_data)
    first = lines[kind][1] if kind != "samples" else '{"problem": "2+2?", "steps": ["4"]}'
    content = first + "\n" + _line_with(kind, lines, "extra", raw) + "\n"
    before = _counts()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "hostile.jsonl"
        path.write_text(content)
        with pytest.raises(LineError) as caught:
            IMPORTERS[kind](path)
    assert (caught.value.line, caught.value.field) == (2, field)
    assert caught.value.message.startswith(message)
    assert _counts() == before


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (HUGE, "extra"),
        # Decodes (json.loads stops near 1,000 levels) and was imported; a later decode or dump
        # of it (the SQLite writer decodes each line again) from a deeper stack would fail.
        ("[" * 950 + "]" * 950, "line"),
    ],
)
def test_a_hostile_line_in_a_chunk_a_worker_process_parses_is_a_line_error(
    shared_data, settings, raw, field
):
    """Past the first chunk the lines are parsed by spawned worker processes: their error
    comes back as the line's, not as an exception raised out of the pool or the writer."""
    settings.STEPWISE_IMPORT_CHUNK = 2
    lines = _real_lines(shared_data)["prm800k"]
    hostile = _line_with("prm800k", {"prm800k": lines}, "extra", raw)
    before = _counts()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "hostile.jsonl"
        path.write_text("\n".join([*lines[:5], hostile]) + "\n")
        with pytest.raises(LineError) as caught:
            import_prm800k(path, workers=2)
    assert (caught.value.line, caught.value.field) == (6, field)
    assert _counts() == before


def _oversized(shared_data, what: str) -> tuple[str, str, str]:
    """(kind, file content, field) of a file whose second line holds a solution past the
    bounds set in `small_bounds`: 5 steps, 60 characters a step."""
    lines = _real_lines(shared_data)["prm800k"]
    sample = {"problem": "1+1?", "steps": ["2"]}
    if what == "sample steps":
        return "samples", _jsonl(sample, {**sample, "steps": ["x"] * 6}), "steps"
    if what == "sample step chars":
        return "samples", _jsonl(sample, {**sample, "steps": ["x", "y" * 61]}), "steps[1]"
    if what == "pool steps":
        return "pool", _jsonl(sample, {**sample, "steps": ["x"] * 6}), "steps"
    phase2 = next(json.loads(line) for line in lines if "pre_generated_steps" in line)
    phase1 = json.loads(lines[0])
    small = json.loads(lines[0])  # a line within the bounds: two steps of short candidates
    small["label"]["steps"] = small["label"]["steps"][:2]
    for step in small["label"]["steps"]:
        for completion in step["completions"] or ():
            completion["text"] = completion["text"][:60]
    if what == "phase-2 steps":
        phase2["question"]["pre_generated_steps"] = ["x"] * 6
        return "prm800k", _jsonl(small, phase2), "question.pre_generated_steps"
    if what == "labeled steps":
        phase1["label"]["steps"] = (phase1["label"]["steps"] * 6)[:6]
        return "prm800k", _jsonl(small, phase1), "label.steps"
    assert what == "candidate step chars"
    phase1["label"]["steps"] = json.loads(json.dumps(small["label"]["steps"]))  # a copy
    phase1["label"]["steps"][1]["completions"][0]["text"] = "c" * 61
    return "prm800k", _jsonl(small, phase1), "label.steps[1].completions[0].text"


def _jsonl(*objs) -> str:
    return "".join(json.dumps(obj) + "\n" for obj in objs)


@pytest.fixture
def small_bounds(settings):
    settings.STEPWISE_MAX_STEPS_PER_SOLUTION = 5
    settings.STEPWISE_MAX_STEP_CHARS = 60


OVERSIZED = [
    "sample steps",
    "sample step chars",
    "pool steps",
    "phase-2 steps",
    "labeled steps",
    "candidate step chars",
]


@pytest.mark.parametrize("what", OVERSIZED)
def test_a_solution_past_the_size_bounds_is_refused_naming_line_and_field(
    shared_data, small_bounds, what
):
    from modeling.services.pool import import_pool

    kind, content, field = _oversized(shared_data, what)
    importers = {**IMPORTERS, "pool": lambda path: import_pool(path)}
    if kind == "pool":
        import_math(shared_data / "math" / "math500.jsonl")  # a problem the pool line can name
        content = content.replace('"1+1?"', json.dumps(Problem.objects.first().text))
    before = _counts()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.jsonl"
        path.write_text(content)
        with pytest.raises(LineError) as caught:
            importers[kind](path)
    assert (caught.value.line, caught.value.field) == (2, field)
    assert "at most 5" in caught.value.message or "at most 60" in caught.value.message
    assert _counts() == before


def test_the_default_bounds_refuse_a_100000_step_sample_and_take_the_real_data(shared_data):
    """The issue's 100,000-step sample is refused; the real PRM800K lines import."""
    before = _counts()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "huge.jsonl"
        path.write_text(_jsonl({"problem": "1+1?", "steps": ["x"] * 100_000}))
        with pytest.raises(LineError, match=r"line 1: steps: 100,000 steps; a solution has at"):
            import_samples(path, batch_name="huge")
        path.write_text(_jsonl({"problem": "1+1?", "steps": ["x" * 10_001]}))
        with pytest.raises(LineError, match=r"steps\[0\]: 10,001 characters; a step has at"):
            import_samples(path, batch_name="huge")
    assert _counts() == before
    assert import_prm800k(shared_data / "prm800k" / "samples.jsonl").created["labelings"] == 6


def _hostile_file(shared_data, kind: str, case: str) -> str:
    lines = _real_lines(shared_data)
    first = lines[kind][1] if kind != "samples" else '{"problem": "2+2?", "steps": ["4"]}'
    return first + "\n" + _line_with(kind, lines, "extra", HOSTILE[case][0]) + "\n"


@pytest.mark.parametrize(
    ("endpoint", "kind"), [("import-prm800k", "prm800k"), ("import-samples", "samples")]
)
@pytest.mark.parametrize("case", ["huge integer", "nested 5,000 deep", "nested 900 deep (decodes)"])
def test_a_hostile_upload_to_the_api_is_400_naming_line_and_field(
    shared_data, researcher, endpoint, kind, case
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.helpers.users import api_client_for

    content = _hostile_file(shared_data, kind, case).encode()
    before = _counts()
    response = api_client_for(researcher).post(
        f"/p/default/api/solutions/{endpoint}/",
        {"file": SimpleUploadedFile("h.jsonl", content), "batch_name": "hostile"},
        format="multipart",
    )
    assert response.status_code == 400
    _, field, message = HOSTILE[case]
    [error] = response.json()["errors"]
    assert (error["line"], error["field"]) == (2, field) and error["message"].startswith(message)
    assert _counts() == before


def test_an_oversized_sample_upload_to_the_api_is_400(researcher, small_bounds):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.helpers.users import api_client_for

    content = _jsonl({"problem": "1+1?", "steps": ["x"] * 6}).encode()
    response = api_client_for(researcher).post(
        "/p/default/api/solutions/import-samples/",
        {"file": SimpleUploadedFile("big.jsonl", content), "batch_name": "big"},
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"line": 1, "field": "steps", "message": "6 steps; a solution has at most 5"}
    ]
    assert _counts() == (0, 0, 0, 0, 0)


@pytest.mark.parametrize("case", ["huge integer", "objects nested 5,000 deep"])
def test_a_hostile_upload_on_the_lead_batch_form_is_400_and_writes_nothing(
    shared_data, client, lead, case
):
    import io

    from django.urls import reverse

    upload = io.BytesIO(_hostile_file(shared_data, "samples", case).encode())
    upload.name = "hostile.jsonl"
    client.force_login(lead)
    before = _counts()
    response = client.post(
        reverse("labeling:batch_new"),
        {"name": "Hostile", "overlap": 1, "priority": 0, "upload": upload},
    )
    assert response.status_code == 400
    _, field, message = HOSTILE[case]
    where = "line 2: " if field == "line" else f"line 2: {field}: "
    assert where + message in response.content.decode()
    assert _counts() == before


@pytest.mark.parametrize(
    ("command", "kind", "options"),
    [
        ("import_prm800k", "prm800k", []),
        ("import_math", "math", []),
        ("import_samples", "samples", ["--batch", "hostile"]),
        ("import_pool", "samples", []),
    ],
)
@pytest.mark.parametrize("case", ["huge integer", "nested 5,000 deep"])
def test_an_import_command_fails_with_one_line_on_a_hostile_value(
    shared_data, tmp_path, command, kind, options, case
):
    from django.core.management import CommandError, call_command

    path = tmp_path / "hostile.jsonl"
    path.write_text(_hostile_file(shared_data, kind, case))
    before = _counts()
    with pytest.raises(CommandError) as caught:
        call_command(command, str(path), *options)
    _, field, message = HOSTILE[case]
    where = "line 2: " if field == "line" else f"line 2: {field}: "
    assert str(caught.value).startswith(f"{path}, {where}{message}")
    assert "\n" not in str(caught.value)
    assert _counts() == before
