"""The web side and the default worker never load the model stack (torch, transformers, peft,
scikit-learn): only the gpu worker and the commands that train or score do. Each is checked in
a fresh process started as it runs in production, since this test session has long imported
torch itself; a failure names the chain of imports that pulled a package in."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import pytest
from axes.models import AccessFailureLog
from django.db import connection
from django.urls import reverse

from labeling import models as lm
from labeling.services import people
from tests.factories import make_one_of_each, make_solution
from tests.helpers.heavy_imports import describe
from tests.helpers.paths import ROOT
from tests.helpers.processes import stop_process
from tests.helpers.users import make_user
from tests.test_deployment import compose

WALK_LIMIT_S = 300  # a few hundred requests on a loaded machine
WORKER_START_LIMIT_S = 120
# Routes whose arguments no row fills: Django's admin's link to a row's page on the site (no
# model has one) and its catch-all, which redirects.
UNFILLED = {"admin:view_on_site", "admin/(?P<url>.*)$"}


def fresh_environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.django_db(transaction=True)  # the walk's process reads the rows from the database
def test_every_page_and_route_answers_in_a_web_process_that_never_loads_torch(client, tmp_path):
    admin = make_user("ada", "admin")
    admin.is_staff = admin.is_superuser = True
    admin.save(update_fields=["is_staff", "is_superuser"])
    rows = make_one_of_each(lead=admin)
    # A generation's number is per project: the other project's lead starts its own generation
    # 1 in the walk (a POST to its list), so the Default project's row is numbered otherwise.
    rows.generation.generation = 9
    rows.generation.save(update_fields=["generation"])
    users = {
        "admin": admin,
        "lead": make_user("lea", "lead", "labeler"),
        "researcher": make_user("rhea", "researcher"),
        "labeler": rows.labeler,
    }
    open_labeling = lm.Labeling.objects.create(
        solution=make_solution(rows.batch), labeler=rows.labeler
    )
    link = people.labeler_add(username="nia", method="link")
    # Members of another project only, one per role: every route of the Default project is
    # sent by each of them too (GET and POST), under its own link and under theirs.
    other = lm.Project.objects.create(name="Other", slug="other")
    outsiders = {
        role: make_user(f"other-{role}", role, project=other)
        for role in ("labeler", "lead", "researcher")
    }
    # django-axes' rows, for its admin pages: a sign-in (logged), a failed one (an attempt) and
    # a failure log row (which the settings do not keep).
    client.post(reverse("login"), {"username": "lea", "password": "lea-pw"})
    client.post(reverse("login"), {"username": "lea", "password": "wrong"})
    AccessFailureLog.objects.create(
        username="lea", ip_address="127.0.0.1", user_agent="", http_accept="", path_info="/"
    )
    plan = {
        "database": connection.settings_dict["NAME"],
        "users": {role: user.pk for role, user in users.items()},
        "outsiders": {role: user.pk for role, user in outsiders.items()},
        "other_slug": other.slug,
        "kwargs": {
            "labeling_id": open_labeling.pk,
            "version": rows.guidelines.version,
            "batch_id": rows.batch.pk,
            "user_id": rows.labeler.pk,
            "solution_id": rows.solution.pk,
            "snapshot_id": rows.snapshot.pk,
            "digest": rows.token.digest,
            "uidb64": link.uidb64,
            "token": link.token,
            "generation": rows.generation.generation,
            "run_id": rows.run.pk,
            "version_id": rows.model.pk,
            "comparison_id": rows.comparison.pk,
            "app_label": "labeling",
        },
        "route_kwargs": {
            "labeling:labeling_history": {"labeling_id": rows.labeling.pk},
            "into_project": {"rest": "label/"},  # an old link, without its project
            "api_into_project": {"rest": "api/batches/"},  # an old API path
            "admin:auth_user_password_change": {"id": admin.pk},
            "modeling_loop:sampling_resume": {"run_id": rows.sampling_run.pk},
            "modeling_loop:sampling_cancel": {"run_id": rows.sampling_run.pk},
            "modeling_loop:sampling_compare": {"run_id": rows.sampling_run.pk},
            "modeling_prelabel:cancel": {"run_id": rows.prelabel_run.pk},
            "modeling_prelabel:resume": {"run_id": rows.prelabel_run.pk},
            "modeling_runs:evaluation-set-api-detail": {"version": rows.evaluation_set.version},
        },
        "api_pks": {
            "problem": rows.solution.problem_id,
            "batch": rows.batch.pk,
            "solution": rows.solution.pk,
            "labeling": rows.labeling.pk,
            "snapshot": rows.snapshot.pk,
            "sampling-run-api": rows.sampling_run.pk,
            "run-api": rows.run.pk,
            "model-api": rows.model.pk,
            "best-of-n-api": rows.comparison.pk,
            "prelabel-api": rows.prelabel_run.pk,
        },
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    walk = subprocess.run(
        [sys.executable, "-m", "tests.helpers.page_walk", "plan.json", "report.json"],
        cwd=tmp_path,
        # An outsider's POST may start model work in their own project (a generation, a run):
        # its task goes to the broker, where no worker takes it, never into this process.
        env={
            **fresh_environment(),
            "STEPWISE_MODEL_TASKS_IN_THREAD": "0",
            "CELERY_TASK_ALWAYS_EAGER": "0",
        },
        capture_output=True,
        text=True,
        timeout=WALK_LIMIT_S,
    )
    assert walk.returncode == 0, walk.stderr[-12000:]
    report = json.loads((tmp_path / "report.json").read_text())

    # One exception: the lead's batch page computes each judge's Cohen's kappa with
    # scikit-learn (issue 46 asks for the library's, not a formula of ours), loaded there only.
    heavy = {
        name: chain
        for name, chain in report["heavy"].items()
        if not (name == "sklearn" and any("prelabel_agreement.py" in line for line in chain))
    }
    assert heavy == {}, describe(heavy)
    answers = report["answers"]
    assert set(report["unfilled"]) == UNFILLED
    failed = {route: by_role for route, by_role in answers.items() if max(by_role.values()) >= 500}
    assert failed == {}
    # The rows filled every route: some role found each (a page, or a POST-only action answering
    # 405), so its view ran rather than a 404 for a missing row.
    assert {route for route, by_role in answers.items() if set(by_role.values()) == {404}} == set()
    rendered = {route for route, by_role in answers.items() if 200 in by_role.values()}
    assert {"home", "labeling:labeling", "modeling_runs:detail", "modeling_review:solution"} <= (
        rendered
    )

    # Projects: a member of the other project only, in each role, gets 403 or 404 for every
    # route of this one, read or write (405: a GET of a POST-only route, refused before any
    # view), and under their own project's link with this one's ids 403 or 404 wherever the
    # route names a row; nothing was written.
    outsider = report["outsider_answers"]
    assert len(outsider) > 4 * 100  # every route, both methods, both links
    crossed = {
        key: by_role
        for key, by_role in outsider.items()
        if (key.split()[1] == "own" or key.split()[2] == "row")
        and not set(by_role.values()) <= {403, 404, 405}
    }
    assert crossed == {}
    # Most say the project's pages do not exist for them at all.
    own = [
        answer for key, by_role in outsider.items() if " own " in key for answer in by_role.values()
    ]
    assert own.count(404) > len(own) / 2
    assert report["outsider_wrote"] == {"own": [], "other": []}


@pytest.mark.redis
def test_the_default_worker_starts_without_loading_torch(tmp_path):
    """docker/compose.yaml's default worker (the `default` and `generate` queues), up to ready:
    its tasks imported and Django's checks run (which import the URLconf)."""
    command = shlex.split(compose()["services"]["worker"]["command"])
    assert command[:2] == ["celery", "-A"] and "default,generate" in command
    report = tmp_path / "report.json"
    log_path = tmp_path / "worker.log"
    options = ["--concurrency", "1", "--without-heartbeat", "--without-gossip", "--without-mingle"]
    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.heavy_imports", str(report)]
            + [*command[1:], *options],
            cwd=ROOT,
            env={**fresh_environment(), "CELERY_TASK_ALWAYS_EAGER": "0"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + WORKER_START_LIMIT_S
        while not report.exists():
            assert worker.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "not ready:\n" + log_path.read_text()
            time.sleep(0.2)
    finally:
        stop_process(worker)
    loaded = json.loads(report.read_text())
    assert loaded == {}, describe(loaded)
    assert "modeling.tasks.generate_proposal" in log_path.read_text()  # its tasks were loaded
