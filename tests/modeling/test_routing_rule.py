"""The disagreement rule in the product (issue 47): a generation routes to humans the pool
solutions the judges' pre-labels and the PRM disagree on most; the pool is pre-labeled by a
run over it; the rule is choosable in the form, the API and the command."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from labeling.models import PreLabel, Solution
from modeling.models import GenerationRun, PreLabelRun, SelectionReason, SolutionScore
from modeling.services import loop, pool
from modeling.services.pipeline import run_generation_inline
from modeling.services.pool import import_pool
from tests.modeling.test_loop import SAMPLE_DIR
from tests.modeling.test_selection_rules import head_model

RIGHT, WRONG = [0.1, 0.1, 0.8], [0.8, 0.1, 0.1]


@pytest.fixture
def scripted(monkeypatch):
    """The mc judge's generator answers from test_prelabel_runs' script."""
    from modeling.services import sampling
    from tests.modeling.test_prelabel_runs import Scripted, rollouts

    generator = Scripted(rollouts)
    monkeypatch.setattr(sampling, "generator_from_settings", lambda: generator)
    return generator


@pytest.fixture
def demo_pool(db):
    from labeling.services.importing import import_math

    import_math(SAMPLE_DIR / "problems.jsonl")
    return import_pool(SAMPLE_DIR / "solutions.jsonl")


def give_verdicts(version, verdicts: dict[int, tuple[int | None, int | None | str]]) -> None:
    """Per solution: (the PRM's first wrong step or None, the llm judge's first wrong step, None
    for "none wrong", or "nothing" for a pre-label with no label). Every other pool solution
    gets a PRM score only (one verdict: not eligible)."""
    for solution in Solution.objects.filter(pool_entry__isnull=False):
        n = len(solution.steps)
        prm, llm = verdicts.get(solution.pk, (None, "absent"))
        probs = [WRONG if i == prm else RIGHT for i in range(n)]
        SolutionScore.objects.create(
            solution=solution, model_version=version, score=0.5, step_probs=probs
        )
        if llm == "absent":
            continue
        if llm == "nothing":
            labels, first = [None] * n, None
        else:
            labels = [1 if llm is None or i < llm else (-1 if i == llm else None) for i in range(n)]
            first = llm
        PreLabel.objects.create(
            solution=solution,
            kind="llm",
            judge="llm: test",
            run_id=1,
            labels=labels,
            scores=[None if label is None else 0.9 for label in labels],
            first_error=first,
        )


def test_a_generation_routes_what_the_judges_and_the_prm_disagree_on(demo_pool):
    version = head_model()
    ids = list(Solution.objects.filter(pool_entry__isnull=False).order_by("pk")[:5])
    a, b, c, d, e = ids
    give_verdicts(
        version,
        {
            a.pk: (None, 0),  # llm: step 0 wrong, PRM: none -> 1.0
            b.pk: (0, 0),  # both step 0 -> 0
            c.pk: (None, len(c.steps) - 1),  # llm: the last step -> 0.5 + 0.5 / n
            d.pk: (None, None),  # both right -> 0
            e.pk: (None, "nothing"),  # the judge said nothing: one verdict, not eligible
        },
    )
    run = run_generation_inline(
        loop.start_generation(
            params={"rule": "disagreement", "k": 10, "per_problem_cap": None, "retrain": False}
        )
    )
    assert run.status == GenerationRun.Status.SUCCEEDED, run.error
    chosen = list(SelectionReason.objects.filter(generation_run=run).order_by("rank"))
    expected = {
        a.pk: 1.0,
        b.pk: 0.0,
        c.pk: 0.5 + 0.5 / len(c.steps),
        d.pk: 0.0,
    }
    assert [(p.solution_id, p.rule) for p in chosen] == [
        (a.pk, "disagreement"),
        (c.pk, "disagreement"),
        (b.pk, "disagreement"),  # ties to the lower id
        (d.pk, "disagreement"),
    ]
    assert [p.score for p in chosen] == pytest.approx([expected[p.solution_id] for p in chosen])
    assert chosen[0].score_label == "judge disagreement"
    assert run.batch.solutions.count() == 4
    assert e.pk not in {p.solution_id for p in chosen}


def test_the_newest_pre_label_of_each_kind_counts_and_the_prm_verdict_is_its_threshold(demo_pool):
    version = head_model()
    solution = Solution.objects.filter(pool_entry__isnull=False).order_by("pk").first()
    n = len(solution.steps)
    SolutionScore.objects.create(
        solution=solution, model_version=version, score=0.5, step_probs=[RIGHT] * n
    )
    old = dict(solution=solution, kind="mc", judge="mc", labels=[-1] + [None] * (n - 1))
    PreLabel.objects.create(**old, run_id=1, scores=[0.9] + [None] * (n - 1), first_error=0)
    PreLabel.objects.create(
        solution=solution, kind="mc", judge="mc", run_id=2, labels=[1] * n, scores=[0.9] * n
    )
    # The newest mc pre-label says "none wrong", as does the PRM: no disagreement.
    assert pool.judge_disagreements(version.pk, Solution.objects.filter(pk=solution.pk)) == {
        solution.pk: 0.0
    }
    assert pool.prm_first_error([RIGHT, [0.5, 0.2, 0.3], WRONG]) == 1
    assert pool.prm_first_error([]) is None


def test_routing_without_any_pre_label_fails_the_select_step_saying_what_to_do(demo_pool):
    version = head_model()
    give_verdicts(version, {})
    run = loop.start_generation(params={"rule": "disagreement", "k": 3, "retrain": False})
    GenerationRun.objects.filter(pk=run.pk).update(model_version=version)
    run.refresh_from_db()
    with pytest.raises(loop.StepFailed, match="prelabel --pool"):
        pool.select_for_run(run)


def test_the_rule_is_choosable_in_the_form_the_api_and_the_command(demo_pool, client, lead):
    head_model()
    client.force_login(lead)
    page = client.get(reverse("modeling_loop:generations"))
    assert b'value="disagreement"' in page.content
    response = client.post(
        "/p/default/api/generations/",
        {"rule": "disagreement", "k": 3, "retrain": False},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert GenerationRun.objects.get().params["rule"] == "disagreement"
    GenerationRun.objects.all().delete()
    call_command("run_generation", "--rule", "disagreement", "--k", "3", "--no-retrain")
    assert GenerationRun.objects.get().params["rule"] == "disagreement"


def test_the_pool_is_pre_labeled_by_a_run_over_its_selectable_solutions(demo_pool, scripted):
    from io import StringIO

    from django.core.management import CommandError

    selectable = sorted(pool.selectable_pool().values_list("pk", flat=True))
    out = StringIO()
    call_command(
        "prelabel",
        "--pool",
        "--judge",
        "mc",
        "--k",
        "1",
        "--max-solutions",
        "2",
        "--wait",
        stdout=out,
    )
    run = PreLabelRun.objects.get()
    assert run.batch is None and run.solution_ids == selectable[:2]
    assert f"Pre-label run {run.pk} (mc) on the candidate pool: 2 solutions" in out.getvalue()
    assert (
        sorted(PreLabel.objects.filter(run_id=run.pk).values_list("solution_id", flat=True))
        == (selectable[:2])
    )
    with pytest.raises(CommandError):
        call_command("prelabel", "--pool", "--batch", "x", "--judge", "mc", stderr=StringIO())
    assert PreLabelRun.objects.count() == 1


def test_the_api_pre_labels_the_pool_or_a_batch_never_both_nor_neither(demo_pool, lead, client):
    client.force_login(lead)

    def start(body: dict):
        return client.post("/p/default/api/prelabel-runs/", body, content_type="application/json")

    assert start({"judge": "mc"}).status_code == 400
    assert start({"judge": "mc", "pool": True, "batch": 1}).status_code == 400
    assert not PreLabelRun.objects.exists()
    answer = start({"judge": "mc", "pool": True, "k": 1, "max_solutions": 3})
    assert answer.status_code == 201, answer.content
    assert answer.json()["batch"] is None and answer.json()["batch_name"] is None
    assert answer.json()["total"] == 3
