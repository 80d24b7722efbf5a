"""Floor benchmark: how fast a rating could be on our stack, and how far the real one is from it.

    python -m benchmarks.floor [--seconds 60] [--labelers 50] [--solutions 100000] [--reseed]

One gunicorn (gthread, as benchmarks/queue_load.py: one worker per core plus one, one thread each)
with the project's settings and URLs plus one bare view (benchmarks/floor_urls.py, selected by
DJANGO_SETTINGS_MODULE=benchmarks.floor_settings; the app has no such view): POST
/bench/floor/ goes through the same middleware, session auth (login_required) and CSRF check as
the rating view, then does exactly one INSERT into a table this script creates
(bench_floor_rating) and answers a tiny fragment. Against it, two loads in turn, each for
--seconds with the same load generator (benchmarks/_load.py: --labelers signed-in sessions in
--clients processes, no think time):

  1. the real rating path, queue_load.py's load: claim (POST /label/next/), then one htmx POST per
     step (benchmarks/queue_load.py's seed: --solutions solutions of 10 steps, N=2);
  2. the floor: each labeler POSTs /bench/floor/ in a loop, with the rating's form fields.

DATABASE_URL is ignored: its own PostgreSQL database (default stepwise_bench_floor on
127.0.0.1:5432, seeded once, --reseed to start again). It prints queue_load.py's lines for the
rating run (percentiles, throughput, overshoot, lost ratings), the floor's requests/s and
p50/p99, both round trips and Django's own time (Server-Timing), and `rating / floor` ratios
for throughput (step ratings/s over floor inserts/s) and for p50/p99, then those ratios in
one line. Exits 1, after a FAIL line, if a rating was lost, a solution went over N, a claim
was doubled, or the floor table's rows differ from the floor's acknowledged requests.
Bounded: two loads of --seconds; everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from benchmarks import queue_load as bench
from benchmarks._load import Run, Tally, add_load_arguments, gunicorn, run_labelers

TABLE = "bench_floor_rating"  # benchmarks/floor_urls.py inserts into it (the same name there)


def create_table(db: str) -> None:
    with bench.psql(db) as conn:
        conn.execute(
            f"""create table if not exists {TABLE} (id bigserial primary key, user_id integer
                not null, step_index smallint not null, rating smallint not null, elapsed_ms
                integer not null, created_at timestamptz not null default now());
                truncate {TABLE};"""
        )


def floor_rows(db: str) -> int:
    with bench.psql(db) as conn:
        return conn.execute(f"select count(*) from {TABLE}").fetchone()[0]


def insert_one(session, base: str, deadline: float, think_s: float, tally: Tally) -> None:
    """One labeler on the floor (a benchmarks._load scenario): POST /bench/floor/ with the
    rating's fields and htmx header, again and again until the deadline. Tally kind: floor."""
    step = 0
    while time.time() < deadline:
        r = tally.timed(
            "floor",
            session.post,
            f"{base}/bench/floor/",
            data={"step_index": step % bench.STEPS, "rating": 1, "elapsed_ms": 4000},
            headers={"HX-Request": "true"},
            timeout=60,
        )
        if r.status_code == 200:
            tally.acked.append((0, step))
        else:
            tally.errors += 1
        step += 1
        if think_s:
            time.sleep(think_s)


def ratio(ours: float, floor: float) -> float:
    return ours / floor if floor and not math.isnan(floor) else float("nan")


def cell(value: float, width: int) -> str:
    return " " * width if math.isnan(value) else f"{value:{width}.1f}"


