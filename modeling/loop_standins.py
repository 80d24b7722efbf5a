"""Stand-ins for the `runs` services the loop calls, used only while `modeling.services` lacks
them (see `active_learning.service`). Same names and signatures, minimal behaviour: train on every
completed labeling with the training core, call a finished run "passed" (no evaluation gate),
score with the saved model. Delete this module once `modeling.services` provides them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from labeling.exporters import iter_prm800k_lines
from labeling.models import Labeling, Solution
from modeling.models import ModelVersion, SolutionScore, TrainingRun


def create_training_run(
    *, config: dict, created_by=None, name: str = "", labelings: QuerySet[Labeling] | None = None
) -> TrainingRun:
    from modeling.training.config import TrainConfig

    effective = TrainConfig.from_dict(dict(config)).to_dict()  # validates, fills defaults
    return TrainingRun.objects.create(name=name, config=effective, created_by=created_by)


def execute_training_run(run_id: int, *, should_stop: Callable[[], bool] | None = None) -> ModelVersion | None:
    from modeling.training.config import TrainConfig
    from modeling.training.data import examples_from_prm800k
    from modeling.training.train import train

    claimed = TrainingRun.objects.filter(pk=run_id, status=TrainingRun.Status.QUEUED).update(
        status=TrainingRun.Status.RUNNING, started_at=timezone.now()
    )
    run = TrainingRun.objects.get(pk=run_id)
    if not claimed:
        return getattr(run, "model_version", None) if run.status == TrainingRun.Status.SUCCEEDED else None
    try:
        records = [json.loads(line) for line in iter_prm800k_lines(Labeling.objects.all())]
        examples = examples_from_prm800k(records)
        out = Path(settings.MEDIA_ROOT) / "models" / f"run-{run.pk}"
        config = TrainConfig.from_dict({**run.config, "output_dir": str(out)})
        result = train(config, examples, should_stop=should_stop)
        passed = not result.stopped and math.isfinite(result.metrics.get("final_loss", math.nan))
        with transaction.atomic():
            version = ModelVersion.objects.create(
                run=run, name=f"{run.name or 'run'} #{run.pk}", backbone=config.backbone,
                artifact_path=result.output_dir, metrics=result.metrics, passed_evaluation=passed,
            )  # fmt: skip
            if passed:
                version.activate()
            run.status = TrainingRun.Status.SUCCEEDED
            run.metrics = result.metrics
            run.finished_at = timezone.now()
            run.save(update_fields=["status", "metrics", "finished_at"])
        return version
    except Exception as exc:
        run.mark_failed(f"{exc.__class__.__name__}: {exc}")
        return None


def load_model(model_version: ModelVersion) -> Any:
    from modeling.training.model import ProcessRewardModel

    return ProcessRewardModel.load(model_version.artifact_path)


def score_solutions_with(
    *,
    model_version: ModelVersion,
    solutions: QuerySet[Solution],
    batch_size: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    from modeling.training.data import Solution as CoreSolution
    from modeling.training.score import score_solutions, solution_score

    model = load_model(model_version)
    total = solutions.count()
    done = written = 0
    rows = solutions.select_related("problem").order_by("pk")
    chunk: list[Solution] = []

    def flush() -> int:
        probs = score_solutions(model, [CoreSolution(s.problem.text, list(s.steps)) for s in chunk])
        scores = [
            SolutionScore(
                solution=s, model_version=model_version, score=solution_score(p, "product"),
                min_step_score=solution_score(p, "min"), step_probs=_json_probs(p),
            )  # fmt: skip
            for s, p in zip(chunk, probs, strict=True)
        ]
        return len(SolutionScore.objects.bulk_create(scores, ignore_conflicts=True))

    for solution in rows.iterator(chunk_size=batch_size):
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


def _json_probs(probs: Any) -> list[list[float | None]]:
    """JSON has no NaN (PostgreSQL refuses it): an unscored step (past max_length) is null."""
    return [[None if math.isnan(x) else float(x) for x in row] for row in probs.tolist()]
