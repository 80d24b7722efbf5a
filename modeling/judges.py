"""Judges: machines that label each step of a solution before a human does (issue 46).

A judge takes a batch of solutions (`JudgeItem`: the problem, its steps, its ground truth) and
gives each a `Judgement`: per step a label (+1, 0, -1, or None: no label) and a score (the
judge's confidence in that label). PRM800K's stop rule holds for all of them: nothing is
labelled after the first -1. A judge that cannot say (a timeout, an unparseable answer, a step
that does not exist) gives the whole solution no label, which the run counts.

- `PRMJudge`: a process reward model's P(-1), P(0), P(+1) per step, labelled by thresholds
  that `choose_thresholds` picks on human labels (Cohen's kappa over a small grid).
- `LLMJudge`: a critic prompt in ProcessBench's shape through the generator; the answer must
  be exactly one \\boxed{index}, parsed strictly.
- `MCJudge`: Math-Shepherd's Monte-Carlo estimate: k completions from each step's prefix,
  graded with the one answer checker; hard label +1 when any reaches the right answer.

No Django here, and no torch at module level: the PRM judge's scoring and scikit-learn are
imported where they run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from modeling.generator import (
    NEXT_PROBLEM,
    Generator,
    GeneratorError,
    Sampling,
    step_prompt,
)

KINDS = ("prm", "llm", "mc")


@dataclass(frozen=True)
class JudgeItem:
    """One solution to judge."""

    problem: str
    steps: list[str]
    ground_truth: str | None = None


@dataclass
class Judgement:
    """A judge's verdict on one solution: per step a label (-1, 0, +1 or None) and a score in
    [0, 1] (None with no label); Math-Shepherd's soft scores for mc; the critic's answer."""

    labels: list[int | None]
    scores: list[float | None]
    soft_scores: list[float | None] | None = None
    first_error: int | None = None
    raw: str = ""

    @property
    def no_label(self) -> bool:
        """The judge could not say anything about this solution."""
        return all(label is None for label in self.labels)


def stopped(
    labels: Sequence[int | None],
    scores: Sequence[float | None],
    soft_scores: Sequence[float | None] | None = None,
    raw: str = "",
) -> Judgement:
    """A Judgement with PRM800K's stop rule applied: no label (and no score) after the first -1."""
    labels, scores = list(labels), list(scores)
    first_error = next((i for i, label in enumerate(labels) if label == -1), None)
    if first_error is not None:
        for i in range(first_error + 1, len(labels)):
            labels[i] = None
            scores[i] = None
    soft = None if soft_scores is None else list(soft_scores)
    return Judgement(labels, scores, soft, first_error, raw)


def no_label(n_steps: int, raw: str = "") -> Judgement:
    return Judgement([None] * n_steps, [None] * n_steps, None, None, raw)


class Judge(Protocol):
    kind: str  # "prm", "llm" or "mc" (labeling's PreLabel.Kind)

    @property
    def name(self) -> str:
        """What PreLabel.judge records, e.g. "prm: v3"."""
        ...

    def judge(self, items: Sequence[JudgeItem]) -> list[Judgement]:
        """One Judgement per item, in order."""
        ...


# --- prm ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Thresholds:
    """-1 when P(-1) >= neg, else +1 when P(+1) >= pos, else 0."""

    neg: float = 0.5
    pos: float = 0.5

    def __post_init__(self) -> None:
        for value in (self.neg, self.pos):
            if not (isinstance(value, int | float) and math.isfinite(value) and 0 < value <= 1):
                raise ValueError(f"a threshold must be a number in (0, 1], not {value!r}")

    def label(self, probs: Sequence[float] | np.ndarray) -> tuple[int, float]:
        """The label for one step's [P(-1), P(0), P(+1)] and the probability of that label."""
        p_neg, p_neutral, p_pos = (float(p) for p in probs)
        if p_neg >= self.neg:
            return -1, p_neg
        if p_pos >= self.pos:
            return 1, p_pos
        return 0, p_neutral

    def as_dict(self) -> dict[str, float]:
        return {"neg": self.neg, "pos": self.pos}


THRESHOLD_GRID = tuple(round(0.1 * i, 1) for i in range(1, 10))


def label_steps(step_probs: np.ndarray, thresholds: Thresholds) -> Judgement:
    """A solution's (n_steps, 3) probabilities as labels; a NaN row (past the model's length)
    is no label."""
    labels: list[int | None] = []
    scores: list[float | None] = []
    for row in np.asarray(step_probs, dtype=np.float64).reshape(-1, 3):
        if np.isnan(row).any():
            labels.append(None)
            scores.append(None)
        else:
            label, score = thresholds.label(row)
            labels.append(label)
            scores.append(round(score, 6))
    return stopped(labels, scores)


