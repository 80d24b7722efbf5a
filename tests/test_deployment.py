"""The deployment: Celery settings keep a long training run from being delivered twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


# --- Celery: a long task is never delivered twice ------------------------------------------------


def test_visibility_timeout_outlasts_every_task_time_limit():
    """Redis gives an unacknowledged (acks_late) task to another worker after the visibility
    timeout: every task's hard limit must end before it, or a running training run starts twice."""
    from stepwise.celery import app

    app.loader.import_default_modules()
    timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    limits = {name: task.time_limit or app.conf.task_time_limit for name, task in app.tasks.items()}
    assert limits["modeling.tasks.gpu_train_run"] == settings.STEPWISE_TRAINING_TIME_LIMIT_S
    longest = max(limits, key=lambda name: limits[name])
    assert timeout > limits[longest], (
        f"{longest} may run {limits[longest]} s, longer than {timeout}"
    )


def test_a_visibility_timeout_shorter_than_a_training_run_is_refused_at_startup():
    env = {**os.environ, "SECRET_KEY": "x", "CELERY_VISIBILITY_TIMEOUT": str(7 * 3600)}
    result = subprocess.run(
        [sys.executable, "-c", "import stepwise.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: CELERY_VISIBILITY_TIMEOUT=25200 must be longer" in result.stderr
