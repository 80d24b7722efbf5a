"""Datasets for process reward models: records in, packed token rows out (no torch: the web
side reads records through this module; `batching` turns rows into tensors).

Text layout (training and scoring alike), SEP the step separator (TrainConfig.step_separator,
default "\\n\\n")::

    [BOS] problem SEP step_1 SEP step_2 SEP ... step_n SEP

BOS is the tokenizer's bos token (or cls token for encoders) when it has one. Each
segment (the problem, each step) is stripped and tokenized on its own together with
its SEP terminator, then the ids are concatenated: so a step's tokens never depend
on its neighbours, and the label of step k sits on the **last token of step k's
segment** (the one that carries the terminator), i.e. where the model has read the
whole step and knows it ended. All other positions are ignored (-100). Targets
(`Targets`): 3 classes, index = rating + 1 (-1 -> 0, 0 -> 1, +1 -> 2), or TRL's 2 (1 = good:
+1, and 0 where neutral_as is "good"; 0 = bad), optionally only the last rated path step
labelled (train_on_last_step_only). An outcome model (objective "outcome") has one label per
solution, at its last step's end: `outcome_examples` turns `GradedSolution`s (final-answer
correctness) into records rated there alone.

Packing: one row holds a solution's chosen path (labelled at every rated step end)
followed by its rated alternatives. An alternative to step k is placed after the path
with position ids continuing from the end of step k-1, and the attention mask lets it
see only the problem and the chosen steps before k, plus itself causally. That is the
same computation as running "prefix + alternative" as its own sequence (tested), but
the prefix is encoded once. Path tokens see only earlier path tokens (causal), so no
position ever sees a later step, whatever the backbone. When a row would exceed
``max_length`` tokens, alternatives move to extra rows that repeat the prefix they need
(unlabelled); path steps past ``max_length`` and alternatives whose prefix plus text
exceed it lose their labels (dropped, never moved).

Packing across solutions (`pack_rows`): several such rows share one token row up to a
token budget, each one a "document" of its own. A token sees only tokens of its own
document, under the rule above, and position ids restart at 0 in each document: every
step's logits are those of its row alone (tested), with little padding in the batch.
"""

from __future__ import annotations

import hashlib
import json
import random
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

IGNORE = -100
SEPARATOR = "\n\n"  # the default step separator (TrainConfig.step_separator)
NUM_CLASSES = 3  # the default head (TrainConfig.num_labels)
NEUTRAL_AS = ("good", "bad")


def rating_to_class(rating: int) -> int:
    return int(rating) + 1


@dataclass(frozen=True)
class Targets:
    """How ratings become the classes a model trains on (TrainConfig's num_labels, neutral_as,
    train_on_last_step_only)."""

    num_labels: int = NUM_CLASSES
    neutral_as: str = "good"
    last_step_only: bool = False
    outcome: bool = False  # objective outcome: the last step's label alone, no alternatives

    @classmethod
    def of_config(cls, config: Any) -> Targets:
        return cls(
            config.num_labels,
            config.neutral_as,
            config.train_on_last_step_only,
            getattr(config, "objective", "process") == "outcome",
        )

    def label(self, rating: int) -> int:
        """3 classes: rating + 1. 2 classes (TRL's): 1 good (+1; 0 when neutral_as is "good"),
        0 bad."""
        if self.num_labels == NUM_CLASSES:
            return rating_to_class(rating)
        return int(rating > 0 or (rating == 0 and self.neutral_as == "good"))


def check_separator(tokenizer: Any, separator: str) -> None:
    """Refuse a separator the tokenizer turns into nothing: steps would run together unmarked.
    Whitespace is the exception: BERT-like encoders drop all of it, and there the label has
    always sat on the step's last word piece (the same for any whitespace separator)."""
    if separator.strip() and not tokenizer(separator, add_special_tokens=False)["input_ids"]:
        raise ValueError(f"step_separator {separator!r} gives no tokens with this tokenizer")


@dataclass
class Solution:
    """A problem and its steps, for scoring."""

    problem: str
    steps: list[str]


@dataclass
class Alternative:
    """A rated step that was not chosen; its prefix is the problem + chosen steps[:after]."""

    after: int
    text: str
    rating: int


