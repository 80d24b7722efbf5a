"""The README's first command, as a person uses it: `make demo`, then every demo account at work.

The demo is set up exactly as the Makefile does (DATABASE_URL unset: a fresh SQLite file,
`migrate`, `setup_demo`, the web server with tasks in-process and training in a thread), in
processes of its own, and driven in Debian's chromium with the keyboard. Nothing here reads
pytest's test database: what the test checks is what the people see and download.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers.paths import ROOT
from tests.helpers.processes import stop_process

pytestmark = [pytest.mark.browser, pytest.mark.django_db]

# The demo's own variables: whatever the test run set for itself must not reach it.
TEST_ONLY_VARIABLES = (
    "DATABASE_URL",
    "STEPWISE_TESTING",
    "STEPWISE_REQUIRE_ALL",
    "CELERY_BROKER_URL",
    "CELERY_TASK_ALWAYS_EAGER",
    "STEPWISE_MODEL_TASKS_IN_THREAD",
    "STEPWISE_TRAIN_IN_THREAD",
    "MEDIA_ROOT",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "SECRET_KEY",  # the demo makes its own, under its var/ folder
)


def demo_env(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TEST_ONLY_VARIABLES}
    env.update(STEPWISE_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the demo server exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/accounts/login/", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)  # a poll interval, not a wait for time: the loop ends on the condition
    pytest.fail(f"the demo server did not answer:\n{log.read_text()[-3000:]}")


@pytest.fixture
def demo_server(tmp_path):
    """`make demo` in a fresh folder: migrate, setup_demo, then the server on a free port."""
    if connection.vendor != "sqlite":
        pytest.skip("the demo is the embedded default: this test runs in the SQLite pass")
    env = demo_env(tmp_path / "var")
    manage = [sys.executable, "manage.py"]
    for command in (["migrate", "--noinput"], ["setup_demo"]):
        done = subprocess.run(manage + command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    assert (tmp_path / "var" / "stepwise.sqlite3").exists()  # the embedded default, nothing else
    port, log = free_port(), tmp_path / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            manage + ["runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url, server, log)
        yield url
    finally:
        stop_process(server)
        assert "Traceback" not in log.read_text(), log.read_text()[-5000:]


def sign_in(page, url: str, username: str, password: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/accounts/login/" not in u)


def step_total(page) -> int:
    """The panel's "k / n steps rated"."""
    return int(page.inner_text("#labeling .progress").split("/")[1].split()[0])


def rate_current(page, key: str) -> None:
    """Press a rating key and wait until the panel moved on (next step, or the end)."""
    step = int(page.get_attribute("#labeling .step.current", "data-step"))
    page.keyboard.press(key)
    page.wait_for_function(
        f"""() => document.querySelector('#labeling .done')
                  || document.querySelector('#labeling .step.current[data-step="{step + 1}"]')"""
    )


def label_one(page, ending: str) -> None:
    """Label the solution on screen to its end: "solution" (+1 to the last step),
    "found_error" (+1 then -1) or "give_up" (+1 then G, confirmed)."""
    page.wait_for_selector("#labeling .step.current")
    page.wait_for_selector("html[data-keys=ready]", state="attached")  # a new page: keys act
    page.wait_for_selector(".problem .katex")  # the problem's math rendered, offline
    total = step_total(page)
    if ending == "solution":
        for _ in range(total):
            rate_current(page, "1")
    else:
        rate_current(page, "1")
        if ending == "found_error":
            rate_current(page, "-")
        else:
            page.once("dialog", lambda dialog: dialog.accept())
            page.keyboard.press("g")
    page.wait_for_selector("#labeling .done")
    assert page.get_attribute("#labeling", "data-status") == "completed"


