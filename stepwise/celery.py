"""The Celery app. Queues: `default` for light work, `gpu` for training and scoring."""

import os
from typing import Any

from celery import Celery
from django.db import transaction
from django.utils.module_loading import import_string

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")

app = Celery("stepwise")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def enqueue_on_commit(task_path: str, *args: Any, **options: Any) -> None:
    """Send the task `task_path` (dotted path, e.g. "labeling.tasks.run_snapshot") once the
    current transaction commits. Services call this instead of importing their app's tasks
    module, so tasks import services and never the reverse; the task is resolved only when
    it is sent. `options` go to `apply_async` (queue, countdown)."""

    def send() -> None:
        task = import_string(task_path)
        task.apply_async(args=args, **options)

    transaction.on_commit(send)
