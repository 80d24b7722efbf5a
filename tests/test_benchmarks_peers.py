"""benchmarks/peers.py's reading of both sides' outputs and its table of ratios, on fake
outputs: nothing is run, no server, no database."""

from __future__ import annotations

import json

import pytest

from benchmarks import peers


def ls_load(users: int, annotations_per_s: float, server: str = "uwsgi", **extra) -> str:
    record = {
        "step": "load",
        "server": server,
        "users": users,
        "duration_s": 30,
        "req_per_s": annotations_per_s * 2,
        "annotations_per_s": annotations_per_s,
        "next": {"n": 100, "p50_ms": 90.0 * users, "p95_ms": 1.0, "p99_ms": 250.0 * users},
        "post_annotation": {"n": 100, "p50_ms": 70.0 * users, "p99_ms": 110.0 * users},
        "errors": {},
        "error_count": 0,
        **extra,
    }
    return json.dumps(record)


RESULTS = "\n".join(
    [
        json.dumps({"step": "project", "project_id": 1}),
        json.dumps(
            {
                "step": "import",
                "with_annotations": False,
                "n_tasks": 20000,
                "status": 201,
                "wall_s": 9.2,
            }
        ),
        ls_load(1, 6.0),
        ls_load(20, 7.5),
        ls_load(50, 6.5, app_server_cpu_s=30.0, postgres_cpu_s=21.0),
        "",
        "{not json",
        ls_load(50, 99.0, server="runserver"),  # the secondary server: not compared
        json.dumps(
            {
                "step": "import",
                "with_annotations": True,
                "n_tasks": 20000,
                "status": 201,
                "wall_s": 40.0,
            }
        ),
        json.dumps(
            {
                "step": "export",
                "server": "uwsgi",
                "format": "CSV",
                "status": 200,
                "items": 20000,
                "wall_s": 1.0,
            }
        ),
        json.dumps(
            {
                "step": "export",
                "server": "uwsgi",
                "format": "JSON",
                "status": 200,
                "items": 20000,
                "wall_s": 80.0,
            }
        ),
    ]
)


def queue_output(
    ratings_per_s: float, claim=(12.5, 80.0), submit=(20.0, 150.0), lost=0, cpu=(4.5, 1.5)
) -> str:
    """The lines benchmarks/queue_load.py prints after a run (its print_run and neighbours);
    `cpu` None leaves out its CPU line, as outputs from before it had one."""
    cpu_line = (
        ""
        if cpu is None
        else f"cpu per 1000 step ratings: app {cpu[0]:.2f} s, database {cpu[1]:.2f} s, client "
        "0.70 s (of 57.3 cpu-s over 30.4 s on 2 cores)\n"
    )
    return f"""seed: reusing stepwise_peers_queue

benchmarks/queue_load.py on 2 cores; gunicorn gthread 3x1; 50 labelers in 5 client processes for 30 s, think time 0 ms per step
load average before/after: 1.50 / 3.20 (1-min)
claim  (POST /label/next/)      n=   600  p50 {claim[0]:7.1f} ms  p95   60.0 ms  p99 {claim[1]:7.1f} ms
submit (POST rate, one step)    n=  6000  p50 {submit[0]:7.1f} ms  p95  100.0 ms  p99 {submit[1]:7.1f} ms
  server time (Server-Timing)   claim p50    10.0 ms  p95    20.0 ms;  submit p50    15.0 ms  p95    30.0 ms (the rest of the round trip is queueing for a worker thread and the client)
whole labeling (all its steps)  n=   600  p50   300.0 ms  p95  400.0 ms  p99  500.0 ms
throughput: 10.4 labelings/s, {ratings_per_s:.1f} step ratings/s (312 labelings, 9372 ratings in 30.0 s; 2 non-200 answers)
{cpu_line}overshoot: 0 (counter check 0); double claims: 0; surplus kept: 0; lost ratings: {lost}
dashboard fragment (htmx) p50 17.5 ms, max 34.3 ms; full page p50 18.1 ms; labeler queue page p50 19.3 ms (round trip on loopback, idle server)
peers (PEERS.md, Label Studio 1.23.2, 50 labelers): 7-9 annotations/s saturated; submit p50 2.8-3.4 s, p99 4.8-7.6 s
"""


IMPORT_OUTPUT = """synthetic file: 20,000 lines, 200,000 step labels, 63 MiB
import_prm800k: 20,000 labelings, 200,000 step labels, 280,000 completions in 15.30 s = 13,069 step labels/s
naive per-row save() loop: 100 lines, 1,000 step labels in 1.24 s = 804 step labels/s
"""
EXPORT_OUTPUT = """seeding 20,000 labelings, 200,000 step labels ...

streamed export (prm800k): 20,000 labelings, 200,000 step labels, 68 MiB in 0.34 s = 587,420 step labels/s; peak RSS growth 2.3 MB
naive ORM loop + json.dumps(list): 200 labelings, 2,000 step labels in 1.75 s = 1,141 step labels/s
"""


