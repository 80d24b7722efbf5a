"""A training run's frozen data: its labelings written once as PRM800K lines in the run's folder
(`data.jsonl`, whose sha256 is the dataset version) before the first step, so a resumed run
trains on exactly what it started with, and split by problem into train and held-out.

A run's data files (any shape `modeling.training.inputs` reads) are read at the same moment and
their solutions appended to that file as PRM800K lines (`inputs.prm800k_record`, read back
as the same solutions): the version, the split and a resume treat them as the labelings. A file
that cannot be read fails the run there, with the reader's one line.

An outcome run (an ORM) freezes graded JSONL instead: one line per graded solution Stepwise
holds (`graded_solutions`), {"problem", "steps", "correct", "id", "answer"}, read back by
`read_graded` and trained on as one label per solution (`outcome_examples`).

A run that freezes its data with no current evaluation set makes one first when it can; it
leaves the set's problems out and records the set (or why there is none), so its gate scores
the new and the active model on that set.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from django.db.models import QuerySet

from labeling.models import Labeling, Problem, Solution
from labeling.models.projects import in_project
from labeling.services.exporting import ExportFilters, iter_prm800k_lines, select_labelings
from modeling.models import Objective, TrainingRun
from modeling.services import evaluation_sets
from modeling.training.data import (
    LabeledSolution,
    examples_from_prm800k,
    outcome_examples,
    problem_key,
    read_jsonl,
    split_by_problem,
)
from modeling.training.inputs import (
    DataFormatError,
    prm800k_record,
    read_graded,
    read_training_data,
)
from stepwise.paths import shown_path, without_roots

DATA_FILE = TrainingRun.DATA_FILE


def run_dir(run: TrainingRun) -> Path:
    return run.folder


def run_labelings(run: TrainingRun) -> QuerySet[Labeling]:
    if not run.dataset_description.get("use_labelings", True):
        return Labeling.objects.none()
    filters = dict(run.dataset_description.get("filters") or {})
    ids = filters.pop("labeling_ids", None)
    filters["project"] = run.project_id  # the run's own project's labels, never another's
    query = select_labelings(ExportFilters.from_json(filters))
    if ids is not None:
        query = query.filter(pk__in=ids)
    return query


def freeze_dataset(run: TrainingRun) -> tuple[Path, str, int]:
    """Write the run's labelings once as PRM800K lines, then its data files' solutions;
    (path, sha256, labelings written).

    The current evaluation set (made first when there is none and it can be:
    `ensure_evaluation_set`) has its problems left out, of the labelings and the files alike,
    and the set, or why there is none, is recorded in the run's dataset_description before the
    file exists, with what each data file gave. A resumed run finds the file and reuses it: it
    trains on what it started with. A data file that cannot be read raises DataFormatError
    (its path as the API shows it, under STEPWISE_DATA_ROOT).
    """
    folder = run_dir(run)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / DATA_FILE
    if run.objective == Objective.OUTCOME:
        return _freeze_graded(run, path)
    if not path.exists():
        labelings = run_labelings(run)
        evaluation_set, missing = evaluation_sets.ensure_evaluation_set(run.project_id)
        recorded = None
        if evaluation_set is not None:
            labelings = labelings.exclude(solution__problem_id__in=evaluation_set.problem_ids)
            recorded = evaluation_set.reference()
        held_out = _problem_keys(evaluation_set.problem_ids if evaluation_set else [])
        files, solutions = _read_data_files(
            run.dataset_description.get("data_files") or [], held_out
        )
        run.dataset_description = {
            **run.dataset_description,
            "evaluation_set": recorded,
            "evaluation_set_missing": missing,
            **({"data_files_read": files} if files else {}),
        }
        TrainingRun.objects.filter(pk=run.pk).update(dataset_description=run.dataset_description)
        partial = path.with_suffix(".partial")
        with partial.open("w", encoding="utf-8") as out:
            for line in iter_prm800k_lines(labelings):
                out.write(line + "\n")
            for solution in solutions:
                out.write(json.dumps(prm800k_record(solution)) + "\n")
        partial.replace(path)
    digest, lines = sha256_and_lines(path)
    from_files = sum(f["solutions"] for f in run.dataset_description.get("data_files_read", []))
    return path, digest, lines - from_files


class NoGradedSolutions(ValueError):
    """An outcome run with nothing to learn from: the same data would fail it again."""


def gradeable_solutions(project_id: int | None = None) -> QuerySet[Solution]:
    """The project's solutions with a final answer nobody graded yet whose problem has a ground
    truth (the imported and labeled ones: PRM800K lines carry both): an ORM's data once graded.
    The Default project's where None is named."""
    return (
        Solution.objects.filter(answer_correct__isnull=True, **in_project(project_id))
        .exclude(final_answer__isnull=True)
        .exclude(final_answer="")
        .exclude(problem__ground_truth_answer__isnull=True)
        .exclude(problem__ground_truth_answer="")
        .order_by("pk")
    )


def _graded_rows(solutions: QuerySet[Solution], then_grade: QuerySet[Solution] | None):
    """(pk, problem text, steps, correct, final answer) of the graded solutions, then of
    `then_grade`'s, judged here by the one answer checker (once per problem and answer form)."""
    fields = ("pk", "problem__text", "steps", "answer_correct", "final_answer")
    yield from solutions.values_list(*fields).iterator(chunk_size=2000)
    if then_grade is None:
        return
    from modeling import grading  # math-verify: only when something is graded here

    judged: dict[tuple[str, str], bool] = {}
    rows = then_grade.values_list(*fields[:3], "final_answer", "problem__ground_truth_answer")
    for pk, problem, steps, answer, truth in rows.iterator(chunk_size=2000):
        form = (problem, grading.normalise_answer(answer))
        if form not in judged:
            judged[form] = grading.is_equivalent(answer, truth)
        yield pk, problem, steps, judged[form], answer


def graded_solutions(
    *, sampling_run_id: int | None = None, project_id: int | None = None
) -> QuerySet[Solution]:
    """The project's solutions whose final answer Stepwise graded (the candidate pool with its
    sampling runs' solutions, imported samples), or one sampling run's; oldest first. The
    Default project's where None is named."""
    query = Solution.objects.filter(answer_correct__isnull=False, **in_project(project_id))
    if sampling_run_id is not None:
        query = query.filter(pool_entry__sampling_run_id=sampling_run_id)
    return query.order_by("pk")


