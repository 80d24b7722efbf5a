"""Import lines decoded, validated and prepared without Django.

The importer's CPU work per line (JSON decoding, validation, the byte-exact re-render check,
hashing) lives here so that worker processes can do it while the importing process writes:
a spawned worker imports this module and `labeling.prm800k`, never Django or the models.
What a worker hands back is made of plain values (tuples, strings, numbers), cheap to pickle.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from labeling import prm800k

Item = TypeVar("Item")

PRM800K_NAMESPACE = uuid.UUID("6f1c2a8e-4a57-4b4e-9a53-3f0cbf5e8d11")
PHASE1, PHASE2 = "phase1", "phase2"  # Solution.Format's values


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def labeler_uuid(labeler: str) -> uuid.UUID:
    try:
        return uuid.UUID(labeler)
    except ValueError:
        return uuid.uuid5(PRM800K_NAMESPACE, labeler)


# --- decoding ------------------------------------------------------------------------------

# A byte that is not UTF-8 (read with surrogateescape); only a non-ASCII line can hold one.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
# What may hide a value no column can store: a long digit run (an integer past 64 bits), an
# escaped NUL, an escaped surrogate (a lone one cannot be stored). Only such lines are walked.
# Digit runs are found by turning every digit into 0 and looking for 19 zeros (on bytes, whose
# translate is a table lookup): ten times faster than the regular expression `\d{19}`, which
# was the largest single cost of an import.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_DIGIT_RUN = b"0" * 19
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")  # NUL, any surrogate (d800-dfff)


# Deeper than any import's format (a PRM800K line nests 6 levels): refused at decoding, so that
# no later json.loads or json.dumps of the value (the SQLite writer decodes a line again, in a
# process whose stack may be deeper than the worker's) can meet Python's recursion limit.
MAX_NESTING = 100


class _LongInteger(str):
    """An integer literal too long for int() (Python's limit on digits in a conversion, 4,300
    by default), kept as its text so the field that holds it can be named."""


def _integer_or_long(text: str) -> int | _LongInteger:
    # 20 characters hold every 64-bit integer (-9223372036854775808); longer ones stay text.
    return int(text) if len(text) <= 20 else _LongInteger(text)


def _loads(line: str, number: int, parse_int: Callable[[str], Any] | None = None) -> Any:
    """json.loads with its failures as RecordErrors naming the line's column."""
    try:
        return json.loads(line, parse_int=parse_int)
    except RecursionError:
        raise prm800k.RecordError("line", _TOO_DEEP) from None
    except json.JSONDecodeError as exc:
        if number == 1 and line.strip() in ("{", "["):
            message = (
                f"not valid JSON: the file starts with a lone {line.strip()!r} line, so it looks "
                "pretty-printed; one JSON object per line (JSONL) is expected"
            )
        else:  # a JSONL line is one text line: its column is the position that matters
            at = "" if exc.msg.endswith(" at") else " at"  # "Unterminated string starting at"
            message = f"not valid JSON: {exc.msg}{at} column {exc.colno}"
        raise prm800k.RecordError("line", message) from None


