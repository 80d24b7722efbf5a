"""The alternatives protocol (PRM800K phase 1) through its services, with the real local
generator: candidates generated ahead, rated, chosen or replaced by the labeler's own step,
exported as a phase-1 line of the release's shape."""

from __future__ import annotations

import json

import pytest
from django.db.models import F
from django.utils import timezone

from labeling import prm800k, selectors
from labeling.models import Batch, FinishReason, Labeling, ProposedSteps, RatingEvent, Solution
from labeling.services import alternatives, queue
from labeling.services.errors import Conflict, LabelingError
from tests.factories import make_batch, make_problem


@pytest.fixture
def short_steps(settings):
    settings.STEPWISE_GENERATOR_STEP_MAX_TOKENS = 24  # a step in seconds on a loaded CPU


@pytest.fixture
def claimed(db, labeler, short_steps):
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
        first = alternatives.current_proposal(claimed)  # at claim time; eager task runs it
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
    ahead = ProposedSteps.objects.get(prefix_sha256=alternatives.prefix_hash([first.steps[0]]))
    ready(ahead)  # generated before the labeler chose: no wait at step 2
    alternatives.choose_candidate(
        labeling_id=claimed.pk, user=labeler, step_index=0, candidate_index=0
    )
    assert alternatives.current_proposal(claimed).pk == ahead.pk

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
        proposal = alternatives.current_proposal(claimed)
    proposal = ready(proposal)
    rate = {"labeling_id": claimed.pk, "user": labeler, "step_index": 0, "candidate_index": 0}
    alternatives.rate_candidate(**rate, rating_value=-1)
    alternatives.rate_candidate(**rate, rating_value=-1)  # a double submit: nothing new
    assert RatingEvent.objects.filter(labeling=claimed).count() == 1
    with pytest.raises(Conflict, match="already rated -1"):
        alternatives.rate_candidate(**rate, rating_value=1)
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


def test_a_generator_that_cannot_answer_fails_the_proposal_and_try_again_resends_it(
    claimed, settings, eager_tasks
):
    from modeling.services import sampling

    sampling.generator_from_settings.cache_clear()
    settings.STEPWISE_GENERATOR_URL = "http://127.0.0.1:9/v1"  # nothing listens there
    settings.STEPWISE_GENERATOR_RETRIES = 0
    try:
        with eager_tasks():
            proposal = alternatives.current_proposal(claimed)
        proposal.refresh_from_db()
        assert proposal.status == ProposedSteps.Status.FAILED
        assert "127.0.0.1:9" in proposal.error and proposal.steps == []
        assert alternatives.fill_proposal(proposal.pk) is None  # a redelivery does nothing
        settings.STEPWISE_GENERATOR_URL = ""
        sampling.generator_from_settings.cache_clear()
        with eager_tasks():
            again = alternatives.current_proposal(claimed)  # "try again"
        assert again.pk == proposal.pk
        ready(again)
    finally:
        sampling.generator_from_settings.cache_clear()


def test_only_an_alternatives_batch_takes_bare_problems(db):
    batch = make_batch()
    with pytest.raises(LabelingError, match="alternatives protocol"):
        alternatives.add_problems(batch=batch, problem_ids=[make_problem().pk])
    batch.protocol = Batch.Protocol.ALTERNATIVES
    with pytest.raises(LabelingError, match="No problem with id 999999"):
        alternatives.add_problems(batch=batch, problem_ids=[999999])
