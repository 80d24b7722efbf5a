"""Queue benchmark: 100k solutions / 1M step ratings, 50 labelers over real HTTP.

    DATABASE_URL is ignored: the script uses its own PostgreSQL database (default
    stepwise_bench_queue on 127.0.0.1), seeds it with bulk SQL (generate_series), starts
    gunicorn (gthread workers) on 127.0.0.1, and runs simulated labelers in several processes,
    each thread a logged-in `requests` session looping: POST /label/next/ (claim), then one
    htmx POST per step (rate) until the labeling ends (the load generator is
    benchmarks/_load.py, shared with floor.py). It prints latency percentiles,
    throughput, overshoot and lost ratings (both must be 0), and the lead dashboard's time.

    Everything happens in the project PROJECT ("Bench", /p/bench/), not in the Default one that
    migrations make: the labelers and the lead are its members only, the batch and solutions
    are its own, and every claim, rating and finish goes to its /p/bench/ links. A view that
    forgot its project (and fell back to Default's) would find nothing to claim here.

    python -m benchmarks.queue_load [--seconds 60] [--labelers 50] [--solutions 100000] [--reseed]

Bounded: the run stops after --seconds; everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time

from benchmarks._load import (
    ROOT,
    Run,
    Tally,
    add_load_arguments,
    gunicorn,
    login,
    pct,
    run_labelers,
)

PG = dict(host="127.0.0.1", port=5432, user="postgres")
STEPS = 10
# The seed's project (its slug): not the Default project, which a row or link without one
# falls back to, so the load measures the project-scoped paths.
PROJECT = "bench"


def db_url(name: str) -> str:
    return f"postgres://{PG['user']}@{PG['host']}:{PG['port']}/{name}"


def env_for(name: str) -> dict:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url(name),
        DEBUG="0",
        SECRET_KEY="bench-only",
        STEPWISE_TESTING="1",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/3"),
        STEPWISE_HTTPS="0",  # loopback, plain HTTP
        STEPWISE_SERVER_TIMING="1",  # the server time per request, read below
        PYTHONPATH=str(ROOT),
        LOG_LEVEL="WARNING",
    )
    return env


def psql(name: str):
    import psycopg

    return psycopg.connect(dbname=name, autocommit=True, **PG)


def seeded(name: str, solutions: int) -> bool:
    """Whether the existing database `name` holds this seed: `solutions` solutions in PROJECT
    (not an older seed's, in the Default project or an older schema)."""
    import psycopg

    try:
        with psql(name) as conn:
            held = conn.execute(
                "select count(*) from labeling_solution s join labeling_project p "
                "on p.id = s.project_id where p.slug = %s",
                [PROJECT],
            ).fetchone()[0]
    except psycopg.Error:
        return False
    return held >= solutions


def seed(name: str, solutions: int, labelers: int, reseed: bool) -> None:
    with psql("postgres") as conn:
        exists = conn.execute("select 1 from pg_database where datname=%s", [name]).fetchone()
        reuse = bool(exists) and not reseed and seeded(name, solutions)
        if exists and not reuse:
            conn.execute(f'drop database "{name}" with (force)')
        if not reuse:
            conn.execute(f'create database "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env_for(name), check=True
    )
    if reuse:
        print(f"seed: reusing {name}")
        return
    with psql(name) as conn:
        t0 = time.perf_counter()
        fill(conn, solutions, labelers)
        print(
            f"seed: {solutions} solutions, {solutions} labelings, {solutions * STEPS} step ratings "
            f"in {time.perf_counter() - t0:.1f} s"
        )


def fill(conn, solutions: int, labelers: int) -> None:
    """The seed's rows, on a migrated database: `solutions` solutions of STEPS steps in one
    batch with N = 2, each labeled once, and `labelers` labelers with nothing open."""
    steps_json = (
        "["
        + ", ".join(f'"Step {i + 1}: we compute $x_{{{i}}} = {i}^2 + 1$."' for i in range(STEPS))
        + "]"
    )
    script = f"""
    insert into labeling_problem (text, text_sha256, ground_truth_answer, subject, created_at)
      select 'Bench problem ' || g, md5('p' || g) || md5('q' || g), '42', 'algebra', now()
      from generate_series(1, {solutions // 10}) g;
    insert into labeling_project (name, slug, created_at) values ('Bench', '{PROJECT}', now());
    insert into labeling_batch (project_id, name, generation, overlap, priority, is_active, origin,
        created_at, protocol, alternatives_k, alternatives_after_error)
      values ((select id from labeling_project where slug = '{PROJECT}'), 'bench', 1, 2, 0, true,
        'manual', now(), 'steps', 5, false);
    insert into auth_group (name) values ('labeler'), ('lead') on conflict do nothing;
    insert into auth_user (password, is_superuser, username, first_name, last_name, email, is_staff, is_active, date_joined)
      select 'md5$bench$' || md5('bench' || 'pw'), false, 'b' || g, '', '', '', false, true, now()
      from generate_series(0, {labelers + 10 - 1}) g;
    insert into auth_user (password, is_superuser, username, first_name, last_name, email, is_staff, is_active, date_joined)
      values ('md5$bench$' || md5('bench' || 'pw'), false, 'benchlead', '', '', '', false, true, now());
    insert into labeling_membership (project_id, user_id, role, created_at)
      select p.id, u.id, 'labeler', now() from auth_user u, labeling_project p
      where p.slug = '{PROJECT}' and u.username like 'b%' and u.username <> 'benchlead';
    insert into labeling_membership (project_id, user_id, role, created_at)
      select p.id, u.id, 'lead', now() from auth_user u, labeling_project p
      where p.slug = '{PROJECT}' and u.username = 'benchlead';
    insert into labeling_labeler (user_id, public_id, created_at)
      select id, gen_random_uuid(), now() from auth_user where username like 'b%';
    insert into labeling_labelerrecord (user_id, project_id, created_at, state, state_reason, claims_since_gold,
        gold_labelings, gold_steps, gold_steps_exact, gold_steps_binary, gold_first_error_total,
        gold_first_error_match, agree_steps_compared, agree_steps_same)
      select u.id, p.id, now(), 'active', '', 0, 0, 0, 0, 0, 0, 0, 0, 0
      from auth_user u, labeling_project p where p.slug = '{PROJECT}' and u.username like 'b%';
    insert into labeling_solution (project_id, problem_id, batch_id, steps, final_answer, generator, source_id, format,
        generation, is_quality_control, is_screening, content_sha256, completed_count, active_count, created_at)
      select (select id from labeling_project where slug = '{PROJECT}'),
        p.id + (g % {solutions // 10}), (select id from labeling_batch where name = 'bench'),
        '{steps_json}'::jsonb, '42', 'bench', 'bench-' || g, 'phase2', 1, false, false,
        md5('s' || g) || md5('t' || g), 1, 0, now()
      from generate_series(0, {solutions - 1}) g, (select min(id) as id from labeling_problem) p;
    -- One finished labeling per solution by the ten 'past' labelers: 100k labelings, 1M ratings.
    insert into labeling_labeling (solution_id, labeler_id, status, finish_reason, total_time_ms, started_at,
        finished_at, updated_at, lease_expires_at, is_surplus, skip_reason)
      select s.id, (select min(id) from auth_user where username like 'b%') + {labelers} + (s.id % 10),
        'completed', 'solution', 60000, now() - interval '2 hours', now() - (s.id % 7200) * interval '1 second',
        now(), null, false, ''
      from labeling_solution s;
    insert into labeling_steplabel (labeling_id, index, chosen_completion, has_completions, time_ms, created_at)
      select l.id, i, 0, true, 6000, l.finished_at from labeling_labeling l, generate_series(0, {STEPS - 1}) i;
    insert into labeling_completion (step_id, index, text, rating, flagged, is_human, source)
      select st.id, 0, 'step', case when st.index % 5 = 4 then 0 else 1 end, false, false, ''
      from labeling_steplabel st;
    insert into labeling_batchlabelerstats (batch_id, labeler_id, labelings, surplus, steps, time_ms, pos, neu, neg,
        flagged, fin_solution, fin_found_error, fin_give_up, fin_bad_problem, solutions_done, last_finished_at)
      select s.batch_id, l.labeler_id, count(*), 0, count(*) * {STEPS}, sum(l.total_time_ms), count(*) * 8, count(*) * 2, 0,
        0, count(*), 0, 0, 0, 0, max(l.finished_at)
      from labeling_labeling l join labeling_solution s on s.id = l.solution_id group by 1, 2;
    insert into labeling_batchhourstats (batch_id, hour, labelings, surplus, steps, time_ms, pos, neu, neg,
        flagged, fin_solution, fin_found_error, fin_give_up, fin_bad_problem, solutions_done)
      select s.batch_id, date_trunc('hour', l.finished_at), count(*), 0, count(*) * {STEPS}, sum(l.total_time_ms),
        count(*) * 8, count(*) * 2, 0, 0, count(*), 0, 0, 0, 0
      from labeling_labeling l join labeling_solution s on s.id = l.solution_id group by 1, 2;
    analyze;
    """
    conn.execute(script)


# --- the simulated labelers ---------------------------------------------------------------------


def rating_for(labeling_id: int, step: int) -> int:
    """The simulated labeler's rating: the same for a labeling and step every time it is sent
    (a retry repeats it), neutral every fourth step, an error at step 7 of one labeling in 9."""
    return -1 if (labeling_id % 9 == 0 and step == 6) else (0 if step % 4 == 3 else 1)


def claim_and_rate(session, base: str, deadline: float, think_s: float, tally: Tally) -> None:
    """One labeler (a benchmarks._load scenario): claim, rate every step of the labeling with
    one htmx POST each (until a -1), claim again, until the deadline or the queue is empty.
    Tally kinds: claim, rate, labeling (a whole labeling's time).

    People neither start nor read in lockstep: at human pace the first claim waits a random
    part of a solution's length and each pause is drawn around `think_s` (identical pauses had
    every labeler claim at the same instant, and the claims queued behind each other)."""
    rng = random.Random()
    if think_s:
        time.sleep(rng.uniform(0, think_s * STEPS))
    while time.time() < deadline:
        r = tally.timed(
            "claim",
            session.post,
            f"{base}/p/{PROJECT}/label/next/",
            allow_redirects=False,
            timeout=60,
        )
        match = re.search(rf"/p/{PROJECT}/label/(\d+)/$", r.headers.get("Location", ""))
        if not match:
            break  # nothing left for this labeler
        labeling_id = int(match.group(1))
        started = time.perf_counter()
        for step in range(STEPS):
            rating = rating_for(labeling_id, step)
            r = tally.timed(
                "rate",
                session.post,
                f"{base}/p/{PROJECT}/label/{labeling_id}/rate/",
                data={"step_index": step, "rating": rating, "elapsed_ms": 4000},
                headers={"HX-Request": "true"},
                timeout=60,
            )
            if think_s:
                time.sleep(rng.uniform(0.5, 1.5) * think_s)  # reading the next step
            if r.status_code == 200:
                tally.acked.append((labeling_id, step))
            else:
                tally.errors += 1
                break
            if rating == -1:
                break
        tally.add("labeling", time.perf_counter() - started)


def start_labelings(db: str) -> int:
    """The last labeling id before a run: the run's own labelings come after it."""
    with psql(db) as conn:
        return conn.execute("select coalesce(max(id), 0) from labeling_labeling").fetchone()[0]


def integrity(db: str, since: int, acked: list[tuple[int, int]]) -> dict[str, int]:
    """Counts that must be 0 (overshoot, counter_overshoot, double, lost) and what the run
    left (surplus, finished), from the database after a run that began at labeling `since`."""
    with psql(db) as conn:

        def one(sql: str, *params: object) -> int:
            return conn.execute(sql, list(params)).fetchone()[0]

        overshoot = one(
            """select count(*) from (select l.solution_id from labeling_labeling l join labeling_solution s
               on s.id = l.solution_id join labeling_batch b on b.id = s.batch_id
               where l.status = 'completed' and not l.is_surplus group by l.solution_id, b.overlap
               having count(*) > b.overlap) x"""
        )
        counter_overshoot = one(
            "select count(*) from labeling_solution s join labeling_batch b on b.id = s.batch_id "
            "where s.completed_count + s.active_count > b.overlap"
        )
        double = one(
            "select count(*) from (select solution_id, labeler_id from labeling_labeling "
            "group by 1, 2 having count(*) > 1) x"
        )
        # Every acknowledged labeling, those resumed from an earlier run (id <= since) too.
        stored = set(
            conn.execute(
                "select st.labeling_id, st.index from labeling_steplabel st "
                "where st.labeling_id = any(%s)",
                [sorted({labeling for labeling, _step in acked})],
            ).fetchall()
        )
        surplus = one("select count(*) from labeling_labeling where id > %s and is_surplus", since)
        finished = one(
            "select count(*) from labeling_labeling where id > %s and status = 'completed'", since
        )
    lost = sum(1 for item in acked if tuple(item) not in stored)
    return dict(
        overshoot=overshoot,
        counter_overshoot=counter_overshoot,
        double=double,
        lost=lost,
        surplus=surplus,
        finished=finished,
    )


def idle_pages(base: str, db: str, labeler: str) -> dict[str, list[float]]:
    """Round trips of the lead's dashboard (its htmx fragment and the full page) and of a
    labeler's queue page, on the server once the load has stopped."""
    lead = login(base, "benchlead")
    with psql(db) as conn:
        batch_id = conn.execute("select id from labeling_batch where name='bench'").fetchone()[0]
    times: dict[str, list[float]] = {"dash": [], "full": [], "queue": []}
    for _ in range(15):
        t1 = time.perf_counter()
        r = lead.get(
            f"{base}/p/{PROJECT}/label/lead/batches/{batch_id}/",
            headers={"HX-Request": "true"},
            timeout=30,
        )
        times["dash"].append(time.perf_counter() - t1)
        assert r.status_code == 200
    for _ in range(5):
        t1 = time.perf_counter()
        lead.get(f"{base}/p/{PROJECT}/label/lead/batches/{batch_id}/", timeout=30)
        times["full"].append(time.perf_counter() - t1)
    labeler_session = login(base, labeler)
    for _ in range(10):
        t1 = time.perf_counter()
        labeler_session.get(f"{base}/p/{PROJECT}/label/", timeout=30)
        times["queue"].append(time.perf_counter() - t1)
    return times


def print_run(run: Run, checks: dict[str, int]) -> None:
    """The claim/submit/labeling percentiles, throughput and integrity lines of a run (the
    format benchmarks/peers.py parses)."""
    t = run.tally
    print(f"load average before/after: {run.load_before:.2f} / {run.load_after:.2f} (1-min)")
    print(
        f"claim  (POST /p/{PROJECT}/label/next/)     n={t.n('claim'):6d}  p50 {t.p('claim', 50):7.1f} ms"
        f"  p95 {t.p('claim', 95):7.1f} ms  p99 {t.p('claim', 99):7.1f} ms"
    )
    print(
        f"submit (POST rate, one step)           n={t.n('rate'):6d}  p50 {t.p('rate', 50):7.1f} ms"
        f"  p95 {t.p('rate', 95):7.1f} ms  p99 {t.p('rate', 99):7.1f} ms"
    )
    print(
        f"  server time (Server-Timing)   claim p50 {t.p('claim', 50, server=True):7.1f} ms  p95 {t.p('claim', 95, server=True):7.1f} ms;"
        f"  submit p50 {t.p('rate', 50, server=True):7.1f} ms  p95 {t.p('rate', 95, server=True):7.1f} ms"
        " (the rest of the round trip is queueing for a worker thread and the client)"
    )
    print(
        f"whole labeling (all its steps)         n={t.n('labeling'):6d}  p50 {t.p('labeling', 50):7.1f} ms"
        f"  p95 {t.p('labeling', 95):7.1f} ms  p99 {t.p('labeling', 99):7.1f} ms"
    )
    finished, ratings = checks["finished"], len(t.acked)
    print(
        f"throughput: {run.per_s(finished):.1f} labelings/s, {run.per_s(ratings):.1f} step ratings/s "
        f"({finished} labelings, {ratings} ratings in {run.wall:.1f} s; {t.errors} non-200 answers)"
    )
    if run.cpu_s and ratings:
        per_k = {side: 1000 * used / ratings for side, used in run.cpu_s.items()}
        print(
            f"cpu per 1000 step ratings: app {per_k['app']:.2f} s, database "
            f"{per_k['database']:.2f} s, client {per_k['client']:.2f} s (of "
            f"{sum(run.cpu_s.values()):.1f} cpu-s over {run.wall:.1f} s on {os.cpu_count()} cores)"
        )
    print(
        f"overshoot: {checks['overshoot']} (counter check {checks['counter_overshoot']}); "
        f"double claims: {checks['double']}; surplus kept: {checks['surplus']}; "
        f"lost ratings: {checks['lost']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_load_arguments(parser, db="stepwise_bench_queue", port=8731)
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0,
        help="pause after each rating, as a person reading the next step (0: saturate)",
    )
    args = parser.parse_args()

    seed(args.db, args.solutions, args.labelers, args.reseed)
    since = start_labelings(args.db)
    users = [f"b{i}" for i in range(args.labelers)]
    with gunicorn(args.port, args.workers, args.threads, env_for(args.db)) as base:
        run = run_labelers(
            base,
            users,
            args.seconds,
            claim_and_rate,
            clients=args.clients,
            think_s=args.think_ms / 1000,
        )
        pages = idle_pages(base, args.db, users[0])
    checks = integrity(args.db, since, run.tally.acked)

    print(
        f"\nbenchmarks/queue_load.py on {os.cpu_count()} cores; gunicorn gthread {args.workers}x{args.threads}; "
        f"{args.labelers} labelers in {args.clients} client processes for {args.seconds:.0f} s, "
        f"think time {args.think_ms:.0f} ms per step"
    )
    print_run(run, checks)
    print(
        f"dashboard fragment (htmx) p50 {pct(pages['dash'], 50):.1f} ms, max {max(pages['dash']) * 1000:.1f} ms; full page p50 "
        f"{pct(pages['full'], 50):.1f} ms; labeler queue page p50 {pct(pages['queue'], 50):.1f} ms (round trip on loopback, idle server)"
    )
    print(
        "peers (PEERS.md, Label Studio 1.23.2, 50 labelers): 7-9 annotations/s saturated; submit p50 2.8-3.4 s, p99 4.8-7.6 s"
    )


if __name__ == "__main__":
    main()
