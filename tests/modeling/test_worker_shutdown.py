"""The gpu worker as the deployment runs it: every model task has a soft and a hard time limit,
and a worker told to stop (SIGTERM, what `docker stop` sends) stops within its soft shutdown
timeout with its running task back on the queue, instead of waiting for the task to end."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from modeling import tasks
from modeling.models import ModelVersion
from stepwise.celery import app
from tests.helpers.paths import ROOT
from tests.helpers.processes import current_database_url, stop_process
from tests.test_deployment import compose, stages

SOFT_SHUTDOWN_S = 2
# Past the soft shutdown: the cancelled task's process is signalled and the message restored. The
# task itself would wait forever (a held lock): the bound only has to outlast a loaded machine.
EXIT_BOUND_S = SOFT_SHUTDOWN_S + 90


def test_every_model_task_has_a_soft_time_limit_before_its_hard_one():
    model_tasks = [
        app.tasks[name]
        for name, queue in settings.TASK_QUEUES.items()
        if queue in ("gpu", "generate")
    ]
    assert {t.name.rsplit(".", 1)[-1] for t in model_tasks} >= {
        "gpu_train_run",
        "gpu_gate_model",
        "gpu_score_for_review",
        "gpu_generation_step",
        "generate_pool_run",
        "generate_proposal",
    }
    for task in model_tasks:
        assert task.time_limit and task.soft_time_limit, task.name
        assert 0 < task.soft_time_limit < task.time_limit, task.name


def gpu_worker() -> tuple[list[str], dict[str, str]]:
    """docker/compose.yaml's gpu worker command (its celery run by this Python) and the
    environment the Dockerfile's gpu image sets."""
    command = shlex.split(compose()["services"]["gpu-worker"]["command"])
    assert command[0] == "celery"
    _, instructions = stages()["gpu"]
    image_env = dict(
        pair.split("=", 1)
        for keyword, args in instructions
        if keyword == "ENV"
        for pair in args.split()
    )
    return [sys.executable, "-m", *command], image_env


def waiting_for_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()"
        )
        return cursor.fetchone()[0]


@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_gpu_worker_told_to_stop_mid_task_stops_and_puts_the_task_back(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("a real worker needs the PostgreSQL test database")
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete("gpu")
    version = ModelVersion.objects.create(
        name="held", backbone="x", artifact_path=str(tmp_path / "nowhere"), kind="step_tag"
    )
    # The gate ends by locking its version's row: held here, the task waits mid-way, as a long
    # scoring would, until the worker is told to stop.
    holder = psycopg.connect(current_database_url(), autocommit=False)
    holder.execute("SELECT 1 FROM modeling_modelversion WHERE id = %s FOR UPDATE", [version.pk])

    command, image_env = gpu_worker()
    env = {
        **os.environ,
        **image_env,
        "DATABASE_URL": current_database_url(),
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT": str(SOFT_SHUTDOWN_S),
        "STEPWISE_VAR_DIR": str(tmp_path),
        "STEPWISE_EVAL_SET_PROBLEMS": "0",  # the gate measures nothing, then takes the lock
        "PYTHONPATH": str(ROOT),
    }
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            [*command, "--without-heartbeat", "--without-gossip", "--without-mingle"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "ready" not in log_path.read_text() and time.monotonic() < deadline:
            assert worker.poll() is None, log_path.read_text()
            time.sleep(0.2)
        tasks.gpu_gate_model.apply_async(args=[version.pk, False])
        while not waiting_for_a_lock() and time.monotonic() < deadline:
            assert worker.poll() is None, log_path.read_text()
            time.sleep(0.2)
        assert waiting_for_a_lock(), log_path.read_text()

        worker.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        try:
            worker.wait(timeout=EXIT_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the worker did not stop within {EXIT_BOUND_S} s of SIGTERM:\n"
                + log_path.read_text()
            )
        assert time.monotonic() - asked >= SOFT_SHUTDOWN_S  # the task had its grace first
        (message,) = broker.lrange("gpu", 0, -1)  # back on the queue for the next worker
        assert b"modeling.tasks.gpu_gate_model" in message
        version.refresh_from_db()
        assert "gate" not in version.metrics and not version.passed_evaluation
    finally:
        stop_process(worker)
        holder.rollback()
        holder.close()
        broker.delete("gpu")
        # The cancelled task's session waited for the lock: gone with its process, ended here
        # at once instead of when its server notices.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
