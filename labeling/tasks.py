"""Celery tasks: thin wrappers that take ids and call one service.

Progress and results go to rows that pages poll, not to the result backend.
"""

from celery import shared_task

from labeling.services import queue, snapshots


def _expire_leases() -> int:
    return queue.expire_stale_leases()


EXPIRE_LIMITS = {"acks_late": True, "time_limit": 120, "soft_time_limit": 100}
# Return expired claims to the pool (periodic, every minute via beat). Safe to run twice.
expire_leases = shared_task(name="labeling.tasks.expire_leases", **EXPIRE_LIMITS)(_expire_leases)
# Its name before every task was named by its module path, kept one release so that a beat
# message queued in Redis during an upgrade is still taken.
expire_leases_old_name = shared_task(name="labeling.expire_leases", **EXPIRE_LIMITS)(_expire_leases)


@shared_task(acks_late=True, time_limit=2 * 3600, soft_time_limit=2 * 3600 - 60)
def run_snapshot(snapshot_id: int) -> str:
    """Write a snapshot's file; a redelivery finds it claimed and does nothing."""
    return snapshots.snapshot_run(snapshot_id=snapshot_id).status


@shared_task(acks_late=True, time_limit=120, soft_time_limit=100)
def resend_snapshots() -> int:
    """Periodic (beat): send again snapshots whose task never reached a worker or died there."""
    return snapshots.snapshots_resend()
