"""A database that cannot be reached (restarting, failing over, a missing SQLite file): a page
answers 503 with Retry-After and a sentence, the API the same as JSON, never a 500 traceback.
Run in a subprocess whose settings point at a database that is not there, for both engines."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, django
django.setup()
from django.test import Client
client = Client(raise_request_exception=False)
page = client.post("/accounts/login/", {"username": "kim", "password": "kim-pw"})
api = client.get("/p/default/api/problems/", HTTP_AUTHORIZATION="Token 0123456789abcdef")
print(json.dumps({
    "page": [page.status_code, page.get("Retry-After"), page.content.decode()],
    "api": [api.status_code, api.get("Retry-After"), api.json()],
}))
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


@pytest.mark.parametrize(
    "database_url",
    [
        pytest.param(lambda: f"postgres://postgres@127.0.0.1:{_closed_port()}/stepwise", id="pg"),
        pytest.param(lambda: "sqlite:////nonexistent-folder/stepwise.sqlite3", id="sqlite"),
    ],
)
def test_an_unreachable_database_is_a_503_with_retry_after_not_a_500(tmp_path, database_url):
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="stepwise.settings",
        SECRET_KEY="x",
        STEPWISE_VAR_DIR=str(tmp_path),
        STEPWISE_TESTING="1",
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(result.stdout.strip().splitlines()[-1])

    status, retry_after, html = answers["page"]
    assert (status, retry_after) == (503, "5")
    assert "The database cannot be reached right now, so nothing was saved." in html
    assert "Traceback" not in html and "OperationalError" not in html

    status, retry_after, body = answers["api"]
    assert (status, retry_after) == (503, "5")
    assert body == {
        "detail": "The database cannot be reached right now, so nothing was saved. "
        "Try again in a few seconds."
    }
