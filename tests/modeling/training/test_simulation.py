"""The simulation on a tiny model and a real slice of the stepwise-critic oracle, and the
simulated labelers driving the real HTTP endpoints."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from modeling.selectors import oracle_ratings
from modeling.training import simulation
from modeling.training.data import Alternative, LabeledSolution
from modeling.training.simulation import (
    Point,
    SimulationConfig,
    candidates_from_oracle,
    efficiency_ratio,
)
from tests.helpers.paths import SAMPLE_DIR


def test_candidates_are_every_rated_path_and_wrong_means_an_oracle_minus_one():
    example = LabeledSolution(
        "P", ["a", "b", "c"], [1, 0, 1], [Alternative(1, "b'", -1), Alternative(2, "c'", 1)]
    )
    cands = candidates_from_oracle([example])
    assert [(c.steps, c.ratings, c.slots, c.wrong) for c in cands] == [
        (["a", "b", "c"], [1, 0, 1], [0, 1, 2], False),
        (["a", "b'"], [1, -1], [0, 3], True),
        (["a", "b", "c'"], [1, 0, 1], [0, 1, 4], False),
    ]
    assert cands[1].n_labels == 2


def points(arm, rows):
    return [Point(arm, g, n, n * 10, 0.0, auc, 0.0, 1) for g, (n, auc) in enumerate(rows)]


def test_efficiency_ratio_interpolates_uniform_solutions_to_active_final_auroc():
    active = points("active", [(10, 0.6), (20, 0.7)])
    uniform = points("uniform", [(10, 0.6), (30, 0.65), (50, 0.75)])
    ratio, bound, needed = efficiency_ratio(active, uniform)
    assert bound == "=" and needed == pytest.approx(40) and ratio == pytest.approx(2.0)
    assert efficiency_ratio(active, points("uniform", [(10, 0.6), (40, 0.65)]))[:2] == (2.0, ">")
    assert efficiency_ratio(active, points("uniform", [(10, 0.8)]))[:2] == (0.5, "<=")


@pytest.fixture(scope="module")
def critic_slice():
    from tests.helpers.paths import require_shared_data
    from tests.helpers.tiny_models import PARQUET

    require_shared_data()
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from modeling.training.data import examples_from_critic_rows

    table = pq.read_table(PARQUET)
    problems = sorted(set(table.column("instruction").to_pylist()))[:16]
    rows = table.filter(
        pc.is_in(table.column("instruction"), value_set=pa.array(problems))
    ).to_pylist()
    return examples_from_critic_rows(rows)


def test_simulation_runs_both_arms_at_equal_budgets_and_writes_table_and_plot(
    critic_slice, tmp_path
):
    from tests.helpers.tiny_models import save_tiny_llama

    backbone = save_tiny_llama(tmp_path / "tiny")
    config = SimulationConfig(
        generations=2, per_generation=8, uniform_generations=3, holdout_fraction=0.25, head_steps=50
    )

    def featurize(ordered):
        return simulation.backbone_features(ordered, backbone=backbone, max_length=512)

    result = simulation.simulate(critic_slice, featurize, config)
    active, uniform = result.arm("active"), result.arm("uniform")
    assert [p.solutions for p in active] == [8, 16, 24]
    assert [p.solutions for p in uniform] == [8, 16, 24, 32]
    assert active[0].auroc == uniform[0].auroc  # the shared, seeded generation 0
    assert active[1].wrong_share == pytest.approx(0.75)  # round(8 * 0.8) = 6 of 8 picks are wrong
    assert all(0 <= p.auroc <= 1 for p in result.points if not math.isnan(p.auroc))
    assert result.ratio_bound in ("=", ">", "<=")
    again = simulation.simulate(critic_slice, featurize, config)
    assert [p.auroc for p in again.points] == [
        p.auroc for p in result.points
    ]  # same seed, same run

    paths = simulation.write_outputs(result, tmp_path / "out", command="test")
    assert paths["plot"].exists() and paths["plot"].stat().st_size > 1000
    assert "| active | 2 | 24 |" in paths["markdown"].read_text()
    assert json.loads(paths["json"].read_text())["ratio_bound"] == result.ratio_bound
    assert len(paths["csv"].read_text().splitlines()) == 1 + 7


def test_svg_plot_when_matplotlib_is_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    points = [
        simulation.Point(arm, generation, 10 * (generation + 1), 40, 0.5, auroc, 0.7, 20)
        for arm, generation, auroc in (("active", 0, 0.5), ("active", 1, 0.6), ("uniform", 0, 0.5))
    ]
    result = simulation.SimulationResult(
        config=simulation.SimulationConfig(),
        points=points,
        ratio=None,
        ratio_bound="n/a",
        uniform_labels_to_match=None,
        pool_size=100,
        pool_wrong_share=0.3,
        eval_problems=5,
        train_problems=20,
    )
    path = simulation.write_plot(result, tmp_path)
    assert path == tmp_path / "simulation.svg"
    assert path.read_text().startswith("<svg") and path.read_text().count("polyline") == 2


def test_simulate_command_on_cached_features(critic_slice, tmp_path, capsys, monkeypatch, settings):
    from django.core.management import call_command

    from tests.helpers.tiny_models import PARQUET, save_tiny_llama

    settings.STEPWISE_MODELS_ROOT = tmp_path  # the command takes model folders only under it
    backbone = save_tiny_llama(tmp_path / "tiny")
    args = [
        "simulate_active_learning",
        "--oracle",
        str(PARQUET),
        "--max-problems",
        "10",
        "--generations",
        "1",
        "--per-generation",
        "5",
        "--backbone",
        backbone,
        "--feature-cache",
        str(tmp_path / "f.pt"),
        "--out",
        str(tmp_path / "out"),
    ]
    call_command(*args)
    assert (tmp_path / "f.pt").exists()
    call_command(*args)
    out = capsys.readouterr().out
    assert "reusing" in out and "data-efficiency ratio" in out
    assert (tmp_path / "out" / "simulation.png").exists()


# --- simulated labelers over HTTP --------------------------------------------------------------


def demo_oracle() -> list[LabeledSolution]:
    """The demo's reference step labels as an oracle."""
    problem_rows = [json.loads(x) for x in (SAMPLE_DIR / "problems.jsonl").read_text().splitlines()]
    label_rows = [
        json.loads(x) for x in (SAMPLE_DIR / "reference_labels.jsonl").read_text().splitlines()
    ]
    problems = {row["unique_id"]: row["problem"] for row in problem_rows}
    ratings = {row["source_id"]: row["ratings"] for row in label_rows}
    out = []
    for line in (SAMPLE_DIR / "solutions.jsonl").read_text().splitlines():
        row = json.loads(line)
        r = ratings[row["source_id"]]
        out.append(LabeledSolution(problems[row["unique_id"]], row["steps"][: len(r)], r))
    return out