@dataclass
class LabeledSolution:
    """A chosen path with one rating per step (None: not trained on) and rated alternatives."""

    problem: str
    steps: list[str]
    ratings: list[int | None]
    alternatives: list[Alternative] = field(default_factory=list)

    def n_labels(self) -> int:
        return sum(r is not None for r in self.ratings) + len(self.alternatives)

    def slot_ratings(self) -> list[int | None]:
        """Ratings by slot: path steps first, then alternatives in order."""
        return list(self.ratings) + [a.rating for a in self.alternatives]


@dataclass(frozen=True)
class GradedSolution:
    """A whole solution and whether its final answer is correct: an outcome model's data."""

    problem: str
    steps: list[str]
    correct: bool


def outcome_examples(graded: Iterable[GradedSolution]) -> list[LabeledSolution]:
    """Graded solutions as an outcome model trains on them: one rating, at the last step (+1
    correct, -1 wrong), every other step unrated, no alternatives. A solution without steps
    has nowhere to carry its label and is left out."""
    return [
        LabeledSolution(
            g.problem, list(g.steps), [None] * (len(g.steps) - 1) + [1 if g.correct else -1]
        )
        for g in graded
        if g.steps
    ]


# ---------------------------------------------------------------- PRM800K records


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def example_from_prm800k(record: dict[str, Any]) -> LabeledSolution | None:
    """One PRM800K label line (phase 1 or 2) -> a labelled solution.

    For every rated completion of step k the prefix is the problem plus the chosen steps
    before k. The chosen step is completions[chosen_completion], else the human
    completion (rating null: in the prefix, not trained on). The path ends at the first
    step with neither. Lines with finish_reason "bad_problem" say nothing about steps
    and give None.
    """
    label = record["label"]
    if label.get("finish_reason") == "bad_problem":
        return None
    steps: list[str] = []
    ratings: list[int | None] = []
    alternatives: list[Alternative] = []
    for step in label["steps"]:
        completions = step.get("completions") or []
        chosen = step.get("chosen_completion")
        for i, completion in enumerate(completions):
            if i != chosen and completion.get("rating") is not None:
                alternatives.append(
                    Alternative(len(steps), completion["text"], int(completion["rating"]))
                )
        if chosen is not None:
            steps.append(completions[chosen]["text"])
            rating = completions[chosen].get("rating")
            ratings.append(None if rating is None else int(rating))
        elif step.get("human_completion"):
            steps.append(step["human_completion"]["text"])
            ratings.append(None)
        else:
            break
    example = LabeledSolution(record["question"]["problem"], steps, ratings, alternatives)
    return example if example.n_labels() else None


def examples_from_prm800k(records: Iterable[dict[str, Any]]) -> list[LabeledSolution]:
    examples = (example_from_prm800k(r) for r in records)
    return [e for e in examples if e is not None]


# ------------------------------------------------------- stepwise-critic parquet


def read_critic_parquet(path: str | Path) -> list[LabeledSolution]:
    import pyarrow.parquet as pq

    columns = ["instruction", "responses", "next_response", "rating", "is_preferred_response"]
    return examples_from_critic_rows(pq.read_table(path, columns=columns).to_pylist())


def examples_from_critic_rows(rows: Iterable[dict[str, Any]]) -> list[LabeledSolution]:
    """Rows (one per rated candidate step) -> labelled solutions.

    Rows sharing a problem and prefix (`responses`) are one step's candidates. The
    chosen path follows the preferred candidate that later rows extend; each path from
    the root to a prefix nobody extends is one solution (its last preferred candidate
    ends it). Every other rated candidate becomes an alternative of the first solution
    through its prefix; each rating is used once, exact duplicate rows once.
    """
    by_problem: dict[str, dict[tuple[str, ...], list[dict[str, Any]]]] = {}
    seen: set[tuple[Any, ...]] = set()
    for row in rows:
        prefix = tuple(row["responses"])
        key = (
            row["instruction"],
            prefix,
            row["next_response"],
            row["rating"],
            row["is_preferred_response"],
        )
        if key in seen:
            continue
        seen.add(key)
        by_problem.setdefault(row["instruction"], {}).setdefault(prefix, []).append(row)
    examples: list[LabeledSolution] = []
    for problem, groups in by_problem.items():
        examples.extend(_critic_solutions(problem, groups))
    return examples


