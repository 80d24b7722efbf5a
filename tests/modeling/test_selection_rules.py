"""The selection rules in the product (issue 30): a generation picks by the rule a lead or a
researcher chose (convincing_wrong, uncertainty, mix, uniform), and every pick records its rule
and its score (for uncertainty: the ensemble's disagreement) in the database."""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from labeling.models import Solution
from labeling.services.importing import import_math
from modeling.models import GenerationRun, ModelVersion, SelectionReason, SolutionScore, TrainingRun
from modeling.services import loop, pool
from modeling.services.loop import BadParameters
from modeling.services.pipeline import run_generation_inline
from modeling.services.pool import import_pool
from tests.modeling.test_loop import SAMPLE_DIR


@pytest.fixture
def demo_pool(db):
    import_math(SAMPLE_DIR / "problems.jsonl")
    return import_pool(SAMPLE_DIR / "solutions.jsonl")


def head_model(mode: str = "head") -> ModelVersion:
    """An active model trained here (in `mode`), with no files: the tests give it scores."""
    run = TrainingRun.objects.create(
        name="tiny", config={"mode": mode}, status=TrainingRun.Status.SUCCEEDED
    )
    version = ModelVersion.objects.create(
        run=run, name=f"prm-{mode}", backbone="tiny", artifact_path="/x", passed_evaluation=True
    )
    version.activate()
    return version


