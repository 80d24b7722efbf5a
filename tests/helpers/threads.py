"""The embedded default's background threads (`stepwise.celery.start_on_commit` with
STEPWISE_MODEL_TASKS_IN_THREAD), recorded so that a test waits for them, not for time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# Every thread started for background work and not yet waited for: tests/conftest.py installs
# the recorder for the whole session and joins what a test started once its body has run.
STARTED: list[threading.Thread] = []


def recording(start: Callable[[str, Callable[[], Any]], threading.Thread]):
    """`stepwise.celery.run_in_thread` that also records each thread in STARTED."""

    def recorded(name: str, work: Callable[[], Any]) -> threading.Thread:
        thread = start(name, work)
        STARTED.append(thread)
        return thread

    return recorded


def wait_for_started(timeout: float) -> list[str]:
    """Join every recorded thread (and those they start meanwhile); the names still running."""
    still_running = []
    while STARTED:
        thread = STARTED.pop(0)
        thread.join(timeout)
        if thread.is_alive():
            still_running.append(thread.name)
    return still_running


def background_threads() -> list[threading.Thread]:
    """The threads this test has started for background work; the list fills as they start."""
    return STARTED


def join_all(threads: list[threading.Thread], timeout: float = 300) -> None:
    """Wait for every thread, and for those a thread started while it ran (a generation's next
    step): a thread records its successor before it ends."""
    assert threads, "no background thread was started"
    joined = 0
    while joined < len(threads):
        threads[joined].join(timeout=timeout)
        assert not threads[joined].is_alive(), f"{threads[joined].name} still runs"
        joined += 1
