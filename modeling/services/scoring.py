"""Scores of a model version on the database's solutions: a SolutionScore per (solution, model),
the ensemble's disagreement for the uncertainty rule, and the review page's scores. Runs on a
`gpu` worker (or a thread of the embedded default's process): it loads torch.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import torch
from django.db.models import QuerySet

from labeling.models import Batch, Solution
from modeling import selectors
from modeling.models import ModelVersion, SolutionScore
from modeling.services.run_data import DATA_FILE, load_split, run_dir
from modeling.services.runs import RunError
from modeling.training.data import Solution as CoreSolution
from modeling.training.ensemble import check_ensemble_model, ensemble_uncertainties, train_heads
from modeling.training.evaluate import finite
from modeling.training.external import load_prm
from modeling.training.score import score_solutions, solution_score


@lru_cache(maxsize=2)
def load_model_dir(path: str) -> Any:
    """A saved model, cached per path: a generation scores many chunks with one model. One
    trained here (prm.json) or imported (external.json: `services.importing`)."""
    return load_prm(path, device="auto")


def load_model(model_version: ModelVersion) -> Any:
    return load_model_dir(model_version.artifact_path)


def release_cached_models() -> None:
    """Forget the models load_model_dir keeps, and CUDA's cached blocks: a scoring model must
    not hold GPU memory while a run trains."""
    load_model_dir.cache_clear()
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def score_solutions_with(
    *,
    model_version: ModelVersion,
    solutions: QuerySet[Solution],
    batch_size: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Score solutions with a model version and store a SolutionScore each; returns rows written.

    Already scored (solution, model) pairs are left as they are, so a re-run only fills gaps.
    """
    model = load_model(model_version)
    total = solutions.count()
    done = written = 0
    chunk: list[Solution] = []

    def flush() -> int:
        probs = score_solutions(model, [CoreSolution(s.problem.text, list(s.steps)) for s in chunk])
        rows = [
            SolutionScore(
                solution=s,
                model_version=model_version,
                score=_nan_to(solution_score(p, "product"), 0.0),
                min_step_score=finite(solution_score(p, "min")),
                step_probs=finite(p.tolist()),
            )
            for s, p in zip(chunk, probs, strict=True)
        ]
        return len(SolutionScore.objects.bulk_create(rows, ignore_conflicts=True))

    for solution in (
        solutions.select_related("problem").order_by("pk").iterator(chunk_size=batch_size)
    ):
        chunk.append(solution)
        if len(chunk) >= batch_size:
            written += flush()
            done += len(chunk)
            chunk = []
            if progress:
                progress(done, total)
    if chunk:
        written += flush()
        done += len(chunk)
    if progress:
        progress(done, total)
    return written


def measure_uncertainty_with(
    *,
    model_version: ModelVersion,
    solutions: QuerySet[Solution],
    heads: int,
    seed: int = 0,
    batch_size: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Fit an ensemble of `heads` heads on the model's training data (its frozen features, head
    mode only) and store its disagreement on each of `solutions` in their SolutionScore rows
    (which must exist: score first). Returns rows written. Refuses, with a RunError that says
    why, an imported model, one without its training data, or a lora/full model."""
    training = model_version.run
    if model_version.kind != ModelVersion.Kind.TRAINED or training is None:
        raise RunError(
            f"{model_version} was not trained here: the uncertainty rule fits its ensemble on "
            "the model's training data"
        )
    model = load_model(model_version)
    try:
        check_ensemble_model(model, heads)
        if not (run_dir(training) / DATA_FILE).exists():
            raise ValueError(f"the training data of run {training.pk} is gone")
        train_set, _ = load_split(training)
        ensemble = train_heads(model, train_set, heads=heads, seed=seed)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    scores = SolutionScore.objects.filter(model_version=model_version, solution__in=solutions)
    total = scores.count()
    done = 0
    chunk: list[SolutionScore] = []

    def flush() -> None:
        spread = ensemble_uncertainties(
            model,
            ensemble,
            [CoreSolution(s.solution.problem.text, list(s.solution.steps)) for s in chunk],
        )
        for row, value in zip(chunk, spread, strict=True):
            row.uncertainty, row.ensemble_heads = value, heads
        SolutionScore.objects.bulk_update(chunk, ["uncertainty", "ensemble_heads"])

    for row in (
        scores.select_related("solution__problem").order_by("pk").iterator(chunk_size=batch_size)
    ):
        chunk.append(row)
        if len(chunk) >= batch_size:
            flush()
            done += len(chunk)
            chunk = []
            if progress:
                progress(done, total)
    if chunk:
        flush()
        done += len(chunk)
    if progress:
        progress(done, total)
    return done


def _nan_to(value: float, default: float) -> float:
    return value if math.isfinite(value) else default


def score_batch_for_review(batch_id: int, version_id: int) -> int:
    """The task's work: score what is still missing (a redelivery fills only gaps)."""
    batch = Batch.objects.get(pk=batch_id)
    version = ModelVersion.objects.get(pk=version_id)
    return score_solutions_with(
        model_version=version, solutions=selectors.unscored_labeled(batch, version)
    )