def choose_thresholds(
    step_probs: np.ndarray, human_ratings: Sequence[int], grid: Sequence[float] = THRESHOLD_GRID
) -> dict[str, Any]:
    """The thresholds whose labels agree best with the humans' (Cohen's kappa, scikit-learn),
    over `grid` x `grid`; the first best in grid order wins a tie. Returns {"neg", "pos",
    "kappa", "steps"}; with no rated step (or no agreement measurable), the defaults and
    kappa None."""
    from sklearn.metrics import cohen_kappa_score

    probs = np.asarray(step_probs, dtype=np.float64).reshape(-1, 3)
    humans = np.asarray(human_ratings, dtype=np.int64)
    keep = ~np.isnan(probs).any(axis=1)
    probs, humans = probs[keep], humans[keep]
    best: dict[str, Any] = {**Thresholds().as_dict(), "kappa": None, "steps": int(len(humans))}
    if len(humans) == 0:
        return best
    best_kappa = -math.inf
    for neg in grid:
        for pos in grid:
            thresholds = Thresholds(neg, pos)
            predicted = [thresholds.label(row)[0] for row in probs]
            kappa = cohen_kappa_score(humans, predicted, labels=[-1, 0, 1])
            if math.isfinite(kappa) and kappa > best_kappa:
                best_kappa = kappa
                best = {"neg": neg, "pos": pos, "kappa": round(float(kappa), 4)}
    best["steps"] = int(len(humans))
    return best


class PRMJudge:
    """A PRM model (ours or imported: anything `score_solutions` takes) with its thresholds."""

    kind = "prm"

    def __init__(self, model: Any, thresholds: Thresholds, *, name: str = "prm") -> None:
        self.model = model
        self.thresholds = thresholds
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def judge(self, items: Sequence[JudgeItem]) -> list[Judgement]:
        from modeling.training.data import Solution
        from modeling.training.score import score_solutions

        probs = score_solutions(self.model, [Solution(i.problem, list(i.steps)) for i in items])
        return [label_steps(p, self.thresholds) for p in probs]


# --- llm ----------------------------------------------------------------------------------------

# ProcessBench's critic prompt (Zheng et al. 2024, "ProcessBench": its `run_eval.py` template),
# with our steps as its tagged paragraphs.
CRITIC_TEMPLATE = (
    "The following is a math problem and a solution (split into paragraphs, enclosed with tags "
    "and indexed from 0):\n\n"
    "[Math Problem]\n\n{problem}\n\n"
    "[Solution]\n\n{steps}\n\n"
    "Your task is to review and critique the solution paragraph by paragraph. Once you identify "
    "an error in a paragraph, return the index of the paragraph where the earliest error occurs. "
    'Otherwise, return the index of -1 (which typically denotes "not found").\n\n'
    "Please put your final answer (i.e., the index) in \\boxed{{}}.\n"
)
TEMPLATE_PLACEHOLDERS = ("{problem}", "{steps}")
MAX_TEMPLATE_CHARS = 20_000
BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
INDEX = re.compile(r"-?\d{1,6}")


class TemplateError(ValueError):
    """A critic template that cannot be used; the message says why in one line."""


def check_template(template: str) -> str:
    """The template if it can be used: both placeholders, no other field, not too long."""
    if not isinstance(template, str) or not template.strip():
        raise TemplateError("The critic template is empty.")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"The critic template is over {MAX_TEMPLATE_CHARS} characters.")
    missing = [p for p in TEMPLATE_PLACEHOLDERS if p not in template]
    if missing:
        raise TemplateError(
            f"The critic template lacks {' and '.join(missing)}: it needs both {{problem}} and "
            "{steps}."
        )
    try:
        template.format(problem="", steps="")
    except (KeyError, IndexError, ValueError) as exc:
        raise TemplateError(
            f"The critic template has a field other than {{problem}} and {{steps}} ({exc}); "
            "write a literal brace as {{ or }}."
        ) from None
    return template


def tagged_steps(steps: Sequence[str]) -> str:
    return "\n\n".join(f"<paragraph_{i}>\n{step}\n</paragraph_{i}>" for i, step in enumerate(steps))


def critic_prompt(item: JudgeItem, template: str = CRITIC_TEMPLATE) -> str:
    return template.format(problem=item.problem.strip(), steps=tagged_steps(item.steps))


