"""PRM800K import throughput: our chunked importer vs a naive per-row ORM save() loop.

    python -m benchmarks.import [--lines 20000] [--naive-lines 500] [--workers N]
                                [--existing-lines 0] [--recount-baseline]

Writes a synthetic PRM800K-shaped JSONL file (phase-2 lines, 10 steps each, one rated
completion per step and two rated alternatives on every fifth step, distinct problems), then
imports it into an emptied database of its own (`stepwise_bench_import`, or
BENCH_DATABASE_URL) with `labeling.services.importing.import_prm800k` (validation, byte-exact
check, dedupe, one transaction, worker processes parsing: --workers, default the setting
STEPWISE_IMPORT_WORKERS), and imports the first --naive-lines lines again, after emptying,
through a naive loop that saves every row with the ORM. Prints step labels/s for both, the
ratio, the target (50,000 step labels/s; 100,000 the longer-term goal) and whether it was
met, the peak RSS of the importing process and of its largest worker (getrusage; run two
--lines sizes to see that memory stays flat), and (unless --no-floor) the server floor: the
same rows COPYed back into the emptied tables in one transaction, which no importer on this
server can beat. --existing-lines N first imports N other lines into the same batch (not
timed): an import into a batch that already holds work. --recount-baseline also times the
importer's earlier way of counting (each chunk's counting off, then `rebuild_batch_stats`
recounting the whole batch) from the same starting point, and prints the ratio. Not a test:
run it by hand.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path
from unittest import mock

from benchmarks._setup import django_on

STEPS = 10
TARGET = 50_000  # step labels/s; 100,000 is the longer-term goal


def synthetic_lines(count: int, start: int = 0):
    for n in range(start, start + count):
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
            " labeling_solution, labeling_problem, labeling_batch, labeling_labeler,"
            " labeling_labelerrecord CASCADE"
        )
        cur.execute("DELETE FROM auth_user WHERE username LIKE 'prm800k-%%'", [])


def _all_stats() -> tuple[list, list]:
    """Every lead counter row, comparable across runs (no ids)."""
    from labeling.models import BatchHourStats, BatchLabelerStats

    fields = BatchLabelerStats.TALLY_FIELDS
    return (
        sorted(
            BatchLabelerStats.objects.values_list("labeler__username", "last_finished_at", *fields)
        ),
        sorted(BatchHourStats.objects.values_list("hour", *fields)),
    )


def naive_import(path: Path, limit: int) -> int:
    """The baseline: one ORM save() per row, no chunking, no bulk SQL."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from labeling import prm800k
    from labeling.models import Batch, Completion, Labeler, Labeling, Problem, Solution, StepLabel
    from labeling.parsing import labeler_uuid, sha256_text
    from labeling.services.importing import problem_hash

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


FLOOR_TABLES = (
    "labeling_problem",
    "labeling_solution",
    "labeling_labeling",
    "labeling_steplabel",
    "labeling_completion",
)


def server_floor() -> float:
    """Seconds the server alone takes to store the imported rows: they are copied out, the
    tables emptied, and the rows COPYed back in one transaction (indexes, TOAST with lz4 as
    the importer sets it, foreign-key checks at commit). No importer on this server can
    beat it; the importer adds its lookups, ids, counters and ANALYZE on top."""
    import io

    from django.db import connection, transaction

    dumps = {}
    with connection.cursor() as cursor:
        for table in FLOOR_TABLES:
            buffer = io.BytesIO()
            with cursor.cursor.copy(f"COPY {table} TO STDOUT") as copy:
                for block in copy:
                    buffer.write(block)
            dumps[table] = buffer.getvalue()
        cursor.execute(f"TRUNCATE {', '.join(FLOOR_TABLES)} CASCADE")
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_settings"
            " WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
        )
        for table in FLOOR_TABLES:
            with cursor.cursor.copy(f"COPY {table} FROM STDIN") as copy:
                copy.write(dumps[table])
    return time.perf_counter() - started


