"""Redis down when work is queued: the request still answers (the row is saved and says it is
waiting for the queue), and once Redis is back the beat sweeper sends it. A real unreachable
broker (a closed port) and the real Redis, in a separate process with its own settings."""

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1
LIVE_DB = 13

pytestmark = pytest.mark.redis

QUEUE_BOTH = """
import json, time, django
django.setup()
from django.contrib.auth.models import Group, User
from django.test import Client
from labeling.models import Snapshot
from modeling.models import TrainingRun
user = User.objects.create_user("rhea", password="x")
from tests.helpers.users import grant
grant(user, "researcher")
client = Client()
client.force_login(user)
started = time.monotonic()
page = client.post("/p/default/research/snapshots/new/", {"format": "prm800k"})
api = client.post("/p/default/api/runs/", {}, content_type="application/json")
elapsed = time.monotonic() - started
snapshot, run = Snapshot.objects.get(), TrainingRun.objects.get()
print(json.dumps({"page": page.status_code, "api": api.status_code, "elapsed": elapsed,
                  "api_error": api.json().get("error"), "snapshot": [snapshot.status, snapshot.error],
                  "run": [run.status, run.error]}))
"""

LABEL = """
import json, django
django.setup()
from django.contrib.auth.models import Group, User
from django.test import Client
from labeling.models import Labeling
from tests.factories import make_batch, make_solution
make_solution(make_batch(gold_rate=0), steps=["$1+1=2$.", "So 3.\\n\\n# Answer\\n\\n3"])
user = User.objects.create_user("lena", password="x")
from tests.helpers.users import grant
grant(user, "labeler")
client = Client()
client.force_login(user)
claim = client.post("/p/default/label/next/")
labeling = Labeling.objects.get(labeler=user)
rated = [client.post(f"/p/default/label/{labeling.pk}/rate/", {"step_index": i, "rating": r}).status_code
         for i, r in ((0, 1), (1, -1))]
labeling.refresh_from_db()
print(json.dumps({"claim": claim.status_code, "rated": rated, "status": labeling.status,
                  "finish_reason": labeling.finish_reason}))
"""

SWEEP = """
import json, django
django.setup()
from labeling.models import Snapshot
from labeling.services.snapshots import snapshots_resend
from modeling.models import TrainingRun
from modeling.services.runs import runs_resend
tried = [snapshots_resend(), runs_resend()]
snapshot, run = Snapshot.objects.get(), TrainingRun.objects.get()
print(json.dumps({"tried": tried, "snapshot": [snapshot.status, snapshot.error],
                  "run": [run.status, run.error]}))
"""


def _run(code: str, env: dict) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def live_db():
    client = redis.Redis.from_url(f"redis://127.0.0.1:6379/{LIVE_DB}")
    client.flushdb()
    yield client
    client.flushdb()


