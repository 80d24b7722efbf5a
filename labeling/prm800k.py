"""The PRM800K label-line format, parsed and rendered without Django.

`parse_record` validates one decoded line and names the failing field; `render_record` writes
it back exactly as the public release does (Python `json.dumps` defaults, the release's key
order). The importer checks `render_record(parse_record(obj)) == line` for every line
(`labeling.parsing`), so a line our columns cannot reproduce is caught at import, not at export.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

FINISH_REASONS = ("solution", "found_error", "give_up", "bad_problem")
RATINGS = (-1, 0, 1)
PHASE2_QUESTION_KEYS = (
    "problem",
    "ground_truth_solution",
    "ground_truth_answer",
    "pre_generated_steps",
    "pre_generated_answer",
    "pre_generated_verifier_score",
)


def as_utc(moment: datetime) -> datetime:
    """An aware UTC datetime; a naive one is taken to be UTC already (as the release's are)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def export_timestamp(moment: datetime) -> datetime:
    """How a stored time appears in a PRM800K line: naive UTC, as the release writes it."""
    return as_utc(moment).replace(tzinfo=None)


class RecordError(ValueError):
    """A line that is not a valid PRM800K record; `field` is a path like `label.steps[2]`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[type[RecordError], tuple[str, str]]:
        # Pickled from an import's worker process: rebuilt from both parts, not from args.
        return type(self), (self.field, self.message)


@dataclass(slots=True)
class CompletionRecord:
    text: str
    rating: int | None
    flagged: bool | None


@dataclass(slots=True)
class HumanCompletionRecord:
    text: str
    rating: int | None
    source: str
    flagged: bool | None


@dataclass(slots=True)
class StepRecord:
    completions: list[CompletionRecord] | None
    human_completion: HumanCompletionRecord | None
    chosen_completion: int | None

    def chosen_text(self) -> str | None:
        """The text this step contributes to the solution path, if any."""
        if self.completions is not None and self.chosen_completion is not None:
            return self.completions[self.chosen_completion].text
        if self.human_completion is not None:
            return self.human_completion.text
        return None


@dataclass(slots=True)
class QuestionRecord:
    problem: str
    ground_truth_answer: str | None
    # Phase-2 lines carry the pre-generated solution; phase-1 lines have none of these keys.
    is_phase2: bool = False
    ground_truth_solution: str | None = None
    pre_generated_steps: list[str] | None = None
    pre_generated_answer: str | None = None
    pre_generated_verifier_score: float | None = None


@dataclass(slots=True)
class LabelRecord:
    labeler: str
    timestamp: datetime
    generation: int | None
    is_quality_control_question: bool
    is_initial_screening_question: bool
    question: QuestionRecord
    steps: list[StepRecord]
    total_time: int
    finish_reason: str


def _expect(value: Any, types: type | tuple[type, ...], field: str, what: str) -> Any:
    # bool is an int in Python; a rating of `true` must still be refused.
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise RecordError(field, f"expected {what}, got {json.dumps(value)}")
    if not isinstance(value, types):
        raise RecordError(field, f"expected {what}, got {type(value).__name__}")
    return value


# Integer columns' ranges (PostgreSQL's integer and smallint; SQLite stores them as they are).
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
SMALLINT_MAX = 2**15 - 1


def within(value: int, field: str, low: int, high: int) -> int:
    """`value` when a column of that range can hold it, else a RecordError naming the field."""
    if not low <= value <= high:
        raise RecordError(field, f"{value} is out of range ({low} to {high})")
    return value


def finite_number(value: Any, field: str) -> float:
    """A JSON number as a float, refusing NaN, ±Infinity and magnitudes past a double (1e400
    decodes to inf): such a value breaks sorting, pagination and every JSON answer after it."""
    _expect(value, (int, float), field, "a number")
    try:
        number = float(value)
    except OverflowError:
        raise RecordError(
            field, "expected a finite number, got one beyond a double's range"
        ) from None
    if not math.isfinite(number):
        raise RecordError(field, f"expected a finite number, got {value!r}")
    return number


def _optional(value: Any, types: type | tuple[type, ...], field: str, what: str) -> Any:
    return None if value is None else _expect(value, types, field, what)


def _keys(obj: dict[str, Any], required: tuple[str, ...], field: str) -> None:
    missing = [key for key in required if key not in obj]
    if missing:
        prefix = f"{field}." if field else ""
        raise RecordError(f"{prefix}{missing[0]}", "missing")


def _rating(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in RATINGS:
        raise RecordError(field, f"must be -1, 0, 1 or null, got {json.dumps(value)}")
    return value


def _well_formed_completion(obj: Any) -> CompletionRecord | None:
    """The common case checked in one go (the importer's hot loop); None sends it to the
    field-by-field checks, which name what is wrong."""
    if type(obj) is dict and "rating" in obj:
        text, rating, flagged = obj.get("text"), obj["rating"], obj.get("flagged")
        if (
            type(text) is str
            and (rating is None or (type(rating) is int and -1 <= rating <= 1))
            and (flagged is None or type(flagged) is bool)
        ):
            return CompletionRecord(text, rating, flagged)
    return None


def _parse_completion(obj: Any, field: str) -> CompletionRecord:
    fast = _well_formed_completion(obj)
    if fast is not None:
        return fast
    _expect(obj, dict, field, "an object")
    _keys(obj, ("text", "rating"), field)
    return CompletionRecord(
        text=_expect(obj["text"], str, f"{field}.text", "a string"),
        rating=_rating(obj["rating"], f"{field}.rating"),
        flagged=_optional(obj.get("flagged"), bool, f"{field}.flagged", "true, false or null"),
    )


def _parse_human(obj: Any, field: str) -> HumanCompletionRecord | None:
    if obj is None:
        return None
    _expect(obj, dict, field, "an object or null")
    _keys(obj, ("text",), field)
    return HumanCompletionRecord(
        text=_expect(obj["text"], str, f"{field}.text", "a string"),
        rating=_rating(obj.get("rating"), f"{field}.rating"),
        source=_expect(obj.get("source", "human"), str, f"{field}.source", "a string"),
        flagged=_optional(obj.get("flagged"), bool, f"{field}.flagged", "true, false or null"),
    )


def _parse_step(obj: Any, field: str) -> StepRecord:
    if (
        type(obj) is dict
        and type(obj.get("completions")) is list
        and obj.get("human_completion") is None
    ):
        chosen = obj.get("chosen_completion")
        maybe = [_well_formed_completion(c) for c in obj["completions"]]
        well_formed = [c for c in maybe if c is not None]
        if len(well_formed) == len(maybe) and (
            chosen is None or (type(chosen) is int and 0 <= chosen < len(well_formed))
        ):
            return StepRecord(
                completions=well_formed, human_completion=None, chosen_completion=chosen
            )
    _expect(obj, dict, field, "an object")
    _keys(obj, ("completions",), field)
    raw_completions = obj["completions"]
    completions = None
    if raw_completions is not None:
        _expect(raw_completions, list, f"{field}.completions", "a list or null")
        completions = [
            _parse_completion(c, f"{field}.completions[{i}]") for i, c in enumerate(raw_completions)
        ]
    chosen = _optional(
        obj.get("chosen_completion"), int, f"{field}.chosen_completion", "an integer"
    )
    if chosen is not None and (completions is None or not 0 <= chosen < len(completions)):
        raise RecordError(f"{field}.chosen_completion", f"index {chosen} has no completion")
    return StepRecord(
        completions=completions,
        human_completion=_parse_human(obj.get("human_completion"), f"{field}.human_completion"),
        chosen_completion=chosen,
    )


def _parse_question(obj: Any) -> QuestionRecord:
    _expect(obj, dict, "question", "an object")
    _keys(obj, ("problem",), "question")
    problem = _expect(obj["problem"], str, "question.problem", "a string")
    if not problem.strip():
        raise RecordError("question.problem", "is empty")
    answer = _optional(
        obj.get("ground_truth_answer"), str, "question.ground_truth_answer", "a string"
    )
    if "pre_generated_steps" not in obj:
        return QuestionRecord(problem=problem, ground_truth_answer=answer)
    steps = _expect(obj["pre_generated_steps"], list, "question.pre_generated_steps", "a list")
    for i, step in enumerate(steps):
        _expect(step, str, f"question.pre_generated_steps[{i}]", "a string")
    score = obj.get("pre_generated_verifier_score")
    if score is not None:
        score = finite_number(score, "question.pre_generated_verifier_score")
    return QuestionRecord(
        problem=problem,
        ground_truth_answer=answer,
        is_phase2=True,
        ground_truth_solution=_optional(
            obj.get("ground_truth_solution"), str, "question.ground_truth_solution", "a string"
        ),
        pre_generated_steps=steps,
        pre_generated_answer=_optional(
            obj.get("pre_generated_answer"), str, "question.pre_generated_answer", "a string"
        ),
        pre_generated_verifier_score=score,
    )


def parse_record(obj: Any) -> LabelRecord:
    """Validate a decoded PRM800K line; raise RecordError naming the first bad field."""
    _expect(obj, dict, "line", "a JSON object")
    _keys(obj, ("labeler", "timestamp", "question", "label"), "")
    labeler = _expect(obj["labeler"], str, "labeler", "a string")
    raw_timestamp = _expect(obj["timestamp"], str, "timestamp", "an ISO 8601 string")
    try:
        timestamp = datetime.fromisoformat(raw_timestamp)
    except ValueError:
        raise RecordError("timestamp", f"not an ISO 8601 time: {raw_timestamp!r}") from None
    label = _expect(obj["label"], dict, "label", "an object")
    _keys(label, ("steps", "finish_reason"), "label")
    raw_steps = _expect(label["steps"], list, "label.steps", "a list")
    finish_reason = label["finish_reason"]
    if finish_reason not in FINISH_REASONS:
        raise RecordError(
            "label.finish_reason",
            f"must be one of {', '.join(FINISH_REASONS)}, got {finish_reason!r}",
        )
    total_time = _expect(label.get("total_time", 0), int, "label.total_time", "milliseconds (int)")
    if total_time < 0:
        raise RecordError("label.total_time", "is negative")
    within(total_time, "label.total_time", 0, INT32_MAX)
    generation = _optional(obj.get("generation"), int, "generation", "an integer or null")
    if generation is not None:
        within(generation, "generation", -INT32_MAX - 1, INT32_MAX)
    return LabelRecord(
        labeler=labeler,
        timestamp=timestamp,
        generation=generation,
        is_quality_control_question=_expect(
            obj.get("is_quality_control_question", False),
            bool,
            "is_quality_control_question",
            "a boolean",
        ),
        is_initial_screening_question=_expect(
            obj.get("is_initial_screening_question", False),
            bool,
            "is_initial_screening_question",
            "a boolean",
        ),
        question=_parse_question(obj["question"]),
        steps=[_parse_step(step, f"label.steps[{i}]") for i, step in enumerate(raw_steps)],
        total_time=total_time,
        finish_reason=finish_reason,
    )


def question_record(
    *,
    is_phase2: bool,
    problem: str,
    ground_truth_answer: str | None,
    ground_truth_solution: str | None,
    steps: list[str] | None,
    answer: str | None,
    verifier_score: float | None,
    override: dict[str, Any] | None,
) -> QuestionRecord:
    """A stored solution's question: `override` (a solution's own ground truth, kept at
    import when it differs from its problem's) wins over the problem's."""
    override = override or {}
    truth = override.get("ground_truth_answer", ground_truth_answer)
    if not is_phase2:
        return QuestionRecord(problem=problem, ground_truth_answer=truth)
    return QuestionRecord(
        problem=problem,
        ground_truth_answer=truth,
        is_phase2=True,
        ground_truth_solution=override.get("ground_truth_solution", ground_truth_solution),
        pre_generated_steps=steps,
        pre_generated_answer=answer,
        pre_generated_verifier_score=verifier_score,
    )


def question_to_dict(q: QuestionRecord) -> dict[str, Any]:
    """The `question` object, keys in the release's order."""
    question: dict[str, Any] = {"problem": q.problem}
    if q.is_phase2:
        question["ground_truth_solution"] = q.ground_truth_solution
        question["ground_truth_answer"] = q.ground_truth_answer
        question["pre_generated_steps"] = q.pre_generated_steps
        question["pre_generated_answer"] = q.pre_generated_answer
        question["pre_generated_verifier_score"] = q.pre_generated_verifier_score
    else:
        question["ground_truth_answer"] = q.ground_truth_answer
    return question


def record_to_dict(record: LabelRecord) -> dict[str, Any]:
    """The record as the release lays it out, keys in the release's order."""
    question = question_to_dict(record.question)
    steps = []
    for step in record.steps:
        completions = None
        if step.completions is not None:
            completions = [
                {"text": c.text, "rating": c.rating, "flagged": c.flagged} for c in step.completions
            ]
        human = None
        if step.human_completion is not None:
            h = step.human_completion
            human = {"text": h.text, "rating": h.rating, "source": h.source, "flagged": h.flagged}
        steps.append(
            {
                "completions": completions,
                "human_completion": human,
                "chosen_completion": step.chosen_completion,
            }
        )
    return {
        "labeler": record.labeler,
        "timestamp": record.timestamp.isoformat(),
        "generation": record.generation,
        "is_quality_control_question": record.is_quality_control_question,
        "is_initial_screening_question": record.is_initial_screening_question,
        "question": question,
        "label": {
            "steps": steps,
            "total_time": record.total_time,
            "finish_reason": record.finish_reason,
        },
    }


def render_record(record: LabelRecord) -> str:
    """One line of the release, without the trailing newline."""
    return json.dumps(record_to_dict(record))


def chosen_path(record: LabelRecord) -> list[str]:
    """The solution the labeler walked: the chosen (or human-written) text of each step."""
    path = []
    for step in record.steps:
        text = step.chosen_text()
        if text is not None:
            path.append(text)
    return path


# --- the final step ----------------------------------------------------------------------------

ANSWER_HEADING = "# Answer"
# The release ends a solution with a step holding the heading `# Answer` on a line of its own,
# the answer after a blank line: alone ("# Answer\n\n7200", phase 2's pre-generated steps) or
# after the step's text ("So 29 cents.\n\n# Answer\n\n29", phase 1's). Also read as the heading:
# spaces around it, CRLF line ends (a browser's plain form post) and the answer on the heading's
# own line after a space or colon (generated text). Not a heading: `# Answer` inside a sentence,
# `#Answer`, `# answer`, `# Answers` (the release writes none of them).
_ANSWER_HEADING = re.compile(r"^[ \t]*# Answer(?=[\s:]|$)[ \t]*:?", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class AnswerSection:
    body: str  # the text before the heading, stripped ("" when the step is only the answer)
    answer: str  # the text after it, stripped ("" when the heading has no answer under it)


def answer_section(text: str) -> AnswerSection | None:
    """A step's (or a solution's) final-answer section, split at its last `# Answer` heading;
    None when there is none. The one rule for "this step gives the final answer": the labeling
    pages, the generator's step splitter and grading's answer extraction all use it."""
    headings = list(_ANSWER_HEADING.finditer(text))
    if not headings:
        return None
    heading = headings[-1]
    return AnswerSection(body=text[: heading.start()].strip(), answer=text[heading.end() :].strip())


def is_final_step(text: str) -> bool:
    """Whether the step gives the final answer, which ends the solution (`solution`)."""
    return _ANSWER_HEADING.search(text) is not None


# --- stepwise supervision (TRL) --------------------------------------------------------------

NEUTRAL_MAPPINGS = ("positive", "negative", "drop")


def step_label(rating: int | None, neutral: str) -> bool | None:
    """+1 → True, -1 → False, 0 → by `neutral`; None means "no label": the row stops."""
    if rating == 1:
        return True
    if rating == -1:
        return False
    if rating == 0:
        return {"positive": True, "negative": False}.get(neutral)
    return None


def stepwise_rows(
    line: dict[str, Any], *, neutral: str = "positive", alternatives: bool = True
) -> list[dict[str, Any]]:
    """TRL stepwise-supervision rows (`prompt`, `completions`, `labels`) from one release line.

    The main row is the path the labeler walked, up to and including its first -1 step
    (PRM800K convention: nothing after a mistake is labeled). Per step it takes the chosen
    completion, else the labeler's own (human) completion (label from its rating, True when
    unrated: the labeler wrote it as the right step); a step with neither ends the path,
    after adding its first -1 completion if it has one (the error the labeler found). An
    unrated step ends the path before it.

    With `alternatives`, every other rated completion along the path is a row of its own:
    the path so far plus that completion (as TRL's PRM800K conversion does).

    `neutral` maps 0 ratings: "positive" (default; the paper's best), "negative", or
    "drop": a row ends before its first neutral step and alternatives rated 0 are skipped.
    Rows left empty are not returned.
    """
    if neutral not in NEUTRAL_MAPPINGS:
        raise ValueError(f"neutral must be one of {', '.join(NEUTRAL_MAPPINGS)}, got {neutral!r}")
    prompt = line["question"]["problem"]
    texts: list[str] = []
    labels: list[bool] = []
    extra: list[dict[str, Any]] = []
    for step in line["label"]["steps"]:
        completions = step["completions"] or []
        chosen_index = step["chosen_completion"]
        chosen: dict[str, Any] | None = None
        if chosen_index is not None:
            chosen = completions[chosen_index]
            rating = chosen["rating"]
        elif step["human_completion"] is not None:
            chosen = step["human_completion"]
            rating = 1 if chosen["rating"] is None else chosen["rating"]
        else:
            chosen = next((c for c in completions if c["rating"] == -1), None)
            rating = -1
        if alternatives:
            for completion in completions:
                if completion is chosen or completion["rating"] is None:
                    continue
                label = step_label(completion["rating"], neutral)
                if label is not None:
                    extra.append(
                        {
                            "prompt": prompt,
                            "completions": [*texts, completion["text"]],
                            "labels": [*labels, label],
                        }
                    )
        if chosen is None:
            break
        label = step_label(rating, neutral)
        if label is None:
            break
        texts.append(chosen["text"])
        labels.append(label)
        if rating == -1:
            break
    main = [{"prompt": prompt, "completions": texts, "labels": labels}] if texts else []
    return main + extra
