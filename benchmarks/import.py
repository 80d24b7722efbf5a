"""PRM800K import throughput: our chunked importer vs a naive per-row ORM save() loop.

    python benchmarks/import.py [--lines 20000] [--naive-lines 500]

Writes a synthetic PRM800K-shaped JSONL file (phase-2 lines, 10 steps each, one rated
completion per step and two rated alternatives on every fifth step, distinct problems), then
imports it into an emptied database of its own (`stepwise_bench_import`, or
BENCH_DATABASE_URL) with `labeling.services.importing.import_prm800k` (validation, byte-exact check,
dedupe and one transaction included), and imports the first --naive-lines lines again, after
emptying, through a naive loop that saves every row with the ORM. Prints step labels/s for
both and the ratio. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

# Run from the repo root, not this folder: benchmarks/queue.py would shadow the stdlib `queue`.
sys.path[0] = str(Path(__file__).resolve().parent.parent)
from benchmarks._setup import django_on  # noqa: E402

STEPS = 10


def synthetic_lines(count: int):
    for n in range(count):
        steps = []
        for i in range(STEPS):
            completions = [
                {
                    "text": f"Step {i} of solution {n}: expand and collect terms, giving {n * i}.",
                    "rating": (n + i) % 3 - 1 if i < STEPS - 1 else 1,
                    "flagged": False,
                }
            ]
            if i % 5 == 4:
                completions += [
                    {
                        "text": f"Alternative {a} for step {i} of {n}.",
                        "rating": 1 - a,
                        "flagged": False,
                    }
                    for a in (1, 2)
                ]
            steps.append(
                {"completions": completions, "human_completion": None, "chosen_completion": 0}
            )
        yield {
            "labeler": f"00000000-0000-4000-8000-{n % 50:012d}",
            "timestamp": f"2022-08-01T00:{n // 600 % 60:02d}:{n // 10 % 60:02d}.{n % 1000000:06d}",
            "generation": 6,
            "is_quality_control_question": False,
            "is_initial_screening_question": False,
            "question": {
                "problem": f"Bench problem {n}: find $x$ such that $x^2 - {n}x = 0$.",
                "ground_truth_solution": f"Factor: $x(x-{n})=0$.",
                "ground_truth_answer": str(n),
                "pre_generated_steps": [s["completions"][0]["text"] for s in steps],
                "pre_generated_answer": str(n),
                "pre_generated_verifier_score": 0.5,
            },
            "label": {"steps": steps, "total_time": 60000 + n, "finish_reason": "solution"},
        }


def empty_tables() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE labeling_completion, labeling_steplabel, labeling_ratingevent, labeling_labeling,"
            " labeling_solution, labeling_problem, labeling_batch, labeling_labeler CASCADE"
        )
        cur.execute("DELETE FROM auth_user WHERE username LIKE 'prm800k-%%'", [])


def naive_import(path: Path, limit: int) -> int:
    """The baseline: one ORM save() per row, no chunking, no bulk SQL."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from labeling import prm800k
    from labeling.models import Batch, Completion, Labeler, Labeling, Problem, Solution, StepLabel
    from labeling.services.importing import labeler_uuid, problem_hash, sha256_text

    steps_saved = 0
    with transaction.atomic(), open(path) as handle:
        for number, line in enumerate(handle):
            if number >= limit:
                break
            line = line.rstrip("\n")
            record = prm800k.parse_record(json.loads(line))
            q = record.question
            problem, _ = Problem.objects.get_or_create(
                text_sha256=problem_hash(q.problem),
                defaults={
                    "text": q.problem,
                    "ground_truth_answer": q.ground_truth_answer,
                    "ground_truth_solution": q.ground_truth_solution,
                },
            )
            batch, _ = Batch.objects.get_or_create(
                name=f"PRM800K generation {record.generation}",
                defaults={"generation": record.generation},
            )
            public_id = labeler_uuid(record.labeler)
            labeler = Labeler.objects.filter(public_id=public_id).select_related("user").first()
            if labeler is None:
                user = get_user_model().objects.create(
                    username=f"prm800k-{public_id}", is_active=False
                )
                labeler = Labeler.objects.create(user=user, public_id=public_id)
            solution = Solution(
                problem=problem,
                batch=batch,
                steps=q.pre_generated_steps,
                final_answer=q.pre_generated_answer,
                verifier_score=q.pre_generated_verifier_score,
                generation=record.generation,
                content_sha256=sha256_text(line),
            )
            solution.save()
            labeling = Labeling(
                solution=solution,
                labeler=labeler.user,
                status="completed",
                finish_reason=record.finish_reason,
                total_time_ms=record.total_time,
                started_at=prm800k.as_utc(record.timestamp),
                finished_at=prm800k.as_utc(record.timestamp),
                source_sha256=sha256_text(line),
            )
            labeling.save()
            for index, step in enumerate(record.steps):
                step_label = StepLabel(
                    labeling=labeling,
                    index=index,
                    chosen_completion=step.chosen_completion,
                    has_completions=step.completions is not None,
                )
                step_label.save()
                steps_saved += 1
                for c_index, completion in enumerate(step.completions or []):
                    Completion(
                        step=step_label,
                        index=c_index,
                        text=completion.text,
                        rating=completion.rating,
                        flagged=completion.flagged,
                    ).save()
    return steps_saved


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--naive-lines", type=int, default=500)
    parser.add_argument("--database", default="stepwise_bench_import")
    args = parser.parse_args()
    django_on(args.database)

    from labeling.services.importing import import_prm800k

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.jsonl"
        with open(path, "w") as handle:
            for line in synthetic_lines(args.lines):
                handle.write(json.dumps(line) + "\n")
        size = path.stat().st_size
        print(
            f"synthetic file: {args.lines:,} lines, {args.lines * STEPS:,} step labels, {size / 2**20:.0f} MiB",
            flush=True,
        )

        empty_tables()
        started = time.perf_counter()
        report = import_prm800k(path)
        elapsed = time.perf_counter() - started
        steps = report.created["step labels"]
        fast_rate = steps / elapsed
        print(
            f"import_prm800k: {report.created['labelings']:,} labelings, {steps:,} step labels,"
            f" {report.created['completions']:,} completions in {elapsed:.2f} s = {fast_rate:,.0f} step labels/s",
            flush=True,
        )

        empty_tables()
        started = time.perf_counter()
        naive_steps = naive_import(path, args.naive_lines)
        naive_elapsed = time.perf_counter() - started
        naive_rate = naive_steps / naive_elapsed
        print(
            f"naive per-row save() loop: {args.naive_lines:,} lines, {naive_steps:,} step labels in"
            f" {naive_elapsed:.2f} s = {naive_rate:,.0f} step labels/s",
            flush=True,
        )
        empty_tables()
    print(
        f"speedup: {fast_rate / naive_rate:.1f}x  (targets: >= 100,000 step labels/s and >= 50x the naive loop)"
    )


if __name__ == "__main__":
    main()
