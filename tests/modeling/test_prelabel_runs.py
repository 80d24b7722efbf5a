"""Pre-label runs (modeling/services/prelabeling.py): a judge over a batch's solutions written
as PreLabel rows one solution per transaction; cancel, resume after a killed worker, a refusing
generator, the command, the API and the page, hostile input, and a real Celery worker."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from labeling.models import PreLabel
from modeling.generator import GeneratorError
from modeling.models import PreLabelRun
from modeling.services import prelabeling, sampling
from tests.factories import make_batch, make_problem, make_solution
from tests.helpers.threads import background_threads
from tests.helpers.users import api_client_for
from tests.modeling.test_prelabel_judges import Scripted
from tests.modeling.test_runs import wait_for

RIGHT = ["I add: $2 + 3 = 5$.", "# Answer\n\n5"]
WRONG = ["I add: $2 + 3 = 6$.", "# Answer\n\n6"]


@pytest.fixture
def batch(db):
    batch = make_batch("judged")
    problem = make_problem("What is $2 + 3$?", answer="5")
    for steps in (RIGHT, WRONG, RIGHT):
        make_solution(batch, steps=steps, problem=problem)
    return batch


def rollouts(prompt: str, n: int) -> list[str]:
    """Completions that reach 5 unless the prefix already says 6: a deterministic mc case."""
    return ["# Answer\n\n6" if "= 6" in prompt else "# Answer\n\n5"] * n


@pytest.fixture
def scripted(monkeypatch):
    """The generator the judges get (sampling.generator_from_settings) answers from a script."""
    generator = Scripted(rollouts)
    monkeypatch.setattr(sampling, "generator_from_settings", lambda: generator)
    return generator


def prelabels(run: PreLabelRun) -> dict[int, PreLabel]:
    return {p.solution_id: p for p in PreLabel.objects.filter(run_id=run.pk)}


@pytest.mark.django_db
def test_an_mc_run_writes_one_prelabel_per_solution_with_soft_and_hard_labels(batch, scripted):
    written = prelabeling.prelabel_solutions_now(
        batch=batch, judge="mc", options={"k": 2, "max_steps": 5}
    )
    assert written == 3
    run = PreLabelRun.objects.get()
    assert run.status == PreLabelRun.Status.SUCCEEDED and (run.done, run.total) == (3, 3)
    assert run.no_label == 0 and run.judge == "mc: scripted k=2"
    assert run.options == {"k": 2, "max_steps": 5, "max_tokens": 256}
    assert run.estimate == {"solutions": 3, "steps": 6, "completions": 12, "tokens": 3072}
    for solution in batch.solutions.all():
        row = prelabels(run)[solution.pk]
        assert row.kind == "mc" and row.judge == run.judge
        if solution.steps == RIGHT:
            assert (
                row.labels == [1, 1] and row.soft_scores == [1.0, 1.0] and row.first_error is None
            )
        else:
            assert row.labels == [-1, None] and row.soft_scores == [0.0, None]
            assert row.first_error == 0 and row.scores == [1.0, None]
    # Rollouts stop at the first -1: 2 steps x 2 for each right one, 1 x 2 for the wrong one.
    assert len(scripted.prompts) == 5


@pytest.mark.django_db
def test_an_llm_run_counts_garbage_and_out_of_range_answers_as_no_label(batch, monkeypatch):
    answers = iter(["\\boxed{-1}", "\\boxed{7}", "no idea"])
    monkeypatch.setattr(
        sampling, "generator_from_settings", lambda: Scripted(lambda p, n: [next(answers)])
    )
    assert prelabeling.prelabel_solutions_now(batch=batch, judge="llm", options={}) == 3
    run = PreLabelRun.objects.get()
    assert run.no_label == 2 and run.done == 3
    rows = sorted(prelabels(run).values(), key=lambda p: p.solution_id)
    assert rows[0].labels == [1, 1] and rows[0].raw == "\\boxed{-1}"
    assert rows[1].labels == [None, None] and rows[1].raw == "\\boxed{7}"
    assert rows[2].labels == [None, None] and rows[2].raw == "no idea"


@pytest.mark.django_db
def test_a_refusing_generator_fails_the_run_with_its_reason_and_it_resumes(batch, monkeypatch):
    refusing = Scripted(None, error=GeneratorError("the generator at x answered 401: no key"))
    monkeypatch.setattr(sampling, "generator_from_settings", lambda: refusing)
    run = prelabeling.start_prelabel_run(
        batch=batch, judge="llm", created_by=None, options={}, send=False
    )
    run = prelabeling.execute_prelabel_run(run.pk)
    assert run.status == PreLabelRun.Status.FAILED
    assert run.error == "GeneratorError: the generator at x answered 401: no key"
    assert not PreLabel.objects.exists()
    monkeypatch.setattr(
        sampling, "generator_from_settings", lambda: Scripted(lambda p, n: ["\\boxed{0}"])
    )
    prelabeling.resume_prelabel_run(run)
    run = prelabeling.execute_prelabel_run(run.pk)
    assert run.status == PreLabelRun.Status.SUCCEEDED and run.done == 3 and run.error == ""


class Killed(BaseException):
    """The worker dies (not an Exception: nothing marks the run failed)."""


@pytest.mark.django_db
def test_a_killed_worker_loses_nothing_written_and_the_resumed_run_skips_judged_solutions(
    batch, scripted
):
    run = prelabeling.start_prelabel_run(
        batch=batch, judge="mc", created_by=None, options={"k": 1}, send=False
    )

    def die_after_first(progress_run):
        raise Killed

    with pytest.raises(Killed):
        prelabeling.execute_prelabel_run(run.pk, progress=die_after_first)
    run.refresh_from_db()
    assert run.status == PreLabelRun.Status.RUNNING and run.done == 1
    assert PreLabel.objects.filter(run_id=run.pk).count() == 1
    first = PreLabel.objects.get(run_id=run.pk).solution_id
    # A redelivery while the worker seems alive does nothing; once stale, it takes over.
    assert prelabeling.execute_prelabel_run(run.pk) is None
    PreLabelRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))
    scripted.prompts.clear()
    run = prelabeling.execute_prelabel_run(run.pk)
    assert run.status == PreLabelRun.Status.SUCCEEDED and run.done == 3 and run.attempts == 2
    assert PreLabel.objects.filter(run_id=run.pk).count() == 3
    # The first solution (by id: a right one) was not judged again: the wrong one's first step
    # (one rollout, then -1) and the other right one's two steps, k = 1.
    assert first == min(batch.solutions.values_list("pk", flat=True))
    assert len(scripted.prompts) == 3


@pytest.mark.django_db
def test_a_cancel_stops_after_the_solution_being_judged_and_keeps_what_was_written(batch, scripted):
    run = prelabeling.start_prelabel_run(
        batch=batch, judge="mc", created_by=None, options={"k": 1}, send=False
    )
    run = prelabeling.execute_prelabel_run(
        run.pk, progress=lambda r: prelabeling.cancel_prelabel_run(r)
    )
    assert run.status == PreLabelRun.Status.CANCELLED and run.done == 1
    assert PreLabel.objects.filter(run_id=run.pk).count() == 1
    assert prelabeling.resume_prelabel_run(run).status == PreLabelRun.Status.QUEUED
    run = prelabeling.execute_prelabel_run(run.pk)
    assert run.status == PreLabelRun.Status.SUCCEEDED
    assert PreLabel.objects.filter(run_id=run.pk).count() == 3


@pytest.mark.django_db
def test_a_prm_run_labels_with_a_tiny_model_and_stores_its_thresholds(batch, tmp_path):
    from tests.modeling.test_model_export import trained_version

    version = trained_version(tmp_path)
    written = prelabeling.prelabel_solutions_now(
        batch=batch, judge="prm", options={"model_version": version.pk}
    )
    run = PreLabelRun.objects.get()
    assert written == 3 and run.judge == "prm: tiny #1"
    # No evaluation set is current: the defaults, said so with the run.
    assert run.options["thresholds"] == {
        "neg": 0.5,
        "pos": 0.5,
        "kappa": None,
        "source": "defaults (no set)",
    }
    for row in prelabels(run).values():
        assert len(row.labels) == 2 and all(s is None or 0 <= s <= 1 for s in row.scores)
        if row.first_error is not None:
            assert row.labels[row.first_error] == -1 and row.labels[row.first_error + 1 :] == [
                None
            ] * (1 - row.first_error)


@pytest.mark.django_db
def test_the_sweeper_sends_again_a_run_whose_task_never_came_and_one_whose_worker_died(
    batch, scripted, eager_tasks
):
    lost = prelabeling.start_prelabel_run(
        batch=batch, judge="mc", created_by=None, options={"k": 1}, send=False
    )
    long_ago = timezone.now() - timedelta(days=1)
    PreLabelRun.objects.filter(pk=lost.pk).update(created_at=long_ago)
    with eager_tasks():  # the task sent on commit runs here
        assert prelabeling.prelabel_runs_resend() == 1
    lost.refresh_from_db()
    assert lost.status == PreLabelRun.Status.SUCCEEDED and lost.done == 3
    assert prelabeling.prelabel_runs_resend() == 0  # nothing left to send
    dead = prelabeling.start_prelabel_run(
        batch=batch, judge="mc", created_by=None, options={"k": 1}, send=False
    )
    PreLabelRun.claim(dead.pk)
    PreLabelRun.objects.filter(pk=dead.pk).update(heartbeat_at=long_ago, sent_at=long_ago)
    with eager_tasks():
        assert prelabeling.prelabel_runs_resend() == 1
    dead.refresh_from_db()
    assert dead.status == PreLabelRun.Status.SUCCEEDED and dead.attempts == 2


@pytest.mark.django_db
def test_prm_thresholds_are_chosen_on_the_current_evaluation_set_s_human_labels(
    batch, tmp_path, settings, shared_data
):
    from modeling.judges import choose_thresholds
    from modeling.models import EvaluationSet
    from modeling.services.scoring import load_model
    from modeling.training.data import examples_from_prm800k, read_jsonl
    from modeling.training.score import predict_labelled
    from tests.modeling.test_model_export import trained_version

    lines = (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines()[:6]
    (settings.MEDIA_ROOT).mkdir(parents=True, exist_ok=True)
    (settings.MEDIA_ROOT / "eval.jsonl").write_text("\n".join(lines) + "\n")
    EvaluationSet.objects.create(
        version=4, file_path="eval.jsonl", sha256="0" * 64, is_current=True
    )
    version = trained_version(tmp_path)
    prelabeling.prelabel_solutions_now(
        batch=batch, judge="prm", options={"model_version": version.pk}
    )
    stored = PreLabelRun.objects.get().options["thresholds"]
    examples = examples_from_prm800k(read_jsonl(settings.MEDIA_ROOT / "eval.jsonl"))
    probs, ratings = predict_labelled(load_model(version), examples)
    assert len(ratings) > 0
    assert stored == {**choose_thresholds(probs, ratings.tolist()), "source": "evaluation set v4"}
    assert stored["steps"] == len(ratings)


def test_the_tasks_go_to_the_generate_queue_for_llm_and_mc_and_the_gpu_queue_for_prm(settings):
    queues = {kind: settings.TASK_QUEUES[task] for kind, task in prelabeling.TASKS.items()}
    assert queues == {"prm": "gpu", "llm": "generate", "mc": "generate"}


# --- hostile input ------------------------------------------------------------------------------


HOSTILE = [
    ({"judge": "mc", "k": 10**9}, "k"),
    ({"judge": "mc", "k": -1}, "k"),
    ({"judge": "mc", "max_steps": 0}, "max_steps"),
    ({"judge": "mc", "max_solutions": -5}, "max_solutions"),
    ({"judge": "mc", "k": True}, "k"),
    ({"judge": "prm", "thresholds": {"neg": "NaN", "pos": 0.5}}, "thresholds"),
    ({"judge": "prm", "thresholds": {"neg": "Infinity", "pos": 0.5}}, "thresholds"),
    ({"judge": "prm", "thresholds": {"neg": 1.5, "pos": 0.5}}, "thresholds"),
    ({"judge": "prm", "model_version": 999999}, "model version"),
    ({"judge": "prm"}, "No model version is active"),
    ({"judge": "llm", "template": "{problem} only"}, "template"),
    ({"judge": "zzz"}, "judge"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("payload", "said"), HOSTILE)
def test_hostile_values_get_a_400_and_write_nothing(batch, lead, payload, said):
    api = api_client_for(lead)
    answer = api.post(
        "/p/default/api/prelabel-runs/", {"batch": batch.pk, **payload}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert said.lower() in answer.content.decode().lower()
    assert not PreLabelRun.objects.exists() and not PreLabel.objects.exists()


@pytest.mark.django_db
def test_nan_in_the_json_body_and_unknown_ids_are_refused(batch, lead, researcher, labeler):
    api = api_client_for(lead)
    raw = json.dumps({"batch": batch.pk, "judge": "prm", "thresholds": {"neg": "x", "pos": 0.5}})
    raw = raw.replace('"x"', "NaN")
    assert (
        api.post("/p/default/api/prelabel-runs/", raw, content_type="application/json").status_code
        == 400
    )
    assert (
        api.post("/p/default/api/prelabel-runs/", {"batch": 10**8, "judge": "mc"}).status_code
        == 400
    )
    assert (
        api.post("/p/default/api/prelabel-runs/", {"batch": -1, "judge": "mc"}).status_code == 400
    )
    assert api.get("/p/default/api/prelabel-runs/424242/").status_code == 404
    # A labeler may not start one; a researcher may not change the critic template.
    assert (
        api_client_for(labeler)
        .post("/p/default/api/prelabel-runs/", {"batch": batch.pk, "judge": "mc"})
        .status_code
        == 403
    )
    template = "Critic: {problem}\n{steps}\n\\boxed{{}}"
    assert (
        api_client_for(researcher)
        .post(
            "/p/default/api/prelabel-runs/",
            {"batch": batch.pk, "judge": "llm", "template": template},
            format="json",
        )
        .status_code
        == 403
    )
    assert not PreLabelRun.objects.exists()


@pytest.mark.django_db
def test_the_api_starts_reads_and_cancels_a_run(
    batch, lead, scripted, django_capture_on_commit_callbacks
):
    api = api_client_for(lead)
    template = "Critic: {problem}\n{steps}\n\\boxed{{}}"
    answer = api.post(
        "/p/default/api/prelabel-runs/",
        {"batch": batch.pk, "judge": "llm", "template": template, "max_solutions": 2},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["status"] == "queued" and body["total"] == 2
    assert body["options"]["template"] == template and body["estimate"]["solutions"] == 2
    assert api.get(f"/p/default/api/prelabel-runs/{body['id']}/").json()["id"] == body["id"]
    assert [r["id"] for r in api.get("/p/default/api/prelabel-runs/").json()] == [body["id"]]
    cancelled = api.post(f"/p/default/api/prelabel-runs/{body['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


def test_the_openapi_schema_has_the_prelabel_endpoints(tmp_path):
    import yaml

    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    paths = set(yaml.safe_load(out.read_text())["paths"])
    assert {
        "/p/default/api/prelabel-runs/",
        "/p/default/api/prelabel-runs/{id}/",
        "/p/default/api/prelabel-runs/{id}/cancel/",
    } <= paths


# --- the page -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_page_starts_a_run_and_shows_its_progress_estimate_and_no_label_count(
    client, lead, labeler, batch, scripted
):
    url = reverse("modeling_prelabel:list")
    client.force_login(labeler)
    assert client.get(url).status_code == 403
    client.force_login(lead)
    answer = client.post(url, {"batch": batch.pk, "judge": "mc", "k": 2, "max_steps": 3})
    assert answer.status_code == 302
    run = PreLabelRun.objects.get()
    prelabeling.execute_prelabel_run(run.pk)
    PreLabelRun.objects.filter(pk=run.pk).update(no_label=1)
    html = client.get(url).content.decode()
    assert f'id="prelabel-run-{run.pk}"' in html
    assert '<span class="progress-count">3/3</span>' in html
    assert '<td class="no-label">1</td>' in html
    assert "12 completions" in html and "mc: scripted k=2" in html


@pytest.mark.django_db
def test_the_page_refuses_a_template_without_placeholders_and_a_researchers_template(
    client, lead, researcher, batch
):
    url = reverse("modeling_prelabel:list")
    client.force_login(lead)
    answer = client.post(url, {"batch": batch.pk, "judge": "llm", "template": "Judge {problem}"})
    assert answer.status_code == 400 and "lacks {steps}" in answer.content.decode()
    client.force_login(researcher)
    answer = client.post(
        url, {"batch": batch.pk, "judge": "llm", "template": "{problem} {steps} judge"}
    )
    assert answer.status_code == 400 and "Only a lead" in answer.content.decode()
    answer = client.post(url, {"batch": batch.pk, "judge": "mc", "k": 100000})
    assert answer.status_code == 400
    assert not PreLabelRun.objects.exists()


# --- the command --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_command_runs_a_judge_and_waits_with_progress_lines(batch, scripted):
    out = StringIO()
    call_command("prelabel", "--batch", "judged", "--judge", "mc", "--k", "2", "--wait", stdout=out)
    text = out.getvalue()
    run = PreLabelRun.objects.get()
    assert f"Pre-label run {run.pk} (mc) on batch judged: 3 solutions" in text
    assert "3/3 judged, 0 with no label" in text and run.status == PreLabelRun.Status.SUCCEEDED
    assert PreLabel.objects.filter(run_id=run.pk).count() == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--batch", "nope", "--judge", "mc"], "no batch named"),
        (["--batch", "judged", "--judge", "prm", "--k", "3"], "takes no --k"),
        (["--batch", "judged", "--judge", "prm", "--model-version", "999"], "no model version"),
        (["--batch", "judged", "--judge", "mc", "--k", "100000"], "k must be"),
    ],
)
def test_the_command_refuses_bad_arguments_and_writes_nothing(batch, arguments, message):
    with pytest.raises(CommandError, match=message):
        call_command("prelabel", *arguments, stdout=StringIO())
    assert not PreLabelRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_embedded_default_prelabels_in_a_thread_and_the_api_answers_at_once(
    settings, lead, scripted
):
    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # what the demo does (no broker, no worker)
    threads = background_threads()
    batch = make_batch("embedded")
    problem = make_problem("What is $2 + 3$?", answer="5")
    for steps in (RIGHT, WRONG):
        make_solution(batch, steps=steps, problem=problem)
    answer = api_client_for(lead).post(
        "/p/default/api/prelabel-runs/", {"batch": batch.pk, "judge": "mc", "k": 2}, format="json"
    )
    assert answer.status_code == 201 and answer.json()["status"] == "queued"
    [thread] = threads
    thread.join(timeout=120)
    assert not thread.is_alive()
    run = PreLabelRun.objects.get()
    assert run.status == PreLabelRun.Status.SUCCEEDED, run.error
    labels = {p.solution.steps[0]: p.labels for p in PreLabel.objects.select_related("solution")}
    assert labels == {RIGHT[0]: [1, 1], WRONG[0]: [-1, None]}


# --- real processes -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_llm_run_against_the_served_local_model(batch, settings, generator_server):
    """The critic through the project's own OpenAI-compatible server process (serve_generator):
    whatever SmolLM2 answers, every solution gets a row, labelled or counted as no label."""
    settings.STEPWISE_GENERATOR_URL = generator_server
    sampling.generator_from_settings.cache_clear()
    try:
        written = prelabeling.prelabel_solutions_now(
            batch=batch, judge="llm", options={"max_tokens": 8, "max_solutions": 2}
        )
    finally:
        sampling.generator_from_settings.cache_clear()
    run = PreLabelRun.objects.get()
    assert written == 2 and run.status == PreLabelRun.Status.SUCCEEDED
    assert run.judge.startswith("llm: ")
    for row in prelabels(run).values():
        assert row.raw  # the critic's answer as it came
        labelled = [label for label in row.labels if label is not None]
        assert labelled or row.labels == [None, None]
    assert run.no_label == sum(
        all(label is None for label in row.labels) for row in prelabels(run).values()
    )


@pytest.mark.redis
@pytest.mark.postgres
def test_a_run_through_a_real_worker_writes_prelabels_and_the_page_shows_progress(
    tmp_path, celery_worker_process, celery_live, client, lead
):
    batch = make_batch("served")
    problem = make_problem("What is $2 + 3$?", answer="5")
    for steps in (RIGHT, WRONG):
        make_solution(batch, steps=steps, problem=problem)
    run = prelabeling.start_prelabel_run(
        batch=batch, judge="llm", created_by=lead, options={"max_tokens": 8}
    )  # committed (transactional test): the task is on the broker's generate queue

    def finished() -> bool:
        run.refresh_from_db()
        return run.status in (PreLabelRun.Status.SUCCEEDED, PreLabelRun.Status.FAILED)

    wait_for(finished, 600, "the pre-label run")
    log = (tmp_path / "worker.log").read_text()
    assert run.status == PreLabelRun.Status.SUCCEEDED, f"{run.error}\n{log[-3000:]}"
    assert "modeling.tasks.prelabel_run" in log
    assert PreLabel.objects.filter(run_id=run.pk).count() == 2 == run.done
    client.force_login(lead)
    html = client.get(reverse("modeling_prelabel:list")).content.decode()
    assert '<span class="progress-count">2/2</span>' in html
    assert run.options == {"max_tokens": 8} and run.judge.startswith("llm: ")
