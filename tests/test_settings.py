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


def _database_options(**env: str) -> dict:
    """DATABASES["default"]["OPTIONS"] as a fresh process reads it with `env`."""
    import json
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if not k.startswith("STEPWISE_DB_PREPARED")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, stepwise.settings as s; "
            "print(json.dumps(s.DATABASES['default'].get('OPTIONS', {}), default=str))",
        ],
        env={**environ, "SECRET_KEY": "x", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def test_postgresql_binds_on_the_server_and_prepares_unless_told_not_to():
    url = "postgres://postgres@127.0.0.1:5432/stepwise"
    prepared = _database_options(DATABASE_URL=url)
    assert (prepared["server_side_binding"], prepared["prepare_threshold"]) == (True, 5)
    # Behind a pooler that cannot keep prepared statements: Django's own default.
    assert "server_side_binding" not in _database_options(
        DATABASE_URL=url, STEPWISE_DB_PREPARED="0"
    )
    # SQLite, named by URL or embedded, takes neither (its driver refuses unknown options).
    sqlite = _database_options(DATABASE_URL="sqlite:////tmp/any.sqlite3")
    assert "server_side_binding" not in sqlite and "prepare_threshold" not in sqlite


def test_a_statement_the_app_sends_again_is_prepared_once_on_postgresql(db):
    """The session's user read (the same SQL every request) runs from a prepared statement
    after its fifth use on a connection: PostgreSQL no longer plans it each time."""
    import pytest
    from django.db import connection

    from stepwise.sessions import USER_READ
    from tests.helpers.users import make_user

    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    user = make_user("prepared", "labeler")
    for _ in range(6):
        assert USER_READ.first(user_id=user.pk) == user
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('FROM "auth_user"' in statement for statement in prepared), prepared


def _startup(**env: str):
    """stepwise.settings as a fresh process reads it with only `env` (and the interpreter's
    own variables) set: DEBUG, HTTPS and SECRET_KEY as JSON, or the failed process."""
    import json
    import os
    import subprocess
    import sys

    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "SECRET_KEY", "DEBUG") and not k.startswith("STEPWISE_")
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, stepwise.settings as s; "
            "print(json.dumps([s.DEBUG, s.HTTPS, s.SECRET_KEY]))",
        ],
        env={**environ, **env},
        capture_output=True,
        text=True,
    )
    if result.returncode:
        return result
    return json.loads(result.stdout)


def test_the_embedded_default_runs_without_debug_on_plain_http_with_a_key_of_its_own(tmp_path):
    """`make demo` sets nothing: DEBUG off (no technical page shows the routes or a traceback),
    plain HTTP on loopback, and a secret key made once for this var/ folder, never a known one."""
    debug, https, key = _startup(STEPWISE_VAR_DIR=str(tmp_path / "var"))
    assert (debug, https) == (False, False)
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.read_text() == key and len(key) >= 50
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert _startup(STEPWISE_VAR_DIR=str(tmp_path / "var"))[2] == key  # kept: sessions survive
    assert _startup(STEPWISE_VAR_DIR=str(tmp_path / "other"))[2] != key
    assert [p.name for p in (tmp_path / "var").iterdir()] == ["secret_key"]  # no draft left
    # A developer asks for DEBUG; production (PostgreSQL) names its key or does not start.
    assert _startup(STEPWISE_VAR_DIR=str(tmp_path / "var"), DEBUG="1")[:2] == [True, False]
    production = _startup(DATABASE_URL="postgres://stepwise@127.0.0.1:1/stepwise")
    assert production.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in production.stderr


def test_a_cap_on_candidate_sets_below_one_is_refused_at_start():
    import os
    import subprocess
    import sys

    read = "import stepwise.settings as s; print(s.STEPWISE_CANDIDATE_SETS_PER_LABELER)"
    environ = {**os.environ, "SECRET_KEY": "x"}

    def start(value: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", read],
            env={**environ, "STEPWISE_CANDIDATE_SETS_PER_LABELER": value},
            capture_output=True,
            text=True,
        )

    assert start("").stdout.strip() == "3"
    refused = start("0")
    assert refused.returncode != 0
    assert "STEPWISE_CANDIDATE_SETS_PER_LABELER=0 is below 1" in refused.stderr


def test_every_registered_task_is_routed_by_its_own_line_in_the_queue_table():
    """A task added or renamed without a line in TASK_QUEUES fails here; before the table, the
    queue followed the name's prefix, and a rename moved a task to another worker unnoticed."""
    from stepwise.celery import app

    app.loader.import_default_modules()  # what a worker registers
    registered = {name for name in app.tasks if not name.startswith("celery.")}
    assert sorted(registered - set(settings.TASK_QUEUES)) == []  # every task named
    assert sorted(set(settings.TASK_QUEUES) - registered) == []  # no line for a gone task
    routed = {name: app.amqp.router.route({}, name)["queue"].name for name in registered}
    assert routed == settings.TASK_QUEUES
