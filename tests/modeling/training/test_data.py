from __future__ import annotations

import pytest

from modeling.training.batching import collate
from modeling.training.data import (
    IGNORE,
    SEPARATOR,
    Alternative,
    LabeledSolution,
    Solution,
    build_features,
    example_from_prm800k,
    examples_from_critic_rows,
    examples_from_prm800k,
    length_batches,
    pack_solution,
    problem_folds,
    problem_key,
    split_by_problem,
)


def test_phase1_record_keeps_alternatives_and_the_human_step_as_unlabelled_prefix(
    prm800k_records,
):
    record = prm800k_records[0]  # step 2: five -1 alternatives, then a human completion
    example = example_from_prm800k(record)
    steps = record["label"]["steps"]
    assert example.steps[1] == steps[1]["human_completion"]["text"]
    assert example.ratings == [1, None, 1, 1, 1, 1]
    assert example.steps[5] == steps[5]["completions"][4]["text"]  # chosen_completion 4
    at_step_1 = [a for a in example.alternatives if a.after == 1]
    assert [a.text for a in at_step_1] == [c["text"] for c in steps[1]["completions"]]
    assert {a.rating for a in at_step_1} == {-1}
    at_step_5 = [(a.text, a.rating) for a in example.alternatives if a.after == 5]
    assert at_step_5 == [(c["text"], c["rating"]) for c in steps[5]["completions"][:4]]


def test_phase2_found_error_record_ends_the_path_at_the_unchosen_step(prm800k_records):
    record = prm800k_records[1]
    assert record["generation"] == 6 and record["label"]["finish_reason"] == "found_error"
    example = example_from_prm800k(record)
    assert example.steps == record["question"]["pre_generated_steps"][:6]
    assert example.ratings == [1, 0, 1, 1, 1, 1]
    last = record["label"]["steps"][6]["completions"]
    assert [(a.after, a.text, a.rating) for a in example.alternatives] == [
        (6, c["text"], c["rating"]) for c in last
    ]


def test_give_up_record_stops_at_the_step_without_completions(prm800k_records):
    record = prm800k_records[4]
    assert record["label"]["finish_reason"] == "give_up"
    example = example_from_prm800k(record)
    assert len(example.steps) == 8 and example.ratings[-1] is None  # human step, unrated
    assert all(a.after == 7 and a.rating == -1 for a in example.alternatives)


def test_bad_problem_records_are_skipped(prm800k_records):
    record = {
        **prm800k_records[0],
        "label": {**prm800k_records[0]["label"], "finish_reason": "bad_problem"},
    }
    assert example_from_prm800k(record) is None
    assert len(examples_from_prm800k(prm800k_records)) == 6


def _row(problem, responses, text, rating, preferred):
    return {
        "instruction": problem,
        "responses": list(responses),
        "next_response": text,
        "rating": rating,
        "is_preferred_response": preferred,
    }


def test_critic_rows_group_into_one_chosen_path_with_alternatives():
    rows = [
        _row("P", [], "a", 1.0, True),
        _row("P", [], "x", -1.0, False),
        _row("P", ["a"], "b", None, True),  # human step: in the path, no label
        _row("P", ["a"], "y", 0.0, False),
        _row("P", ["a"], "y", 0.0, False),  # exact duplicate: used once
        _row("P", ["a", "b"], "c", 1.0, True),
        _row("P", ["a", "b"], "z", -1.0, False),
        _row("Q", [], "q", -1.0, True),
    ]
    examples = {e.problem: e for e in examples_from_critic_rows(rows)}
    p = examples["P"]
    assert p.steps == ["a", "b", "c"]
    assert p.ratings == [1, None, 1]
    assert [(a.after, a.text, a.rating) for a in p.alternatives] == [
        (0, "x", -1),
        (1, "y", 0),
        (2, "z", -1),
    ]
    assert examples["Q"].steps == ["q"] and examples["Q"].ratings == [-1]


def test_critic_rows_of_the_real_slice_use_every_distinct_rating_once(critic_rows):
    examples = examples_from_critic_rows(critic_rows)
    distinct = {
        (
            r["instruction"],
            tuple(r["responses"]),
            r["next_response"],
            r["rating"],
            r["is_preferred_response"],
        )
        for r in critic_rows
        if r["rating"] is not None
    }
    assert sum(e.n_labels() for e in examples) == len(distinct)
    # Every chosen step k of the path was a candidate at prefix steps[:k].
    keys = {(r["instruction"], tuple(r["responses"]), r["next_response"]) for r in critic_rows}
    for e in examples:
        for k, step in enumerate(e.steps):
            assert (e.problem, tuple(e.steps[:k]), step) in keys


def test_problem_folds_hold_each_problem_out_once_and_never_train_on_it():
    examples = [LabeledSolution(f"problem {i % 12}", ["s"], [1]) for i in range(40)]
    folds = problem_folds(examples, 5, seed=3)
    assert len(folds) == 5
    held_out_everywhere = []
    for train, held_out in folds:
        trained = {problem_key(e.problem) for e in train}
        held = {problem_key(e.problem) for e in held_out}
        assert trained.isdisjoint(held) and held
        assert len(train) + len(held_out) == 40  # every solution on one side
        held_out_everywhere += sorted(held)
    assert sorted(held_out_everywhere) == sorted({problem_key(e.problem) for e in examples})
    again = problem_folds(examples, 5, seed=3)
    assert [[e.problem for e in h] for _, h in again] == [[e.problem for e in h] for _, h in folds]
    other = problem_folds(examples, 5, seed=4)
    assert [{e.problem for e in h} for _, h in other] != [{e.problem for e in h} for _, h in folds]


