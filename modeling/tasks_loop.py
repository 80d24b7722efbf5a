"""Celery tasks of the active-learning loop: thin wrappers over `modeling.active_learning`.

Each task runs one generation step and queues the next after commit; a redelivered task finds
the step already claimed or done and does nothing. Training and scoring go to the `gpu` queue.
"""

from __future__ import annotations

from celery import shared_task

from modeling import active_learning

STEP_LIMIT_S = 6 * 3600


@shared_task(
    queue="gpu", acks_late=True, time_limit=STEP_LIMIT_S, soft_time_limit=STEP_LIMIT_S - 60
)
def gpu_generation_step(run_id: int, step: str) -> None:
    """retrain / score: the steps that need the model."""
    active_learning.advance(run_id, step)


@shared_task(acks_late=True, time_limit=600, soft_time_limit=540)
def generation_step(run_id: int, step: str) -> None:
    """select / enqueue: database work only."""
    active_learning.advance(run_id, step)


@shared_task(acks_late=True, time_limit=120)
def check_generation_progress() -> int | None:
    """Periodic (beat): start the next generation once the last is labeled to the set fraction."""
    run = active_learning.maybe_start_next_generation()
    return run.pk if run else None


@shared_task(acks_late=True, time_limit=120)
def fail_stale_generations() -> int:
    """Periodic (beat): a generation whose worker died is marked failed, to be retried."""
    return active_learning.fail_stale_generations()
