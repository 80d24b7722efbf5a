"""labeling.parsing: what an import's worker processes do to a line, without Django."""

import functools
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from labeling import parsing, prm800k
from labeling.models import Solution


def sample_lines(shared_data) -> list[str]:
    return (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines()


BOUNDS = parsing.Bounds(max_steps=1000, max_step_chars=10_000)


def prepare(line: str, bounds: parsing.Bounds = BOUNDS) -> parsing.PreparedLine:
    return parsing.prepare_prm800k_line(parsing.decode_line(line, 1), line, bounds=bounds)


def test_every_release_line_is_exact(shared_data):
    assert all(prepare(line).exact for line in sample_lines(shared_data))


@pytest.mark.parametrize(
    "reformat",
    [
        lambda obj: json.dumps(obj, separators=(",", ":")),  # other formatting
        lambda obj: json.dumps(obj, ensure_ascii=False) + " ",  # a trailing space
        lambda obj: json.dumps({**obj, "note": "x"}),  # a key our columns do not keep
        lambda obj: json.dumps(dict(reversed(list(obj.items())))),  # other key order
    ],
)
def test_a_line_that_does_not_render_back_byte_for_byte_is_not_exact(shared_data, reformat):
    line = reformat(json.loads(sample_lines(shared_data)[1]))
    prepared = prepare(line)
    assert not prepared.exact
    assert prepared.source_sha256 == parsing.sha256_text(line)


def test_a_score_written_as_an_integer_is_not_exact(shared_data):
    # 1 parses as the float 1.0, which renders as "1.0": the line is kept as it came.
    obj = json.loads(sample_lines(shared_data)[1])
    obj["question"]["pre_generated_verifier_score"] = 1
    assert not prepare(json.dumps(obj)).exact


def test_copy_rows_escape_what_copy_text_format_needs():
    step = prm800k.StepRecord(
        completions=[prm800k.CompletionRecord("a\\b\tc\nd\re", None, True)],
        human_completion=prm800k.HumanCompletionRecord("own", 1, "human", None),
        chosen_completion=None,
    )
    ((row, completions),) = parsing.copy_step_rows([step])
    assert row == "0\t\\N\tt\n"
    assert completions == ("0\ta\\\\b\\tc\\nd\\re\t\\N\tt\tf\t\n", "-1\town\t1\t\\N\tt\thuman\n")


def test_a_step_never_rated_has_no_completion_rows():
    step = prm800k.StepRecord(completions=None, human_completion=None, chosen_completion=None)
    assert parsing.copy_step_rows([step]) == (("0\t\\N\tf\n", ()),)


def test_the_solution_hash_without_override_is_the_writers(shared_data):
    """The worker hashes with the model's format values: re-imports keep matching."""
    assert (parsing.PHASE1, parsing.PHASE2) == (Solution.Format.PHASE1, Solution.Format.PHASE2)
    prepared = prepare(sample_lines(shared_data)[1])
    assert prepared.solution_sha256 == parsing.solution_content_hash(
        problem_sha256=prepared.problem_sha256,
        fmt=Solution.Format.PHASE2,
        steps=prepared.solution_steps,
        final_answer=prepared.final_answer,
        verifier_score=prepared.verifier_score,
        generation=prepared.generation,
        is_quality_control=prepared.is_quality_control,
        is_screening=prepared.is_screening,
        question_override=None,
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "1234567890123456789012"}',  # a long digit run inside a string is fine
        '{"a": 9223372036854775807}',  # the largest 64-bit integer
        '{"a": "\\\\u0000"}',  # an escaped backslash before "u0000" is not a NUL
    ],
)
def test_suspect_looking_lines_that_are_fine_decode(text):
    assert parsing.decode_line(text, 1) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"a": [1, 9223372036854775808]}', "a[1]"),
        ('{"b": {"c": "x\\u0000"}}', "b.c"),
        ('{"d": "\\ud800"}', "d"),
        ('{"e": ["\\udfff"]}', "e[0]"),  # a lone low surrogate too
    ],
)
def test_values_no_column_can_hold_are_named(text, field):
    with pytest.raises(prm800k.RecordError) as caught:
        parsing.decode_line(text, 1)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ('{"a": [1, ' + "9" * 5000 + "]}", "a[1]", "integer of 5,000 digits"),
        ('{"b": -' + "1" * 4301 + "}", "b", "integer of 4,301 digits"),
        ("[" + "7" * 10_000 + ", " + "[" * 5000 + "]" * 5000 + "]", "line", "not valid JSON"),
    ],
)
def test_an_integer_past_pythons_digit_limit_is_named_not_a_value_error(text, field, message):
    with pytest.raises(prm800k.RecordError) as caught:
        parsing.decode_line(text, 1)
    assert caught.value.field == field and caught.value.message.startswith(message)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,
        '{"a": ' * 5000 + "1" + "}" * 5000,
        '{"a": ' * 101 + "1" + "}" * 101,  # decodes, yet deeper than any format nests
        "[" + "[" * 900 + "]" * 900 + "]",
    ],
)
def test_deep_nesting_is_a_clean_error(text):
    with pytest.raises(prm800k.RecordError) as caught:
        parsing.decode_line(text, 1)
    assert caught.value.field == "line"
    assert caught.value.message == "not valid JSON: nested too deeply (more than 100 levels)"


