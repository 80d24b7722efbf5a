"""Model-assisted review: the active PRM's step probabilities beside each labeler's ratings."""

from __future__ import annotations

import re

import pytest
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from labeling.models import Labeling, Solution
from labeling.services import queue
from modeling import selectors
from modeling.models import ModelVersion, SolutionScore
from tests.factories import make_batch, make_solution
from tests.labeling.helpers import label

# Per step [P(-1), P(0), P(+1)]: sure step 1 is right, unsure at 2, sure step 3 is wrong.
PROBS = [[0.05, 0.05, 0.9], [0.3, 0.3, 0.4], [0.8, 0.1, 0.1]]


def labeled(solution: Solution, user, ratings: list[int]) -> Labeling:
    """A completed labeling with these ratings, as a labeler's claim would start it."""
    queue.ensure_labeler(user)
    Solution.objects.filter(pk=solution.pk).update(active_count=F("active_count") + 1)
    labeling = Labeling.objects.create(
        solution=solution, labeler=user, lease_expires_at=timezone.now()
    )
    return label(labeling, ratings)


def active_model() -> ModelVersion:
    version = ModelVersion.objects.create(
        name="prm-review", backbone="tiny", artifact_path="/nonexistent", passed_evaluation=True
    )
    version.activate()
    return version


@pytest.fixture
def scored_batch(db, labeler, labeler2):
    return build_scored_batch(labeler, labeler2)


def build_scored_batch(labeler, labeler2):
    """Two solutions the active model scored: one labeled as the model thinks, one disputed."""
    batch = make_batch(overlap=2)
    agreeing, disputed = make_solution(batch), make_solution(batch)
    version = active_model()
    for solution in (agreeing, disputed):
        SolutionScore.objects.create(
            solution=solution, model_version=version, score=0.1, step_probs=PROBS
        )
    labeled(agreeing, labeler, [1, 1, -1])  # what the model thinks
    labeled(disputed, labeler, [1, 0, -1])
    labeled(disputed, labeler2, [-1])  # the model is sure step 1 is right
    return batch, agreeing, disputed, version


def test_step_disagreement_is_one_minus_the_models_probability_of_that_rating():
    assert selectors.step_disagreement(PROBS[0], 1) == pytest.approx(0.1)
    assert selectors.step_disagreement(PROBS[0], -1) == pytest.approx(0.95)
    assert selectors.model_rating(PROBS[1]) == 1 and selectors.model_rating(PROBS[2]) == -1


def test_queue_puts_the_largest_disagreement_first_and_ranks_labelers(scored_batch):
    batch, agreeing, disputed, version = scored_batch
    queue = selectors.review_queue(batch)
    assert queue.model_version == version and queue.unscored == 0
    assert [r.solution.pk for r in queue.solutions] == [disputed.pk, agreeing.pk]
    assert queue.solutions[0].disagreement == pytest.approx(0.95)  # lars's -1 at step 1
    assert queue.solutions[1].disagreement == pytest.approx(0.6)  # lena's +1 at step 2
    lars, lena = queue.labelers
    assert (lars.labeler, lars.steps) == ("lars", 1)
    assert lars.mean_disagreement == pytest.approx(0.95) and lars.argmax_differs == 1.0
    assert (lena.labeler, lena.steps) == ("lena", 6)
    # lena: 0.1, 0.6, 0.2 on one solution, 0.1, 0.7, 0.2 on the other; differs once (the 0)
    assert lena.mean_disagreement == pytest.approx((0.1 + 0.6 + 0.2 + 0.1 + 0.7 + 0.2) / 6)
    assert lena.argmax_differs == pytest.approx(1 / 6)


def test_solution_review_lines_up_steps_model_and_labelers(scored_batch):
    _, _, disputed, _ = scored_batch
    review = selectors.review_solution(disputed)
    rows = review.steps
    assert [row["model_rating"] for row in rows] == [1, 1, -1]
    assert [label["rating"] for label in rows[0]["labels"]] == [1, -1]
    assert [label["rating"] for label in rows[2]["labels"]] == [-1, None]  # lars stopped at 1
    assert rows[0]["disagreement"] == pytest.approx(0.95)
    assert rows[2]["disagreement"] == pytest.approx(0.2)


def test_unscored_solutions_are_counted_and_no_active_model_is_said(db, labeler):
    batch = make_batch()
    labeled(make_solution(batch), labeler, [1, 1, 1])
    make_solution(batch)  # unlabeled: not for review
    assert selectors.review_queue(batch).model_version is None
    assert selectors.review_queue(batch).unscored == 1
    active_model()
    queue = selectors.review_queue(batch)
    assert queue.unscored == 1 and queue.solutions == []


def test_pages_are_for_leads_only(client, scored_batch, labeler, lead):
    batch, _, disputed, _ = scored_batch
    queue_url = f"{reverse('modeling_review:queue')}?batch={batch.pk}"
    solution_url = reverse("modeling_review:solution", args=[disputed.pk])
    client.force_login(labeler)
    assert client.get(queue_url).status_code == 403
    assert client.get(solution_url).status_code == 403
    client.force_login(lead)
    page = client.get(queue_url).content.decode()
    assert f"Solution {disputed.pk}" in page and "0.95" in page
    page = client.get(solution_url).content.decode()
    assert "Adjudicate this solution" in page and "lars" in page


def test_adjudicate_links_show_only_to_those_who_may_adjudicate(
    client, scored_batch, lead, researcher
):
    batch, _, disputed, _ = scored_batch
    pages = [
        f"{reverse('modeling_review:queue')}?batch={batch.pk}",
        reverse("modeling_review:solution", args=[disputed.pk]),
    ]
    for user, may in ((researcher, False), (lead, True)):
        client.force_login(user)
        for page in pages:
            html = client.get(page).content.decode()
            links = re.findall(r'href="(/p/default/label/lead/adjudication/\d+/)"', html)
            assert bool(links) is may and ("Adjudicate" in html) is may, (user, page)
            assert all(client.get(link).status_code == 200 for link in links)
    client.force_login(researcher)  # what the links answered them before
    assert client.get(reverse("labeling:adjudicate", args=[disputed.pk])).status_code == 403


def test_score_button_scores_the_missing_solutions_with_the_active_model(
    client,
    lead,
    labeler,
    tmp_path,
    shared_data,
    open_evaluation_gate,
    eager_tasks,
):
    """The button sends the scoring (eager in tests) and the rows appear; with no active model
    it says so and scores nothing."""
    from labeling.services.importing import import_prm800k
    from modeling.services import execution, runs
    from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config

    batch = make_batch()
    solution = make_solution(batch)
    labeled(solution, labeler, [1, 1, 1])
    client.force_login(lead)
    url = reverse("modeling_review:score", args=[batch.pk])
    response = client.post(url, follow=True)
    assert b"There is no active model" in response.content
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")  # labels to train on
    config = tiny_train_config(make_tiny_backbone(tmp_path / "tiny"))
    version = execution.execute_training_run(runs.create_training_run(config=config).pk)
    assert version == ModelVersion.active()
    with eager_tasks():
        response = client.post(url, follow=True)
    assert b"Scoring 1 solutions" in response.content
    score = SolutionScore.objects.get(solution=solution, model_version=version)
    assert len(score.step_probs) == 3 and all(abs(sum(p) - 1) < 1e-4 for p in score.step_probs)
    assert selectors.review_queue(batch).unscored == 0