_TOO_DEEP = f"not valid JSON: nested too deeply (more than {MAX_NESTING} levels)"


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` lists and objects deep (walked level by level,
    without recursion)."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [
            child
            for node in level
            for child in (node.values() if type(node) is dict else node)
            if type(child) in (dict, list)
        ]
    return False


def decode_line(line: str, number: int) -> Any:
    """One JSONL line decoded; RecordError says where it stops being JSON or UTF-8 text, or
    which field holds a value no column can store."""
    bad_byte = None if line.isascii() else _NOT_UTF8.search(line)
    if bad_byte:
        byte = ord(bad_byte.group()) - 0xDC00
        raise prm800k.RecordError(
            "line", f"not UTF-8 text: byte 0x{byte:02x} at column {bad_byte.start() + 1}"
        )
    try:
        obj = _loads(line, number)
    except prm800k.RecordError:
        raise
    except ValueError:
        # An integer literal past int()'s limit on digits: decoded again, integers past 64 bits
        # left as text, to name the field that holds it.
        obj = _loads(line, number, parse_int=_integer_or_long)
    # Nesting deeper than the limit needs at least that many brackets: most lines are not walked.
    if (
        type(obj) in (dict, list)
        and line.count("[") + line.count("{") > MAX_NESTING
        and _nested_deeper_than(obj, MAX_NESTING)
    ):
        raise prm800k.RecordError("line", _TOO_DEEP)
    digits = line.encode("utf-8", "surrogateescape").translate(_DIGITS_AS_ZERO)
    if ("\\u" in line and _SUSPECT_ESCAPE.search(line)) or _LONG_DIGIT_RUN in digits:
        unstorable = _unstorable_value(obj, "")
        if unstorable:
            raise prm800k.RecordError(*unstorable)
    return obj


def _unstorable_value(value: Any, path: str) -> tuple[str, str] | None:
    """(field, why) of the first value no database column can hold, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, _LongInteger):
        digits = len(value.lstrip("-"))
        return path or "line", f"integer of {digits:,} digits, beyond the 64-bit range"
    if isinstance(value, int) and not -prm800k.INT64_MAX - 1 <= value <= prm800k.INT64_MAX:
        return path or "line", "integer beyond the 64-bit range"
    if isinstance(value, str):
        if "\x00" in value:
            return path or "line", "text holds a NUL character (\\u0000)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return (
                path or "line",
                "text holds a lone surrogate (an unpaired \\ud800-\\udfff escape)",
            )
        return None
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = (
            (f"{path}.{key}" if path else str(key), item) for key, item in value.items()
        )
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    for child_path, child in items:
        found = _unstorable_value(child, child_path)
        if found:
            return found
    return None


def parse_lines(
    parse: Callable[[Any, str], Item], lines: list[tuple[int, str]]
) -> list[Item | prm800k.RecordError]:
    """Each numbered line decoded and parsed; a bad line's RecordError stands in its place.

    What a worker process runs on a chunk (`parse` must be importable without Django); the
    importing process runs it too when it parses by itself."""
    parsed: list[Item | prm800k.RecordError] = []
    for number, line in lines:
        try:
            parsed.append(parse(decode_line(line, number), line))
        except prm800k.RecordError as error:
            parsed.append(error)
    return parsed


# --- size bounds --------------------------------------------------------------------------


class Bounds(NamedTuple):
    """How large one solution may be: the settings STEPWISE_MAX_STEPS_PER_SOLUTION and
    STEPWISE_MAX_STEP_CHARS, handed in by the importer (this module reads no settings). A
    solution's steps are shown whole on its labeling and adjudication pages."""

    max_steps: int
    max_step_chars: int


def check_step_count(count: int, field: str, bounds: Bounds) -> None:
    if count > bounds.max_steps:
        raise prm800k.RecordError(
            field, f"{count:,} steps; a solution has at most {bounds.max_steps:,}"
        )


def check_step_text(text: str, field: str, bounds: Bounds) -> None:
    if len(text) > bounds.max_step_chars:
        raise prm800k.RecordError(
            field, f"{len(text):,} characters; a step has at most {bounds.max_step_chars:,}"
        )


def check_steps(steps: list[str], field: str, bounds: Bounds) -> None:
    """A solution's step texts within the bounds, else a RecordError naming the list or step."""
    check_step_count(len(steps), field, bounds)
    for i, text in enumerate(steps):
        check_step_text(text, f"{field}[{i}]", bounds)


def _check_record_size(record: prm800k.LabelRecord, line: str, bounds: Bounds) -> None:
    """The PRM800K record's steps within the bounds: the pre-generated ones (phase 2), the
    labeled steps, and every candidate and human-written step's text."""
    q = record.question
    if q.pre_generated_steps is not None:
        check_step_count(len(q.pre_generated_steps), "question.pre_generated_steps", bounds)
    check_step_count(len(record.steps), "label.steps", bounds)
    # A text is at least as long in the line as decoded: a short line holds no long text, and
    # the texts of the release's lines (a few KB) are not looked at one by one.
    if len(line) <= bounds.max_step_chars:
        return
    if q.pre_generated_steps is not None:
        check_steps(q.pre_generated_steps, "question.pre_generated_steps", bounds)
    for i, step in enumerate(record.steps):
        for j, completion in enumerate(step.completions or ()):
            check_step_text(completion.text, f"label.steps[{i}].completions[{j}].text", bounds)
        if step.human_completion is not None:
            field = f"label.steps[{i}].human_completion.text"
            check_step_text(step.human_completion.text, field, bounds)


# --- PRM800K label lines -------------------------------------------------------------------


class PreparedLine(NamedTuple):
    """A PRM800K line as the importer writes it: validated, checked, hashed, no Django.

    A NamedTuple of plain values: it pickles as a tuple, which matters when thousands cross
    from a worker process every second."""

    source_sha256: str
    labeler: str  # the public id (a UUID) as text
    timestamp: datetime  # aware, UTC
    exact: bool  # our columns reproduce the line byte for byte
    generation: int | None
    is_quality_control: bool
    is_screening: bool
    total_time: int
    finish_reason: str
    problem: str
    problem_sha256: str
    is_phase2: bool
    ground_truth_answer: str | None
    ground_truth_solution: str | None
    solution_format: str
    solution_steps: list[str]  # the pre-generated steps (phase 2) or the path walked (phase 1)
    final_answer: str | None
    verifier_score: float | None
    # The solution's content hash when its problem row shows the line's ground truth (no
    # override); the writer hashes again in the rare case where it does not.
    solution_sha256: str
    # Per step, its StepLabel row and its Completion rows as PostgreSQL COPY text, each
    # without the ids that only the writer knows (see copy_step_rows).
    steps: tuple[tuple[str, tuple[str, ...]], ...]

    def content_hash(self, question_override: dict[str, Any] | None = None) -> str:
        """The solution's content hash, with the ground truth the problem row does not show
        (`question_override`) where there is some."""
        return solution_content_hash(
            problem_sha256=self.problem_sha256,
            fmt=self.solution_format,
            steps=self.solution_steps,
            final_answer=self.final_answer,
            verifier_score=self.verifier_score,
            generation=self.generation,
            is_quality_control=self.is_quality_control,
            is_screening=self.is_screening,
            question_override=question_override,
        )


_COPY_BOOL = {True: "t", False: "f", None: "\\N"}


def copy_escape(text: str) -> str:
    """Text for COPY's text format: backslash, tab, newline and carriage return escaped.
    (Four str.replace calls: several times faster than str.translate on short texts.)"""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _copy_int(value: int | None) -> str:
    return "\\N" if value is None else str(value)


def copy_step_rows(steps: list[prm800k.StepRecord]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each step's row tail for COPY into StepLabel (index, chosen_completion,
    has_completions) and its completions' row tails for COPY into Completion (index, text,
    rating, flagged, is_human, source); the writer puts the ids in front."""
    escape, as_bool, as_int = copy_escape, _COPY_BOOL, _copy_int
    rows = []
    for index, step in enumerate(steps):
        completions = [
            f"{i}\t{escape(c.text)}\t{as_int(c.rating)}\t{as_bool[c.flagged]}\tf\t\n"
            for i, c in enumerate(step.completions or ())
        ]
        human = step.human_completion
        if human is not None:
            completions.append(
                f"-1\t{escape(human.text)}\t{as_int(human.rating)}"
                f"\t{as_bool[human.flagged]}\tt\t{escape(human.source)}\n"
            )
        has = step.completions is not None
        rows.append(
            (f"{index}\t{as_int(step.chosen_completion)}\t{as_bool[has]}\n", tuple(completions))
        )
    return tuple(rows)


def solution_content_hash(
    *,
    problem_sha256: str,
    fmt: str,
    steps: list[str],
    final_answer: str | None,
    verifier_score: float | None,
    generation: int | None,
    is_quality_control: bool,
    is_screening: bool,
    question_override: dict[str, Any] | None,
    generator: str = "",
) -> str:
    key = [
        problem_sha256,
        fmt,
        steps,
        final_answer,
        verifier_score,
        generation,
        is_quality_control,
        is_screening,
        question_override,
        generator,
    ]
    return sha256_text(json.dumps(key, sort_keys=True))


def prepare_prm800k_line(obj: Any, line: str, *, bounds: Bounds) -> PreparedLine:
    """Validate a decoded PRM800K line (its solution within `bounds`) and compute what the
    importer stores of it. Handed to worker processes as a functools.partial with the bounds."""
    record = prm800k.parse_record(obj)
    _check_record_size(record, line, bounds)
    public_id = str(labeler_uuid(record.labeler))
    timestamp = prm800k.as_utc(record.timestamp)
    # Render the line as the exporter will from our columns: byte for byte the same, or the
    # import counts it as kept verbatim. The render is the cost, not the comparison (a string
    # compare stops at the first difference), so it runs here, in the worker processes.
    stored = dataclasses.replace(
        record, labeler=public_id, timestamp=prm800k.export_timestamp(timestamp)
    )
    q = record.question
    problem_sha256 = sha256_text(q.problem)
    fmt = PHASE2 if q.is_phase2 else PHASE1
    if q.is_phase2:
        assert q.pre_generated_steps is not None  # parsing a phase-2 question requires them
        solution_steps = q.pre_generated_steps
    else:
        solution_steps = prm800k.chosen_path(record)
    prepared = PreparedLine(
        source_sha256=sha256_text(line),
        labeler=public_id,
        timestamp=timestamp,
        exact=prm800k.render_record(stored) == line,
        generation=record.generation,
        is_quality_control=record.is_quality_control_question,
        is_screening=record.is_initial_screening_question,
        total_time=record.total_time,
        finish_reason=record.finish_reason,
        problem=q.problem,
        problem_sha256=problem_sha256,
        is_phase2=q.is_phase2,
        ground_truth_answer=q.ground_truth_answer,
        ground_truth_solution=q.ground_truth_solution,
        solution_format=fmt,
        solution_steps=solution_steps,
        final_answer=q.pre_generated_answer,
        verifier_score=q.pre_generated_verifier_score,
        solution_sha256="",  # hashed below, from these fields
        steps=copy_step_rows(record.steps),
    )
    return prepared._replace(solution_sha256=prepared.content_hash())