def _critic_solutions(
    problem: str, groups: dict[tuple[str, ...], list[dict[str, Any]]]
) -> list[LabeledSolution]:
    def rating(row: dict[str, Any]) -> int | None:
        value = row["rating"]
        return None if value is None or value != value else int(value)  # NaN from pandas

    solutions: list[LabeledSolution] = []
    used: set[tuple[str, ...]] = set()  # prefixes whose candidates are already used
    stack: list[tuple[str, ...]] = [()]
    while stack:
        prefix = stack.pop()
        # Walk down from `prefix`, pushing siblings that branch off for later solutions.
        path = list(prefix)
        while True:
            candidates = groups.get(tuple(path), [])
            children = [c for c in candidates if tuple(path) + (c["next_response"],) in groups]
            if len(children) > 1:
                stack.extend(tuple(path) + (c["next_response"],) for c in children[1:])
            if children:
                path.append(children[0]["next_response"])
                continue
            preferred = [c for c in candidates if c["is_preferred_response"]]
            if preferred:
                path.append(preferred[0]["next_response"])
            break
        ratings: list[int | None] = []
        alternatives: list[Alternative] = []
        for k, text in enumerate(path):
            candidates = groups.get(tuple(path[:k]), [])
            fresh = tuple(path[:k]) not in used
            used.add(tuple(path[:k]))
            chosen = next(c for c in candidates if c["next_response"] == text)
            ratings.append(rating(chosen) if fresh else None)
            if fresh:
                for c in candidates:
                    if c is not chosen and (r := rating(c)) is not None:
                        alternatives.append(Alternative(k, c["next_response"], r))
        # A leaf prefix with only unpreferred candidates still has labels to give.
        leaf = tuple(path)
        if leaf in groups and leaf not in used:
            used.add(leaf)
            for c in groups[leaf]:
                if (r := rating(c)) is not None:
                    alternatives.append(Alternative(len(path), c["next_response"], r))
        example = LabeledSolution(problem, path, ratings, alternatives)
        if example.n_labels():
            solutions.append(example)
    return solutions


# ------------------------------------------------------------------ splitting


