"""The simulation's oracle: a set of labelled solutions (`data.LabeledSolution`) that answers
for labelers. It is the stepwise-critic parquet, a PRM800K-format file, or the database's
completed labelings.

Candidates. From every oracle solution come one candidate per distinct path through its rated
steps: the chosen path itself, and for each rated alternative of step k, the chosen steps before
k followed by that alternative. Each candidate's steps all carry the oracle's ratings (None for
an unrated, e.g. human-written, step), so "labeling" a candidate reveals exactly those ratings.
Labels used = rated steps of the labeled candidates (a shared prefix is counted every time it
is shown again, as a human would rate it again).

Wrong answer. The oracle has labels only for steps labelers saw, and phase-1 labelers finished
only correct solutions, so a final-answer check cannot tell a candidate's fate. A candidate is
**wrong** when the oracle rates one of its steps -1 (the solution went wrong there and, had it
continued, its answer would not be trusted); else it is **correct**. In the real loop the grader
knows wrong answers before labeling too (answer vs ground truth), so selection may use this
flag, exactly as `select_generation` uses `Solution.answer_correct`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .data import (
    LabeledSolution,
    example_from_prm800k,
    examples_from_prm800k,
    read_critic_parquet,
    read_jsonl,
    subsample_problems,
)
from .feature_cache import content_hash


@dataclass
class OracleCandidate:
    id: int
    example: int
    problem: str
    steps: list[str]
    ratings: list[int | None]
    slots: list[int]  # feature slot of each step within its example

    @property
    def wrong(self) -> bool:
        return any(r == -1 for r in self.ratings)

    @property
    def n_labels(self) -> int:
        return sum(r is not None for r in self.ratings)


def candidates_from_oracle(examples: Sequence[LabeledSolution]) -> list[OracleCandidate]:
    """Every distinct rated path of every oracle solution (see the module docstring)."""
    out: list[OracleCandidate] = []
    for i, example in enumerate(examples):
        n = len(example.steps)
        if any(r is not None for r in example.ratings):
            out.append(
                OracleCandidate(
                    len(out),
                    i,
                    example.problem,
                    list(example.steps),
                    list(example.ratings),
                    list(range(n)),
                )
            )
        for j, alt in enumerate(example.alternatives):
            out.append(
                OracleCandidate(
                    len(out),
                    i,
                    example.problem,
                    list(example.steps[: alt.after]) + [alt.text],
                    list(example.ratings[: alt.after]) + [alt.rating],
                    list(range(alt.after)) + [n + j],
                )
            )
    return out


def load_oracle(
    source: str | Iterable[dict[str, Any]], *, max_problems: int | None = None, seed: int = 0
) -> list[LabeledSolution]:
    """A `.parquet` (stepwise-critic) or `.jsonl` (PRM800K labels) path, or PRM800K records
    (the database's completed labelings: `simulate_active_learning --oracle db` reads them)."""
    if not isinstance(source, str):
        examples = examples_from_prm800k(source)
    elif source.endswith(".parquet"):
        examples = read_critic_parquet(source)
    else:
        examples = examples_from_prm800k(read_jsonl(source))
    if max_problems:
        examples = subsample_problems(examples, max_problems, seed)
    return examples


def sampled_answers(records: Iterable[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """(final answer, ground truth) of every PRM800K record that has both (phase 2's sampled
    solutions), by the content hash of its labelled solution; the caller grades them."""
    found = {}
    for record in records:
        question = record.get("question") or {}
        answer, truth = question.get("pre_generated_answer"), question.get("ground_truth_answer")
        example = example_from_prm800k(record)
        if example is not None and answer and truth:
            found[content_hash(example)] = (str(answer), str(truth))
    return found
