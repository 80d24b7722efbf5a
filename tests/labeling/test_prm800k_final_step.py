"""The one rule for "this step gives the final answer" (`prm800k.is_final_step`,
`prm800k.answer_section`), checked against the release's own steps in ../shared/data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from labeling import prm800k


def release_lines(shared_data: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines()
    ]


def walked_path(line: dict[str, Any]) -> list[str]:
    return prm800k.chosen_path(prm800k.parse_record(line))


def test_the_release_final_steps_are_final_and_the_steps_before_them_are_not(shared_data):
    finals: list[tuple[str, str | None]] = []  # (step, its answer where the line records it)
    earlier: list[str] = []
    for line in release_lines(shared_data):
        path = walked_path(line)
        if line["label"]["finish_reason"] == "solution":
            finals.append((path[-1], None))
            earlier += path[:-1]
        else:  # found_error, give_up: the labeler stopped before any answer
            earlier += path
        pre_generated = line["question"].get("pre_generated_steps")
        if pre_generated:  # a phase-2 solution ends with its answer step
            finals.append((pre_generated[-1], line["question"]["pre_generated_answer"]))
            earlier += pre_generated[:-1]
    # Both shapes the release writes: text then the answer (phase 1), the answer alone (phase 2).
    assert any(step.startswith("# Answer") for step, _ in finals)
    assert any(not step.startswith("# Answer") for step, _ in finals)
    assert len(finals) >= 5 and len(earlier) >= 40
    for step, answer in finals:
        assert prm800k.is_final_step(step), step
        section = prm800k.answer_section(step)
        assert section is not None and section.answer
        assert f"{section.body}\n\n# Answer\n\n{section.answer}".strip() == step
        if answer is not None:
            assert section.answer == answer
    assert [step for step in earlier if prm800k.is_final_step(step)] == []
    assert all(prm800k.answer_section(step) is None for step in earlier)


def test_the_written_answer_steps_of_the_phase1_conversion_are_classified(shared_data):
    """The public phase-1 conversion cuts each final step's `\\n\\n# Answer\\n\\n<answer>` off into
    its `answer` column (`is_solution`): its 44,716 step texts hold no answer section, though
    hundreds say "answer" and dozens hold `#` (`r \\# s`). Put back, each is a final step again."""
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(
        shared_data / "prm800k" / "phase1_train.stepwise-critic.parquet",
        columns=["responses", "next_response", "is_solution", "answer"],
    ).to_pylist()
    texts = {row["next_response"] for row in table}
    for row in table:
        texts.update(row["responses"])
    assert len(texts) > 40_000
    assert sum("answer" in t.lower() for t in texts) > 500 and sum("#" in t for t in texts) > 20
    assert [t for t in texts if prm800k.is_final_step(t)] == []

    solutions = [row for row in table if row["is_solution"]]
    assert len(solutions) > 800
    for row in solutions:
        step = f"{row['next_response']}\n\n# Answer\n\n{row['answer']}"
        assert prm800k.is_final_step(step)
        assert prm800k.answer_section(step) == prm800k.AnswerSection(
            body=row["next_response"].strip(), answer=row["answer"].strip()
        )


@pytest.mark.parametrize(
    ("step", "section"),
    [
        # The release's two shapes.
        (
            "So the price of a pencil is 29 cents.\n\n# Answer\n\n29",
            ("So the price of a pencil is 29 cents.", "29"),
        ),
        ("# Answer\n\n7200", ("", "7200")),
        # What a labeler's form or a generator may send: spaces, CRLF, the answer on the line.
        ("  # Answer\n\n4", ("", "4")),
        ("So $x = 4$.\r\n\r\n# Answer\r\n\r\n4\r\n", ("So $x = 4$.", "4")),
        ("So $x = 4$.\n  # Answer  \n4", ("So $x = 4$.", "4")),
        ("# Answer 12", ("", "12")),
        ("# Answer: 12", ("", "12")),
        ("I stop here.\n\n# Answer", ("I stop here.", "")),  # final, with no answer under it
        # Never the heading (the release writes none of these).
        ("I'd write # Answer here and go on.", None),
        ("So the # Answer\n\nis 4", None),
        ("#Answer\n\n4", None),
        ("# answer\n\n4", None),
        ("# Answers to both parts follow.", None),
        ("## Answer\n\n4", None),
        ("The answer is $\\boxed{4}$.", None),
        ("And we can do so using the first condition: $r\\ \\#\\ 0=r$.", None),
    ],
)
def test_a_step_is_final_only_with_the_answer_heading_on_a_line_of_its_own(step, section):
    assert prm800k.is_final_step(step) == (section is not None)
    expected = None if section is None else prm800k.AnswerSection(*section)
    assert prm800k.answer_section(step) == expected
