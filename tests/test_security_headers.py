"""What a deployment tells browsers: a CSP the pages pass, Permissions-Policy, HTTPS settings
that pass `check --deploy`, and no Server-Timing in production."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from tests.factories import make_batch, make_solution
from tests.helpers.users import make_user
from tests.labeling.helpers import next_labeling

ROOT = Path(__file__).resolve().parent.parent


def test_pages_carry_a_same_origin_csp_and_a_permissions_policy(client, labeler):
    client.force_login(labeler)
    response = client.get(reverse("labeling:queue"))
    csp = response["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    assert "camera=()" in response["Permissions-Policy"]


def _production(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPWISE_", "DEBUG"))}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the browser tests set it
    env.update(
        # Production is PostgreSQL (the embedded default serves loopback over plain HTTP). Nothing
        # here connects to it: the probe's pages read no row.
        DATABASE_URL="postgres://stepwise@127.0.0.1:1/stepwise",
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="stepwise.example.org",
        STEPWISE_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="stepwise.settings",
        **extra,
    )
    return env


def test_production_settings_pass_check_deploy_without_a_warning(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=_production(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


PROBE = """
import json, django
django.setup()
from django.test import Client
response = Client(HTTP_HOST="stepwise.example.org").get("/accounts/login/", secure=True,
    HTTP_X_FORWARDED_PROTO="https")
plain = Client(HTTP_HOST="stepwise.example.org").get("/accounts/login/")
print(json.dumps({"headers": dict(response.headers), "status": response.status_code,
                  "plain_status": plain.status_code, "plain_location": plain.get("Location")}))
"""


@pytest.mark.parametrize("proxy", ["0", "1"])
def test_production_answers_over_https_with_hsts_and_without_server_timing(tmp_path, proxy):
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=_production(tmp_path, STEPWISE_BEHIND_TLS_PROXY=proxy),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    headers = seen["headers"]
    assert seen["status"] == 200
    assert "Server-Timing" not in headers
    assert headers["Strict-Transport-Security"].startswith("max-age=31536000")
    assert "Content-Security-Policy" in headers
    # Plain HTTP is sent to HTTPS, not served.
    assert seen["plain_status"] == 301
    assert seen["plain_location"].startswith("https://stepwise.example.org/")


REPORT_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI + " " + e.sourceFile));
"""


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_every_role_page_runs_under_the_csp_without_a_violation(strict_page, live_server):
    page = strict_page
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    user = make_user("ada", "labeler", "lead", "researcher")
    batch = make_batch(gold_rate=0)
    make_solution(batch, steps=["We have $\\frac{1}{2} + \\frac{1}{2} = 1$.", "# Answer\n\n1"])
    labeling = next_labeling(user)
    page.add_init_script(REPORT_VIOLATIONS)
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "ada-pw")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    paths = [
        reverse("labeling:queue"),
        reverse("labeling:labeling", args=[labeling.pk]),
        reverse("labeling:guidelines"),
        reverse("labeling:lead_home"),
        reverse("labeling:batch_dashboard", args=[batch.pk]),
        reverse("labeling:labelers"),
        "/p/default/research/",
        "/p/default/modeling/runs/",
        "/p/default/generations/",
        reverse("api-docs"),
    ]
    for path in paths:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        assert page.evaluate("window.__csp") == [], path
    # Math rendered (KaTeX ran under the policy) on the labeling page.
    page.goto(f"{live_server.url}{reverse('labeling:labeling', args=[labeling.pk])}")
    page.locator(".katex").first.wait_for()
    assert page.evaluate("window.__csp") == []
    # Swagger UI started from its script file.
    page.goto(f"{live_server.url}{reverse('api-docs')}")
    page.locator(".swagger-ui .info").first.wait_for()
    assert page.evaluate("window.__csp") == []
