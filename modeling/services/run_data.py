"""A training run's frozen data: its labelings written once as PRM800K lines in the run's folder
(`data.jsonl`, whose sha256 is the dataset version) before the first step, so a resumed run
trains on exactly what it started with, and split by problem into train and held-out.

A run that freezes its data with no current evaluation set makes one first when it can; it
leaves the set's problems out and records the set (or why there is none), so its gate scores
the new and the active model on that set.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.db.models import QuerySet

from labeling.models import Labeling
from labeling.services.exporting import ExportFilters, iter_prm800k_lines, select_labelings
from modeling.models import TrainingRun
from modeling.services import evaluation_sets
from modeling.training.data import examples_from_prm800k, read_jsonl, split_by_problem

DATA_FILE = TrainingRun.DATA_FILE


def run_dir(run: TrainingRun) -> Path:
    return run.folder


def run_labelings(run: TrainingRun) -> QuerySet[Labeling]:
    filters = dict(run.dataset_description.get("filters") or {})
    ids = filters.pop("labeling_ids", None)
    query = select_labelings(ExportFilters.from_json(filters))
    if ids is not None:
        query = query.filter(pk__in=ids)
    return query


def freeze_dataset(run: TrainingRun) -> tuple[Path, str, int]:
    """Write the run's labelings once as PRM800K lines; (path, sha256, lines).

    The current evaluation set (made first when there is none and it can be:
    `ensure_evaluation_set`) has its problems left out, and the set, or why there is none, is
    recorded in the run's dataset_description before the file exists. A resumed run finds the file and reuses it:
    it trains on what it started with.
    """
    folder = run_dir(run)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / DATA_FILE
    if not path.exists():
        labelings = run_labelings(run)
        evaluation_set, missing = evaluation_sets.ensure_evaluation_set()
        recorded = None
        if evaluation_set is not None:
            labelings = labelings.exclude(solution__problem_id__in=evaluation_set.problem_ids)
            recorded = evaluation_set.reference()
        run.dataset_description = {
            **run.dataset_description,
            "evaluation_set": recorded,
            "evaluation_set_missing": missing,
        }
        TrainingRun.objects.filter(pk=run.pk).update(dataset_description=run.dataset_description)
        partial = path.with_suffix(".partial")
        with partial.open("w", encoding="utf-8") as out:
            for line in iter_prm800k_lines(labelings):
                out.write(line + "\n")
        partial.replace(path)
    return (path, *sha256_and_lines(path))


def sha256_and_lines(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    lines = 0
    with path.open("rb") as f:
        for raw in f:
            digest.update(raw)
            lines += 1
    return digest.hexdigest(), lines


def load_split(run: TrainingRun) -> tuple[list, list]:
    """(train, held-out) examples of the run's frozen data, split by problem."""
    examples = examples_from_prm800k(read_jsonl(run_dir(run) / DATA_FILE))
    holdout = float(run.dataset_description.get("holdout_fraction", 0.0))
    return split_by_problem(examples, holdout, int(run.config.get("seed", 0)))
