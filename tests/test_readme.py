"""The README a new user follows, and the docs it sends them to: the two commands first, the
demo's logins as setup_demo makes them, commands that run with the virtualenv `make` creates
(no `python` on the PATH is assumed to have the app), links that lead somewhere, and a settings
reference that lists what stepwise/settings.py reads, with its defaults."""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

from labeling.services.demo import DEMO_ACCOUNTS
from tests.helpers.paths import ROOT

README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
SETTINGS = ROOT / "stepwise" / "settings.py"
DEPLOYMENT = ROOT / "docs" / "deployment.md"
ENV_READERS = {"env_str", "env_bool", "env_int", "env_float", "env_list"}
BARE_MANAGE_PY = re.compile(r"(?<![\w/.])python manage\.py")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a shell block is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's ids for a Markdown file's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading numbered."""
    ids: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            ids.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return ids


def test_the_readme_is_short_and_starts_with_the_two_commands():
    assert len(README.splitlines()) <= 300
    first_block = re.search(r"```\w*\n(.*?)```", README, re.DOTALL)
    assert first_block, "README shows no command"
    commands = [line.split("#")[0].strip() for line in first_block[1].splitlines()]
    assert [command for command in commands if command][:2] == ["make demo", "make test"]


def test_the_readme_lists_every_demo_login():
    for username, password, _ in DEMO_ACCOUNTS:
        assert f"`{username}` / `{password}`" in README, username


def test_the_readme_and_docs_run_manage_py_with_the_virtualenvs_python():
    bare = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in [README_PATH, *DOCS]
        for line in path.read_text(encoding="utf-8").splitlines()
        if BARE_MANAGE_PY.search(line)
    ]
    assert bare == []
    assert ".venv/bin/python manage.py import_math" in README


def test_every_relative_link_in_the_readme_and_docs_leads_to_a_file_and_heading_that_exist():
    broken = []
    for path in [README_PATH, *DOCS]:
        for line in prose_lines(path.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                file_part, _, fragment = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                if not linked.exists():
                    broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
                elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                    broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def env_reads() -> dict[str, list[ast.expr | None]]:
    """Every variable stepwise/settings.py reads through its typed helpers, with the default
    each read gives (None where the call gives none)."""
    reads: dict[str, list[ast.expr | None]] = {}
    for node in ast.walk(ast.parse(SETTINGS.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ENV_READERS
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            default = node.args[1] if len(node.args) > 1 else None
            default = next((k.value for k in node.keywords if k.arg == "default"), default)
            reads.setdefault(node.args[0].value, []).append(default)
    return reads


def documented_settings() -> dict[str, str]:
    """The deployment doc's settings tables: each variable named in a row's first cell, with
    the row's default cell."""
    text = DEPLOYMENT.read_text(encoding="utf-8")
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


ARITHMETIC = {ast.Add: operator.add, ast.Mult: operator.mul, ast.Pow: operator.pow}


def literal(node: ast.expr | None) -> object:
    """A default written as a constant or constant arithmetic (`6 * 3600`); else None."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC:
        left, right = literal(node.left), literal(node.right)
        if isinstance(left, int | float) and isinstance(right, int | float):
            return ARITHMETIC[type(node.op)](left, right)
    return None


UNITS = {"GiB": 2**30, "MiB": 2**20, "B": 10**9}


def says_default(cell: str, default: object) -> bool:
    if isinstance(default, bool):
        return cell.startswith("on" if default else "off")
    if isinstance(default, int | float):
        number = re.match(r"([\d,]*\d(?:\.\d+)?)(?:\s*(GiB|MiB|B)\b)?", cell)
        return bool(number) and float(number[1].replace(",", "")) * UNITS.get(
            number[2] or "", 1
        ) == float(default)
    if default == "":
        return cell.startswith(("unset", "empty"))
    return str(default) in cell


def test_the_settings_reference_lists_every_variable_settings_reads_with_its_default():
    reads, documented = env_reads(), documented_settings()
    assert sorted(set(reads) - set(documented)) == [], "read by settings.py, not in the table"
    assert sorted(set(documented) - set(reads)) == [], "in the table, not read by settings.py"
    wrong = []
    for name, defaults in reads.items():
        values = {repr(literal(default)) for default in defaults}
        value = literal(defaults[0])
        # A default computed from other settings (DEBUG, the embedded default, VAR_DIR) is
        # described in words; only a literal one, the same in every read, is compared.
        if len(values) == 1 and value is not None and not says_default(documented[name], value):
            wrong.append(f"{name}: settings.py {value!r}, docs {documented[name]!r}")
    assert wrong == []