def fixed_scores(version: ModelVersion, heads: int) -> dict[int, tuple[float, float]]:
    """PRM score rises with the id; the ensemble's disagreement falls with it (ties in pairs)."""
    given = {}
    for solution in Solution.objects.filter(pool_entry__isnull=False).order_by("pk"):
        given[solution.pk] = (solution.pk / 1000, round(0.5 - (solution.pk // 2) / 1000, 6))
    SolutionScore.objects.bulk_create(
        SolutionScore(
            solution_id=pk,
            model_version=version,
            score=score,
            step_probs=[],
            uncertainty=uncertainty,
            ensemble_heads=heads,
        )
        for pk, (score, uncertainty) in given.items()
    )
    return given


def picks(run: GenerationRun) -> list[SelectionReason]:
    return list(SelectionReason.objects.filter(generation_run=run).order_by("rank"))


def test_uncertainty_picks_record_the_ensembles_spread_as_their_score(demo_pool, settings):
    settings.STEPWISE_ENSEMBLE_HEADS = 3
    version = head_model()
    given = fixed_scores(version, heads=3)
    run = run_generation_inline(
        loop.start_generation(
            params={"rule": "uncertainty", "k": 5, "per_problem_cap": None, "retrain": False}
        )
    )
    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    chosen = picks(run)
    expected = sorted(given, key=lambda pk: (-given[pk][1], pk))[:5]  # ties: the lower id
    assert [p.solution_id for p in chosen] == expected
    assert [p.rule for p in chosen] == ["uncertainty"] * 5
    assert [p.score for p in chosen] == [given[pk][1] for pk in expected]
    assert run.steps["score"]["detail"]["ensemble_heads"] == 3
    assert run.batch.solutions.count() == 5


def test_an_uncertainty_measured_by_another_ensemble_size_does_not_count(demo_pool, settings):
    settings.STEPWISE_ENSEMBLE_HEADS = 3
    version = head_model()
    fixed_scores(version, heads=3)
    run = loop.start_generation(
        params={"rule": "uncertainty", "k": 5, "retrain": False, "ensemble_heads": 4}
    )
    GenerationRun.objects.filter(pk=run.pk).update(model_version=version)
    run.refresh_from_db()
    with pytest.raises(loop.StepFailed, match="no pool solution has an uncertainty"):
        pool.select_for_run(run)


def test_a_mix_records_the_rule_that_chose_each_pick(demo_pool):
    version = head_model()
    given = fixed_scores(version, heads=5)
    run = run_generation_inline(
        loop.start_generation(
            params={
                "rule": "mix",
                "shares": {"convincing_wrong": 0.5, "uncertainty": 0.5},
                "k": 6,
                "per_problem_cap": None,
                "retrain": False,
            }
        )
    )
    chosen = picks(run)
    assert Counter(p.rule for p in chosen) == {"convincing_wrong": 3, "uncertainty": 3}
    assert [p.rule for p in chosen] == ["convincing_wrong"] * 3 + ["uncertainty"] * 3
    for pick in chosen:
        score, uncertainty = given[pick.solution_id]
        assert pick.score == (uncertainty if pick.rule == "uncertainty" else score)
    assert all(p.correct is False for p in chosen if p.rule == "convincing_wrong")
    assert len({p.solution_id for p in chosen}) == 6
    assert run.params["shares"] == {"convincing_wrong": 0.5, "uncertainty": 0.5}


def test_a_mix_fills_the_rest_in_one_order_whatever_the_order_of_its_shares(demo_pool):
    version = head_model()
    fixed_scores(version, heads=5)
    shares = {"uncertainty": 0.5, "convincing_wrong": 0.5}  # uncertainty named first
    run = run_generation_inline(
        loop.start_generation(params={"rule": "mix", "shares": shares, "k": 5, "retrain": False})
    )
    # convincing_wrong comes first in MIX_RULES: 3 (2.5 rounded up) before uncertainty's 3.
    assert [p.rule for p in picks(run)] == ["convincing_wrong"] * 3 + ["uncertainty"] * 2


def test_uniform_is_seeded_and_records_the_prm_score(demo_pool):
    version = head_model()
    given = fixed_scores(version, heads=5)
    params = {"rule": "uniform", "k": 5, "per_problem_cap": 1, "retrain": False, "seed": 3}
    first = picks(run_generation_inline(loop.start_generation(params=params)))
    assert [p.rule for p in first] == ["uniform"] * 5
    assert all(p.score == given[p.solution_id][0] for p in first)
    assert len({Solution.objects.get(pk=p.solution_id).problem_id for p in first}) == 5
    # The same seed draws the same again: select again on the pool as it was.
    run = GenerationRun.objects.get()
    Solution.objects.filter(batch=run.batch).update(batch=None, generation=None)
    assert [p.solution_id for p in pool.select_for_run(run)] == [p.solution_id for p in first]


def test_the_default_rule_is_the_papers(demo_pool):
    version = head_model()
    fixed_scores(version, heads=5)
    run = run_generation_inline(loop.start_generation(params={"k": 5, "retrain": False}))
    assert run.params["rule"] == "convincing_wrong"
    assert {p.rule for p in picks(run)} <= {"convincing_wrong", "convincing"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"rule": "most_confusing"},
            "unknown selection rule 'most_confusing'; choose one of "
            "convincing_wrong, uncertainty, disagreement, mix, uniform",
        ),
        ({"rule": "mix"}, "needs shares"),
        ({"rule": "mix", "shares": {"convincing_wrong": 0.5, "uncertainty": 0.4}}, "sum to 1"),
        ({"rule": "mix", "shares": {"convincing_wrong": 0.5, "bogus": 0.5}}, "cannot hold 'bogus'"),
        ({"rule": "mix", "shares": {"uniform": "half"}}, "could not convert"),
        ({"rule": "uniform", "shares": {"uniform": 1.0}}, "shares are for the rule 'mix'"),
        ({"rule": "uniform", "scope": "per_problem", "per_problem_k": 2}, "per_problem"),
        ({"rule": "uncertainty", "ensemble_heads": 1}, r"\[2, 32\]"),
    ],
)
def test_bad_rule_parameters_are_refused_and_nothing_starts(db, params, message):
    with pytest.raises(BadParameters, match=message):
        loop.start_generation(params=params)
    assert not GenerationRun.objects.exists()


def test_uncertainty_is_refused_for_lora_and_full_models_with_its_cost(db, settings):
    settings.STEPWISE_ENSEMBLE_HEADS = 4
    head_model("lora")
    with pytest.raises(BadParameters, match="lora mode, where it would cost 4 trainings"):
        loop.start_generation(params={"rule": "uncertainty", "retrain": False})
    with pytest.raises(BadParameters, match="full mode"):
        loop.start_generation(
            params={"rule": "uncertainty", "train_config": {"mode": "full"}, "ensemble_heads": 3}
        )
    with pytest.raises(BadParameters, match="lora mode"):
        loop.start_generation(
            params={"rule": "mix", "shares": {"uniform": 0.5, "uncertainty": 0.5}, "retrain": False}
        )
    # A mix without an uncertainty share needs no ensemble.
    loop.start_generation(
        params={
            "rule": "mix",
            "shares": {"uniform": 0.5, "convincing_wrong": 0.5},
            "retrain": False,
        }
    )


