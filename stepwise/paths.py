"""Server paths as the API and its messages show them: under the root they lie in, named by the
root's setting (`MEDIA_ROOT/models/imported-…`), never the server's absolute path. The
operator's commands print paths whole; what a request gets back goes through here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

# Roots a stored path or a message may lie under, each named by its setting.
ROOT_SETTINGS = ("MEDIA_ROOT", "STEPWISE_MODELS_ROOT", "STEPWISE_DATA_ROOT", "VAR_DIR")


def _roots() -> list[tuple[str, str]]:
    """(absolute prefix, its setting's name), the longest first: a root inside another (MEDIA_ROOT
    in VAR_DIR by default) is named by the nearer one. A root behind a link is found both ways."""
    found: dict[str, str] = {}
    for name in ROOT_SETTINGS:
        root = Path(getattr(settings, name))
        shown = "STEPWISE_VAR_DIR" if name == "VAR_DIR" else name
        for spelling in {str(root), str(root.resolve())}:
            found.setdefault(spelling.rstrip("/") or "/", shown)
    return sorted(found.items(), key=lambda item: len(item[0]), reverse=True)


def shown_path(path: str | Path) -> str:
    """A server path as a request may see it: under its root (`STEPWISE_MODELS_ROOT/my-prm`), else
    its last part; a name that is no absolute path (a hub name, "upload x.zip") as it is."""
    text = str(path)
    if not Path(text).is_absolute():
        return text
    for prefix, name in _roots():
        if text == prefix or text.startswith(prefix + "/"):
            return name + text[len(prefix) :]
    return Path(text).name


def without_roots(text: str) -> str:
    """A message with every root's absolute path replaced by its setting's name."""
    for prefix, name in _roots():
        if prefix != "/":
            text = text.replace(prefix, name)
    return text


def shown_paths_in(value: Any) -> Any:
    """`without_roots` on every string of a JSON value (a run's config, metrics, error)."""
    if isinstance(value, str):
        return without_roots(value)
    if isinstance(value, dict):
        return {key: shown_paths_in(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shown_paths_in(item) for item in value]
    return value