def test_problem_folds_refuse_more_folds_than_problems():
    examples = [LabeledSolution(f"problem {i % 3}", ["s"], [1]) for i in range(9)]
    with pytest.raises(ValueError, match="5 folds need at least 2 folds and 5 problems, not 3"):
        problem_folds(examples, 5, seed=0)


def test_split_by_problem_never_leaks_a_problem_and_is_seeded():
    examples = [LabeledSolution(f"problem {i % 10}", ["s"], [1]) for i in range(40)]
    train, test = split_by_problem(examples, 0.3, seed=7)
    assert {problem_key(e.problem) for e in train}.isdisjoint(
        {problem_key(e.problem) for e in test}
    )
    assert len({e.problem for e in test}) == 3 and len(train) + len(test) == 40
    again, _ = split_by_problem(examples, 0.3, seed=7)
    assert [e.problem for e in again] == [e.problem for e in train]
    other, _ = split_by_problem(examples, 0.3, seed=8)
    assert {e.problem for e in other} != {e.problem for e in train}


def _expected_end_texts(tokenizer, problem, steps):
    text = (tokenizer.bos_token or "") + problem.strip() + SEPARATOR
    ends = []
    for step in steps:
        text += step.strip() + SEPARATOR
        ends.append(text)
    return ends


def test_labels_land_on_step_end_tokens_only(tokenizer, prm800k_records):
    example = example_from_prm800k(prm800k_records[0])
    [row] = pack_solution(example, tokenizer, max_length=4096)
    labels = row.token_labels()
    path_len = row.visible[-1] if row.segment[-1] else len(row)
    ends = _expected_end_texts(tokenizer, example.problem, example.steps)
    # Token by token: a path position is labelled iff the text up to it is a whole step.
    for pos in range(path_len):
        decoded = tokenizer.decode(row.input_ids[: pos + 1])
        if decoded in ends:
            k = ends.index(decoded)
            rating = example.ratings[k]
            assert labels[pos] == (IGNORE if rating is None else rating + 1), pos
            assert row.slots[row.ends.index(pos)] == k
        else:
            assert labels[pos] == IGNORE, pos
    # An alternative's label sits on its last token; its text is what the tokens say.
    for j, alt in enumerate(example.alternatives):
        tokens = [t for t, s in zip(row.input_ids, row.segment, strict=True) if s == j + 1]
        assert tokenizer.decode(tokens) == alt.text.strip() + SEPARATOR
        last = max(i for i, s in enumerate(row.segment) if s == j + 1)
        assert labels[last] == alt.rating + 1
        first = row.segment.index(j + 1)
        assert all(label == IGNORE for label in labels[first:last])
        assert row.position_ids[first] == row.visible[first]  # continues its prefix


def test_truncation_drops_labels_past_max_length_and_never_moves_them(tokenizer, prm800k_records):
    example = example_from_prm800k(prm800k_records[0])
    [full] = pack_solution(example, tokenizer, max_length=4096)
    short = pack_solution(example, tokenizer, max_length=200)
    assert all(len(r) <= 200 for r in short)
    full_at = dict(zip(full.slots, zip(full.ends, full.labels, strict=True), strict=True))
    kept = set()
    for row in short:
        for slot, pos, label in zip(row.slots, row.ends, row.labels, strict=True):
            assert slot not in kept
            kept.add(slot)
            assert label == full_at[slot][1]
            position = row.position_ids[pos]  # same place in the model's view of the text
            assert position == full.position_ids[full_at[slot][0]]
    assert 0 < len(kept) < len(full.slots)
    dropped = set(full.slots) - kept
    assert all(
        full.position_ids[full_at[s][0]] >= 200 - 1 or s >= len(example.steps) for s in dropped
    )


def test_alternatives_overflowing_a_row_move_to_rows_with_just_their_prefix(tokenizer):
    problem, steps = "What is 2 + 3?", ["First add.", "Then write it down.", "# Answer\n\n5"]
    alternatives = [Alternative(1, f"Alternative number {i} with words.", -1) for i in range(8)]
    example = LabeledSolution(problem, steps, [1, 1, 1], alternatives)
    [single] = pack_solution(example, tokenizer, max_length=4096)
    rows = pack_solution(example, tokenizer, max_length=len(single) // 2)
    assert len(rows) > 1
    assert sorted(s for r in rows for s in r.slots) == sorted(single.slots)
    for extra in rows[1:]:
        assert all(label == IGNORE for label in extra.token_labels()[: extra.visible[-1]])


def test_length_batches_bucket_by_length_under_the_token_budget():
    lengths = [5, 100, 7, 98, 6, 99, 300]
    batches = length_batches(lengths, batch_tokens=300)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 300
    assert {0, 2, 4} in [set(b) for b in batches]  # the short ones together


def test_collate_pads_right_and_keeps_flat_step_end_indices(tokenizer):
    solutions = [Solution("1+1?", ["It is 2."]), Solution("2+2?", ["Add.", "It is 4."])]
    rows = build_features(solutions, tokenizer, 512)
    batch = collate(rows, pad_id=0)
    width = batch.input_ids.shape[1]
    assert batch.slots == [(0, 0), (1, 0), (1, 1)]
    assert batch.ends.tolist() == [
        rows[0].ends[0],
        width + rows[1].ends[0],
        width + rows[1].ends[1],
    ]
    assert (batch.segment[0, len(rows[0]) :] == -1).all()
    assert batch.n_tokens == len(rows[0]) + len(rows[1])