def problem_key(text: str) -> str:
    """A problem's identity across models and evaluation sets (split.json, prm.json's training
    record): sha256 of its text, stripped, runs of whitespace as one space; 16 hex digits."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:16]


def shuffle_key(problem: str) -> str:
    """What seeded splits shuffle problems by: sha256 of the stripped text (the key before
    problem_key normalised whitespace), so a seed holds out the same problems it always did."""
    return hashlib.sha256(problem.strip().encode("utf-8")).hexdigest()[:16]


class HasProblem(Protocol):
    @property
    def problem(self) -> str: ...


P = TypeVar("P", bound=HasProblem)


def split_by_problem(
    examples: Sequence[P], holdout_fraction: float, seed: int
) -> tuple[list[P], list[P]]:
    """(train, held out): every solution of a problem lands on the same side."""
    keys = sorted({shuffle_key(e.problem) for e in examples})
    random.Random(seed).shuffle(keys)
    n_test = round(len(keys) * holdout_fraction)
    if holdout_fraction > 0 and n_test == 0 and len(keys) > 1:
        n_test = 1
    test_keys = set(keys[:n_test])
    train = [e for e in examples if shuffle_key(e.problem) not in test_keys]
    test = [e for e in examples if shuffle_key(e.problem) in test_keys]
    return train, test


def training_record(problems: Iterable[str], optimizer_steps: int, examples: int) -> dict[str, Any]:
    """prm.json's "training": the problems trained on (problem_key, sorted, unique), a digest
    of them, the optimizer steps taken and the solutions trained on: what tells whether two
    models were trained on equal footing."""
    keys = sorted({problem_key(p) for p in problems})
    return {
        "problems": keys,
        "problems_digest": hashlib.sha256("\n".join(keys).encode("utf-8")).hexdigest(),
        "optimizer_steps": int(optimizer_steps),
        "examples": int(examples),
    }


def problem_fold_of(problems: Sequence[str], k: int, seed: int) -> dict[str, int]:
    """Fold (0..k-1) of each distinct problem: seeded shuffle, then dealt round robin, so the
    folds differ in size by at most one problem."""
    keys = sorted(set(problems))
    if k < 2 or len(keys) < k:
        raise ValueError(f"{k} folds need at least 2 folds and {k} problems, not {len(keys)}")
    random.Random(seed).shuffle(keys)
    return {key: n % k for n, key in enumerate(keys)}


def problem_folds(
    examples: Sequence[LabeledSolution], k: int, seed: int
) -> list[tuple[list[LabeledSolution], list[LabeledSolution]]]:
    """k (train, held out) pairs split by problem (`problem_fold_of`): each problem is held
    out in exactly one fold and never trained on in that fold."""
    fold = problem_fold_of([shuffle_key(e.problem) for e in examples], k, seed)
    return [
        (
            [e for e in examples if fold[shuffle_key(e.problem)] != held_out],
            [e for e in examples if fold[shuffle_key(e.problem)] == held_out],
        )
        for held_out in range(k)
    ]


def subsample_problems(examples: Sequence[P], max_problems: int, seed: int) -> list[P]:
    keys = sorted({shuffle_key(e.problem) for e in examples})
    random.Random(seed + 1).shuffle(keys)
    kept = set(keys[:max_problems])
    return [e for e in examples if shuffle_key(e.problem) in kept]


# --------------------------------------------------------------- tokenization


@dataclass
class Row:
    """One packed token row.

    `segment` is 0 on path tokens and j+1 on alternative j's tokens; `visible` is how
    many leading path tokens a token may attend to. `ends`/`slots`/`labels` are the
    step-end positions in this row, the slot each belongs to (path step k -> k,
    alternative j -> n_steps + j) and its class (or IGNORE when unrated).
    """

    example: int
    input_ids: list[int]
    position_ids: list[int]
    segment: list[int]
    visible: list[int]
    ends: list[int]
    slots: list[int]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)

    def token_labels(self) -> list[int]:
        """Labels per token: the class at labelled step ends, IGNORE everywhere else."""
        out = [IGNORE] * len(self.input_ids)
        for pos, label in zip(self.ends, self.labels, strict=True):
            out[pos] = label
        return out


def start_ids(tokenizer: Any) -> list[int]:
    for token_id in (tokenizer.bos_token_id, tokenizer.cls_token_id):
        if token_id is not None:
            return [token_id]
    return []


def encode_segments(
    tokenizer: Any, texts: Sequence[str], separator: str = SEPARATOR
) -> list[list[int]]:
    """Each text stripped + terminator, tokenized on its own (no special tokens)."""
    if not texts:
        return []
    batch = [t.strip() + separator for t in texts]
    return tokenizer(batch, add_special_tokens=False)["input_ids"]


def pack_solution(
    solution: Solution | LabeledSolution,
    tokenizer: Any,
    max_length: int,
    index: int = 0,
    *,
    separator: str = SEPARATOR,
    targets: Targets = Targets(),
) -> list[Row]:
    """Token rows for one solution; see the module docstring for the layout. With
    `targets.last_step_only` the path keeps only its last rated step's label (whether or not
    it fits max_length, as TRL picks it before truncating); alternatives keep theirs. With
    `targets.outcome` only the last step's end keeps its label (the solution's outcome) and
    alternatives are dropped."""
    steps = list(solution.steps)
    alternatives = list(getattr(solution, "alternatives", []))
    ratings = list(getattr(solution, "ratings", [None] * len(steps)))
    if targets.outcome:
        ratings = [None] * (len(ratings) - 1) + ratings[-1:]
        alternatives = []
    if targets.last_step_only:
        rated = [k for k, r in enumerate(ratings) if r is not None]
        ratings = [r if rated and k == rated[-1] else None for k, r in enumerate(ratings)]
    encoded = encode_segments(
        tokenizer, [solution.problem, *steps, *(a.text for a in alternatives)], separator
    )
    path = start_ids(tokenizer) + encoded[0]
    boundaries = [len(path)]  # boundaries[k]: path tokens before step k
    for ids in encoded[1 : 1 + len(steps)]:
        path += ids
        boundaries.append(len(path))
    path = path[:max_length]
    first = _path_row(index, path)
    for k, rating in enumerate(ratings):
        end = boundaries[k + 1] - 1
        if end < len(path):
            first.ends.append(end)
            first.slots.append(k)
            first.labels.append(IGNORE if rating is None else targets.label(rating))

    # First fit: the first row holds the whole path; extra rows hold only the prefix needed.
    plans: list[dict[str, Any]] = [{"path": len(path), "alts": [], "size": len(path)}]
    for j, alt in enumerate(alternatives):
        ids = encoded[1 + len(steps) + j]
        prefix = boundaries[alt.after]
        if prefix + len(ids) > max_length:
            continue
        for n, plan in enumerate(plans):
            needed = max(plan["path"], prefix) if n else plan["path"]
            if needed + plan["size"] - plan["path"] + len(ids) <= max_length:
                break
        else:
            plan = {"path": prefix, "alts": [], "size": prefix}
            plans.append(plan)
        plan["size"] += max(0, prefix - plan["path"]) + len(ids)
        plan["path"] = max(plan["path"], prefix)
        plan["alts"].append(j)

    rows = []
    for n, plan in enumerate(plans):
        if n == 0:
            row = first
        elif not plan["alts"]:
            continue
        else:
            row = _path_row(index, path[: plan["path"]])
        for j in plan["alts"]:
            ids = encoded[1 + len(steps) + j]
            prefix = boundaries[alternatives[j].after]
            row.input_ids += ids
            row.position_ids += range(prefix, prefix + len(ids))
            row.segment += [j + 1] * len(ids)
            row.visible += [prefix] * len(ids)
            row.ends.append(len(row.input_ids) - 1)
            row.slots.append(len(steps) + j)
            row.labels.append(targets.label(alternatives[j].rating))
        rows.append(row)
    return rows


def _path_row(example: int, ids: list[int]) -> Row:
    """A row of path tokens only: causal, each token sees the path up to itself."""
    n = len(ids)
    return Row(example, list(ids), list(range(n)), [0] * n, list(range(1, n + 1)), [], [], [])


def build_features(
    solutions: Sequence[Solution | LabeledSolution],
    tokenizer: Any,
    max_length: int,
    progress: Callable[[int], None] | None = None,
    *,
    separator: str = SEPARATOR,
    targets: Targets = Targets(),
) -> list[Row]:
    """Rows for many solutions; `Row.example` indexes `solutions`. `progress(done)` after
    each solution (tens of seconds for thousands of them). A separator that gives no tokens
    is refused (ValueError)."""
    check_separator(tokenizer, separator)
    rows: list[Row] = []
    for i, solution in enumerate(solutions):
        rows.extend(
            pack_solution(solution, tokenizer, max_length, i, separator=separator, targets=targets)
        )
        if progress is not None:
            progress(i + 1)
    return rows


# ------------------------------------------------------------------- batching


def pack_rows(rows: Sequence[Row], capacity: int) -> list[list[Row]]:
    """Rows grouped into packs of at most `capacity` tokens (a row longer than that alone):
    best fit, longest rows first, so the packs come out nearly full. Deterministic: the
    same rows always give the same packs (a resumed run's batches depend on it)."""
    order = sorted(range(len(rows)), key=lambda i: (-len(rows[i]), i))
    packs: list[list[Row]] = []
    free: list[tuple[int, int]] = []  # (tokens left, pack), ascending
    for i in order:
        size = len(rows[i])
        at = bisect_left(free, (size, -1))
        if at < len(free):
            left, pack = free.pop(at)
        else:
            left, pack = max(capacity, size), len(packs)
            packs.append([])
        packs[pack].append(rows[i])
        if left > size:
            insort(free, (left - size, pack))
    return packs


def pack_length(pack: Sequence[Row]) -> int:
    return sum(len(r) for r in pack)


def length_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices grouped by length so that rows x longest row stays under batch_tokens."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if current and (len(current) + 1) * lengths[i] > batch_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches
