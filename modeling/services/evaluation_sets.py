"""The frozen evaluation set: problems no training run had in its data, written once as PRM800K
lines, on which the gate scores the new and the active model in the same run.

Invariants:
- At most one set is current (a partial unique constraint); renewing adds a new version.
- A set holds only problems absent from every run's frozen data file when it was made, and
  every run that freezes its data while a set is current leaves that set's problems out
  (`run_data.freeze_dataset`), so no run trains on them.
- The file never changes after it is written: its sha256 says so, and the gate checks it.
- There is a set whenever one can be made: a run that freezes its data with none current makes
  one first (`ensure_evaluation_set`, STEPWISE_EVAL_SET_PROBLEMS problems), as `setup_demo`
  does; where too few problems allow none, the gate says so and compares nothing.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from labeling.models.projects import default_project_id, in_project
from labeling.services.exporting import ExportFilters, iter_prm800k_lines, select_labelings
from modeling.models import EvaluationSet, TrainingRun

FOLDER = "evaluation_sets"


class EvaluationSetError(Exception):
    """A set that cannot be made (too few problems, a bad share or count)."""


def problem_key(text: str) -> str:
    """A problem's identity in PRM800K lines and in the database alike (its stripped text)."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


def problems_in_run_data(project_id: int | None = None) -> set[str]:
    """Keys of the problems in any of the project's runs' frozen data (trained on or held out
    by it; the Default project's where None is named).

    Held-out problems count too: they chose that run's model, so they are not unseen. A run
    still queued has no file yet; it leaves out the current set's problems when it freezes."""
    keys: set[str] = set()
    for run in TrainingRun.objects.filter(**in_project(project_id)).only("pk").iterator():
        path = run.folder / TrainingRun.DATA_FILE
        if path.exists():
            keys.update(problem_key(problem) for problem in _problems_of(path))
    return keys


def _problems_of(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)  # PRM800K lines; an outcome run's graded JSONL
                yield row["problem"] if "problem" in row else row["question"]["problem"]


def create_evaluation_set(
    *,
    share: float | None = None,
    count: int | None = None,
    seed: int = 0,
    created_by=None,
    project_id: int | None = None,
) -> EvaluationSet:
    """Draw `count` problems (or `share` of them) among the project's with completed labelings
    that none of its runs has in its data, freeze their labelings to a file and make it the
    project's current set (the Default project where None is named)."""
    if project_id is None:
        project_id = default_project_id()
    if (share is None) == (count is None):
        raise EvaluationSetError("give either a share or a count of problems")
    if share is not None and not 0 < share <= 1:
        raise EvaluationSetError("the share of problems must be in (0, 1]")
    if count is not None and count < 1:
        raise EvaluationSetError("the count of problems must be at least 1")
    labelings, texts, candidates = _candidates(project_id)
    wanted = max(1, round(share * len(candidates))) if share is not None else (count or 0)
    if wanted > len(candidates):
        raise EvaluationSetError(
            f"only {len(candidates)} problems with completed labelings are in no run's data "
            f"({len(texts)} in all); {wanted} wanted"
        )
    chosen = sorted(random.Random(seed).sample(candidates, wanted))
    try:
        with transaction.atomic():
            return _create(chosen, labelings, seed, created_by, project_id)
    except IntegrityError:  # another renewal took this version number first
        raise EvaluationSetError(
            "another evaluation set was created at the same time; try again"
        ) from None


def _candidates(project_id: int | None) -> tuple[Any, dict[int, str], list[int]]:
    """(the project's completed labelings, their problems' texts by id, ids of those in none of
    its runs' data)."""
    if project_id is None:
        project_id = default_project_id()
    labelings = select_labelings(ExportFilters(project=project_id))
    texts = dict(
        labelings.values_list("solution__problem_id", "solution__problem__text").distinct()
    )
    used = problems_in_run_data(project_id)
    return labelings, texts, sorted(pk for pk, t in texts.items() if problem_key(t) not in used)


def ensure_evaluation_set(project_id: int | None = None) -> tuple[EvaluationSet | None, str]:
    """The project's current set (the Default project's where None is named); with none, a new one of STEPWISE_EVAL_SET_PROBLEMS problems drawn among
    those no run has in its data, when at least twice as many are there (as many stay to train
    on). (None, why not) when none can be made: the gate then compares nothing."""
    current = EvaluationSet.current(project_id)
    if current is not None:
        return current, ""
    size = settings.STEPWISE_EVAL_SET_PROBLEMS
    if size < 1:
        return None, "no evaluation set: none is current and STEPWISE_EVAL_SET_PROBLEMS is 0"
    available = len(_candidates(project_id)[2])
    if available < 2 * size:
        return None, (
            f"no evaluation set: {2 * size} problems with completed labelings in no run's data "
            f"are needed to make one ({size} for the set, STEPWISE_EVAL_SET_PROBLEMS, as many to "
            f"train on); {available} are"
        )
    try:
        return create_evaluation_set(count=size, project_id=project_id), ""
    except EvaluationSetError as exc:  # a concurrent run made one, or the labels changed
        current = EvaluationSet.current(project_id)
        return (current, "") if current is not None else (None, f"no evaluation set: {exc}")


def _create(chosen: list[int], labelings, seed: int, created_by, project_id: int) -> EvaluationSet:
    sets = EvaluationSet.objects.filter(project_id=project_id)  # versions are per project
    # Lock the current row so two renewals cannot both become current.
    list(sets.select_for_update().filter(is_current=True))
    version = (sets.aggregate(last=Max("version"))["last"] or 0) + 1
    # A file of its own even when a concurrent renewal computes the same version number (or
    # another project's set has it).
    relative = Path(FOLDER) / f"evaluation-set-v{version}-{uuid.uuid4().hex[:8]}.jsonl"
    sha256, rows, steps = _write(
        Path(settings.MEDIA_ROOT) / relative, labelings.filter(solution__problem_id__in=chosen)
    )
    sets.filter(is_current=True).update(is_current=False)
    return EvaluationSet.objects.create(
        project_id=project_id,
        version=version,
        problem_ids=chosen,
        file_path=str(relative),
        sha256=sha256,
        row_count=rows,
        step_count=steps,
        seed=seed,
        is_current=True,
        created_by=created_by,
    )


def _write(path: Path, labelings) -> tuple[str, int, int]:
    """Write the lines once; (sha256, lines, rated steps)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    rows = steps = 0
    partial = path.with_suffix(".partial")
    with partial.open("wb") as out:
        for line in iter_prm800k_lines(labelings):
            raw = (line + "\n").encode("utf-8")
            out.write(raw)
            digest.update(raw)
            rows += 1
            steps += len(json.loads(line)["label"]["steps"])
    partial.replace(path)
    return digest.hexdigest(), rows, steps