def migrated_process_env(tmp_path) -> dict[str, str]:
    """The environment of a process of the embedded default whose broker is a closed port, its
    SQLite database under tmp_path migrated."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="stepwise.settings",
        SECRET_KEY=secrets.token_urlsafe(20),
        STEPWISE_TESTING="1",
        STEPWISE_VAR_DIR=str(tmp_path),
        CELERY_TASK_ALWAYS_EAGER="0",
        STEPWISE_MODEL_TASKS_IN_THREAD="0",
        CELERY_BROKER_URL=DEAD_BROKER,
    )
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    return env


def test_work_queued_while_redis_is_down_is_saved_said_and_sent_when_it_is_back(tmp_path, live_db):
    env = migrated_process_env(tmp_path)

    down = _run(QUEUE_BOTH, env)
    # Answered, not a 500: the page redirects back, the API creates the run.
    assert (down["page"], down["api"]) == (302, 201)
    assert down["snapshot"][0] == "pending" and "could not be reached" in down["snapshot"][1]
    assert down["run"][0] == "queued" and "could not be reached" in down["run"][1]
    assert "could not be reached" in down["api_error"]

    # Labeling never needs the broker: claim, rate and finish all work with it down.
    labeled = _run(LABEL, env)
    assert labeled["claim"] == 302 and all(code < 400 for code in labeled["rated"])
    assert (labeled["status"], labeled["finish_reason"]) == ("completed", "found_error")

    still_down = _run(SWEEP, env)  # the sweeper tries, fails again, and keeps the mark
    assert still_down["tried"] == [1, 1]
    assert "could not be reached" in still_down["snapshot"][1]
    assert "could not be reached" in still_down["run"][1]

    env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:6379/{LIVE_DB}"
    back = _run(SWEEP, env)
    assert back["tried"] == [1, 1]
    assert back["snapshot"] == ["pending", ""] and back["run"] == ["queued", ""]
    # Both tasks now wait in the broker's queues for a worker.
    deadline = time.monotonic() + 60
    while live_db.llen("default") + live_db.llen("gpu") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_db.llen("default") == 1 and live_db.llen("gpu") == 1


QUEUE_LOOP = """
import json, django
django.setup()
from django.contrib.auth.models import Group, User
from django.test import Client
from modeling.models import GenerationRun, SamplingRun
from tests.factories import make_problem
make_problem()
user = User.objects.create_user("lea", password="x")
from tests.helpers.users import grant
grant(user, "lead")
client = Client()
client.force_login(user)
generation = client.post("/p/default/api/generations/", {"k": 3}, content_type="application/json")
sampling = client.post("/p/default/api/sampling-runs/", {"samples": 1}, content_type="application/json")
number = generation.json()["generation"]
page = client.get(f"/p/default/generations/{number}/").content.decode()
sampling_page = client.get("/p/default/pool/sampling/").content.decode()
second = client.post("/p/default/api/generations/", {"k": 3}, content_type="application/json")
retry = client.post(f"/p/default/api/generations/{number}/retry/")
run, sample = GenerationRun.objects.get(), SamplingRun.objects.get()
print(json.dumps({
    "codes": [generation.status_code, sampling.status_code, second.status_code, retry.status_code],
    "second": second.json().get("detail"), "retry": retry.json().get("error"),
    "page_says": "could not be reached" in page and 'id="retry"' in page,
    "sampling_page_says": "could not be reached" in sampling_page,
    "generation": [run.status, run.error, run.sent_at is None],
    "sampling": [sample.status, sample.error, sample.sent_at is None]}))
"""

SWEEP_LOOP = """
import json, django
django.setup()
from modeling.models import GenerationRun, SamplingRun
from modeling.tasks import resend_runs
tried = resend_runs()
run, sample = GenerationRun.objects.get(), SamplingRun.objects.get()
print(json.dumps({"tried": tried, "generation": [run.status, run.error, run.sent_at is None],
                  "sampling": [sample.status, sample.error, sample.sent_at is None]}))
"""


def test_generations_and_sampling_runs_queued_while_redis_is_down_are_sent_when_it_is_back(
    tmp_path, live_db
):
    env = migrated_process_env(tmp_path)

    down = _run(QUEUE_LOOP, env)
    # Both are saved and answered; the second generation waits for the first (409, saying why),
    # and retrying the stuck one tries the queue again at once rather than answering 409.
    assert down["codes"] == [201, 201, 409, 200]
    assert "could not be reached" in down["second"]
    assert "could not be reached" in down["retry"]
    assert down["page_says"] and down["sampling_page_says"]
    for row in ("generation", "sampling"):
        status, error, never_sent = down[row]
        assert status == "queued" and "could not be reached" in error and never_sent

    env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:6379/{LIVE_DB}"
    back = _run(SWEEP_LOOP, env)
    assert back["tried"] == 2
    assert back["generation"] == ["queued", "", False]
    assert back["sampling"] == ["queued", "", False]
    # The retrain step waits on the gpu queue, the sampling run on the generate queue.
    deadline = time.monotonic() + 60
    while live_db.llen("gpu") + live_db.llen("generate") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_db.llen("gpu") == 1 and live_db.llen("generate") == 1
