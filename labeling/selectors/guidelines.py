"""The labeling guidelines: the current text, and what each version changed (difflib)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeling.models import Guidelines
from labeling.models.projects import DEFAULT_SLUG

DEFAULT_GUIDELINES = Path(__file__).resolve().parent.parent / "guidelines_default.txt"


def _of(project: Any) -> Any:
    """A project's guidelines (the Default project's when none is named)."""
    if project is None:
        return Guidelines.objects.filter(project__slug=DEFAULT_SLUG)
    return Guidelines.objects.filter(project_id=project.pk)


def current_guidelines(project: Any = None) -> tuple[str, Guidelines | None]:
    """The project's current guidelines: its latest version, else the default text."""
    latest = _of(project).order_by("-version").first()
    if latest is not None:
        return latest.text, latest
    return DEFAULT_GUIDELINES.read_text(encoding="utf-8"), None


@dataclass(frozen=True)
class DiffLine:
    """One line of what changed between two texts: "add", "remove", "same" (context around a
    change) or "gap" (unchanged lines left out). Plain text: the template escapes it."""

    kind: str
    text: str


def text_diff(old: str, new: str, *, context: int = 2) -> list[DiffLine]:
    """Line by line, as `diff -u` shows it (difflib), without its headers."""
    kinds = {"+": "add", "-": "remove", " ": "same"}
    lines: list[DiffLine] = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=context):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            if lines:
                lines.append(DiffLine("gap", ""))
            continue
        lines.append(DiffLine(kinds[line[0]], line[1:]))
    return lines


@dataclass(frozen=True)
class GuidelinesChange:
    version: Guidelines
    previous_version: int | None  # None: the first version, compared with the default text
    diff: list[DiffLine]


def guidelines_change(version: int, project: Any = None) -> GuidelinesChange | None:
    """One version of the project's guidelines and what it changed from the one before."""
    rows = list(
        _of(project)
        .select_related("created_by")
        .filter(version__lte=version)
        .order_by("-version")[:2]
    )
    if not rows or rows[0].version != version:
        return None
    if len(rows) == 2:
        previous, previous_text = rows[1].version, rows[1].text
    else:
        previous, previous_text = None, DEFAULT_GUIDELINES.read_text(encoding="utf-8")
    return GuidelinesChange(rows[0], previous, text_diff(previous_text, rows[0].text))
