"""Celery tasks of PRM training: thin wrappers over `modeling.services`.

`gpu_*` tasks are routed to the `gpu` queue (settings.CELERY_TASK_ROUTES), served by one worker
with concurrency 1. Late acks plus `reject_on_worker_lost` put a killed worker's task back on the
queue; `services.execute_training_run` claims a run with a conditional update, so a second
delivery does nothing while the first worker lives and takes over once its heartbeat is stale.
"""

from __future__ import annotations

from celery import shared_task

from modeling import services
from modeling.models import ModelVersion

RUN_LIMIT_S = 24 * 3600


@shared_task(
    name="modeling.tasks.gpu_train_run",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=RUN_LIMIT_S,
    soft_time_limit=RUN_LIMIT_S - 120,
)
def gpu_train_run(run_id: int) -> int | None:
    version = services.execute_training_run(run_id)
    return version.pk if version else None


@shared_task(name="modeling.tasks.gpu_evaluate_model", acks_late=True, time_limit=6 * 3600)
def gpu_evaluate_model(version_id: int, processbench: list[str] | None = None) -> dict:
    version = ModelVersion.objects.get(pk=version_id)
    return services.evaluate_model_version(version, processbench=processbench or [])


@shared_task(name="modeling.tasks.fail_stale_runs", time_limit=60)
def fail_stale_runs() -> int:
    """Periodic (beat): runs whose worker died are marked failed, and can be resumed."""
    return services.fail_stale_runs()
