"""The SQLite pass runs what tests/conftest.py names: a name that no longer exists (a file moved,
a test renamed) would drop its test from that pass without a word, so every one must resolve."""

from __future__ import annotations

import ast

from tests.conftest import SQLITE_FILES, SQLITE_TESTS
from tests.helpers.paths import ROOT


def test_every_test_file_the_sqlite_pass_names_exists():
    missing = sorted(str(path.relative_to(ROOT)) for path in SQLITE_FILES if not path.is_file())
    assert missing == []


def test_every_test_the_sqlite_pass_names_is_defined_in_its_file():
    missing = []
    for node_id in sorted(SQLITE_TESTS):
        file, name = node_id.split("::")
        path = ROOT / file
        defined = path.is_file() and any(
            isinstance(node, ast.FunctionDef) and node.name == name
            for node in ast.parse(path.read_text()).body
        )
        if not defined:
            missing.append(node_id)
    assert missing == []
