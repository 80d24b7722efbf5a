"""labeling.prm800k.stepwise_rows: which steps become rows and labels (no database)."""

import json

import pytest

from labeling.prm800k import stepwise_rows


@pytest.fixture
def lines(shared_data):
    text = (shared_data / "prm800k" / "samples.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _line(steps):
    return {"question": {"problem": "P"}, "label": {"steps": steps}}


def _step(ratings, chosen=0, human=None):
    return {
        "completions": None
        if ratings is None
        else [{"text": f"s{i}:{r}", "rating": r, "flagged": False} for i, r in enumerate(ratings)],
        "human_completion": human,
        "chosen_completion": chosen,
    }


def test_main_row_is_the_chosen_path_up_to_and_including_the_first_mistake():
    line = _line([_step([1]), _step([0]), _step([-1], chosen=0), _step([1])])
    main = stepwise_rows(line, alternatives=False)
    assert main == [
        {"prompt": "P", "completions": ["s0:1", "s0:0", "s0:-1"], "labels": [True, True, False]}
    ]


def test_neutral_mapping_choices():
    line = _line([_step([1]), _step([0]), _step([1])])
    assert stepwise_rows(line, neutral="positive")[0]["labels"] == [True, True, True]
    assert stepwise_rows(line, neutral="negative")[0]["labels"] == [True, False, True]
    # drop: the row ends before the neutral step; nothing after it is labeled out of context
    assert stepwise_rows(line, neutral="drop")[0]["labels"] == [True]
    with pytest.raises(ValueError, match="neutral must be one of"):
        stepwise_rows(line, neutral="maybe")


def test_step_without_choice_ends_the_path_with_the_error_found():
    # phase-2 "found_error": the pre-generated step rated -1, nothing chosen
    line = _line([_step([1]), _step([-1, 1, 1], chosen=None)])
    rows = stepwise_rows(line)
    assert rows[0]["completions"] == ["s0:1", "s0:-1"] and rows[0]["labels"] == [True, False]
    # the other rated alternatives are rows of their own after the shared prefix
    assert [r["completions"] for r in rows[1:]] == [["s0:1", "s1:1"], ["s0:1", "s2:1"]]
    assert [r["labels"] for r in rows[1:]] == [[True, True], [True, True]]


def test_human_completion_continues_the_path_and_counts_as_correct():
    human = {"text": "mine", "rating": None, "source": "human", "flagged": False}
    line = _line([_step([-1, -1], chosen=None, human=human), _step([1]), _step(None, chosen=None)])
    rows = stepwise_rows(line)
    assert rows[0] == {"prompt": "P", "completions": ["mine", "s0:1"], "labels": [True, True]}
    assert [r["labels"] for r in rows[1:]] == [[False], [False]]


def test_unrated_alternatives_and_unrated_steps_give_no_label():
    line = _line([_step([1, None]), _step([None])])
    assert stepwise_rows(line) == [{"prompt": "P", "completions": ["s0:1"], "labels": [True]}]


def test_reference_lines(lines):
    first = stepwise_rows(lines[0])
    # 6 steps walked (one human-written), 5 rejected alternatives at step 2, 4 at step 6
    assert len(first[0]["labels"]) == 6 and all(first[0]["labels"])
    assert len(first) == 1 + 5 + 4
    found_error = stepwise_rows(lines[1], alternatives=False)[0]
    assert found_error["labels"] == [True] * 6 + [False]
    assert stepwise_rows(lines[1], neutral="drop", alternatives=False)[0]["labels"] == [True]
    for line in lines:
        for row in stepwise_rows(line):
            assert len(row["completions"]) == len(row["labels"]) > 0
            assert row["prompt"] == line["question"]["problem"]