def _freeze_graded(run: TrainingRun, path: Path) -> tuple[Path, str, int]:
    """An outcome run's graded JSONL, written once; the current evaluation set's problems never
    in it. Raises NoGradedSolutions when nothing graded is left to train on."""
    if not path.exists():
        asked = run.dataset_description.get("graded") or {}
        chosen = asked.get("sampling_run")
        # "Train the ORM" beside a PRM: only the problems that PRM's run trained and held out on,
        # so the two split the same problems the same way (equal footing, evaluate.footing).
        problems_of = asked.get("problems_of_run")
        keep = None if problems_of is None else run_problem_keys(problems_of)
        solutions = graded_solutions(sampling_run_id=chosen, project_id=run.project_id)
        # All of the project's: also the ones with an answer to grade against their problem's.
        to_grade = gradeable_solutions(run.project_id) if chosen is None else None
        evaluation_set, missing = evaluation_sets.ensure_evaluation_set(run.project_id)
        left_out = 0
        if evaluation_set is not None:
            on_set = solutions.filter(problem_id__in=evaluation_set.problem_ids)
            left_out = on_set.count()
            solutions = solutions.exclude(problem_id__in=evaluation_set.problem_ids)
            if to_grade is not None:
                left_out += to_grade.filter(problem_id__in=evaluation_set.problem_ids).count()
                to_grade = to_grade.exclude(problem_id__in=evaluation_set.problem_ids)
        rows = _graded_rows(solutions, to_grade)
        partial = path.with_suffix(".partial")
        written = correct = elsewhere = 0
        with partial.open("w", encoding="utf-8") as out:
            for pk, problem, steps, right, answer in rows:
                if not steps:
                    continue
                if keep is not None and problem_key(problem) not in keep:
                    elsewhere += 1
                    continue
                line = {"problem": problem, "steps": steps, "correct": right, "id": pk}
                out.write(json.dumps({**line, "answer": answer}) + "\n")
                written += 1
                correct += bool(right)
        whose = f"sampling run {chosen}'s" if chosen else "Stepwise's"
        if not written:
            partial.unlink()
            on = f" ({left_out} are on the evaluation set, never trained on)" if left_out else ""
            if elsewhere:
                on += f" ({elsewhere} are of problems run {problems_of} did not train on)"
            raise NoGradedSolutions(
                f"no graded solutions to train the outcome model on: {whose} solutions have "
                f"none whose final answer was graded{on}; import or sample graded solutions first"
            )
        run.dataset_description = {
            **run.dataset_description,
            "graded": {
                "sampling_run": chosen,
                "problems_of_run": problems_of,
                "not_its_problems": elsewhere,
                "solutions": written,
                "correct": correct,
                "left_out": left_out,  # on the evaluation set
            },
            "evaluation_set": evaluation_set.reference() if evaluation_set else None,
            "evaluation_set_missing": missing,
        }
        TrainingRun.objects.filter(pk=run.pk).update(dataset_description=run.dataset_description)
        partial.replace(path)
    digest, lines = sha256_and_lines(path)
    return path, digest, lines


def run_problem_keys(run_id: int) -> set[str]:
    """The problems (data.problem_key) of a process run's frozen data: those it trained on and
    those it held out. Empty when the run or its data is gone."""
    path = run_dir(TrainingRun(pk=run_id)) / DATA_FILE
    if not path.is_file():
        return set()
    return {problem_key(e.problem) for e in examples_from_prm800k(read_jsonl(path))}


def _problem_keys(problem_ids: list[int]) -> set[str]:
    texts = Problem.objects.filter(pk__in=problem_ids).values_list("text", flat=True)
    return {evaluation_sets.problem_key(text) for text in texts}


def _read_data_files(
    paths: list[str], held_out: set[str]
) -> tuple[list[dict[str, Any]], list[LabeledSolution]]:
    """Each file's solutions but those of `held_out` problems, and what each gave (as the run's
    page and the API show it: paths under their root's setting)."""
    described: list[dict[str, Any]] = []
    solutions: list[LabeledSolution] = []
    for file in paths:
        try:
            data = read_training_data(file)
        except DataFormatError as exc:
            raise DataFormatError(without_roots(str(exc))) from None
        kept = [s for s in data.solutions if evaluation_sets.problem_key(s.problem) not in held_out]
        described.append(
            {
                "path": shown_path(file),
                "format": str(data.format),
                "rows": data.rows,
                "solutions": len(kept),
                "step_labels": sum(s.n_labels() for s in kept),
                "left_out": len(data.solutions) - len(kept),  # on the evaluation set
            }
        )
        solutions += kept
    return described, solutions


def sha256_and_lines(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    lines = 0
    with path.open("rb") as f:
        for raw in f:
            digest.update(raw)
            lines += 1
    return digest.hexdigest(), lines


def load_split(run: TrainingRun) -> tuple[list, list]:
    """(train, held-out) examples of the run's frozen data, split by problem (an outcome run's:
    one label per solution, on its last step)."""
    path = run_dir(run) / DATA_FILE
    if run.objective == Objective.OUTCOME:
        examples = outcome_examples(read_graded(path))
    else:
        examples = examples_from_prm800k(read_jsonl(path))
    holdout = float(run.dataset_description.get("holdout_fraction", 0.0))
    return split_by_problem(examples, holdout, int(run.config.get("seed", 0)))
