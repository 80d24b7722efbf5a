from django.conf import settings


def test_every_beat_entry_names_a_registered_task():
    from stepwise.celery import app

    app.loader.import_default_modules()
    entries = settings.CELERY_BEAT_SCHEDULE
    expected = {"expire-leases", "fail-stale-training-runs", "check-generation-progress"}
    assert expected <= set(entries)
    assert {entry["task"] for entry in entries.values()} <= set(app.tasks)


def _model_tasks_in_thread(**env: str) -> str:
    """STEPWISE_MODEL_TASKS_IN_THREAD as a fresh process reads it with `env`."""
    import os
    import subprocess
    import sys

    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("STEPWISE_MODEL_TASKS_IN_THREAD", "STEPWISE_TRAIN_IN_THREAD")
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import stepwise.settings as s; print(s.STEPWISE_MODEL_TASKS_IN_THREAD)",
        ],
        env={**environ, "SECRET_KEY": "x", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_the_deprecated_train_in_thread_name_still_sets_model_tasks_in_thread():
    assert _model_tasks_in_thread(STEPWISE_TRAIN_IN_THREAD="1") == "True"
    assert _model_tasks_in_thread(STEPWISE_TRAIN_IN_THREAD="0") == "False"
    # Both set: the new name wins.
    both = {"STEPWISE_TRAIN_IN_THREAD": "1", "STEPWISE_MODEL_TASKS_IN_THREAD": "0"}
    assert _model_tasks_in_thread(**both) == "False"