def test_label_studio_step_ratings_are_its_submits_times_ten_on_uwsgi():
    peer = peers.read_peer(RESULTS)
    assert sorted(peer.load) == [1, 20, 50]
    assert peer.load[50]["ratings_per_s"] == 65.0  # uwsgi's 6.5 annotations/s, not runserver's
    assert peer.load[20]["submit_p99"] == 2200.0
    # CPU per 1000 step ratings: (30 + 21) CPU-s over 6.5 x 30 s x 10 steps.
    assert peer.load[50]["server_cpu"] == pytest.approx(1000 * 51 / 1950)
    assert peer.load[20]["server_cpu"] is None  # a record without the CPU figures
    assert peer.import_rate == 20000 * 10 / 40.0  # the import with annotations
    assert peer.export_rate == 20000 * 10 / 80.0  # the JSON export, not the CSV one
    assert peer.unreadable == 1


def test_our_queue_output_is_read():
    got = peers.parse_queue(queue_output(312.4))
    assert got == {
        "ratings_per_s": 312.4,
        "errors": 2,
        "next_p50": 12.5,
        "next_p99": 80.0,
        "submit_p50": 20.0,
        "submit_p99": 150.0,
        "overshoot": 0,
        "lost": 0,
        "server_cpu": 6.0,
    }
    assert peers.parse_queue(queue_output(1.0, cpu=None))["server_cpu"] is None
    assert peers.parse_import(IMPORT_OUTPUT) == 13069
    assert peers.parse_export(EXPORT_OUTPUT) == 587420


def test_an_output_without_its_throughput_line_is_refused_by_name():
    broken = "\n".join(
        line for line in queue_output(1.0).splitlines() if not line.startswith("throughput")
    )
    with pytest.raises(ValueError, match="no throughput line"):
        peers.parse_queue(broken)


def test_the_table_and_the_last_line():
    ours = {
        1: peers.parse_queue(queue_output(50.0, claim=(30.0, 60.0), submit=(35.0, 70.0))),
        20: peers.parse_queue(queue_output(250.0)),
        50: peers.parse_queue(queue_output(312.4)),
    }
    lines = peers.report(
        ours,
        peers.read_peer(RESULTS),
        [1, 20, 50],
        ours_import=peers.parse_import(IMPORT_OUTPUT),
        ours_export=peers.parse_export(EXPORT_OUTPUT),
    )
    rows = {line[:32].strip(): line[32:].split() for line in lines[2:22]}
    assert rows["step ratings/s, 50 labelers"] == ["312.4", "65.0", "4.81", "ours"]
    assert rows["step ratings/s, 1 labeler"] == ["50.0", "60.0", "0.83", "LS"]
    # Latencies: lower is better, so a ratio below 1 is ours.
    assert rows["submit p50 ms, 50 labelers"] == ["20.0", "3,500.0", "0.0057", "ours"]
    # Server CPU: lower is better; Label Studio's is known at 50 labelers only here.
    assert rows["server CPU-s/1k, 50 labelers"] == ["6.0", "26.2", "0.23", "ours"]
    assert rows["server CPU-s/1k, 1 labeler"] == ["6.0", "n/a", "n/a", "n/a"]
    assert rows["next item p99 ms, 1 labeler"] == ["60.0", "250.0", "0.24", "ours"]
    assert rows["import, step labels/s"] == ["13,069.0", "5,000.0", "2.61", "ours"]
    assert rows["export, step labels/s"] == ["587,420.0", "2,500.0", "234.97", "ours"]
    assert "1 unreadable lines" in "\n".join(lines)
    assert lines[-1] == (
        "side-by-side: step ratings/s at 50 labelers: ours 312.4, Label Studio 65.0, ratio 4.81"
    )


def test_a_level_label_studio_did_not_measure_is_na_and_bulk_rows_need_a_figure():
    ours = {n: peers.parse_queue(queue_output(100.0)) for n in (10, 50)}
    lines = peers.report(ours, peers.read_peer(ls_load(50, 5.0)), [10, 50])
    assert lines[2].split()[-4:] == ["100.0", "n/a", "n/a", "n/a"]
    assert not any(line.startswith(("import,", "export,")) for line in lines)
    assert lines[-1] == (
        "side-by-side: step ratings/s at 50 labelers: ours 100.0, Label Studio 50.0, ratio 2.00"
    )


def test_no_label_studio_figure_at_50_is_an_error_not_a_line():
    with pytest.raises(ValueError, match="at 50 labelers"):
        peers.report({50: peers.parse_queue(queue_output(1.0))}, peers.read_peer(""), [50])


def test_labeler_levels_must_include_50():
    assert peers.parse_levels("50,1,20,20") == [1, 20, 50]
    with pytest.raises(Exception, match="include 50"):
        peers.parse_levels("1,20")


def test_repeated_runs_print_each_ratio_and_their_median():
    runs = [{1: 1.1, 20: 2.0, 50: 2.5}, {1: 0.9, 20: 2.4, 50: None}, {1: 1.3, 20: 1.8, 50: 2.1}]
    lines = peers.ratio_summary(runs, [1, 20, 50])
    assert lines[1].split() == ["1", "labeler", "1.10,", "0.90,", "1.30", "median", "1.10"]
    assert lines[2].split()[-1] == "2.00"
    # A run without a figure at a level shows n/a and the median is of the others.
    assert lines[3].split() == ["50", "labelers", "2.50,", "n/a,", "2.10", "median", "2.30"]
