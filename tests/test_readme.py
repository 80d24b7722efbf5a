"""The README a new user follows: the demo's logins as setup_demo makes them, and commands that
run with the virtualenv `make` creates (no `python` on the PATH is assumed to have the app)."""

from __future__ import annotations

import re

from labeling.services.demo import DEMO_ACCOUNTS
from tests.helpers.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_lists_every_demo_login():
    for username, password, _ in DEMO_ACCOUNTS:
        assert f"`{username}` / `{password}`" in README, username


def test_the_readme_runs_manage_py_with_the_virtualenvs_python():
    bare = [
        line for line in README.splitlines() if re.search(r"(?<![\w/.])python manage\.py", line)
    ]
    assert bare == []
    assert ".venv/bin/python manage.py import_math" in README