def test_uncertainty_is_refused_for_an_imported_model(db):
    version = ModelVersion.objects.create(
        name="imported",
        backbone="x",
        artifact_path="/x",
        passed_evaluation=True,
        kind=ModelVersion.Kind.TOKEN_CLASSIFICATION,
    )
    version.activate()
    with pytest.raises(BadParameters, match="was imported"):
        loop.start_generation(params={"rule": "uncertainty", "retrain": False})


# --- a real tiny model: the score step fits the ensemble and stores its disagreement ------------


def test_the_score_step_measures_the_ensembles_disagreement_on_a_tiny_model(
    demo_pool, tmp_path, shared_data, open_evaluation_gate, settings
):
    from labeling.services.importing import import_prm800k
    from modeling.services import execution, runs
    from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config

    settings.MEDIA_ROOT = tmp_path / "media"
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")
    config = tiny_train_config(make_tiny_backbone(tmp_path / "tiny"))
    version = execution.execute_training_run(runs.create_training_run(config=config).pk)
    assert version is not None and version == ModelVersion.active()
    run = run_generation_inline(
        loop.start_generation(
            params={"rule": "uncertainty", "ensemble_heads": 2, "k": 4, "retrain": False}
        )
    )
    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    measured = SolutionScore.objects.filter(model_version=version, ensemble_heads=2)
    assert measured.count() == 63 and not measured.filter(uncertainty__isnull=True).exists()
    spreads = list(measured.values_list("uncertainty", flat=True))
    assert all(0 <= u <= 0.5 for u in spreads) and max(spreads) > 0
    chosen = picks(run)
    by_solution = dict(measured.values_list("solution_id", "uncertainty"))
    assert [p.score for p in chosen] == [by_solution[p.solution_id] for p in chosen]
    assert [p.score for p in chosen] == sorted(by_solution.values(), reverse=True)[:4]
    assert {p.rule for p in chosen} == {"uncertainty"}
    assert run.steps["score"]["detail"]["uncertainties"] == 63


# --- the page, the API and run_generation ---------------------------------------------------------


def test_the_page_offers_the_rules_and_refuses_bad_shares(client, lead, db):
    client.force_login(lead)
    url = reverse("modeling_loop:generations")
    page = client.get(url).content.decode()
    for rule in ("convincing_wrong", "uncertainty", "mix", "uniform"):
        assert f'value="{rule}"' in page
    assert "one training per head" in page  # what uncertainty costs outside head mode
    form = {
        "k": 6,
        "convincing_wrong_fraction": 0.8,
        "per_problem_cap": 2,
        "scope": "pool",
        "overlap": 1,
        "rule": "mix",
        "share_convincing_wrong": 0.5,
        "share_uncertainty": 0.4,
    }
    response = client.post(url, form)
    assert response.status_code == 200
    assert "Mix shares: mix shares must sum to 1, got 0.9." in response.content.decode()
    response = client.post(url, {**form, "rule": "best_guess"})
    assert "Select a valid choice" in response.content.decode()
    assert not GenerationRun.objects.exists()


def test_the_page_starts_a_mix(client, lead, demo_pool, eager_tasks):
    version = head_model()
    fixed_scores(version, heads=5)
    client.force_login(lead)
    with eager_tasks():
        response = client.post(
            reverse("modeling_loop:generations"),
            {
                "k": 4,
                "convincing_wrong_fraction": 0.8,
                "per_problem_cap": 2,
                "scope": "pool",
                "overlap": 1,
                "rule": "mix",
                "share_uncertainty": 0.5,
                "share_uniform": 0.5,
                "retrain": "",
            },
        )
    assert response.status_code == 302
    run = GenerationRun.objects.get()
    assert run.params["rule"] == "mix"
    assert run.params["shares"] == {"uncertainty": 0.5, "uniform": 0.5}
    assert Counter(p.rule for p in picks(run)) == {"uncertainty": 2, "uniform": 2}
    page = client.get(response.url).content.decode()
    assert "mix (uncertainty 0.5, uniform 0.5)" in page
    assert "ensemble disagreement" in page and "PRM score" in page


