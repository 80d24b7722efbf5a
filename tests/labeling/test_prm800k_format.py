import json

import pytest

from labeling import prm800k


def sample_lines(shared_data):
    return (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines()


def test_every_sample_line_renders_back_byte_for_byte(shared_data):
    for line in sample_lines(shared_data):
        assert prm800k.render_record(prm800k.parse_record(json.loads(line))) == line


def test_phase1_line_keeps_alternatives_and_human_completion(shared_data):
    record = prm800k.parse_record(json.loads(sample_lines(shared_data)[0]))
    assert record.generation is None and not record.question.is_phase2
    second = record.steps[1]
    assert [c.rating for c in second.completions] == [-1] * 5
    assert second.chosen_completion is None
    assert second.human_completion.text == "We have $3p+e=1.24$ and $5p+e=1.82$."
    # The walked path takes the human completion where no completion was chosen.
    assert prm800k.chosen_path(record)[1] == second.human_completion.text


def test_phase2_line_keeps_pre_generated_solution(shared_data):
    record = prm800k.parse_record(json.loads(sample_lines(shared_data)[1]))
    assert record.generation == 6 and record.question.is_phase2
    assert len(record.question.pre_generated_steps) == 13
    assert record.question.pre_generated_answer == "7200"
    assert record.steps[0].completions[0].flagged is None
    assert record.finish_reason == "found_error"


def _line(**changes):
    base = {
        "labeler": "e90a38f3-3135-4465-87af-3e6322e3d772",
        "timestamp": "2022-07-30T23:23:32.118856",
        "generation": None,
        "is_quality_control_question": False,
        "is_initial_screening_question": False,
        "question": {"problem": "1+1?", "ground_truth_answer": "2"},
        "label": {
            "steps": [
                {
                    "completions": [{"text": "2", "rating": 1, "flagged": False}],
                    "human_completion": None,
                    "chosen_completion": 0,
                }
            ],
            "total_time": 10,
            "finish_reason": "solution",
        },
    }
    for path, value in changes.items():
        target = base
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        target[keys[-1]] = value
    return base


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"label__steps__0__completions__0__rating": 2},
            "label.steps[0].completions[0].rating",
            "must be -1, 0, 1 or null",
        ),
        (
            {"label__steps__0__completions__0__rating": True},
            "label.steps[0].completions[0].rating",
            "must be -1, 0, 1",
        ),
        (
            {"label__steps__0__chosen_completion": 3},
            "label.steps[0].chosen_completion",
            "has no completion",
        ),
        ({"label__finish_reason": "done"}, "label.finish_reason", "must be one of"),
        ({"timestamp": "yesterday"}, "timestamp", "not an ISO 8601 time"),
        ({"question__problem": ""}, "question.problem", "is empty"),
        ({"label__total_time": "10"}, "label.total_time", "milliseconds"),
    ],
)
def test_invalid_fields_are_named(changes, field, message):
    with pytest.raises(prm800k.RecordError) as caught:
        prm800k.parse_record(_line(**changes))
    assert caught.value.field == field
    assert message in caught.value.message


def test_missing_top_level_key_is_named():
    line = _line()
    del line["label"]
    with pytest.raises(prm800k.RecordError, match="^label: missing"):
        prm800k.parse_record(line)
