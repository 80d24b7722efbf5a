"""Celery tasks of the modeling app: thin wrappers over the services of training runs (`runs`,
`execution`, `evaluation`, `scoring`) and of the active-learning loop (`loop`, `pipeline`).
Services send them by dotted path after commit (`stepwise.celery.enqueue_on_commit`); tasks
import services, never the reverse.

The `gpu` queue's tasks (settings.TASK_QUEUES names every task's queue) are served by one worker
process (prefork, concurrency 1: the pool that enforces time limits). Every model task has a soft
time limit (SoftTimeLimitExceeded in the task: its service records why it stopped) a minute
before its hard one (the process is killed). Late acks plus `reject_on_worker_lost` put a killed
worker's task back on the queue, and a worker told to stop cancels its task after
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT and puts it back; `execution.execute_training_run` claims a run with a conditional update, so a second
delivery does nothing while the first worker lives and takes over once its heartbeat is stale.
Each generation task runs one step and queues the next after commit; a redelivered task finds
the step already claimed or done and does nothing.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from modeling.services import (
    best_of_n,
    exporting,
    importing,
    loop,
    pipeline,
    prelabeling,
    runs,
    sampling,
)

RUN_LIMIT_S = settings.STEPWISE_TRAINING_TIME_LIMIT_S
STEP_LIMIT_S = 6 * 3600
MODEL_LIMIT_S = 6 * 3600  # gating, scoring for review
SAMPLING_LIMIT_S = settings.CELERY_TASK_TIME_LIMIT
EXPORT_LIMIT_S = 2 * 3600  # loading and saving a 7 B model on a CPU takes minutes, not hours
PRELABEL_LIMIT_S = SAMPLING_LIMIT_S


# --- training runs -----------------------------------------------------------------------------


@shared_task(
    name="modeling.tasks.gpu_train_run",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=RUN_LIMIT_S,
    soft_time_limit=RUN_LIMIT_S - 120,
)
def gpu_train_run(run_id: int) -> int | None:
    # The gpu tasks' services load torch, transformers and scikit-learn when they are imported:
    # here, so that a web process or the default worker that registers these tasks does not.
    from modeling.services import execution

    version = execution.execute_training_run(run_id)
    return version.pk if version else None


@shared_task(
    name="modeling.tasks.gpu_gate_model",
    acks_late=True,
    time_limit=MODEL_LIMIT_S,
    soft_time_limit=MODEL_LIMIT_S - 60,
)
def gpu_gate_model(version_id: int, activate: bool = False) -> bool:
    """An imported model's gate: scored with the active one on the current evaluation set."""
    return importing.gate_model_version(version_id, activate=activate).passed_evaluation


@shared_task(name="modeling.tasks.resend_runs", time_limit=60)
def resend_runs() -> int:
    """Periodic (beat): send again queued training runs, generations, sampling runs, pre-label
    runs and exports whose task never reached a worker, and exports whose worker died."""
    return (
        runs.runs_resend()
        + loop.generations_resend()
        + sampling.sampling_runs_resend()
        + exporting.exports_resend()
        + best_of_n.comparisons_resend()
        + prelabeling.prelabel_runs_resend()
    )


@shared_task(name="modeling.tasks.fail_stale_runs", time_limit=60)
def fail_stale_runs() -> int:
    """Periodic (beat): runs whose worker died are marked failed, and can be resumed."""
    return runs.fail_stale_runs()


@shared_task(
    name="modeling.tasks.export_model",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=EXPORT_LIMIT_S,
    soft_time_limit=EXPORT_LIMIT_S - 60,
)
def export_model(export_id: int) -> str:
    """A model version's Hugging Face zip, on the default queue: its service runs the export in
    a child process (`cli export`), so this worker never loads torch, and a training run on the
    gpu worker never holds it up."""
    return exporting.export_run(export_id).status


@shared_task(
    name="modeling.tasks.gpu_compare_best_of_n",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=MODEL_LIMIT_S,
    soft_time_limit=MODEL_LIMIT_S - 60,
)
def gpu_compare_best_of_n(comparison_id: int) -> str:
    """A best-of-N comparison: every sample scored by every model, on the gpu queue (its
    service imports the scorer when it runs)."""
    return best_of_n.comparison_run(comparison_id).status


