"""Server time of the labeler's hot path on PostgreSQL: claim, open the page, rate a step.

Runs the real views in-process through Django's test client (server time only, no network),
against a dedicated database, next to a baseline in the same process: the same request
cycle (session, auth, CSRF, middleware) answering a trivial view. Usage:

    .venv/bin/python -m benchmarks.labeling_roundtrip [--solutions 2000] [--labelers 20]
"""

from __future__ import annotations

import argparse
import hashlib
import time

from benchmarks._setup import django_on, percentiles


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--solutions", type=int, default=2000)
    parser.add_argument("--labelers", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    url = django_on("stepwise_bench_labeling")

    from django.contrib.auth.models import User
    from django.db import connection
    from django.http import HttpResponse
    from django.test import Client
    from django.urls import path

    from labeling.models import (
        Batch,
        Labeling,
        Membership,
        Problem,
        RatingEvent,
        Solution,
        default_project_id,
    )
    from stepwise import urls

    # A fresh dataset each run.
    Labeling.objects.all().delete()
    RatingEvent.objects.all().delete()
    Solution.objects.all().delete()
    Problem.objects.all().delete()
    Batch.objects.all().delete()
    User.objects.filter(username__startswith="bench-").delete()
    problems = Problem.objects.bulk_create(
        Problem(
            text=f"Problem {i}: what is ${i} + {i}$?",
            text_sha256=hashlib.sha256(f"p{i}".encode()).hexdigest(),
            ground_truth_answer=str(2 * i),
        )
        for i in range(args.solutions)
    )
    batch = Batch.objects.create(name="bench", overlap=1, generation=1)
    Solution.objects.bulk_create(
        Solution(
            problem=p,
            batch=batch,
            generation=1,
            steps=[
                f"Step {k}: we know ${k} \\cdot 2 = {2 * k}$, so we continue."
                for k in range(args.steps)
            ],
            content_sha256=hashlib.sha256(f"s{p.pk}".encode()).hexdigest(),
        )
        for p in problems
    )
    with connection.cursor() as cursor:  # as an import does (importing.refresh_planner_statistics)
        cursor.execute("ANALYZE")
    project_id = default_project_id()
    clients = []
    for i in range(args.labelers):
        user = User.objects.create_user(f"bench-{i}", password="x")
        Membership.objects.create(user=user, project_id=project_id, role="labeler")
        client = Client()
        client.force_login(user)
        clients.append(client)

    # Baseline: the same middleware stack and session, answering a trivial view.
    urls.urlpatterns.append(path("bench-baseline/", lambda request: HttpResponse("ok")))
    baseline, claim, page, rate = [], [], [], []
    for client in clients:
        for _ in range(5):
            t = time.perf_counter()
            client.get("/bench-baseline/")
            baseline.append((time.perf_counter() - t) * 1000)
    for _round in range(3):
        for client in clients:
            t = time.perf_counter()
            response = client.post("/p/default/label/next/")
            claim.append((time.perf_counter() - t) * 1000)
            labeling_url = response["Location"]
            t = time.perf_counter()
            client.get(labeling_url)
            page.append((time.perf_counter() - t) * 1000)
            for step in range(args.steps):
                t = time.perf_counter()
                r = client.post(
                    f"{labeling_url}rate/",
                    {"step_index": step, "rating": 1, "elapsed_ms": 900},
                    HTTP_HX_REQUEST="true",
                )
                rate.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.content[:300]

    def line(name, samples):
        p = percentiles(samples)
        return f"{name:<22} n={len(samples):>5}  p50 {p[50]:6.2f} ms  p95 {p[95]:6.2f} ms  p99 {p[99]:6.2f} ms"

    print(
        f"database: {connection.vendor} ({url.rsplit('/', 1)[-1]}), {args.solutions} solutions x {args.steps} steps, {args.labelers} labelers"
    )
    print(line("baseline (trivial view)", baseline))
    print(line("claim next", claim))
    print(line("labeling page", page))
    print(line("rate a step (htmx)", rate))
    base = percentiles(baseline)[50]
    print(
        f"rate p50 = {percentiles(rate)[50] / base:.1f}x the trivial-view floor; "
        f"Label Studio submit p50 (PEERS.md, one labeler, over HTTP): 70-82 ms"
    )
    done = Labeling.objects.filter(status="completed").count()
    print(f"completed labelings: {done} (expected {3 * args.labelers})")


if __name__ == "__main__":
    main()
