"""Queued work's rules (stepwise.queued.QueuedWork), the same for every row that waits for a task:
one claim wins, a heartbeat and an end land only while the row is its worker's, a failure's
reason keeps its start and is cut once, and the rows whose task will not come are sent again."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from labeling.models import ProposedSteps, Snapshot
from modeling.models import GenerationRun, ModelExport, ModelVersion, SamplingRun, TrainingRun
from stepwise.celery import UNSENT, resend_rows
from stepwise.queued import ERROR_CHARS, QueuedWork

MODELS = [Snapshot, TrainingRun, GenerationRun, SamplingRun, ModelExport]


def new_row(model: type[QueuedWork], **fields) -> QueuedWork:
    """A waiting row of `model` with what the model requires besides."""
    required = {
        SamplingRun: {"samples": 1, "sampling": {}, "problem_ids": []},
        GenerationRun: {"generation": GenerationRun.objects.count() + 1},
        # One open export per version: each row its own version.
        ModelExport: {"version": ModelVersion.objects.create(name="v", artifact_path="/x")},
    }.get(model, {})
    return model.objects.create(**required, **fields)


def test_every_row_that_waits_for_a_task_is_queued_work():
    """A row a task is sent for (it records `sent_at`) has the one shape, new ones included.
    ProposedSteps is not one: a shared, reusable set of candidates asked for again and again,
    whose `sent_at` says a task is out (cleared when it is through, empty while it waits under
    its labeler's cap), with no heartbeat, takeover or sweeper."""
    sent = {m for m in apps.get_models() if any(f.name == "sent_at" for f in m._meta.fields)}
    queued = {model for model in sent if issubclass(model, QueuedWork)}
    assert queued >= set(MODELS)
    assert sent - queued == {ProposedSteps}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_of_workers_claiming_one_row_at_once_exactly_one_wins(model):
    row = new_row(model)
    workers = 4
    barrier = threading.Barrier(workers)
    won: list[bool] = []
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            won.append(model.claim(row.pk) is not None)
        except BaseException as exc:  # surfaced below; a thread must not swallow it
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    assert sorted(won) == [False, False, False, True]
    row.refresh_from_db()
    assert row.status == model.RUNNING and row.attempts == 1
    assert row.heartbeat_at is not None and row.started_at is not None


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_stale_row_is_taken_over_where_the_model_allows_and_a_live_one_never(model):
    long_ago = timezone.now() - model.stale_after() - timedelta(seconds=1)
    stale = new_row(model, status=model.RUNNING, heartbeat_at=long_ago, attempts=1)
    live = new_row(model, status=model.RUNNING, heartbeat_at=timezone.now(), attempts=1)
    assert model.claim(live.pk) is None

    taken = model.claim(stale.pk)
    if model.TAKES_OVER_STALE:
        assert taken is not None and taken.attempts == 2 and taken.heartbeat_at > long_ago
    else:  # a generation's dead step is failed by its sweeper and retried by a lead
        assert taken is None and GenerationRun.objects.get(pk=stale.pk).attempts == 1
    assert model.objects.get(pk=live.pk).attempts == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "model",
    [m for m in MODELS if m.TAKES_OVER_STALE and not m.WORKER_HAS_LAST_WORD],
    ids=lambda m: m.__name__,
)
def test_a_worker_whose_stale_row_was_taken_over_writes_nothing_more(model):
    first = model.claim(new_row(model).pk)
    assert first is not None and first.heartbeat()
    long_ago = timezone.now() - model.stale_after() - timedelta(seconds=1)
    model.objects.filter(pk=first.pk).update(heartbeat_at=long_ago)  # its worker went quiet
    second = model.claim(first.pk)
    assert second is not None and second.attempts == first.attempts + 1

    assert not first.heartbeat() and not first.mark_succeeded() and not first.mark_failed("late")
    assert second.heartbeat() and second.mark_succeeded()
    row = model.objects.get(pk=first.pk)
    assert row.status == model.SUCCEEDED and row.error == ""


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_failure_keeps_the_start_of_its_reason_cut_once_to_the_error_column(model):
    assert model._meta.get_field("error").max_length == ERROR_CHARS
    reason = "the start of it " + "x" * (3 * ERROR_CHARS)
    row = model.claim(new_row(model).pk)
    assert row is not None and row.mark_failed(reason)
    row = model.objects.get(pk=row.pk)
    assert row.status == model.FAILED and row.finished_at is not None
    assert row.error == reason[:ERROR_CHARS]

    other = model.claim(new_row(model).pk)
    assert other is not None and other.mark_failed(ValueError("no such backbone"))
    assert model.objects.get(pk=other.pk).error == "ValueError: no such backbone"


