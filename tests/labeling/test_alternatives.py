"""The alternatives protocol (PRM800K phase 1) through its services, with the real local
generator: candidates generated ahead, rated, chosen or replaced by the labeler's own step,
exported as a phase-1 line of the release's shape."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from labeling import prm800k, selectors
from labeling.models import Batch, FinishReason, Labeling, ProposedSteps, RatingEvent, Solution
from labeling.services import alternatives, queue
from labeling.services.errors import Conflict, LabelingError
from tests.factories import make_batch, make_problem, make_solution
from tests.labeling.helpers import next_labeling


@pytest.fixture
def claimed(db, labeler, seeded_candidates):
    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=2, generation=None)
    problem = make_problem("What is $2 + 3$?", answer="5")
    assert alternatives.add_problems(batch=batch, problem_ids=[problem.pk]) == 1
    assert alternatives.add_problems(batch=batch, problem_ids=[problem.pk]) == 0  # once
    solution = Solution.objects.get(batch=batch)
    assert solution.format == Solution.Format.PHASE1 and solution.steps == []
    queue.ensure_labeler(labeler)
    Solution.objects.filter(pk=solution.pk).update(active_count=F("active_count") + 1)
    return Labeling.objects.create(
        solution=solution, labeler=labeler, lease_expires_at=timezone.now()
    )


def ready(proposal: ProposedSteps) -> ProposedSteps:
    proposal.refresh_from_db()
    assert proposal.status == ProposedSteps.Status.READY, proposal.error
    assert 1 <= len(proposal.steps) <= proposal.k
    return proposal


def real_phase1_line(shared_data) -> dict:
    for line in (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        steps = record["label"]["steps"]
        if record["generation"] is None and any(s["human_completion"] for s in steps):
            return record
    raise AssertionError("no phase-1 line with a human completion in the samples")


def test_a_whole_path_rated_chosen_written_and_exported_in_the_phase1_shape(
    claimed, labeler, shared_data, eager_tasks
):
    with eager_tasks():
        first = alternatives.request_candidates(claimed)  # at claim time; eager task runs it
    first = ready(first)
    assert first.prefix == [] and first.generator == "SmolLM2-135M-Instruct (local)"

    # Step 1: rate every candidate; the +1 asks for the candidates after it at once.
    with eager_tasks():
        for index in range(len(first.steps)):
            alternatives.rate_candidate(
                labeling_id=claimed.pk,
                user=labeler,
                step_index=0,
                candidate_index=index,
                rating_value=1 if index == 0 else -1,
            )
    ahead = ProposedSteps.objects.get(prefix_sha256=selectors.prefix_hash([first.steps[0]]))
    ready(ahead)  # generated before the labeler chose: no wait at step 2
    alternatives.choose_candidate(
        labeling_id=claimed.pk, user=labeler, step_index=0, candidate_index=0
    )
    assert alternatives.request_candidates(claimed).pk == ahead.pk

    # Step 2: rate the candidates, none good enough: write the final step.
    for index in range(len(ahead.steps)):
        alternatives.rate_candidate(
            labeling_id=claimed.pk,
            user=labeler,
            step_index=1,
            candidate_index=index,
            rating_value=0,
        )
    alternatives.write_step(
        labeling_id=claimed.pk, user=labeler, step_index=1, text="# Answer\n\n5"
    )
    claimed.refresh_from_db()
    assert claimed.status == Labeling.Status.COMPLETED
    assert claimed.finish_reason == FinishReason.SOLUTION

    line = json.loads(prm800k.render_record(selectors.release_record(claimed.pk)))
    step1, step2 = line["label"]["steps"]
    assert [c["text"] for c in step1["completions"]] == first.steps
    assert [c["rating"] for c in step1["completions"]] == [1] + [-1] * (len(first.steps) - 1)
    assert step1["chosen_completion"] == 0 and step1["human_completion"] is None
    assert [c["text"] for c in step2["completions"]] == ahead.steps
    assert step2["chosen_completion"] is None
    assert step2["human_completion"] == {
        "text": "# Answer\n\n5",
        "rating": None,
        "source": "human",
        "flagged": False,
    }
    assert line["label"]["finish_reason"] == "solution"
    # The release's phase-1 shape, key for key.
    real = real_phase1_line(shared_data)
    assert list(line) == list(real)
    assert list(line["question"]) == list(real["question"])  # no pre-generated fields
    assert list(line["label"]) == list(real["label"])
    real_steps = real["label"]["steps"]
    assert list(step1) == list(real_steps[0])
    assert list(step1["completions"][0]) == list(real_steps[0]["completions"][0])
    human = next(s["human_completion"] for s in real_steps if s["human_completion"])
    assert list(step2["human_completion"]) == list(human)


def test_ratings_are_idempotent_and_out_of_order_requests_are_refused(
    claimed, labeler, eager_tasks
):
    with pytest.raises(Conflict, match="not ready"):
        alternatives.rate_candidate(
            labeling_id=claimed.pk, user=labeler, step_index=0, candidate_index=0, rating_value=1
        )
    with eager_tasks():
        proposal = alternatives.request_candidates(claimed)
    proposal = ready(proposal)
    rate = {"labeling_id": claimed.pk, "user": labeler, "step_index": 0, "candidate_index": 0}
    alternatives.rate_candidate(**rate, rating_value=-1)
    alternatives.rate_candidate(**rate, rating_value=-1)  # a double submit: nothing new
    assert RatingEvent.objects.filter(labeling=claimed).count() == 1
    # Until the step is settled, a change of mind is an edit, kept in the audit trail.
    alternatives.rate_candidate(**rate, rating_value=0)
    edit = RatingEvent.objects.get(labeling=claimed, reason=RatingEvent.Reason.EDIT)
    assert (edit.old_rating, edit.new_rating) == (-1, 0)
    alternatives.rate_candidate(**rate, rating_value=-1)
    assert claimed.step_labels.get().completions.get(index=0).rating == -1
    with pytest.raises(LabelingError, match="rated \\+1 or 0"):
        alternatives.choose_candidate(
            labeling_id=claimed.pk, user=labeler, step_index=0, candidate_index=0
        )
    with pytest.raises(LabelingError, match="no candidate 9"):
        alternatives.rate_candidate(**{**rate, "candidate_index": 8}, rating_value=1)
    with pytest.raises(Conflict, match="Step 1 is the one"):
        alternatives.rate_candidate(**{**rate, "step_index": 3}, rating_value=1)
    with pytest.raises(LabelingError, match="A rating is"):
        alternatives.rate_candidate(**rate, rating_value=2)
    with pytest.raises(LabelingError, match="Write the step"):
        alternatives.write_step(labeling_id=claimed.pk, user=labeler, step_index=0, text="  ")
    write = {"labeling_id": claimed.pk, "user": labeler, "step_index": 0}
    alternatives.write_step(**write, text="I add $2 + 3$.")
    alternatives.write_step(**write, text="I add $2 + 3$.")  # a double submit
    with pytest.raises(Conflict, match="Step 1 already has your own step"):
        alternatives.write_step(**write, text="Something else.")
    assert len(proposal.steps) >= 1


def test_a_path_past_the_bound_on_steps_is_refused(claimed, labeler, settings):
    settings.STEPWISE_MAX_STEPS_PER_SOLUTION = 2
    ids = {"labeling_id": claimed.pk, "user": labeler}
    alternatives.write_step(**ids, step_index=0, text="I add.")
    alternatives.write_step(**ids, step_index=1, text="I add again.")
    with pytest.raises(LabelingError, match="A solution has at most 2 steps"):
        alternatives.write_step(**ids, step_index=2, text="And again.")
    with pytest.raises(LabelingError, match="A solution has at most 2 steps"):
        alternatives.rate_candidate(**ids, step_index=2, candidate_index=0, rating_value=1)
    assert sorted(claimed.step_labels.values_list("index", flat=True)) == [0, 1]
    assert selectors.path_of(claimed)[0] == ["I add.", "I add again."]


def test_a_generator_that_cannot_answer_fails_the_proposal_and_try_again_resends_it(
    claimed, settings, eager_tasks
):
    from modeling.services import sampling

    sampling.generator_from_settings.cache_clear()
    settings.STEPWISE_GENERATOR_URL = "http://127.0.0.1:9/v1"  # nothing listens there
    settings.STEPWISE_GENERATOR_RETRIES = 0
    try:
        with eager_tasks():
            proposal = alternatives.request_candidates(claimed)
        proposal.refresh_from_db()
        assert proposal.status == ProposedSteps.Status.FAILED
        assert "127.0.0.1:9" in proposal.error and proposal.steps == []
        assert sampling.fill_proposal(proposal.pk) is None  # a redelivery does nothing
        settings.STEPWISE_GENERATOR_URL = ""
        sampling.generator_from_settings.cache_clear()
        assert alternatives.request_candidates(claimed).status == ProposedSteps.Status.FAILED
        with eager_tasks():
            again = alternatives.request_candidates(claimed, again=True)  # "ask again"
        assert again.pk == proposal.pk
        ready(again)
    finally:
        sampling.generator_from_settings.cache_clear()


@pytest.mark.parametrize(
    "task_name", ["modeling.tasks.generate_proposal", "labeling.tasks.generate_proposal"]
)
def test_a_request_is_filled_by_the_task_its_name_finds_the_old_name_too(db, settings, task_name):
    """Labeling sends the request by task name (it never imports modeling); one queued under
    the name it had before it moved to modeling, during an upgrade, is still taken."""
    from modeling.services import sampling
    from stepwise.celery import app, registered_task

    sampling.generator_from_settings.cache_clear()
    settings.STEPWISE_GENERATOR_URL = "http://127.0.0.1:9/v1"  # nothing listens there
    settings.STEPWISE_GENERATOR_RETRIES = 0
    try:
        problem = make_problem("What is $1 + 1$?", answer="2")
        proposal = ProposedSteps.objects.create(
            problem=problem, prefix=[], prefix_sha256=selectors.prefix_hash([]), k=2
        )
        assert registered_task(task_name)(proposal.pk) == 0  # no steps: the generator failed
        proposal.refresh_from_db()
        assert proposal.status == ProposedSteps.Status.FAILED and "127.0.0.1:9" in proposal.error
        assert app.amqp.router.route({}, task_name)["queue"].name == "generate"
    finally:
        sampling.generator_from_settings.cache_clear()


def test_only_an_alternatives_batch_takes_bare_problems(db):
    batch = make_batch()
    with pytest.raises(LabelingError, match="alternatives protocol"):
        alternatives.add_problems(batch=batch, problem_ids=[make_problem().pk])
    batch.protocol = Batch.Protocol.ALTERNATIVES
    with pytest.raises(LabelingError, match="No problem with id 999999"):
        alternatives.add_problems(batch=batch, problem_ids=[999999])


def test_a_request_whose_worker_died_is_sent_again_and_a_failed_one_only_when_asked(
    claimed, eager_tasks
):
    proposal = alternatives.request_candidates(claimed)  # sent to a worker that never answers
    ProposedSteps.objects.filter(pk=proposal.pk).update(status=ProposedSteps.Status.RUNNING)
    assert alternatives.request_candidates(claimed).status == ProposedSteps.Status.RUNNING
    long_ago = timezone.now() - selectors.PROPOSAL_STALE - timedelta(seconds=1)
    ProposedSteps.objects.filter(pk=proposal.pk).update(sent_at=long_ago)
    with eager_tasks():
        again = alternatives.request_candidates(claimed)  # past the task's limit: sent again
    ready(again)
    assert again.pk == proposal.pk and ProposedSteps.objects.count() == 1


def real_phase2_line(shared_data) -> dict:
    for line in (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["generation"] not in (None, -1):
            return record
    raise AssertionError("no phase-2 line in the samples")


def test_after_a_minus_one_the_alternatives_to_the_wrong_step_are_rated_as_in_phase_2(
    labeler, seeded_candidates, shared_data, eager_tasks
):
    from labeling.services import rating

    batch = make_batch(alternatives_after_error=True, alternatives_k=2)
    steps = ["I write $2 + 3 = 6$.", "# Answer\n\n6"]
    solution = make_solution(
        batch, steps=steps, problem=make_problem("What is $2 + 3$?", answer="5")
    )
    labeling = next_labeling(labeler)
    assert labeling.solution_id == solution.pk
    assert selectors.after_error_panel(labeling) is None  # not before the −1
    assert alternatives.request_alternatives_after_error(labeling) is None
    with eager_tasks():
        rating.rate_step(labeling_id=labeling.pk, user=labeler, step_index=0, rating=-1)
        labeling.refresh_from_db()
        alternatives.request_alternatives_after_error(labeling)  # the −1's page asks the model
    panel = selectors.after_error_panel(labeling)
    assert labeling.finish_reason == FinishReason.FOUND_ERROR and panel.step_index == 0
    assert panel.proposal.prefix == [] and panel.proposal.status == ProposedSteps.Status.READY
    texts = [c.text for c in panel.candidates]

    rate = {"labeling_id": labeling.pk, "user": labeler}
    for index in range(len(texts)):
        alternatives.rate_after_error(**rate, candidate_index=index, rating_value=1)
    alternatives.rate_after_error(**rate, candidate_index=0, rating_value=1)  # a double submit
    alternatives.rate_after_error(**rate, candidate_index=0, rating_value=0, flagged=True)
    with pytest.raises(LabelingError, match="no alternative 9"):
        alternatives.rate_after_error(**rate, candidate_index=8, rating_value=1)
    events = RatingEvent.objects.filter(labeling=labeling, detail__startswith="alternative")
    assert [e.reason for e in events] == ["rate"] * len(texts) + ["edit"]

    labeling.refresh_from_db()
    line = json.loads(labeling.release_line)  # rendered again with the alternatives
    assert line == json.loads(prm800k.render_record(selectors.release_record(labeling.pk)))
    (wrong,) = line["label"]["steps"]
    assert [c["text"] for c in wrong["completions"]] == [steps[0], *texts]
    assert [c["rating"] for c in wrong["completions"]] == [-1, 0] + [1] * (len(texts) - 1)
    assert wrong["completions"][1]["flagged"] is True
    assert wrong["chosen_completion"] is None and wrong["human_completion"] is None
    real = real_phase2_line(shared_data)
    real_wrong = real["label"]["steps"][-1]
    assert len(real_wrong["completions"]) > 1 and real_wrong["completions"][0]["rating"] == -1
    assert list(wrong) == list(real_wrong)
    assert list(wrong["completions"][1]) == list(real_wrong["completions"][1])
    assert line["label"]["finish_reason"] == real["label"]["finish_reason"] == "found_error"


def test_alternatives_after_an_error_only_where_the_batch_asks_for_them(labeler, eager_tasks):
    from labeling.services import rating

    make_solution(make_batch(), steps=["Wrong.", "# Answer\n\n1"])
    labeling = next_labeling(labeler)
    rating.rate_step(labeling_id=labeling.pk, user=labeler, step_index=0, rating=-1)
    labeling.refresh_from_db()
    assert selectors.after_error_panel(labeling) is None
    assert alternatives.request_alternatives_after_error(labeling) is None
    with pytest.raises(LabelingError, match="ended on a −1"):
        alternatives.rate_after_error(
            labeling_id=labeling.pk, user=labeler, candidate_index=0, rating_value=1
        )
    assert not ProposedSteps.objects.exists()


def test_the_first_candidates_of_the_next_solution_are_asked_for_ahead(claimed, labeler):
    batch = claimed.solution.batch
    following = make_problem("What is $3 + 4$?", answer="7")
    alternatives.add_problems(batch=batch, problem_ids=[following.pk])
    alternatives.request_candidates(claimed)  # the claim's: sent to the generate queue
    panel = selectors.alternatives_panel(claimed)
    assert panel.waiting and panel.path == [] and panel.candidates == []
    asked = ProposedSteps.objects.filter(prefix_sha256=selectors.prefix_hash([]))
    assert sorted(p.problem_id for p in asked) == sorted(
        [claimed.solution.problem_id, following.pk]
    )
    alternatives.request_candidates(claimed)  # asked again (another tab's claim): nothing new
    assert ProposedSteps.objects.count() == 2


def test_back_a_step_reopens_the_last_choice_and_a_just_finished_solution(
    claimed, labeler, eager_tasks
):
    with eager_tasks():
        first = alternatives.request_candidates(claimed)
    first = ready(first)
    ids = {"labeling_id": claimed.pk, "user": labeler}
    with pytest.raises(Conflict, match="no step to take back"):
        alternatives.step_back(**ids)
    alternatives.rate_candidate(**ids, step_index=0, candidate_index=0, rating_value=0)
    with eager_tasks():  # the next step's candidates are generated at the block's end
        alternatives.write_step(**ids, step_index=0, text="I add: $2 + 3 = 5$.", elapsed_ms=800)
    second = ready(alternatives.request_candidates(claimed))
    alternatives.rate_candidate(**ids, step_index=1, candidate_index=0, rating_value=-1)

    alternatives.step_back(**ids)  # step 1 is open again; step 2's rating goes
    panel = selectors.alternatives_panel(claimed)
    assert panel.path == [] and panel.proposal.pk == first.pk
    assert [c.rating for c in panel.candidates][:1] == [0]  # kept, to choose again
    assert claimed.step_labels.count() == 1
    undone = RatingEvent.objects.filter(labeling=claimed, reason=RatingEvent.Reason.UNDO)
    assert sorted(e.detail for e in undone) == ["candidate 1", "took back step 1"]
    assert [step.time_ms for step in claimed.step_labels.all()] == [None]  # its time went too

    alternatives.write_step(**ids, step_index=0, text="I add: $2 + 3 = 5$.")
    alternatives.write_step(**ids, step_index=1, text="# Answer\n\n5")
    claimed.refresh_from_db()
    solution = claimed.solution
    solution.refresh_from_db()
    assert claimed.status == Labeling.Status.COMPLETED and solution.completed_count == 1
    alternatives.step_back(**ids)  # moments later: reopened at step 2
    claimed.refresh_from_db()
    solution.refresh_from_db()
    assert claimed.status == Labeling.Status.IN_PROGRESS and claimed.finish_reason is None
    assert (solution.completed_count, solution.active_count) == (0, 1)
    assert [s.text for s in selectors.alternatives_panel(claimed).path] == ["I add: $2 + 3 = 5$."]
    assert second.pk == alternatives.request_candidates(claimed).pk


def test_a_step_back_sends_again_the_reopened_steps_candidates_stopped_meanwhile(
    claimed, labeler, django_capture_on_commit_callbacks
):
    """The page only reads: the step back itself asks for the step it reopens, whose candidates
    were stopped while the labeler was past it (here: before all k came)."""
    stopped = ProposedSteps.objects.create(
        problem=claimed.solution.problem,
        prefix=[],
        prefix_sha256=selectors.prefix_hash([]),
        k=2,
        status=ProposedSteps.Status.STOPPED,
        steps=["I add."],
        requested_by=labeler,
        generator="test",
    )
    ids = {"labeling_id": claimed.pk, "user": labeler}
    alternatives.write_step(**ids, step_index=0, text="I add: $2 + 3 = 5$.")
    with django_capture_on_commit_callbacks() as sent:
        alternatives.step_back(**ids)
    stopped.refresh_from_db()
    assert stopped.status == ProposedSteps.Status.PENDING and stopped.sent_at is not None
    assert stopped.steps == ["I add."] and len(sent) == 1  # kept, to be added to
    past = ProposedSteps.objects.get(prefix=["I add: $2 + 3 = 5$."])
    assert past.status == ProposedSteps.Status.STOPPED  # asked past the step: of no use now
    assert not selectors.alternatives_panel(claimed).needs_asking


def test_two_labelers_paths_through_one_problem_get_no_step_agreement(labeler, labeler2):
    from labeling.models import SolutionAgreement

    batch = make_batch(
        protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=1, overlap=2, generation=None
    )
    problem = make_problem("What is $2 + 3$?", answer="5")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])
    ProposedSteps.objects.create(  # the model's one candidate, as the generate task leaves it
        problem=problem,
        prefix=[],
        prefix_sha256=selectors.prefix_hash([]),
        k=1,
        status=ProposedSteps.Status.READY,
        steps=["# Answer\n\n5"],
        generator="test",
    )
    for user, value in ((labeler, 1), (labeler2, 0)):
        labeling = next_labeling(user)
        ids = {"labeling_id": labeling.pk, "user": user, "step_index": 0, "candidate_index": 0}
        alternatives.rate_candidate(**ids, rating_value=value)
        alternatives.choose_candidate(**ids)
    solution = Solution.objects.get(batch=batch)
    assert solution.completed_count == 2
    assert Labeling.objects.filter(finish_reason=FinishReason.SOLUTION).count() == 2
    assert not SolutionAgreement.objects.exists()  # different paths: nothing to adjudicate


def test_a_written_step_that_gives_the_answer_after_its_text_ends_the_solution(claimed, labeler):
    ids = {"labeling_id": claimed.pk, "user": labeler}
    first = "I add: $2 + 3 = 5$."
    alternatives.write_step(**ids, step_index=0, text=first)
    assert ProposedSteps.objects.filter(prefix=[first]).exists()  # the path goes on: asked
    # The release's phase-1 final-step shape, with a browser's plain form post's CRLF.
    final = "So the sum is $5$.\r\n\r\n# Answer\r\n\r\n5"
    alternatives.write_step(**ids, step_index=1, text=final)

    claimed.refresh_from_db()
    assert claimed.status == Labeling.Status.COMPLETED
    assert claimed.finish_reason == FinishReason.SOLUTION
    assert claimed.solution.completed_count == 1
    stored = "So the sum is $5$.\n\n# Answer\n\n5"  # the release's line ends
    assert ProposedSteps.objects.count() == 1  # nothing asked after the answer
    assert not selectors.alternatives_panel(claimed).waiting
    line = json.loads(prm800k.render_record(selectors.release_record(claimed.pk)))
    assert line["label"]["finish_reason"] == "solution"
    assert [s["human_completion"]["text"] for s in line["label"]["steps"]] == [first, stored]
    assert prm800k.chosen_path(prm800k.parse_record(line)) == [first, stored]


def test_a_release_candidate_with_its_answer_after_its_text_asks_nothing_ahead_and_ends_it(
    claimed, labeler, shared_data
):
    # Two of the release's own final candidates ("Exactly.\n\n# Answer\n\n468", ...).
    texts = [
        completion["text"]
        for line in (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines()
        for step in json.loads(line)["label"]["steps"]
        for completion in step["completions"] or []
        if "\n\n# Answer\n\n" in completion["text"]
    ][:2]
    assert len(texts) == 2 and not any(t.startswith("# Answer") for t in texts)
    ProposedSteps.objects.create(
        problem=claimed.solution.problem,
        prefix=[],
        prefix_sha256=selectors.prefix_hash([]),
        k=2,
        status=ProposedSteps.Status.READY,
        steps=texts,
        generator="release",
        ready_at=timezone.now(),
    )
    ids = {"labeling_id": claimed.pk, "user": labeler, "step_index": 0}
    alternatives.rate_candidate(**ids, candidate_index=0, rating_value=1)
    alternatives.rate_candidate(**ids, candidate_index=1, rating_value=-1)
    assert ProposedSteps.objects.count() == 1  # a +1 on a final step asks nothing ahead
    alternatives.choose_candidate(**ids, candidate_index=0)

    claimed.refresh_from_db()
    assert claimed.status == Labeling.Status.COMPLETED
    assert claimed.finish_reason == FinishReason.SOLUTION
    assert ProposedSteps.objects.count() == 1
    line = json.loads(prm800k.render_record(selectors.release_record(claimed.pk)))
    assert line["label"]["finish_reason"] == "solution"
    [step] = line["label"]["steps"]
    assert step["chosen_completion"] == 0 and step["human_completion"] is None
    assert [c["text"] for c in step["completions"]] == texts


# --- candidates as they come ----------------------------------------------------------------------


def test_candidates_are_rated_as_they_come_and_the_choice_waits_for_the_rest(claimed, labeler):
    from modeling.services import sampling

    Batch.objects.filter(pk=claimed.solution.batch_id).update(alternatives_k=3)
    claimed.refresh_from_db()
    proposal = alternatives.request_candidates(claimed)  # sent; run below, step by step
    ids = {"labeling_id": claimed.pk, "user": labeler, "step_index": 0, "candidate_index": 0}
    seen: list[tuple[str, list[str]]] = []

    def labeler_meanwhile(row: ProposedSteps) -> None:
        seen.append((row.status, list(row.steps)))
        if len(row.steps) == 1:  # the first candidate, while the others are written
            alternatives.rate_candidate(**ids, rating_value=0)
            with pytest.raises(Conflict, match="still writing"):
                alternatives.choose_candidate(**ids)
            panel = selectors.alternatives_panel(claimed)
            assert panel.waiting and [c.rating for c in panel.candidates] == [0]

    done = sampling.fill_proposal(proposal.pk, progress=labeler_meanwhile)
    assert done.status == ProposedSteps.Status.READY
    assert len(done.steps) + sum(done.dropped.values()) == 3
    assert seen and {status for status, _ in seen} == {ProposedSteps.Status.RUNNING}
    # Appended one by one, in the order found: a rating's candidate never moves.
    assert [steps for _, steps in seen] == [done.steps[: i + 1] for i in range(len(seen))]
    alternatives.choose_candidate(**ids)  # all here now
    step = claimed.step_labels.get(index=0)
    assert step.chosen_completion == 0
    assert [(c.text, c.rating) for c in step.completions.all()] == [(done.steps[0], 0)]


def test_generation_stops_for_a_prefix_nobody_waits_for_and_resumes_when_someone_does(
    claimed, labeler
):
    from modeling.services import sampling

    Batch.objects.filter(pk=claimed.solution.batch_id).update(alternatives_k=5)
    claimed.refresh_from_db()
    problem = claimed.solution.problem
    first = ["I add $2$ and $3$.", "I subtract.", "I multiply.", "I divide.", "I guess."]
    ProposedSteps.objects.create(
        problem=problem,
        prefix=[],
        prefix_sha256=selectors.prefix_hash([]),
        k=5,
        status=ProposedSteps.Status.READY,
        steps=first,
        generator="test",
    )
    rate = {"labeling_id": claimed.pk, "user": labeler, "step_index": 0, "candidate_index": 0}
    alternatives.rate_candidate(**rate, rating_value=1)
    ahead = ProposedSteps.objects.get(prefix=first[:1])  # asked at the +1, ahead of a choice
    # Before the model gets to it, the labeler changes their mind: nobody waits for what comes
    # after that candidate any more (asked after the prompt's pass, then as it goes).
    alternatives.rate_candidate(**rate, rating_value=0)
    stopped = sampling.fill_proposal(ahead.pk)
    assert stopped.status == ProposedSteps.Status.STOPPED
    assert stopped.dropped["abandoned"] >= 1
    assert len(stopped.steps) + sum(stopped.dropped.values()) == 5

    alternatives.rate_candidate(**rate, rating_value=1)  # +1 again: wanted again, sent again
    resumed = ProposedSteps.objects.get(pk=ahead.pk)
    assert resumed.status == ProposedSteps.Status.PENDING and resumed.sent_at is not None
    resumed = sampling.fill_proposal(ahead.pk)
    assert resumed.status == ProposedSteps.Status.READY
    assert resumed.steps[: len(stopped.steps)] == stopped.steps  # kept, the new ones after
    assert len(resumed.steps) + sum(resumed.dropped.values()) == 5
    resumed.refresh_from_db()
    assert resumed.sent_at is None  # its task is through: no longer counted against the cap


def test_candidates_are_wanted_at_a_labelers_prefix_or_after_a_candidate_they_rated_plus_one(
    claimed, labeler, labeler2
):
    from labeling.models import StepLabel

    problem = claimed.solution.problem

    def asked(prefix: list[str], k: int = 2, status=ProposedSteps.Status.RUNNING, **extra) -> int:
        return ProposedSteps.objects.create(
            problem=problem,
            prefix=prefix,
            prefix_sha256=selectors.prefix_hash(prefix),
            k=k,
            status=status,
            sent_at=timezone.now(),  # its task is out
            requested_by=labeler,
            **extra,
        ).pk

    def wanted() -> dict[str, bool]:
        return {name: alternatives.proposal_wanted(pk) for name, pk in rows.items()}

    rows = {
        "first": asked([], steps=["I add.", "I subtract."]),
        "one": asked(["I add."]),
        "two": asked(["I add.", "So 5."]),
        "other": asked(["I subtract.", "So -1."]),
        "other k": asked(["I add."], k=3),
        "pending": asked(["I add!"], status=ProposedSteps.Status.PENDING),
    }
    # At step 1: the first candidates; those after a candidate only while it is rated +1.
    assert [name for name, yes in wanted().items() if yes] == ["first"]
    rate = {"labeling_id": claimed.pk, "user": labeler, "step_index": 0, "candidate_index": 0}
    alternatives.rate_candidate(**rate, rating_value=1)
    assert [name for name, yes in wanted().items() if yes] == ["first", "one"]
    alternatives.rate_candidate(**rate, rating_value=0)
    assert [name for name, yes in wanted().items() if yes] == ["first"]
    alternatives.write_step(labeling_id=claimed.pk, user=labeler, step_index=0, text="I add.")
    # At step 2: its own prefix; a first step stays wanted while the labeling is open.
    assert [name for name, yes in wanted().items() if yes] == ["first", "one"]
    Labeling.objects.filter(pk=claimed.pk).update(status=Labeling.Status.EXPIRED)
    assert not any(wanted().values())  # the labeler left: nobody waits for any of them
    ProposedSteps.objects.filter(pk=rows["first"]).delete()
    assert alternatives.proposal_wanted(rows["first"]) is False
    # The alternatives to a pre-generated step are wanted once a labeling ended on it with a −1.
    batch = make_batch(alternatives_after_error=True, alternatives_k=2)
    solution = make_solution(
        batch, steps=["I subtract.", "So -1.", "# Answer\n\n-1"], problem=problem
    )
    assert alternatives.proposal_wanted(rows["other"]) is False
    ended = Labeling.objects.create(
        solution=solution,
        labeler=labeler2,
        status=Labeling.Status.COMPLETED,
        finish_reason=FinishReason.FOUND_ERROR,
    )
    StepLabel.objects.bulk_create(StepLabel(labeling=ended, index=i) for i in range(2))
    assert alternatives.proposal_wanted(rows["other"]) is False  # a −1 at step 2, not step 3
    StepLabel.objects.create(labeling=ended, index=2)
    assert alternatives.proposal_wanted(rows["other"]) is True


@pytest.mark.django_db(transaction=True)
def test_on_the_embedded_default_one_labeler_holds_at_most_the_cap_of_generation_threads(
    labeler, settings
):
    """The demo runs each request in a thread of the web process (15 write/back cycles started
    17 threads, all waiting for the model). While the model is busy with someone else's
    candidates: a +1 on every candidate asks ahead for at most the cap of sets, and write/back
    cycles leave no thread behind for a path the labeler left."""
    from modeling.services import sampling
    from tests.helpers.threads import background_threads

    settings.STEPWISE_MODEL_TASKS_IN_THREAD = True  # what the demo does (no broker, no worker)
    cap = settings.STEPWISE_CANDIDATE_SETS_PER_LABELER
    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES, alternatives_k=5, generation=None)
    problem = make_problem("What is $2 + 3$?", answer="5")
    alternatives.add_problems(batch=batch, problem_ids=[problem.pk])
    labeling = next_labeling(labeler)
    first = [f"I try way {n}." for n in range(5)]
    ProposedSteps.objects.create(
        problem=problem,
        prefix=[],
        prefix_sha256=selectors.prefix_hash([]),
        k=5,
        status=ProposedSteps.Status.READY,
        steps=first,
        generator="test",
    )
    threads = background_threads()

    def live() -> list:
        return [t for t in threads if t.is_alive() and t.name.startswith("generate_proposal")]

    open_ = (ProposedSteps.Status.PENDING, ProposedSteps.Status.RUNNING)
    ids = {"labeling_id": labeling.pk, "user": labeler}
    generator = sampling.generator_from_settings()
    with generator._lock:  # the model is busy: every request's thread waits for it
        for index in range(5):
            alternatives.rate_candidate(**ids, step_index=0, candidate_index=index, rating_value=1)
        assert len(live()) == cap
        assert ProposedSteps.objects.count() == 1 + cap  # the aheads past the cap were not made
        mine = ProposedSteps.objects.filter(requested_by=labeler)
        assert mine.filter(status__in=open_).count() == cap
        for cycle in range(5 * cap):
            alternatives.write_step(**ids, step_index=0, text=f"I write ${cycle}$.")
            alternatives.step_back(**ids)
            assert mine.filter(sent_at__isnull=False).count() <= cap
        # Back at step 1, nothing asked past it is wanted: each thread waiting for the model
        # ends once its request is stopped (their ends are waited for, not a time).
        assert not mine.filter(status__in=open_).exists()
        deadline = time.monotonic() + 120
        while live() and time.monotonic() < deadline:
            live()[0].join(timeout=1)
        assert live() == []
    assert not mine.filter(sent_at__isnull=False).exists()  # no task out: the cap is free