def test_each_demo_account_does_its_job_end_to_end(demo_server, page, artifacts_dir, tmp_path):
    url = demo_server
    shots = artifacts_dir / "demo"
    shots.mkdir(exist_ok=True)

    # The labeler: three solutions to their end, keyboard only.
    sign_in(page, url, "labeler", "labeler-demo")
    page.goto(f"{url}/p/default/label/")
    page.wait_for_selector("#start")
    page.keyboard.press("Enter")
    endings = ["solution", "found_error", "give_up"]
    for number, ending in enumerate(endings):
        label_one(page, ending)
        page.screenshot(path=str(shots / f"1-labeler-{number + 1}-{ending}.png"), full_page=True)
        page.keyboard.press("Enter")  # next solution
        page.wait_for_selector("#labeling .step.current")
    assert "Not saved" not in page.inner_text("body")

    # The lead: the batch dashboard counts the labeler's three labelings.
    page.context.clear_cookies()
    sign_in(page, url, "lead", "lead-demo")
    page.goto(f"{url}/p/default/label/lead/")
    page.click("text=Demo generation 1")
    page.wait_for_selector("#labeler-table")
    name_cell = page.locator("td:first-child", has_text=re.compile(r"^\s*labeler\s*$"))
    row = page.locator("#labeler-table tbody tr").filter(has=name_cell)
    page.screenshot(path=str(shots / "2-lead-dashboard.png"), full_page=True)
    assert row.locator("td").nth(2).inner_text().strip() == "3"  # Labelings

    # The researcher: a PRM800K export holding those three lines, then a small training run.
    page.context.clear_cookies()
    sign_in(page, url, "researcher", "researcher-demo")
    page.goto(f"{url}/p/default/research/")
    page.fill("input[name=labeler]", "labeler")
    with page.expect_download() as download:
        page.click("#download-now")
    export = tmp_path / "export.jsonl"
    download.value.save_as(export)
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert sorted(line["label"]["finish_reason"] for line in lines) == sorted(endings)
    by_reason = {line["label"]["finish_reason"]: line for line in lines}
    assert all(s["completions"][0]["rating"] == 1 for s in by_reason["solution"]["label"]["steps"])
    assert [s["completions"][0]["rating"] for s in by_reason["found_error"]["label"]["steps"]] == [
        1,
        -1,
    ]
    assert [s["completions"][0]["rating"] for s in by_reason["give_up"]["label"]["steps"]] == [1]
    page.screenshot(path=str(shots / "3-research-export.png"), full_page=True)

    page.goto(f"{url}/p/default/modeling/runs/")
    page.fill("input[name=name]", "demo run")
    page.fill("input[name=max_steps]", "3")
    page.fill("input[name=backbone_layers]", "2")
    page.fill("input[name=max_length]", "512")
    page.click("#start-run")
    page.wait_for_url("**/modeling/runs/*/")
    page.wait_for_function(
        "() => ['succeeded', 'failed', 'cancelled'].includes("
        "document.querySelector('#run-status').textContent.trim())",
        timeout=600_000,  # the first run converts the SmolLM2 GGUF and caches features on the CPU
    )
    page.screenshot(path=str(shots / "4-research-run.png"), full_page=True)
    assert page.inner_text("#run-status").strip() == "succeeded", page.inner_text("#progress")


STYLED = """() => [...document.styleSheets].some(
  (sheet) => sheet.href && sheet.href.endsWith("/static/css/app.css") && sheet.cssRules.length)"""


def test_an_unknown_address_is_the_apps_404_page_signed_in_or_not(
    demo_server, page, artifacts_dir, tmp_path
):
    """The demo runs with DEBUG off: an address nobody routes is the app's styled 404 page
    (its CSS served by WhiteNoise), never Django's technical page listing every route."""
    url = demo_server
    shots = artifacts_dir / "demo"
    shots.mkdir(exist_ok=True)
    for who in ("nobody", "labeler"):
        if who == "labeler":
            sign_in(page, url, "labeler", "labeler-demo")
        response = page.goto(f"{url}/no/such/page/")
        assert response is not None and response.status == 404
        html = page.content()
        assert "Django tried these URL patterns" not in html and "DEBUG = True" not in html
        assert page.inner_text("#error-page h1") == "Not found"
        assert "Nothing is at /no/such/page/" in page.inner_text("#error-page")
        assert page.evaluate(STYLED), "app.css did not load"
        page.screenshot(path=str(shots / f"0-not-found-{who}.png"), full_page=True)
    # The key it signs sessions with is its own, made for this folder and readable by its owner.
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(key_file.read_text()) >= 50
