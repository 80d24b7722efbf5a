"""Small builders for rows the tests need; names say what they make."""

from __future__ import annotations

import hashlib
import itertools

from labeling.models import Batch, Problem, Solution

_counter = itertools.count(1)


def make_problem(text: str | None = None, answer: str = "42") -> Problem:
    text = text or f"What is problem {next(_counter)}?"
    return Problem.objects.create(
        text=text, text_sha256=hashlib.sha256(text.encode()).hexdigest(), ground_truth_answer=answer
    )


def make_batch(
    name: str | None = None, *, overlap: int = 1, generation: int | None = 1, **extra
) -> Batch:
    return Batch.objects.create(
        name=name or f"batch {next(_counter)}", overlap=overlap, generation=generation, **extra
    )


def make_solution(
    batch: Batch | None = None, *, steps: list[str] | None = None, problem: Problem | None = None
) -> Solution:
    problem = problem or make_problem()
    steps = steps or [
        "I add $1 + 1 = 2$.",
        "Then $2 \\times 21 = 42$.",
        "So the answer is 42.\n\n# Answer\n\n42",
    ]
    n = next(_counter)
    return Solution.objects.create(
        problem=problem,
        batch=batch,
        steps=steps,
        final_answer="42",
        generation=batch.generation if batch else None,
        content_sha256=hashlib.sha256(f"solution {n}".encode()).hexdigest(),
    )


def make_solutions(batch: Batch, count: int) -> list[Solution]:
    return [make_solution(batch) for _ in range(count)]
