"""The model stack in a process and who loaded it. Installed first thing in a fresh process (the
web side's page walk, the default worker), it names for each heavy package the chain of our
own lines that imported it, so a failing test says which import to move."""

from __future__ import annotations

import importlib.abc
import sys
import traceback
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from tests.helpers.paths import ROOT

# What only a model needs: the web side and the default worker never load these.
HEAVY = ("torch", "transformers", "peft", "sklearn")


class _FirstImports(importlib.abc.MetaPathFinder):
    """Sees every import before the real finders do, and remembers the first of each heavy
    package: the stack's frames in this checkout (not the virtualenv's), innermost first."""

    def __init__(self) -> None:
        self.chains: dict[str, list[str]] = {}

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        package = name.partition(".")[0]
        if package in HEAVY and package not in self.chains:
            frames = traceback.extract_stack()[:-1]
            self.chains[package] = [
                f"{frame.filename.removeprefix(f'{ROOT}/')}:{frame.lineno}"
                for frame in reversed(frames)
                if frame.filename.startswith(str(ROOT)) and "-packages/" not in frame.filename
            ]
        return None  # the real finders import it


_WATCH = _FirstImports()


def watch() -> None:
    """Start recording; call before anything of the project is imported."""
    if _WATCH not in sys.meta_path:
        sys.meta_path.insert(0, _WATCH)


def heavy_loaded() -> dict[str, list[str]]:
    """Each heavy package in sys.modules, with the chain that imported it (empty when it was
    loaded before `watch`)."""
    return {name: _WATCH.chains.get(name, []) for name in HEAVY if name in sys.modules}


def describe(loaded: dict[str, list[str]]) -> str:
    """A failure message: each package and the lines that imported it, innermost first."""
    return "\n".join(
        f"{name} imported by {' <- '.join(chain) or 'nothing of ours'}"
        for name, chain in loaded.items()
    )


def celery_reporting(report_path: str, argv: list[str]) -> None:
    """`celery ARGV` with the model stack watched from the start; once a worker is ready (its
    tasks imported, Django's checks run, the pool started) the loaded packages go to
    `report_path` as JSON."""
    import json
    from pathlib import Path

    watch()
    from celery.signals import worker_ready

    def report(**_: object) -> None:
        partial = Path(f"{report_path}.partial")  # whole once it appears under its name
        partial.write_text(json.dumps(heavy_loaded()))
        partial.rename(report_path)

    worker_ready.connect(report, weak=False)
    from celery.__main__ import main

    sys.argv = ["celery", *argv]
    main()


if __name__ == "__main__":
    celery_reporting(sys.argv[1], sys.argv[2:])