def peak_rss_mb(who: int) -> float:
    """Peak resident memory (MiB) of this process, or of the largest of its ended children."""
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--naive-lines", type=int, default=500)
    parser.add_argument("--workers", type=int, default=None, help="parsing processes")
    parser.add_argument(
        "--floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the server alone storing the same rows (see server_floor)",
    )
    parser.add_argument("--database", default="stepwise_bench_import")
    parser.add_argument(
        "--existing-lines",
        type=int,
        default=0,
        help="import this many other lines into the same batch first (not timed)",
    )
    parser.add_argument(
        "--recount-baseline",
        action="store_true",
        help="also time the earlier counting: the whole batch recounted after the import",
    )
    args = parser.parse_args()
    django_on(args.database)

    from django.conf import settings

    from labeling.models import Batch
    from labeling.services.counters import rebuild_batch_stats
    from labeling.services.importing import import_prm800k, label_lines

    workers = settings.STEPWISE_IMPORT_WORKERS if args.workers is None else args.workers
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

        existing = Path(tmp) / "existing.jsonl"
        with open(existing, "w") as handle:  # other problems, the same batch and labelers
            for line in synthetic_lines(args.existing_lines, start=args.lines):
                handle.write(json.dumps(line) + "\n")

        def start_from_existing() -> None:
            empty_tables()
            if args.existing_lines:
                import_prm800k(existing, workers=workers)
                print(f"batch holds {args.existing_lines:,} imported lines already", flush=True)

        if args.recount_baseline:
            start_from_existing()
            started = time.perf_counter()
            with mock.patch.object(label_lines, "tally_added", lambda labeling_ids: None):
                recounted = import_prm800k(path, workers=workers)
            counting_started = time.perf_counter()
            for batch in Batch.objects.all():
                rebuild_batch_stats(batch)
            recount_elapsed = time.perf_counter() - started
            recount_counting = time.perf_counter() - counting_started
            recount_rate = recounted.created["step labels"] / recount_elapsed
            print(
                f"earlier counting (whole batch recounted after): {recount_elapsed:.2f} s"
                f" = {recount_rate:,.0f} step labels/s, {recount_counting:.2f} s of it counting",
                flush=True,
            )
            counted_by_recount = _all_stats()

        start_from_existing()
        rss_before = peak_rss_mb(resource.RUSAGE_SELF)
        counting = [0.0]

        def timed_tally(labeling_ids, tally=label_lines.tally_added):
            counting_started = time.perf_counter()
            tally(labeling_ids)
            counting[0] += time.perf_counter() - counting_started

        started = time.perf_counter()
        with mock.patch.object(label_lines, "tally_added", timed_tally):  # the same, timed
            report = import_prm800k(path, workers=workers)
        elapsed = time.perf_counter() - started
        rss_main, rss_worker = (
            peak_rss_mb(resource.RUSAGE_SELF),
            peak_rss_mb(resource.RUSAGE_CHILDREN),
        )
        steps = report.created["step labels"]
        fast_rate = steps / elapsed
        print(
            f"import_prm800k ({workers} parsing workers): {report.created['labelings']:,} labelings,"
            f" {steps:,} step labels, {report.created['completions']:,} completions in {elapsed:.2f} s"
            f" = {fast_rate:,.0f} step labels/s",
            flush=True,
        )
        if args.recount_baseline:
            same = "the same counters" if _all_stats() == counted_by_recount else "OTHER COUNTERS"
            print(
                f"counting what the import added: {fast_rate / recount_rate:.2f}x the earlier"
                f" import rate; counting {counting[0]:.2f} s against {recount_counting:.2f} s"
                f" ({recount_counting / counting[0]:.1f}x less; {same} as the recount)",
                flush=True,
            )
        print(
            f"peak RSS: importing process {rss_main:,.0f} MiB ({rss_before:,.0f} MiB before the"
            f" import), largest worker {rss_worker:,.0f} MiB",
            flush=True,
        )
        if args.floor:
            floor = server_floor()
            print(
                f"server floor: the same rows COPYed back in one transaction in {floor:.2f} s"
                f" = {steps / floor:,.0f} step labels/s (import/floor: {elapsed / floor:.2f})",
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
    met = "met" if fast_rate >= TARGET else "NOT met"
    print(f"speedup: {fast_rate / naive_rate:.1f}x the naive loop")
    print(
        f"target: >= {TARGET:,} step labels/s: {met} ({fast_rate:,.0f});"
        " longer-term goal 100,000 step labels/s"
    )


if __name__ == "__main__":
    main()
