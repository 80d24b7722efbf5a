"""The embedded default's background threads (`stepwise.celery.start_on_commit` with
STEPWISE_MODEL_TASKS_IN_THREAD), recorded so that a test waits for them, not for time."""

from __future__ import annotations

import threading

import pytest

from stepwise import celery


def background_threads(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The list fills with every thread started for background work from now on."""
    threads: list[threading.Thread] = []
    start = celery.run_in_thread

    def recorded(name: str, work) -> threading.Thread:
        thread = start(name, work)
        threads.append(thread)
        return thread

    monkeypatch.setattr(celery, "run_in_thread", recorded)
    return threads


def join_all(threads: list[threading.Thread], timeout: float = 300) -> None:
    """Wait for every thread, and for those a thread started while it ran (a generation's next
    step): a thread records its successor before it ends."""
    assert threads, "no background thread was started"
    joined = 0
    while joined < len(threads):
        threads[joined].join(timeout=timeout)
        assert not threads[joined].is_alive(), f"{threads[joined].name} still runs"
        joined += 1