def parse_critic(answer: str, n_steps: int) -> int | None:
    """The earliest wrong step the critic named: exactly one \\boxed{integer} in -1..n-1 (-1:
    none wrong); None for anything else (no box, two boxes, not an integer, out of range)."""
    boxes = BOXED.findall(answer)
    if len(boxes) != 1:
        return None
    text = boxes[0].strip()
    if not INDEX.fullmatch(text):
        return None
    index = int(text)
    return index if -1 <= index < n_steps else None


def critic_judgement(answer: str, n_steps: int) -> Judgement:
    """Steps before the named one +1, the named one -1, none after; -1 (none wrong): all +1.
    The critic gives no confidence: scores are None."""
    index = parse_critic(answer, n_steps)
    if index is None:
        return no_label(n_steps, raw=answer)
    named = [1] * n_steps if index == -1 else [1] * index + [-1]
    labels: list[int | None] = [*named, *([None] * (n_steps - len(named)))]
    return stopped(labels, [None] * n_steps, raw=answer)


def timed_out(exc: GeneratorError) -> bool:
    """Whether the generator gave up waiting (a judge's "no label"), rather than being refused
    or unreachable (the run fails with the reason)."""
    cause = exc.__cause__
    return cause is not None and "Timeout" in type(cause).__name__


class LLMJudge:
    """A critic prompt through the generator; greedy, one answer per solution."""

    kind = "llm"

    def __init__(
        self,
        generator: Generator,
        template: str = CRITIC_TEMPLATE,
        *,
        max_tokens: int = 512,
    ) -> None:
        self.generator = generator
        self.template = check_template(template)
        self.sampling = Sampling(max_tokens=max_tokens, temperature=0.0, top_p=1.0, seed=0)

    @property
    def name(self) -> str:
        return f"llm: {self.generator.name}"

    def judge(self, items: Sequence[JudgeItem]) -> list[Judgement]:
        return [self._one(item) for item in items]

    def _one(self, item: JudgeItem) -> Judgement:
        if not item.steps:
            return no_label(0)
        try:
            [text] = self.generator.complete(
                critic_prompt(item, self.template), n=1, sampling=self.sampling
            )
        except GeneratorError as exc:
            if timed_out(exc):
                return no_label(len(item.steps), raw=f"timed out: {exc}")
            raise
        return critic_judgement(text.text, len(item.steps))


# --- mc -----------------------------------------------------------------------------------------


def estimate_mc(
    solutions: Sequence[JudgeItem], k: int, max_steps: int, *, max_tokens: int = 256
) -> dict[str, int]:
    """What an mc run costs at most: k completions per step judged (up to max_steps a solution),
    each at most max_tokens. Rollouts stop at the first -1, so a run spends this or less."""
    completions = k * sum(min(len(s.steps), max_steps) for s in solutions)
    return {"completions": completions, "tokens": completions * max_tokens}


@dataclass
class MCJudge:
    """Math-Shepherd: for each step's prefix, k completions graded against the ground truth;
    soft = share correct, hard = +1 when any is correct, else -1 (and nothing after it). Steps
    past max_steps have no label; a solution with no ground truth has none at all."""

    generator: Generator
    k: int
    max_steps: int
    sampling: Sampling = field(default_factory=lambda: Sampling(max_tokens=256))
    completions_made: int = 0  # what it spent, for the estimate's check
    kind: str = "mc"

    @property
    def name(self) -> str:
        return f"mc: {self.generator.name} k={self.k}"

    def judge(self, items: Sequence[JudgeItem]) -> list[Judgement]:
        return [self._one(item) for item in items]

    def _one(self, item: JudgeItem) -> Judgement:
        from modeling.grading import grade_solution  # math-verify, where answers are graded

        n = len(item.steps)
        if not n or not (item.ground_truth or "").strip():
            return no_label(n)
        labels: list[int | None] = [None] * n
        scores: list[float | None] = [None] * n
        soft: list[float | None] = [None] * n
        for i in range(min(n, self.max_steps)):
            prefix = list(item.steps[: i + 1])
            try:
                texts = self.generator.complete(
                    step_prompt(item.problem, prefix),
                    n=self.k,
                    sampling=self.sampling,
                    stop=(NEXT_PROBLEM,),
                )
            except GeneratorError as exc:
                if timed_out(exc):
                    return no_label(n, raw=f"timed out: {exc}")
                raise
            self.completions_made += len(texts)
            correct = sum(
                grade_solution([*prefix, text.text], item.ground_truth).correct is True
                for text in texts
            )
            share = correct / len(texts) if texts else 0.0
            soft[i] = round(share, 6)
            labels[i] = 1 if correct else -1
            scores[i] = round(share if correct else 1.0 - share, 6)
            if not correct:
                break  # PRM800K's stop rule: no rollouts past the first -1
        return stopped(labels, scores, soft)