def test_the_api_validates_the_rule_with_clear_400s(client, researcher, demo_pool):
    client.force_login(researcher)

    def start(body: dict):
        return client.post("/p/default/api/generations/", body, content_type="application/json")

    response = start({"rule": "most_confusing"})
    assert response.status_code == 400
    assert (
        "choose one of convincing_wrong, uncertainty, disagreement, mix, uniform"
        in response.json()["rule"][0]
    )
    response = start({"rule": "mix"})
    assert response.status_code == 400 and "needs shares" in response.json()["shares"][0]
    response = start({"rule": "mix", "shares": {"convincing_wrong": 0.7, "uncertainty": 0.7}})
    assert response.status_code == 400 and "sum to 1, got 1.4" in response.json()["shares"][0]
    response = start({"rule": "mix", "shares": {"convincing_wrong": "lots"}})
    assert response.status_code == 400 and "shares" in response.json()
    head_model("lora")
    response = start({"rule": "uncertainty", "retrain": False})
    assert response.status_code == 400 and "trainings" in response.json()["detail"]
    assert not GenerationRun.objects.exists()
    version = ModelVersion.active()
    ModelVersion.objects.update(is_active=False)
    version = head_model()
    fixed_scores(version, heads=5)
    response = start(
        {
            "rule": "mix",
            "shares": {"uncertainty": 0.5, "convincing_wrong": 0.5},
            "k": 4,
            "retrain": False,
        }
    )
    assert response.status_code == 201, response.json()
    assert response.json()["params"]["shares"] == {"uncertainty": 0.5, "convincing_wrong": 0.5}
    run_generation_inline(GenerationRun.objects.get())
    generation = response.json()["generation"]
    rows = client.get(f"/p/default/api/generations/{generation}/selections/").json()
    assert Counter(r["rule"] for r in rows) == {"uncertainty": 2, "convincing_wrong": 2}


def test_run_generation_takes_the_rule(demo_pool, capsys, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    version = head_model()
    fixed_scores(version, heads=2)
    call_command(
        "run_generation",
        "--rule",
        "mix",
        "--shares",
        "uniform=0.5,uncertainty=0.5",
        "--ensemble-heads",
        "2",
        "--k",
        "4",
        "--no-retrain",
        "--inline",
    )
    assert "4 solutions queued" in capsys.readouterr().out
    run = GenerationRun.objects.get()
    assert Counter(p.rule for p in picks(run)) == {"uniform": 2, "uncertainty": 2}
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("run_generation", "--rule", "bogus", "--no-retrain", "--inline")
    with pytest.raises(CommandError, match="not RULE=SHARE"):
        call_command("run_generation", "--rule", "mix", "--shares", "uniform:1", "--inline")
    with pytest.raises(CommandError, match="sum to 1"):
        call_command("run_generation", "--rule", "mix", "--shares", "uniform=0.2", "--inline")


def test_the_review_page_shows_each_picks_rule_and_score(client, lead, labeler):
    from tests.helpers.users import make_user
    from tests.modeling.test_review import build_scored_batch

    batch, agreeing, disputed, version = build_scored_batch(labeler, make_user("lars", "labeler"))
    run = GenerationRun.objects.create(generation=1, model_version=version, batch=batch)
    SelectionReason.objects.create(
        generation_run=run,
        solution=disputed,
        model_version=version,
        score=0.4321,
        rank=1,
        rule="uncertainty",
    )
    SelectionReason.objects.create(
        generation_run=run,
        solution=agreeing,
        model_version=version,
        score=0.875,
        rank=2,
        rule="convincing_wrong",
    )
    client.force_login(lead)
    page = client.get(f"{reverse('modeling_review:queue')}?batch={batch.pk}").content.decode()
    rows = page.split('id="review-solutions"')[1].split("<tr")[2:]
    assert "uncertainty" in rows[0] and "0.432" in rows[0] and "ensemble disagreement" in rows[0]
    assert "convincing wrong" in rows[1] and "0.875" in rows[1] and "PRM score" in rows[1]
