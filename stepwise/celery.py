"""The Celery app. Queues: `default` for light work, `gpu` for training and scoring."""

import logging
import os
from collections.abc import Callable
from typing import Any

from celery import Celery
from django.db import transaction
from django.utils.module_loading import import_string
from kombu.exceptions import OperationalError as BrokerUnreachable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")

app = Celery("stepwise")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)

# A broker that is down answers the request within about a second (Celery's default keeps the
# user waiting through minutes of reconnects); the row stays queued and a sweeper sends it.
SEND_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.3,
    "interval_max": 0.3,
}


# What a queued row (snapshot, training run) says while its task could not reach the broker;
# each app's beat sweeper sends the rows that carry it again.
UNSENT = (
    "Queued, but the task queue (Redis) could not be reached: it is sent again when it is back."
)


def enqueue_on_commit(
    task_path: str,
    *args: Any,
    on_unreachable: Callable[[], None] | None = None,
    **options: Any,
) -> None:
    """Send the task `task_path` (dotted path, e.g. "labeling.tasks.run_snapshot") once the
    current transaction commits. Services call this instead of importing their app's tasks
    module, so tasks import services and never the reverse; the task is resolved only when
    it is sent. `options` go to `apply_async` (queue, countdown).

    When the broker cannot be reached the row is already committed: nothing is raised (the
    request must not answer 500 for saved work), and `on_unreachable` marks the row so the
    page can say so and the service's sweeper sends it again."""

    def send() -> None:
        task = import_string(task_path)
        try:
            task.apply_async(args=args, retry_policy=SEND_RETRY_POLICY, **options)
        except BrokerUnreachable as exc:
            log.warning("could not send %s%r, the broker is unreachable: %s", task_path, args, exc)
            if on_unreachable is not None:
                on_unreachable()

    transaction.on_commit(send)
