"""Export throughput at PRM800K scale: our streamed exporter vs a naive ORM loop.

    python -m benchmarks.export [--step-labels 1000000] [--naive-labelings 2000] [--reseed]

Builds (or reuses) a synthetic PRM800K-shaped dataset in its own database (`stepwise_bench`,
or BENCH_DATABASE_URL): 10 steps per labeling, one rated completion per step and two rated
alternatives on every fifth step, phase-2 questions with their pre-generated steps, seeded
with INSERT ... SELECT generate_series in PostgreSQL. Then it writes the full PRM800K export
to a temporary file and measures step labels/s and peak RSS growth, and runs the naive
baseline (per-labeling ORM queries, every line built into one list, one json.dumps at the
end) on the first --naive-labelings labelings, scaled to step labels/s. Prints figures and
the ratio. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks._setup import PeakRSS, django_on

STEPS_PER_LABELING = 10
BENCH_BATCH = "benchmark: synthetic PRM800K"


def seed(step_labels: int, *, reseed: bool = False) -> None:
    from django.db import connection, transaction

    from labeling.models import (
        Batch,
        Completion,
        Labeler,
        Labeling,
        StepLabel,
        default_project_id,
    )

    labelings = step_labels // STEPS_PER_LABELING
    batch = Batch.objects.filter(name=BENCH_BATCH).first()
    complete = (
        batch
        and not reseed
        and StepLabel.objects.filter(labeling__solution__batch=batch).count() == step_labels
        and Completion.objects.filter(step__labeling__solution__batch=batch).count() >= step_labels
        and not Labeling.objects.filter(release_line__isnull=True).exists()
    )
    if complete:
        print(f"reusing {step_labels:,} step labels in {connection.settings_dict['NAME']}")
        return
    print(f"seeding {labelings:,} labelings, {step_labels:,} step labels ...", flush=True)
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "TRUNCATE labeling_completion, labeling_steplabel, labeling_ratingevent, labeling_labeling,"
            " labeling_solution, labeling_problem, labeling_batch, labeling_labeler,"
            " labeling_labelerrecord CASCADE"
        )
        cur.execute("DELETE FROM auth_user WHERE username LIKE 'bench-%%'")
        project_id = default_project_id()  # the Default project, which exports read
        cur.execute(
            "INSERT INTO labeling_batch (project_id, name, generation, overlap, priority, is_active,"
            " origin, created_at, protocol, alternatives_k, alternatives_after_error)"
            " VALUES (%s, %s, 6, 1, 0, false, 'import', now(), 'steps', 5, false) RETURNING id",
            [project_id, BENCH_BATCH],
        )
        batch_id = cur.fetchone()[0]
        problems = max(1, labelings // 8)
        cur.execute(
            """INSERT INTO labeling_problem (text, text_sha256, ground_truth_answer, ground_truth_solution,
                   subject, level, created_at)
               SELECT 'Bench problem ' || g || ': find $x$ such that $x^2 - ' || g || 'x = 0$.',
                      md5('p' || g) || md5('q' || g), '' || g, 'Factor: $x(x-' || g || ')=0$, so $x=' || g || '$.',
                      'Algebra', 1 + g %% 5, now()
               FROM generate_series(1, %s) g""",
            [problems],
        )
        cur.execute(
            """INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email,
                   is_staff, is_active, date_joined)
               SELECT '!', false, 'bench-' || g, '', '', '', false, false, now() FROM generate_series(1, 50) g"""
        )
        cur.execute(
            "SELECT id, md5(username)::uuid FROM auth_user WHERE username LIKE 'bench-%%'", []
        )
        # Through the ORM: Labeler has columns whose defaults live in Django, not the database.
        Labeler.objects.bulk_create(
            [Labeler(user_id=uid, public_id=pid) for uid, pid in cur.fetchall()]
        )
        cur.execute("SELECT min(id) FROM labeling_problem")
        first_problem = cur.fetchone()[0]
        cur.execute(
            """INSERT INTO labeling_solution (project_id, problem_id, batch_id, steps, final_answer,
                   verifier_score, generator, source_id, format, generation, is_quality_control,
                   is_screening, content_sha256, completed_count, active_count, created_at)
               SELECT %s, %s + (g %% %s), %s,
                      (SELECT jsonb_agg('Step ' || i || ': we expand the product and collect the terms in $x$, giving ' || (g * i) || '.' ORDER BY i)
                         FROM generate_series(1, %s) i),
                      '' || g, 0.001 * (g %% 1000), 'bench', '', 'phase2', 6, g %% 50 = 0, false,
                      md5('s' || g) || md5('t' || g), 1, 0, now()
               FROM generate_series(1, %s) g""",
            [project_id, first_problem, problems, batch_id, STEPS_PER_LABELING, labelings],
        )
        cur.execute("SELECT min(id) FROM labeling_solution")
        first_solution = cur.fetchone()[0]
        cur.execute("SELECT min(id) FROM auth_user WHERE username LIKE 'bench-%%'")
        first_user = cur.fetchone()[0]
        cur.execute(
            """INSERT INTO labeling_labeling (solution_id, labeler_id, status, finish_reason, total_time_ms,
                   started_at, finished_at, updated_at, is_surplus, skip_reason)
               SELECT %s + g - 1, %s + (g %% 50), 'completed',
                      CASE WHEN g %% 3 = 0 THEN 'found_error' ELSE 'solution' END, 60000 + g,
                      timestamp '2022-08-01' + g * interval '1 second',
                      timestamp '2022-08-01' + g * interval '1 second', now(), false, ''
               FROM generate_series(1, %s) g""",
            [first_solution, first_user, labelings],
        )
        cur.execute(
            """INSERT INTO labeling_steplabel (labeling_id, index, chosen_completion, has_completions, created_at)
               SELECT l.id, i, 0, true, now() FROM labeling_labeling l, generate_series(0, %s) i
               ORDER BY l.id, i""",
            [STEPS_PER_LABELING - 1],
        )
        cur.execute(
            """INSERT INTO labeling_completion (step_id, index, text, rating, flagged, is_human, source)
               SELECT s.id, 0, 'Step ' || s.index || ': we expand the product and collect the terms in $x$, giving ' || s.id || '.',
                      (s.id %% 3) - 1, CASE WHEN s.id %% 7 = 0 THEN NULL ELSE false END, false, ''
               FROM labeling_steplabel s
               UNION ALL
               SELECT s.id, a, 'Alternative ' || a || ' for step ' || s.index || ': instead we substitute $x = 2$.',
                      1 - a, false, false, ''
               FROM labeling_steplabel s, generate_series(1, 2) a WHERE s.index %% 5 = 4""",
            [],
        )
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    assert Labeling.objects.count() == labelings
    print(f"seeded rows in {time.perf_counter() - started:.1f} s", flush=True)
    # As import and submission do: each completed labeling keeps its rendered release line.
    from labeling.services.exporting import store_release_lines

    started = time.perf_counter()
    store_release_lines()
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE labeling_labeling")
    print(f"rendered and stored release lines in {time.perf_counter() - started:.1f} s", flush=True)


def naive_export(limit: int, out_path: str) -> int:
    """The baseline: ORM objects per labeling (N+1 queries), one list, one json.dumps."""
    from labeling.models import Labeling
    from labeling.prm800k import export_timestamp

    lines = []
    steps_seen = 0
    for labeling in Labeling.objects.filter(status="completed").order_by("pk")[:limit]:
        solution = labeling.solution
        problem = solution.problem
        steps = []
        for step in labeling.step_labels.order_by("index"):
            steps_seen += 1
            completions = [
                {"text": c.text, "rating": c.rating, "flagged": c.flagged}
                for c in step.completions.filter(is_human=False).order_by("index")
            ]
            steps.append(
                {
                    "completions": completions,
                    "human_completion": None,
                    "chosen_completion": step.chosen_completion,
                }
            )
        lines.append(
            {
                "labeler": str(labeling.labeler.labeler.public_id),
                "timestamp": export_timestamp(labeling.finished_at).isoformat(),
                "generation": solution.generation,
                "is_quality_control_question": solution.is_quality_control,
                "is_initial_screening_question": solution.is_screening,
                "question": {
                    "problem": problem.text,
                    "ground_truth_solution": problem.ground_truth_solution,
                    "ground_truth_answer": problem.ground_truth_answer,
                    "pre_generated_steps": solution.steps,
                    "pre_generated_answer": solution.final_answer,
                    "pre_generated_verifier_score": solution.verifier_score,
                },
                "label": {
                    "steps": steps,
                    "total_time": labeling.total_time_ms,
                    "finish_reason": labeling.finish_reason,
                },
            }
        )
    Path(out_path).write_text(json.dumps(lines))
    return steps_seen


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--step-labels", type=int, default=1_000_000)
    parser.add_argument("--naive-labelings", type=int, default=2000)
    parser.add_argument(
        "--format", default="prm800k", choices=["prm800k", "stepwise_jsonl", "stepwise_parquet"]
    )
    parser.add_argument("--database", default="stepwise_bench")
    parser.add_argument("--reseed", action="store_true")
    args = parser.parse_args()
    django_on(args.database)
    seed(args.step_labels, reseed=args.reseed)

    from labeling.services.exporting import ExportFilters, select_labelings, write_export_file

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "export.out")
        labelings = select_labelings(ExportFilters())
        with PeakRSS() as rss:
            started = time.perf_counter()
            result = write_export_file(out, args.format, labelings)
            elapsed = time.perf_counter() - started
        fast_rate = result.step_labels / elapsed
        print(flush=True)
        print(
            f"streamed export ({args.format}): {result.labelings:,} labelings, {result.step_labels:,} step labels,"
            f" {result.size_bytes / 2**20:,.0f} MiB in {elapsed:.2f} s = {fast_rate:,.0f} step labels/s;"
            f" peak RSS growth {rss.growth_mb:.1f} MB"
        )

        # Lines rendered through prm800k.render_record (what store_release_lines and a
        # submit do), for rows that have none.
        from labeling.services.exporting import render_release_lines

        sample = list(
            labelings.order_by("pk").values_list("pk", flat=True)[: args.naive_labelings * 5]
        )
        started = time.perf_counter()
        rendered_steps = sum(
            line.count('"chosen_completion": ') for _, line in render_release_lines(sample)
        )
        rendered_rate = rendered_steps / (time.perf_counter() - started)
        print(
            f"rendered through render_record (rows without a stored line): {len(sample):,} labelings,"
            f" {rendered_rate:,.0f} step labels/s"
        )

        naive_out = os.path.join(tmp, "naive.json")
        with PeakRSS() as naive_rss:
            started = time.perf_counter()
            steps = naive_export(args.naive_labelings, naive_out)
            naive_elapsed = time.perf_counter() - started
        naive_rate = steps / naive_elapsed
        scale = result.step_labels / max(steps, 1)
        print(
            f"naive ORM loop + json.dumps(list): {args.naive_labelings:,} labelings, {steps:,} step labels in"
            f" {naive_elapsed:.2f} s = {naive_rate:,.0f} step labels/s; peak RSS growth"
            f" {naive_rss.growth_mb:.1f} MB on this subset (~{naive_rss.growth_mb * scale:,.0f} MB and"
            f" ~{result.step_labels / naive_rate:,.0f} s scaled to the full set)"
        )
    print(
        f"speedup: {fast_rate / naive_rate:.1f}x  (targets: >= 200,000 step labels/s, RSS growth < 100 MB)"
    )


if __name__ == "__main__":
    main()