@pytest.mark.django_db
def test_a_heartbeat_and_an_end_land_only_while_the_row_is_its_workers():
    run = SamplingRun.claim(new_row(SamplingRun).pk)
    assert run is not None
    assert run.heartbeat(next_index=1)
    SamplingRun.objects.filter(pk=run.pk).update(status=SamplingRun.Status.CANCELLED)  # a lead

    assert not run.heartbeat(next_index=2) and not run.mark_succeeded()
    assert not run.mark_failed("too late")
    run = SamplingRun.objects.get(pk=run.pk)
    assert run.status == SamplingRun.Status.CANCELLED and run.next_index == 1 and run.error == ""

    # A training run's worker has the last word: its model version exists whatever a sweeper
    # said meanwhile.
    training = TrainingRun.claim(new_row(TrainingRun).pk)
    assert training is not None
    TrainingRun.objects.filter(pk=training.pk).update(status=TrainingRun.Status.FAILED)
    assert training.heartbeat(step=3) and training.mark_succeeded(phase="done")
    training = TrainingRun.objects.get(pk=training.pk)
    assert training.status == TrainingRun.Status.SUCCEEDED and training.step == 3


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_rows_whose_task_will_not_come_are_sent_again_once(
    model, settings, django_capture_on_commit_callbacks
):
    now = timezone.now()
    long_ago = now - timedelta(seconds=settings.STEPWISE_RESEND_AFTER_SECONDS + 1)
    new_row(model, sent_at=now)  # sent just now: it may still come
    due = {
        new_row(model, sent_at=now, error=UNSENT).pk,  # the broker was unreachable
        new_row(model, sent_at=long_ago).pk,  # its message was lost
        new_row(model, created_at=long_ago).pk,  # never sent
    }
    new_row(model, status=model.RUNNING, sent_at=long_ago)  # a worker has it
    new_row(model, status=model.FAILED, sent_at=long_ago)
    waiting = model.objects.waiting_too_long(now)
    assert set(waiting.values_list("pk", flat=True)) == due

    with django_capture_on_commit_callbacks(execute=False) as sent:
        assert resend_rows(waiting, "labeling.tasks.run_snapshot", now=now) == 3
    assert len(sent) == 3
    for row in model.objects.filter(pk__in=due):
        assert row.error == "" and row.sent_at == now and row.status == model.WAITING
    assert resend_rows(model.objects.waiting_too_long(now), "labeling.tasks.run_snapshot") == 0


def _fail_a_snapshot(monkeypatch, crash) -> QueuedWork:
    from labeling.services import snapshots
    from labeling.services.exporting import ExportFilters, StepwiseOptions

    monkeypatch.setattr(snapshots, "write_export_file", crash)
    snapshot = snapshots.snapshot_create(
        user=None, fmt="prm800k", filters=ExportFilters(), options=StepwiseOptions(), enqueue=False
    )
    return snapshots.snapshot_run(snapshot_id=snapshot.pk)


def _fail_a_training_run(monkeypatch, crash) -> QueuedWork:
    from modeling.services import execution

    monkeypatch.setattr(execution, "freeze_dataset", crash)  # out of memory, a full disk...
    run = new_row(TrainingRun)
    execution.execute_training_run(run.pk)
    return TrainingRun.objects.get(pk=run.pk)


def _fail_a_sampling_run(monkeypatch, crash) -> QueuedWork:
    from modeling.services import sampling

    monkeypatch.setattr(sampling, "generator_from_settings", crash)
    run = new_row(SamplingRun)
    sampling.execute_sampling_run(run.pk)
    return SamplingRun.objects.get(pk=run.pk)


def _fail_a_generation(monkeypatch, crash) -> QueuedWork:
    from modeling.services import pipeline

    monkeypatch.setitem(pipeline.STEP_FUNCTIONS, "select", crash)
    run = new_row(GenerationRun, current_step=GenerationRun.Step.SELECT)
    pipeline.run_step(run.pk, "select")
    return GenerationRun.objects.get(pk=run.pk)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fail, prefix",
    [
        (_fail_a_snapshot, ""),
        (_fail_a_training_run, ""),
        (_fail_a_sampling_run, ""),
        (_fail_a_generation, "select: "),  # the step it failed at
    ],
    ids=["snapshot", "training run", "sampling run", "generation"],
)
def test_every_worker_writes_its_failure_the_one_way(monkeypatch, fail, prefix):
    """Each service's worker ends a crashed row FAILED with the exception's class and message,
    its start kept and cut to the one length (a snapshot kept 2,000 characters, a sampling run
    all of them)."""
    message = "the start of it " + "x" * (3 * ERROR_CHARS)

    def crash(*args, **kwargs):
        raise RuntimeError(message)

    row = fail(monkeypatch, crash)
    assert row.status == type(row).FAILED and row.finished_at is not None
    assert row.error == f"{prefix}RuntimeError: {message}"[:ERROR_CHARS]


@pytest.mark.django_db(transaction=True)
def test_a_generation_running_at_the_upgrade_keeps_its_steps_heartbeat():
    """Until the migration a generation's heartbeat was its running step's (in `steps`): the
    sweeper must not fail a live one, nor keep a dead one, for want of `heartbeat_at`."""
    before = [("modeling", "0011_trainingrun_phase_progress")]
    executor = MigrationExecutor(connections["default"])
    executor.migrate(before)
    OldGenerationRun = executor.loader.project_state(before).apps.get_model(
        "modeling", "GenerationRun"
    )
    seen = timezone.now() - timedelta(seconds=30)
    step = {"status": "running", "started_at": (seen - timedelta(hours=1)).isoformat()}
    reporting = OldGenerationRun.objects.create(
        generation=1,
        status="running",
        current_step="score",
        steps={"score": {**step, "heartbeat": seen.isoformat()}},
    )
    starting = OldGenerationRun.objects.create(
        generation=2, status="running", current_step="select", steps={"select": step}
    )
    done = OldGenerationRun.objects.create(
        generation=3, status="succeeded", current_step="done", steps={"score": step}
    )

    executor = MigrationExecutor(connections["default"])
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    heartbeats = dict(GenerationRun.objects.values_list("pk", "heartbeat_at"))
    assert heartbeats == {
        reporting.pk: seen,
        starting.pk: seen - timedelta(hours=1),
        done.pk: None,
    }
