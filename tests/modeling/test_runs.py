"""Training runs on the database: a tiny random Llama trained on the PRM800K sample labelings.

What each failure leaves behind is asserted: a failed or cancelled run never changes the active
model, a second delivery trains nothing, and a run whose worker was killed is marked failed and
resumes from its checkpoint (the last test does it with a real Celery worker and SIGKILL).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from labeling.models import Solution
from labeling.services.importing import import_math, import_prm800k
from modeling.models import ModelVersion, SolutionScore, TrainingRun
from modeling.services import evaluation, execution, run_data, runs, scoring
from stepwise.celery import UNSENT
from tests.helpers.paths import SAMPLE_DIR
from tests.helpers.threads import background_threads
from tests.modeling.loop_helpers import make_tiny_backbone


@pytest.fixture(scope="module")
def backbone(tmp_path_factory) -> str:
    return make_tiny_backbone(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def labels(db, shared_data):
    """The six PRM800K sample lines as completed labelings."""
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")


def tiny(backbone: str, **overrides) -> dict:
    return {
        "backbone": backbone,
        "mode": "head",
        "max_steps": 4,
        "device": "cpu",
        "lr": 1e-2,
        "batch_tokens": 4096,
        "max_length": 512,
        "checkpoint_every": 1000,
        **overrides,
    }


def previous_active() -> ModelVersion:
    version = ModelVersion.objects.create(
        name="previous",
        backbone="x",
        artifact_path="/nowhere",
        passed_evaluation=True,
        metrics={"auroc": 0.5},
    )
    version.activate()
    return version


# --- a run, start to end ---------------------------------------------------------------------


def test_a_run_trains_evaluates_and_activates(labels, backbone, open_evaluation_gate):
    run = runs.create_training_run(config=tiny(backbone), name="first", holdout_fraction=0.25)
    assert run.status == TrainingRun.Status.QUEUED and run.config["lr"] == 1e-2
    assert run.config["warmup_ratio"] == 0.05  # the effective config: defaults filled in

    version = execution.execute_training_run(run.pk)

    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert version.is_active and version == ModelVersion.active() and version.run == run
    assert run.step == run.total_steps == 4 and [p[0] for p in run.loss_curve] == [1, 2, 3, 4]
    data = Path(run.output_dir) / run_data.DATA_FILE
    assert (
        run.dataset_version
        == hashlib.sha256(data.read_bytes()).hexdigest()
        == version.dataset_version
    )
    assert len(data.read_text().splitlines()) == run.dataset_description["labelings"] == 6
    described = run.dataset_description
    assert described["train_solutions"] + described["held_out_solutions"] == 6
    assert described["held_out_solutions"] >= 1
    assert "accuracy" in run.metrics["held_out"] and run.metrics["gate"]["passed"] is True
    saved = json.loads((Path(version.artifact_path) / "prm.json").read_text())
    assert saved["config"]["dataset_version"] == run.dataset_version  # saved with the model
    assert run.config == saved["config"]  # the row holds the effective config, output_dir included


def test_a_run_drops_cached_scoring_models_before_it_trains(
    labels, backbone, open_evaluation_gate, tmp_path
):
    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    scoring_model = ProcessRewardModel.from_config(TrainConfig.from_dict(tiny(backbone)))
    # a generation scored with it
    scoring.load_model_dir(str(scoring_model.save(tmp_path / "scoring")))
    assert scoring.load_model_dir.cache_info().currsize >= 1
    cached: list[int] = []
    run = runs.create_training_run(config=tiny(backbone, max_steps=2))

    execution.execute_training_run(
        run.pk, progress=lambda p: cached.append(scoring.load_model_dir.cache_info().currsize)
    )

    assert cached and cached[0] == 0  # nothing cached (on a GPU: no memory held) while it trains
    assert TrainingRun.objects.get(pk=run.pk).status == TrainingRun.Status.SUCCEEDED


def test_a_model_under_the_floor_is_kept_but_not_activated(labels, backbone, settings):
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 1.01  # unreachable
    before = previous_active()
    run = runs.create_training_run(config=tiny(backbone), holdout_fraction=0.5)
    version = execution.execute_training_run(run.pk)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED
    assert not version.passed_evaluation and not version.is_active
    assert ModelVersion.active() == before
    assert run.metrics["gate"]["reason"]
    with pytest.raises(runs.RunError, match="did not pass"):
        runs.activate_model_version(version)


@pytest.mark.parametrize(
    ("auroc", "active", "passed"),
    [
        (0.7, None, True),
        (0.55, None, False),
        (None, None, False),
        (0.70, 0.71, True),
        (0.70, 0.75, False),
        (None, 0.5, False),
    ],
)
def test_evaluation_gate_on_the_set(settings, auroc, active, passed):
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 0.6
    settings.STEPWISE_PRM_EVAL_MAX_REGRESSION = 0.02
    current = ModelVersion(pk=4, project_id=1) if active is not None else None
    on_set = {"id": 7, "version": 2, "sha256": "a" * 64, "problems": 5}
    on_set |= {"new_auroc": auroc, "active_auroc": active}
    gate = evaluation.evaluation_gate({"evaluation_set": on_set}, current)
    assert gate["passed"] is passed
    assert (gate["evaluation_set"], gate["evaluation_set_id"]) == (2, 7)
    assert (gate["auroc"], gate["active_auroc"]) == (auroc, active)


@pytest.mark.parametrize(
    ("auroc", "active", "passed"),
    [(0.7, None, True), (0.55, None, False), (None, None, False), (0.9, 0.5, False)],
)
def test_evaluation_gate_without_a_set_compares_nothing(settings, auroc, active, passed):
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 0.6
    current = ModelVersion(metrics={"auroc": active}, project_id=1) if active is not None else None
    gate = evaluation.evaluation_gate({"auroc": auroc}, current, missing="no evaluation set: why")
    assert gate["passed"] is passed and gate["active_auroc"] is None
    assert "no evaluation set: why" in gate["reason"]


def test_a_second_delivery_trains_nothing(labels, backbone, open_evaluation_gate):
    run = runs.create_training_run(config=tiny(backbone))
    first = execution.execute_training_run(run.pk)
    second = execution.execute_training_run(run.pk)
    run.refresh_from_db()
    assert first == second and run.attempts == 1 and ModelVersion.objects.count() == 1


def test_a_failure_is_recorded_and_the_active_model_stays(labels, tmp_path):
    before = previous_active()
    model = tmp_path / "no-such-model"
    model.mkdir()  # there when the run is queued (a missing one is refused up front) ...
    run = runs.create_training_run(config={"backbone": str(model), "device": "cpu"})
    model.rmdir()  # ... gone when the worker loads it
    assert execution.execute_training_run(run.pk) is None
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.FAILED and "no-such-model" in run.error
    assert run.resumable is False  # the worker cannot load it: resuming would fail the same way
    assert ModelVersion.active() == before and ModelVersion.objects.count() == 1


def test_no_labelings_is_a_clear_failure_that_cannot_be_resumed(db, backbone):
    run = runs.create_training_run(config=tiny(backbone))
    execution.execute_training_run(run.pk)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.FAILED and "no completed labelings" in run.error
    assert run.error.startswith("Cannot start:") and run.resumable is False
    with pytest.raises(runs.RunError, match="start a new run"):
        runs.resume_training_run(run)
    assert TrainingRun.objects.get(pk=run.pk).status == TrainingRun.Status.FAILED


def test_bad_config_and_filters_are_refused_before_anything_is_queued(db):
    with pytest.raises(runs.RunError, match="mode must be one of"):
        runs.create_training_run(config={"mode": "everything"})
    with pytest.raises(runs.RunError, match="unknown TrainConfig fields"):
        runs.create_training_run(config={"learning_rate": 1})
    with pytest.raises(runs.RunError, match="data filters"):
        runs.create_training_run(config={}, filters={"colour": "red"})
    with pytest.raises(runs.RunError, match="holdout"):
        runs.create_training_run(config={}, holdout_fraction=1.0)
    with pytest.raises(runs.RunError, match="lr must be positive"):
        runs.create_training_run(config={"lr": 0})
    with pytest.raises(runs.RunError, match="max_steps must be at least 1"):
        runs.create_training_run(config={"max_steps": 0})
    with pytest.raises(runs.RunError, match="ProcessBench file not found"):
        runs.create_training_run(config={}, processbench=["/no/such/gsm8k.json"])
    assert not TrainingRun.objects.exists()


def test_filters_pick_the_labelings(labels, backbone, open_evaluation_gate):
    from labeling.models import Labeling

    first_two = Labeling.objects.order_by("pk")[:2]
    run = runs.create_training_run(
        config=tiny(backbone),
        holdout_fraction=0.0,
        labelings=Labeling.objects.filter(pk__in=first_two.values("pk")),
    )
    execution.execute_training_run(run.pk)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert run.dataset_description["labelings"] == 2 and run.metrics["held_out"] is None


# --- cancel, resume, stale workers -------------------------------------------------------------


def test_cancel_a_queued_run_at_once(db):
    run = runs.create_training_run(config={})
    assert runs.cancel_training_run(run).status == TrainingRun.Status.CANCELLED
    with pytest.raises(runs.RunError, match="nothing to cancel"):
        runs.cancel_training_run(run)


def test_cancel_a_running_run_then_resume_it_from_its_checkpoint(
    labels, backbone, open_evaluation_gate, settings
):
    settings.STEPWISE_RUN_PROGRESS_SECONDS = 0  # write (and read cancel) every step
    before = previous_active()
    run = runs.create_training_run(config=tiny(backbone, max_steps=6, checkpoint_every=2))
    asked = []

    def cancel_after_three_steps() -> bool:  # a user presses Cancel while it trains
        if TrainingRun.objects.get(pk=run.pk).step >= 3 and not asked:
            asked.append(runs.cancel_training_run(run))
        return False

    execution.execute_training_run(run.pk, should_stop=cancel_after_three_steps)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.CANCELLED and 3 <= run.step < 6
    assert ModelVersion.active() == before and not hasattr(run, "model_version")

    runs.resume_training_run(run, send=False)
    version = execution.execute_training_run(run.pk)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED and run.attempts == 2
    assert run.step == 6 and version.is_active
    assert [p[0] for p in run.loss_curve] == list(range(1, 7))  # no step trained twice


def test_a_cancel_while_it_evaluates_stops_the_run_activates_nothing_and_it_resumes(
    labels, backbone, open_evaluation_gate, settings
):
    settings.STEPWISE_RUN_PROGRESS_SECONDS = 0  # every question to the row is answered
    before = previous_active()
    run = runs.create_training_run(config=tiny(backbone))

    def cancel_at_the_first_batch(phase: str):
        def report(done: int, total: int) -> None:
            if phase == "evaluate" and not TrainingRun.objects.get(pk=run.pk).cancel_requested:
                runs.cancel_training_run(run)  # a user presses Cancel while it evaluates

        return report

    assert execution.execute_training_run(run.pk, counter=cancel_at_the_first_batch) is None
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.CANCELLED and run.phase == "evaluate"
    assert not ModelVersion.objects.filter(run=run).exists() and ModelVersion.active() == before
    runs.resume_training_run(run, send=False)
    assert execution.execute_training_run(run.pk) is not None
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED and run.step == 4


def test_asking_whether_to_stop_refreshes_the_heartbeat_and_reads_a_cancel_at_a_bounded_rate(
    db, settings, django_assert_num_queries
):
    """What the loop asks between steps and backbone blocks keeps the run alive on its page
    and hears a cancel even when the next progress report is a minute away."""
    settings.STEPWISE_RUN_PROGRESS_SECONDS = 0
    long_ago = timezone.now() - timedelta(minutes=5)
    run = runs.create_training_run(config={})
    TrainingRun.objects.filter(pk=run.pk).update(
        status=TrainingRun.Status.RUNNING, heartbeat_at=long_ago
    )
    reporter = execution.RunReporter(run)
    assert reporter.should_stop() is False
    assert TrainingRun.objects.get(pk=run.pk).heartbeat_at > long_ago
    runs.cancel_training_run(run)
    assert reporter.should_stop() is True
    reporter = execution.RunReporter(run)
    settings.STEPWISE_RUN_PROGRESS_SECONDS = 3600
    reporter.interval_s = 3600
    assert reporter.should_stop() is True  # the first question is answered
    with django_assert_num_queries(0):
        reporter.should_stop()  # the next ones wait for the interval


def test_while_it_extracts_features_the_run_page_says_how_far_in_solutions(
    labels, backbone, open_evaluation_gate, settings, client, researcher
):
    settings.STEPWISE_RUN_PROGRESS_SECONDS = 0  # every report written
    client.force_login(researcher)
    run = runs.create_training_run(config=tiny(backbone, batch_tokens=1024))
    seen = []

    def look_at_the_page(progress) -> None:  # called once the report is on the row
        if progress.phase == "features" and not seen:
            url = reverse("modeling_runs:detail", args=[run.pk])
            page = client.get(url, headers={"HX-Request": "true"}).content.decode()
            seen.append((TrainingRun.objects.get(pk=run.pk), page))

    execution.execute_training_run(run.pk, progress=look_at_the_page)
    [(row, page)] = seen
    solutions = row.dataset_description["train_solutions"]
    assert (row.phase, row.phase_total, row.step, row.total_steps) == ("features", solutions, 0, 0)
    assert 0 <= row.phase_done <= solutions  # those whose every row is through the backbone
    assert 'id="run-phase">extracting features' in page
    assert f'id="phase-progress">{row.phase_done} / {solutions} solutions' in page
    assert 'id="run-step">—' in page  # not "0 / ?"


def test_resume_refuses_a_run_that_did_not_stop(db):
    run = runs.create_training_run(config={})
    with pytest.raises(runs.RunError, match="only failed or cancelled"):
        runs.resume_training_run(run)


def test_a_run_whose_worker_went_silent_is_taken_over_or_failed(db, settings):
    settings.STEPWISE_RUN_STALE_SECONDS = 600
    run = runs.create_training_run(config={})
    old = timezone.now() - timedelta(seconds=601)
    TrainingRun.objects.filter(pk=run.pk).update(
        status=TrainingRun.Status.RUNNING, heartbeat_at=old, started_at=old
    )
    fresh = runs.create_training_run(config={})
    TrainingRun.objects.filter(pk=fresh.pk).update(
        status=TrainingRun.Status.RUNNING, heartbeat_at=timezone.now()
    )
    # A redelivery to a run whose worker is alive does nothing.
    assert execution.execute_training_run(fresh.pk) is None
    fresh.refresh_from_db()
    assert fresh.status == TrainingRun.Status.RUNNING and fresh.attempts == 0
    # A redelivery takes over the dead worker's run (which, with no labelings, cannot start).
    assert execution.execute_training_run(run.pk) is None
    run.refresh_from_db()
    assert run.attempts == 1 and "no completed labelings" in run.error
    assert run.started_at < timezone.now() - timedelta(seconds=600)  # the first attempt's start
    # Nobody redelivers: the sweep fails the silent run, saying it can be resumed.
    silent = runs.create_training_run(config={})
    TrainingRun.objects.filter(pk=silent.pk).update(
        status=TrainingRun.Status.RUNNING, heartbeat_at=old, started_at=old
    )
    assert runs.fail_stale_runs() == 1
    silent.refresh_from_db()
    assert silent.status == TrainingRun.Status.FAILED and "resume" in silent.error


def test_queued_runs_whose_message_never_reached_a_worker_are_sent_again(
    db, settings, django_capture_on_commit_callbacks
):
    """A Redis restart loses the queued messages (no persistence): the beat sweeper sends a run
    again once it has waited STEPWISE_RESEND_AFTER_SECONDS, and only then, and only once."""
    settings.STEPWISE_RESEND_AFTER_SECONDS = 600
    with django_capture_on_commit_callbacks(execute=False) as sent_at_creation:
        lost = runs.start_training_run(config={})
    lost.refresh_from_db()
    assert len(sent_at_creation) == 1 and lost.sent_at is not None
    unsent = runs.create_training_run(config={})
    TrainingRun.objects.filter(pk=unsent.pk).update(error=UNSENT, sent_at=timezone.now())
    running = runs.create_training_run(config={})
    TrainingRun.objects.filter(pk=running.pk).update(status=TrainingRun.Status.RUNNING)

    with django_capture_on_commit_callbacks(execute=False) as sends:
        assert runs.runs_resend() == 1  # only the unsent one: the others are recent or running
    assert len(sends) == 1
    unsent.refresh_from_db()
    assert unsent.error == "" and unsent.status == TrainingRun.Status.QUEUED

    later = timezone.now() + timedelta(seconds=601)
    with django_capture_on_commit_callbacks(execute=False) as sends:
        assert runs.runs_resend(now=later) == 2  # the lost one and the unsent one, now old
        assert runs.runs_resend(now=later) == 0  # a second sweep finds them just sent
    assert len(sends) == 2
    lost.refresh_from_db()
    assert lost.sent_at == later and lost.status == TrainingRun.Status.QUEUED
    assert TrainingRun.objects.get(pk=running.pk).sent_at is None


def test_cancelling_a_run_whose_worker_died_cancels_it_at_once(db, settings):
    run = runs.create_training_run(config={})
    old = timezone.now() - timedelta(seconds=settings.STEPWISE_RUN_STALE_SECONDS + 1)
    TrainingRun.objects.filter(pk=run.pk).update(
        status=TrainingRun.Status.RUNNING, heartbeat_at=old
    )
    assert runs.cancel_training_run(run).status == TrainingRun.Status.CANCELLED


# --- scoring and the commands -------------------------------------------------------------------


def test_score_solutions_with_stores_one_score_per_solution(labels, backbone, open_evaluation_gate):
    import_math(SAMPLE_DIR / "problems.jsonl")
    version = execution.execute_training_run(runs.create_training_run(config=tiny(backbone)).pk)
    solutions = Solution.objects.all()
    seen = []
    scoring.score_solutions_with(
        model_version=version,
        solutions=solutions,
        batch_size=4,
        progress=lambda done, total: seen.append((done, total)),
    )
    scores = SolutionScore.objects.filter(model_version=version)
    assert scores.count() == solutions.count() == 6 and seen[-1] == (6, 6)
    for score in scores.select_related("solution"):
        assert len(score.step_probs) == len(score.solution.steps)
        product = 1.0
        scored = [row for row in score.step_probs if row[0] is not None]  # null: past max_length
        assert scored
        for p_neg, p_neutral, p_pos in scored:
            assert abs(p_neg + p_neutral + p_pos - 1) < 1e-4
            product *= p_neutral + p_pos
        assert score.score == pytest.approx(product, rel=1e-4)
    scoring.score_solutions_with(model_version=version, solutions=solutions)
    assert SolutionScore.objects.filter(model_version=version).count() == 6  # no duplicates


def test_train_prm_help_states_each_config_default_once(monkeypatch):
    from modeling.management.commands.train_prm import Command
    from modeling.training.config import TrainConfig

    monkeypatch.setenv("COLUMNS", "1000")  # argparse's width: no wrapping inside a default
    help_text = Command().create_parser("manage.py", "train_prm").format_help()
    blocks: dict[str, str] = {}  # flag -> its help, wrapped lines joined
    for line in help_text.splitlines():
        if line.startswith("  --"):
            flag = line.split()[0]
            blocks[flag] = ""
        if blocks:
            blocks[flag] += " " + line.strip()
    for field in dataclasses.fields(TrainConfig):
        text = blocks["--" + field.name.replace("_", "-")]
        shown = field.default
        if isinstance(shown, str) and not shown.isprintable():
            shown = json.dumps(shown)  # the step separator's "\n\n", quoted, not blank lines
        assert text.count("(default:") == 1 and f"(default: {shown})" in text, text


def test_train_and_evaluate_commands(
    labels, backbone, open_evaluation_gate, capsys, tmp_path, settings
):
    settings.STEPWISE_MODELS_ROOT = Path(backbone).parent  # train_prm takes folders under it
    flags = [
        "--backbone",
        backbone,
        "--mode",
        "head",
        "--max-steps",
        "3",
        "--device",
        "cpu",
        "--max-length",
        "512",
        "--batch-tokens",
        "4096",
    ]
    call_command("train_prm", *flags, "--name", "cli", "--holdout-fraction", "0.3")
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{") :])
    run = TrainingRun.objects.get(pk=summary["run"])
    assert run.name == "cli" and run.status == TrainingRun.Status.SUCCEEDED and summary["active"]

    bench = tmp_path / "bench.json"
    bench.write_text(
        json.dumps(
            [
                {"problem": "1+1?", "steps": ["1+1=2.", "So 2."], "label": -1},
                {"problem": "2+2?", "steps": ["2+2=5.", "So 5."], "label": 0},
            ]
        )
    )
    call_command("evaluate_prm", "--processbench", str(bench))
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["processbench"][0]["n_error"] == 1 and report["processbench"][0]["n_correct"] == 1
    held_out = report["held_out"]
    assert f"{held_out['n_dropped']} of {held_out['n_labels']} step labels" in captured.err
    assert held_out["max_length"] == 512 and "past max_length 512 tokens" in captured.err
    call_command("evaluate_prm", "--max-length", "64", "--no-save")
    captured = capsys.readouterr()
    short = json.loads(captured.out)["held_out"]
    assert short["n_dropped"] > held_out["n_dropped"] and short["n_labels"] == held_out["n_labels"]
    assert f"{short['n_dropped']} of {short['n_labels']} step labels" in captured.err
    assert "past max_length 64 tokens" in captured.err
    version = ModelVersion.active()
    version.refresh_from_db()
    assert version.metrics["evaluation"]["processbench"][0]["subset"] == "bench"

    with pytest.raises(CommandError, match="mode must be one of"):
        call_command("train_prm", "--mode", "everything")
    with pytest.raises(CommandError, match="no such model version"):
        call_command("evaluate_prm", "--model-version", "999")


# --- a real worker, killed mid-training -------------------------------------------------------


@pytest.mark.redis
@pytest.mark.postgres
def test_a_killed_worker_leaves_the_run_resumable_and_the_active_model_alone(
    labels, backbone, tmp_path, settings, open_evaluation_gate, celery_worker_process, celery_live
):
    settings.MEDIA_ROOT = tmp_path / "media"  # the worker's: its STEPWISE_VAR_DIR is tmp_path
    before = previous_active()
    # Long enough that the worker is still training when the test, polling, sees step 12 and
    # kills it (a step of full tuning here takes tens of milliseconds even on an idle machine);
    # the rest is trained again in-process, so no longer than that.
    config = tiny(backbone, mode="full", max_steps=80, checkpoint_every=5, lr=1e-3)
    run = runs.start_training_run(config=config, holdout_fraction=0.3)  # committed: on the broker
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.step >= 12 or run.is_finished:
            break
        time.sleep(0.1)
    assert run.status == TrainingRun.Status.RUNNING and run.step >= 12, run.error
    celery_worker_process.send_signal(signal.SIGKILL)
    celery_worker_process.wait(timeout=10)

    run.refresh_from_db()
    killed_at = run.step
    assert run.status == TrainingRun.Status.RUNNING and killed_at < 80
    assert ModelVersion.active() == before  # nothing half-trained became active
    settings.STEPWISE_RUN_STALE_SECONDS = 0
    assert runs.fail_stale_runs() == 1
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.FAILED

    checkpoints = sorted(
        (Path(run.output_dir) / execution.MODEL_DIR / "checkpoints").glob("step-*")
    )
    assert checkpoints, "the worker saved checkpoints before it died"
    runs.resume_training_run(run, send=False)
    version = execution.execute_training_run(run.pk)
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED and run.step == 80 and run.attempts == 2
    assert version.is_active
    steps = [p[0] for p in run.loss_curve]
    assert steps == sorted(set(steps)) and steps[-1] == 80  # resumed, not restarted or doubled


@pytest.mark.django_db(transaction=True)
def test_the_embedded_default_trains_in_a_thread_and_answers_at_once(
    shared_data, backbone, settings, open_evaluation_gate
):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # what the demo does (no broker, no worker)
    threads = background_threads()
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    run = runs.start_training_run(config=tiny(backbone, max_steps=3))
    # Wait for the thread, not the rows: an in-memory SQLite test database answers "table is
    # locked" to a read while the thread writes (the demo's file database waits instead).
    [thread] = threads
    thread.join(timeout=300)
    assert not thread.is_alive()
    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert ModelVersion.active() == run.model_version


def wait_for(condition, timeout: float, what: str) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what} after {timeout} s"
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True)
def test_the_embedded_default_trains_one_run_at_a_time_and_a_cancel_stops_it_in_seconds(
    shared_data, backbone, settings, open_evaluation_gate, client, researcher
):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # what the demo does (no broker, no worker)
    threads = background_threads()
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    # Minutes of steps unless cancelled; the run after it, a few.
    long = runs.start_training_run(config=tiny(backbone, max_steps=50_000), name="long")
    short = runs.start_training_run(config=tiny(backbone, max_steps=3), name="short")

    def long_is_training() -> bool:
        long.refresh_from_db()
        return long.is_finished or (long.phase == "train" and long.step > 0)

    wait_for(long_is_training, 120, "the first run to train")
    assert long.status == TrainingRun.Status.RUNNING, long.error
    short.refresh_from_db()
    assert short.status == TrainingRun.Status.QUEUED and short.started_at is None
    client.force_login(researcher)
    page = client.get(reverse("modeling_runs:detail", args=[short.pk])).content.decode()
    detail = reverse("modeling_runs:detail", args=[long.pk])
    assert f'waiting for the run before it, <a href="{detail}">long</a> (running)' in page

    client.post(reverse("modeling_runs:cancel", args=[long.pk]))
    wait_for(lambda: TrainingRun.objects.get(pk=long.pk).is_finished, 30, "the cancel")
    long.refresh_from_db()
    assert long.status == TrainingRun.Status.CANCELLED and long.step < 50_000

    for thread in threads:  # the gpu lane: it trains the queued run once the first has stopped
        thread.join(timeout=300)
    short.refresh_from_db()
    assert short.status == TrainingRun.Status.SUCCEEDED, short.error
    assert short.started_at >= long.finished_at
