"""The Celery app. Queues (settings.TASK_QUEUES, every task by name): `default` for light work,
`gpu` for training and scoring, `generate` for the generator (candidate steps, sampling runs)."""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery import Celery
from django.conf import settings
from django.db import connections, transaction
from django.db.models import QuerySet
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

if TYPE_CHECKING:  # at run time this module loads before the apps (stepwise/__init__.py)
    from stepwise.queued import QueuedWork

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


# What a queued row (stepwise.queued.QueuedWork) says while its task could not reach the broker;
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
    """Send the task named `task_path` (its module path, e.g. "labeling.tasks.run_snapshot")
    once the current transaction commits. Services call this instead of importing a tasks
    module, so tasks import services and never the reverse: the task is looked up by name in
    Celery's task registry (`registered_task`) only when it is sent, which is also how the
    labeling app asks the modeling app for work without importing it. `options` go to
    `apply_async` (queue, countdown).

    When the broker cannot be reached the row is already committed: nothing is raised (the
    request must not answer 500 for saved work), and `on_unreachable` marks the row so the
    page can say so and the service's sweeper sends it again."""

    def send() -> None:
        # The task object, not app.send_task: eager mode (the embedded default) runs only it.
        task = registered_task(task_path)
        try:
            task.apply_async(args=args, retry_policy=SEND_RETRY_POLICY, **options)
        except BrokerUnreachable as exc:
            log.warning("could not send %s%r, the broker is unreachable: %s", task_path, args, exc)
            if on_unreachable is not None:
                on_unreachable()

    transaction.on_commit(send)


def run_in_thread(name: str, work: Callable[[], Any]) -> threading.Thread:
    """Run `work` in a daemon thread of this process: the embedded default's stand-in for a
    worker (STEPWISE_MODEL_TASKS_IN_THREAD), so the request that started it answers at once."""

    def target() -> None:
        try:
            work()
        finally:
            connections.close_all()  # this thread's own connection

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


class Lane:
    """Tasks that run one at a time, in the order they were sent, in a thread of this process
    that lives while the lane has work: the embedded default's stand-in for a worker of
    concurrency 1."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.waiting: deque[tuple[str, Callable[[], Any]]] = deque()
        self.thread: threading.Thread | None = None

    def submit(self, name: str, work: Callable[[], Any]) -> None:
        with self.lock:
            self.waiting.append((name, work))
            if self.thread is None or not self.thread.is_alive():
                self.thread = run_in_thread(f"{self.name}-lane", self._drain)

    def _drain(self) -> None:
        while True:
            with self.lock:
                if not self.waiting:
                    self.thread = None
                    return
                name, work = self.waiting.popleft()
            try:
                work()
            except Exception:  # as a worker would: logged, and the next task runs
                log.exception("%s failed in the %s lane of this process", name, self.name)
            finally:
                connections.close_all()


# The gpu queue's tasks (training, a generation's retrain and score, gates, review scores) in
# the embedded default: one at a time, as the gpu worker's concurrency 1 runs them. Trainings
# side by side in the web process shared its CPU and made each slower to finish or to cancel.
GPU_LANE = Lane("gpu")


def task_queue(task_path: str) -> str:
    """The queue the task is routed to (settings.CELERY_TASK_ROUTES)."""
    return app.amqp.router.route({}, task_path)["queue"].name


def start_on_commit(
    task_path: str,
    *args: Any,
    row: type[QueuedWork] | None = None,
) -> None:
    """The one place background model work is dispatched: once the transaction commits, send
    the task `task_path` with `args` to a worker, or on the embedded default
    (STEPWISE_MODEL_TASKS_IN_THREAD: no worker) run the same task in this process, so the
    request that asked answers at once either way: a gpu task in GPU_LANE, after those sent
    before it, any other in a thread of its own.

    With `row` (the queued-work model whose id is `args[0]`), the row records when its task was
    sent and a broker that cannot be reached marks it UNSENT while it still waits (`send_row`)."""
    if model_tasks_in_thread():
        task = registered_task(task_path)
        name = "-".join([task_path.rsplit(".", 1)[-1], *map(str, args)])
        if row is not None:  # the order rows wait in
            row._default_manager.filter(pk=args[0]).update(sent_at=timezone.now())
        if task_queue(task_path) == GPU_LANE.name:
            transaction.on_commit(lambda: GPU_LANE.submit(name, lambda: task(*args)))
        else:
            transaction.on_commit(lambda: run_in_thread(name, lambda: task(*args)))
    elif row is not None:
        send_row(row, args[0], task_path, args=args)
    else:
        enqueue_on_commit(task_path, *args)


def model_tasks_in_thread() -> bool:
    """Whether background model work runs in threads of this process (no broker, no worker):
    then the sweepers have nothing to send again."""
    return settings.STEPWISE_MODEL_TASKS_IN_THREAD


def registered_task(name: str) -> Any:
    """The task registered under `name`, its app's tasks module imported first if need be."""
    if name not in app.tasks:
        app.loader.import_default_modules()  # autodiscovery imports every app's tasks.py
    return app.tasks[name]


# Rows that wait for a task are `stepwise.queued.QueuedWork`: send_row and resend_rows send
# them and send them again, for both apps.

# A row's task: a dotted path (sent with the row id), or, for rows whose task depends on the row
# (a generation's next step), a function of the row id giving the path and the arguments.
RowTask = str | Callable[[int], tuple[str, tuple[Any, ...]]]


def send_row(
    model: type[QueuedWork],
    row_id: int,
    task_path: str,
    *,
    args: tuple[Any, ...] | None = None,
) -> None:
    """Record when the row's task was sent and send it once the transaction commits (with
    `args`, default the row id); a broker that cannot be reached marks the row UNSENT (and
    clears `sent_at`) while it still waits."""
    model._default_manager.filter(pk=row_id).update(sent_at=timezone.now())
    _enqueue_row(model, row_id, task_path, args)


def resend_rows(due: QuerySet[QueuedWork], task: RowTask, *, now=None) -> int:
    """Send again every row of `due` (e.g. `waiting_too_long()`); returns how many. Each is
    taken with a conditional UPDATE (a concurrent sweep, or a worker that took the row, wins),
    which also clears UNSENT and records the send; a send that fails marks it UNSENT again."""
    now = now or timezone.now()
    sent = 0
    for row_id in due.values_list("pk", flat=True):
        with transaction.atomic():
            if due.filter(pk=row_id).update(error="", sent_at=now):
                task_path, args = (task, None) if isinstance(task, str) else task(row_id)
                _enqueue_row(due.model, row_id, task_path, args)
                sent += 1
    return sent


def _enqueue_row(
    model: type[QueuedWork],
    row_id: int,
    task_path: str,
    args: tuple[Any, ...] | None,
) -> None:
    def mark_unsent() -> None:
        # sent_at cleared: nothing reached the broker, so the row was not sent at all.
        model._default_manager.filter(pk=row_id, status=model.WAITING).update(
            error=UNSENT, sent_at=None
        )

    enqueue_on_commit(task_path, *(args or (row_id,)), on_unreachable=mark_unsent)