@pytest.mark.django_db(transaction=True)
def test_http_labelers_label_through_the_real_endpoints(live_server):
    from labeling.models import Labeling
    from labeling.services.importing import import_math, import_samples
    from tests.helpers.users import make_user

    import_math(SAMPLE_DIR / "problems.jsonl")
    import_samples(SAMPLE_DIR / "solutions.jsonl", batch_name="load", overlap=1)
    make_user("load-1", "labeler")
    make_user("load-2", "labeler")
    oracle = demo_oracle()
    ratings_for = oracle_ratings(oracle)
    done = []
    for name in ("load-1", "load-2"):
        client = simulation.HttpLabeler(live_server.url, name, f"{name}-pw")
        client.login()
        done += client.label(ratings_for, max_solutions=2)
        assert client.timings and max(client.timings) < 5
    assert len(done) == 4
    labelings = Labeling.objects.filter(pk__in=done).prefetch_related("step_labels__completions")
    for labeling in labelings:
        assert labeling.status == Labeling.Status.COMPLETED
        sent = [c.rating for s in labeling.step_labels.all() for c in s.completions.all()]
        expected = ratings_for(labeling.pk)
        cut = expected.index(-1) + 1 if -1 in expected else len(expected)
        assert sent == expected[:cut]


def test_features_cover_every_path_step_and_alternative(critic_slice, tmp_path):
    from tests.helpers.tiny_models import save_tiny_llama

    examples = critic_slice[:3]
    features = simulation.backbone_features(
        examples, backbone=save_tiny_llama(tmp_path / "t"), max_length=4096
    )
    expected = {
        (i, s) for i, e in enumerate(examples) for s in range(len(e.steps) + len(e.alternatives))
    }
    assert set(features) == expected
    assert all(v.dtype == torch.float32 for v in features.values())


@pytest.mark.django_db
def test_the_db_oracle_reads_the_completed_labelings_through_the_command():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no labelled solution"):
        call_command("simulate_active_learning", "--oracle", "db")
