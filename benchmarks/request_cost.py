"""In-process cost of the labeling path's two requests: a claim and a rating, each through the
whole Django stack (middleware, session auth, CSRF off as for a test client, the view, the
template), without HTTP or gunicorn, on the queue benchmark's PostgreSQL database
(benchmarks/queue_load.py's seed: 100k solutions of 10 steps, 1M step ratings already there).

    python -m benchmarks.request_cost [--solutions 100000] [--labelers 20] [--rounds 3]

Each labeler claims a solution and rates its 10 steps, `--rounds` times. Prints, per kind of
request (claim; a rating in the middle of a solution; the rating that ends it, and apart the
one that brings the solution to its N labelings and so also computes agreement), the server
time p50/p95 and the queries per request (session and user lookups counted apart), against the
targets: a claim and a rating in at most 4 queries and 5 ms, a finish in 10 and 10 ms. Also the time of one bare INSERT
in a transaction, the database's floor for a write, measured the same way.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks import queue_load as queue_bench
from benchmarks._setup import django_on

DATABASE = "stepwise_bench_queue"
AUTH_TABLES = ('"django_session"', '"auth_user"')


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solutions", type=int, default=100_000)
    parser.add_argument("--labelers", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    queue_bench.seed(DATABASE, args.solutions, 50, reseed=False)
    django_on(DATABASE)
    from django.contrib.auth.models import User
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from labeling.models import Labeling, RatingEvent, Solution

    samples: dict[str, list[tuple[float, int, int]]] = {
        "claim": [],
        "rate": [],
        "finish": [],
        "finish_n": [],
    }

    def timed(kind: str, send) -> object:
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = send()
            elapsed = time.perf_counter() - started
        # psycopg logs the transaction's BEGIN and COMMIT too: statements are what we count.
        sql = [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
        auth = sum(1 for q in sql if any(t in q for t in AUTH_TABLES))
        samples[kind].append((elapsed * 1000, len(sql) - auth, auth))
        return response

    users = list(User.objects.filter(username__startswith="b").exclude(username="benchlead"))
    users = users[: args.labelers]
    clients = []
    for user in users:
        client = Client()
        client.force_login(user)
        clients.append((user, client))
    # Warm-up: one claim per labeler (templates compiled, connections open, caches filled).
    for _user, client in clients:
        client.post(f"/p/{queue_bench.PROJECT}/label/next/")
    for _round in range(args.rounds):
        for user, client in clients:
            labeling = Labeling.objects.filter(
                labeler=user, status=Labeling.Status.IN_PROGRESS
            ).first()
            if labeling is None:
                timed("claim", lambda c=client: c.post(f"/p/{queue_bench.PROJECT}/label/next/"))
                labeling = Labeling.objects.filter(
                    labeler=user, status=Labeling.Status.IN_PROGRESS
                ).first()
            if labeling is None:
                continue
            steps = len(labeling.solution.steps)
            done = labeling.step_labels.count()
            # The seed's batch has N = 2: the second finish of a solution also computes its
            # agreement (gold would too; the seed has none).
            batch = labeling.solution.batch
            reaches_n = batch is not None and (
                Solution.objects.get(pk=labeling.solution_id).completed_count + 1 == batch.overlap
            )
            for index in range(done, steps):
                kind = "rate" if index < steps - 1 else "finish_n" if reaches_n else "finish"
                timed(
                    kind,
                    lambda c=client, i=index, pk=labeling.pk: c.post(
                        f"/p/{queue_bench.PROJECT}/label/{pk}/rate/",
                        {"step_index": i, "rating": 1, "elapsed_ms": 4000},
                        HTTP_HX_REQUEST="true",
                    ),
                )
            timed("claim", lambda c=client: c.post(f"/p/{queue_bench.PROJECT}/label/next/"))

    floor: list[float] = []
    labeling = Labeling.objects.first()
    for _ in range(200):
        started = time.perf_counter()
        with transaction.atomic():
            RatingEvent.objects.create(labeling=labeling, reason=RatingEvent.Reason.FINISH)
        floor.append((time.perf_counter() - started) * 1000)
    RatingEvent.objects.filter(
        labeling=labeling, reason=RatingEvent.Reason.FINISH, actor=None
    ).delete()

    print(f"in-process, {len(clients)} labelers x {args.rounds} rounds, PostgreSQL {DATABASE}")
    print(f"{'request':<34}{'n':>6}{'p50 ms':>9}{'p95 ms':>9}{'queries':>9}{'+auth':>7}  target")
    names = {
        "claim": "claim (POST /label/next/)",
        "rate": "rating, middle of a solution",
        "finish": "rating that ends the solution",
        "finish_n": "... and brings it to N (agreement)",
    }
    for kind, rows in samples.items():
        if not rows:
            continue
        times = [r[0] for r in rows]
        queries = statistics.median(r[1] for r in rows)
        auth = statistics.median(r[2] for r in rows)
        target = {
            "claim": "<= 4 queries, 5 ms",
            "rate": "<= 4 queries, 5 ms",
            "finish": "<= 10 queries, 10 ms",
        }.get(kind, "")
        print(
            f"{names[kind]:<34}{len(rows):>6}{pct(times, 50):>9.2f}{pct(times, 95):>9.2f}"
            f"{queries:>9.0f}{auth:>7.0f}  {target}"
        )
    print(
        f"{'one bare INSERT in a transaction':<34}{len(floor):>6}{pct(floor, 50):>9.2f}{pct(floor, 95):>9.2f}"
    )
    rate_p50 = pct([r[0] for r in samples["rate"]], 50)
    print(
        f"request-cost: rating p50 {rate_p50:.2f} ms = {rate_p50 / pct(floor, 50):.1f} bare INSERTs"
    )


if __name__ == "__main__":
    main()