def test_nesting_up_to_the_limit_decodes():
    text = '{"a": ' * 99 + "[1]" + "}" * 99
    assert parsing.decode_line(text, 1) == json.loads(text)


def _phase2(shared_data) -> dict:
    return next(
        json.loads(line)
        for line in sample_lines(shared_data)
        if "pre_generated_steps" in json.loads(line)["question"]
    )


def _exact_bounds(obj: dict) -> parsing.Bounds:
    """The line's own sizes as the bounds: the line is within them, one more is not."""
    steps = obj["label"]["steps"]
    texts = [c["text"] for s in steps for c in s["completions"] or ()]
    texts += [s["human_completion"]["text"] for s in steps if s["human_completion"]]
    texts += obj["question"].get("pre_generated_steps", [])
    counts = [len(steps), len(obj["question"].get("pre_generated_steps", []))]
    return parsing.Bounds(max_steps=max(counts), max_step_chars=max(map(len, texts)))


def _pad(obj: dict, long: int) -> None:
    obj["question"]["problem"] += " " * long  # so the line is longer than the bound on a step


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (
            lambda q, label, n: q.update(pre_generated_steps=["x"] * (n + 1)),
            "question.pre_generated_steps",
        ),
        (
            lambda q, label, n: label.update(steps=(label["steps"] * (n + 1))[: n + 1]),
            "label.steps",
        ),
        (
            lambda q, label, n: q["pre_generated_steps"].__setitem__(1, "y" * (n + 1)),
            "question.pre_generated_steps[1]",
        ),
        (
            lambda q, label, n: label["steps"][2]["completions"][0].update(text="z" * (n + 1)),
            "label.steps[2].completions[0].text",
        ),
    ],
)
def test_a_solution_past_the_bounds_is_refused_naming_the_field(shared_data, edit, field):
    obj = _phase2(shared_data)
    bounds = _exact_bounds(obj)
    _pad(obj, bounds.max_step_chars)
    assert prepare(json.dumps(obj), bounds)  # exactly at the bounds: accepted
    n = bounds.max_steps if field.endswith("steps") else bounds.max_step_chars
    edit(obj["question"], obj["label"], n)
    with pytest.raises(prm800k.RecordError) as caught:
        prepare(json.dumps(obj), bounds)
    limit = f"at most {bounds.max_steps:,}" if field.endswith("steps") else f"at most {n:,}"
    assert caught.value.field == field and limit in caught.value.message


def test_a_human_written_step_past_the_bound_is_refused(shared_data):
    line = next(
        json.loads(line)
        for line in sample_lines(shared_data)
        if any(s["human_completion"] for s in json.loads(line)["label"]["steps"])
    )
    index = next(i for i, s in enumerate(line["label"]["steps"]) if s["human_completion"])
    line["label"]["steps"][index]["human_completion"]["text"] = "h" * 10_001
    with pytest.raises(prm800k.RecordError) as caught:
        prepare(json.dumps(line))
    assert caught.value.field == f"label.steps[{index}].human_completion.text"


def test_parse_lines_puts_each_error_in_its_lines_place():
    parsed = parsing.parse_lines(
        functools.partial(parsing.prepare_prm800k_line, bounds=BOUNDS),
        [(3, "{}"), (4, "not json"), (7, "[]")],
    )
    assert [(e.field, e.message[:14]) for e in parsed] == [
        ("labeler", "missing"),
        ("line", "not valid JSON"),
        ("line", "expected a JSO"),
    ]


def test_a_record_error_crosses_a_process_boundary():
    error = pickle.loads(pickle.dumps(prm800k.RecordError("label.steps[2]", "missing")))
    assert (error.field, error.message, str(error)) == (
        "label.steps[2]",
        "missing",
        "label.steps[2]: missing",
    )


def test_a_worker_can_import_the_module_without_django():
    """A spawned worker imports labeling.parsing and nothing of Django."""
    code = (
        "import sys, labeling.parsing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')))"
    )
    root = Path(parsing.__file__).resolve().parent.parent  # this checkout, not an installed copy
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    ).stdout
    assert out.strip() == "[]"