def print_comparison(rating: Run, floor: Run) -> None:
    """A table: the rating run's rate and claim requests, the floor's requests, and the
    `rating / floor` row (throughput and latency ratios), then the same in one line."""
    r, f = rating.tally, floor.tally
    req_s = (rating.per_s(r.n("claim") + r.n("rate")), floor.per_s(f.n("floor")))
    saved_s = (rating.per_s(len(r.acked)), floor.per_s(len(f.acked)))
    blank = float("nan")
    print(
        f"\n{'':36s} {'n':>7s} {'req/s':>7s} {'saved/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s}"
        f" {'server p50':>11s} {'server p99':>11s}"
    )
    for name, n, req, saved, kind, tally in (
        ("rating: POST rate (one step)", r.n("rate"), req_s[0], saved_s[0], "rate", r),
        ("  its claims: POST /label/next/", r.n("claim"), blank, blank, "claim", r),
        ("floor: POST /bench/floor/", f.n("floor"), req_s[1], saved_s[1], "floor", f),
    ):
        print(
            f"{name:36s} {n:7d} {cell(req, 7)} {cell(saved, 8)} {tally.p(kind, 50):8.1f} "
            f"{tally.p(kind, 99):8.1f} {tally.p(kind, 50, server=True):11.1f} "
            f"{tally.p(kind, 99, server=True):11.1f}"
        )
    got = {
        "req/s": ratio(*req_s),
        "saved/s": ratio(*saved_s),
        "p50": ratio(r.p("rate", 50), f.p("floor", 50)),
        "p99": ratio(r.p("rate", 99), f.p("floor", 99)),
        "server p50": ratio(r.p("rate", 50, server=True), f.p("floor", 50, server=True)),
        "server p99": ratio(r.p("rate", 99, server=True), f.p("floor", 99, server=True)),
    }
    print(
        f"{'rating / floor':36s} {'':7s} {got['req/s']:7.2f} {got['saved/s']:8.2f} "
        f"{got['p50']:8.2f} {got['p99']:8.2f} {got['server p50']:11.2f} {got['server p99']:11.2f}"
    )
    print(
        "(req/s: every request, the rating's claims included; saved/s: step ratings acknowledged,"
        " floor rows inserted; server: Django's own time per request, Server-Timing)"
    )
    print(
        f"rating / floor: throughput {got['saved/s']:.2f} ({saved_s[0]:.1f} step ratings/s vs "
        f"{saved_s[1]:.1f} floor inserts/s), p50 {got['p50']:.2f}, p99 {got['p99']:.2f}, "
        f"server time p50 {got['server p50']:.2f}, p99 {got['server p99']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_load_arguments(parser, db="stepwise_bench_floor", port=8732)
    args = parser.parse_args()

    bench.seed(args.db, args.solutions, args.labelers, args.reseed)
    create_table(args.db)
    since = bench.start_labelings(args.db)
    users = [f"b{i}" for i in range(args.labelers)]
    env = bench.env_for(args.db)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.floor_settings"
    load = dict(clients=args.clients, think_s=0.0)
    with gunicorn(args.port, args.workers, args.threads, env) as base:
        rating = run_labelers(base, users, args.seconds, bench.claim_and_rate, **load)
        floor = run_labelers(base, users, args.seconds, insert_one, **load)
    checks = bench.integrity(args.db, since, rating.tally.acked)
    rows = floor_rows(args.db)

    print(
        f"\nbenchmarks/floor.py on {os.cpu_count()} cores; gunicorn gthread {args.workers}x"
        f"{args.threads} (project settings and URLs + /bench/floor/); {args.labelers} labelers in "
        f"{args.clients} client processes, {args.seconds:.0f} s per load, no think time"
    )
    print("-- the rating path (benchmarks/queue_load.py's load), first:")
    bench.print_run(rating, checks)
    f = floor.tally
    print("-- the floor (one INSERT behind the same auth and CSRF), then:")
    print(f"load average before/after: {floor.load_before:.2f} / {floor.load_after:.2f} (1-min)")
    print(
        f"floor  (POST /bench/floor/)     n={f.n('floor'):6d}  p50 {f.p('floor', 50):7.1f} ms"
        f"  p95 {f.p('floor', 95):7.1f} ms  p99 {f.p('floor', 99):7.1f} ms"
    )
    print(
        f"  server time (Server-Timing)   p50 {f.p('floor', 50, server=True):7.1f} ms  p95 "
        f"{f.p('floor', 95, server=True):7.1f} ms  p99 {f.p('floor', 99, server=True):7.1f} ms"
    )
    print(
        f"throughput: {floor.per_s(f.n('floor')):.1f} requests/s, {floor.per_s(len(f.acked)):.1f} "
        f"inserts/s ({len(f.acked)} acknowledged, {rows} rows in {TABLE}, {f.errors} non-200 "
        f"answers, in {floor.wall:.1f} s)"
    )
    print_comparison(rating, floor)
    failed = [k for k in ("overshoot", "counter_overshoot", "double", "lost") if checks[k]]
    if rows != len(f.acked):
        failed.append(f"floor rows {rows} != acknowledged {len(f.acked)}")
    if failed:
        print("FAIL " + ", ".join(failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