# --- the active-learning loop ------------------------------------------------------------------


@shared_task(
    name="modeling.tasks.gpu_generation_step",
    acks_late=True,
    time_limit=STEP_LIMIT_S,
    soft_time_limit=STEP_LIMIT_S - 60,
)
def gpu_generation_step(run_id: int, step: str) -> None:
    """retrain / score: the steps that need the model."""
    pipeline.advance(run_id, step)


@shared_task(
    name="modeling.tasks.generation_step", acks_late=True, time_limit=600, soft_time_limit=540
)
def generation_step(run_id: int, step: str) -> None:
    """select / enqueue: database work only."""
    pipeline.advance(run_id, step)


@shared_task(name="modeling.tasks.check_generation_progress", acks_late=True, time_limit=120)
def check_generation_progress() -> int | None:
    """Periodic (beat): start the next generation once the last is labeled to the set fraction."""
    run = loop.maybe_start_next_generation()
    return run.pk if run else None


@shared_task(name="modeling.tasks.fail_stale_generations", acks_late=True, time_limit=120)
def fail_stale_generations() -> int:
    """Periodic (beat): a generation whose worker died is marked failed, to be retried."""
    return pipeline.fail_stale_generations()


@shared_task(
    name="modeling.tasks.generate_pool_run",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=SAMPLING_LIMIT_S,
    soft_time_limit=SAMPLING_LIMIT_S - 60,
)
def generate_pool_run(run_id: int) -> int | None:
    """A generate_pool run, on the `generate` queue."""
    run = sampling.execute_sampling_run(run_id)
    return None if run is None else run.added


@shared_task(
    name="modeling.tasks.gpu_score_for_review",
    acks_late=True,
    time_limit=MODEL_LIMIT_S,
    soft_time_limit=MODEL_LIMIT_S - 60,
)
def gpu_score_for_review(batch_id: int, version_id: int) -> int:
    """Scores for the review page: the active model on a batch's labeled solutions."""
    from modeling.services import scoring  # loads torch: as in gpu_train_run

    return scoring.score_batch_for_review(batch_id, version_id)


# --- candidate next steps for labelers -------------------------------------------------------


def _generate_proposal(proposal_id: int) -> int | None:
    proposal = sampling.fill_proposal(proposal_id)
    return None if proposal is None else len(proposal.steps)


PROPOSAL_LIMITS = {"acks_late": True, "time_limit": 600, "soft_time_limit": 570}
# Candidate next steps for a labeler (labeling.services.alternatives sends it by this name), on
# the `generate` queue.
generate_proposal = shared_task(name="modeling.tasks.generate_proposal", **PROPOSAL_LIMITS)(
    _generate_proposal
)
# Its name before it moved here from labeling.tasks, kept one release so that requests queued
# in Redis during an upgrade are still taken (a lost one is sent again once stale anyway).
generate_proposal_old_name = shared_task(
    name="labeling.tasks.generate_proposal", **PROPOSAL_LIMITS
)(_generate_proposal)


# --- pre-label runs (judges) -----------------------------------------------------------------


@shared_task(
    name="modeling.tasks.prelabel_run",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=PRELABEL_LIMIT_S,
    soft_time_limit=PRELABEL_LIMIT_S - 60,
)
def prelabel_run(run_id: int) -> int | None:
    """An llm or mc pre-label run, on the `generate` queue (the generator's)."""
    run = prelabeling.execute_prelabel_run(run_id)
    return None if run is None else run.done


@shared_task(
    name="modeling.tasks.gpu_prelabel_run",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=PRELABEL_LIMIT_S,
    soft_time_limit=PRELABEL_LIMIT_S - 60,
)
def gpu_prelabel_run(run_id: int) -> int | None:
    """A prm pre-label run, on the `gpu` queue: the judge loads the model (torch) when it runs."""
    run = prelabeling.execute_prelabel_run(run_id)
    return None if run is None else run.done
