"""How good a saved model is, and whether it may become active: step metrics on held-out
problems, ProcessBench, best-of-N, the evaluation set (the new and the active model scored on
the same frozen problems), and the gate that reads those figures. Loads torch: a `gpu` worker's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings

from labeling.models import Solution
from modeling import grading
from modeling.models import EvaluationSet, ModelVersion
from modeling.services.run_data import DATA_FILE, load_split, run_dir, sha256_and_lines
from modeling.services.scoring import load_model_dir
from modeling.training.data import GradedSolution, examples_from_prm800k, read_jsonl
from modeling.training.evaluate import (
    evaluate_best_of_n,
    evaluate_outcome,
    evaluate_processbench,
    evaluate_steps,
    fill_answers,
    finite,
    read_best_of_n,
)

PhaseProgress = Callable[[str], Callable[[int, int], None]]  # phase name -> (done, total) callback


def evaluate_held_out(
    model_dir: str,
    held_out: Sequence,
    counter: PhaseProgress | None = None,
    max_length: int | None = None,
) -> dict[str, Any]:
    """Step metrics of the saved model on the held-out problems' rated steps (those within
    max_length tokens, default the model's; the rest are counted as dropped)."""
    if not held_out:
        return {"held_out": None}
    model = load_model_dir(model_dir)
    progress = counter("evaluate") if counter else None
    steps = evaluate_steps(model, held_out, max_length=max_length, progress=progress)
    return {"held_out": finite(steps), "auroc": finite(steps["auroc_negative"])}


def evaluate_processbench_files(
    model_dir: str,
    paths: Sequence[str],
    counter: PhaseProgress | None = None,
    threshold: float = 0.5,
) -> dict[str, Any]:
    if not paths:
        return {}
    model = load_model_dir(model_dir)
    results = []
    for path in paths:
        progress = counter(f"processbench {Path(path).stem}") if counter else None
        try:
            results.append(evaluate_processbench(model, path, threshold, progress=progress))
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
        ) as exc:  # a bad file costs its row, not the run
            results.append({"subset": Path(path).stem, "error": f"{exc.__class__.__name__}: {exc}"})
    return {"processbench": results}


def evaluate_best_of_n_file(
    model_dir: str,
    path: str,
    counter: PhaseProgress | None = None,
    ns: Sequence[int] | None = None,
    repeats: int = 100,
) -> dict[str, Any]:
    """Best-of-N accuracy on a samples file (format: training.evaluate.read_best_of_n), each
    answer judged by modeling.grading, the one answer checker."""
    problems = fill_answers(read_best_of_n(path), grading.extract_answer)
    if not problems:
        raise ValueError(f"{path} has no problems")
    report = evaluate_best_of_n(
        load_model_dir(model_dir),
        problems,
        equivalent=grading.is_equivalent,
        key=grading.normalise_answer,
        ns=ns,
        repeats=repeats,
        progress=counter("best of N") if counter else None,
    )
    return {"best_of_n": finite({"file": Path(path).name, **report})}


def evaluate_on_evaluation_set(
    recorded: dict[str, Any],
    model_dir: str,
    active: ModelVersion | None,
    counter: PhaseProgress | None = None,
) -> dict[str, Any]:
    """Step AUROC of the new and the active model on the run's evaluation set, in this run.

    A missing or changed set file, or an active model that cannot be loaded, is written as an
    `error` / `active_error` that fails the gate; the run still records its model."""
    # Runs frozen before sets were named by id recorded only the version.
    evaluation_set = EvaluationSet.objects.filter(
        **({"pk": recorded["id"]} if "id" in recorded else {"version": recorded["version"]})
    ).first()
    report: dict[str, Any] = {
        **(evaluation_set.reference() if evaluation_set else {}),
        **recorded,
        "new_auroc": None,
        "active_auroc": None,
        "active_model": active.pk if active else None,
    }
    path = evaluation_set.path if evaluation_set else None
    if path is None or not path.exists():
        return {**report, "error": f"the file of evaluation set v{recorded['version']} is missing"}
    if sha256_and_lines(path)[0] != recorded["sha256"]:
        return {**report, "error": f"the file of evaluation set v{recorded['version']} changed"}
    examples = examples_from_prm800k(read_jsonl(path))
    report["new_auroc"] = evaluate_held_out(model_dir, examples, counter).get("auroc")
    if active is not None:
        try:
            report["active_auroc"] = evaluate_held_out(active.artifact_path, examples).get("auroc")
        except Exception as exc:  # a missing or unreadable artifact costs the gate, not the run
            report["active_error"] = f"{exc.__class__.__name__}: {exc}"[:1000]
    return report


NO_SET = "no evaluation set was current when the run froze its data"
_SET_REASONS = {
    "unmeasured": "not measured (no -1 and non -1 steps in {name})",
    "unmeasurable": "{name} has no -1 and non -1 steps to measure AUROC on",
    "under": "AUROC {auroc:.3f} on {name} is under {floor:.3f}",
    "regresses": "AUROC {auroc:.3f} on {name} regresses more than {max_regression} from the "
    "active model's {previous:.3f} on the same set",
}


def evaluation_gate(
    metrics: dict[str, Any], active: ModelVersion | None, *, missing: str = NO_SET
) -> dict[str, Any]:
    """Whether a new model may become active: step AUROC at least the floor, and not more
    than the allowed regression under the active model's, both measured on the evaluation set
    (metrics["evaluation_set"]) in this run.

    Figures from different splits are never compared. Without a set (`missing` says why) a
    new model passes only where nothing is compared: the gate is off (a floor of 0), or there is
    no active model and its own held-out AUROC reaches the floor. Beside an active model it is
    not activated: "not gated"."""
    floor = settings.STEPWISE_PRM_EVAL_MIN_AUROC
    max_regression = settings.STEPWISE_PRM_EVAL_MAX_REGRESSION
    on_set = metrics.get("evaluation_set")
    gate: dict[str, Any] = {"min_auroc": floor, "max_regression": max_regression}

    def verdict(passed: bool, reason: str = "") -> dict[str, Any]:
        return {**gate, "passed": passed, "reason": reason}

    if on_set is None:
        auroc = metrics.get("auroc")  # on this run's own held-out problems, if any
        gate.update(evaluation_set=None, auroc=auroc, active_auroc=None, missing=missing)
        if floor <= 0:
            gate["comparison"] = "none: the gate is off and there is no evaluation set"
            return verdict(True, f"not gated: the gate is off (the AUROC floor is 0); {missing}")
        if active is not None:
            gate["comparison"] = "none: no evaluation set to score both models on"
            return verdict(
                False,
                f"not gated: {missing}; a new model is compared with the active one only on "
                "the same frozen problems, so it was not activated",
            )
        gate["comparison"] = "none: no active model; the floor on this run's held-out problems"
        if auroc is None:
            return verdict(False, f"{missing}, and no held-out -1 and non -1 steps to measure on")
        if auroc < floor:
            return verdict(False, f"held-out AUROC {auroc:.3f} is under {floor:.3f} ({missing})")
        return verdict(True, f"no active model to compare with; {missing}")

    name = f"evaluation set v{on_set['version']}"
    auroc, previous = on_set.get("new_auroc"), on_set.get("active_auroc")
    gate.update(
        evaluation_set=on_set["version"],
        evaluation_set_id=on_set.get("id"),
        comparison=f"new and active model scored on {name} in this run",
        auroc=auroc,
        active_auroc=previous,
    )
    words = {"name": name, "auroc": auroc, "previous": previous, "floor": floor}

    def said(key: str) -> str:
        return _SET_REASONS[key].format(**words, max_regression=max_regression)

    if on_set.get("error"):
        return verdict(False, on_set["error"])
    if auroc is None:  # a floor of 0 turns the gate off: then nothing measured is no refusal
        return (
            verdict(True, said("unmeasured"))
            if floor <= 0
            else verdict(False, said("unmeasurable"))
        )
    if auroc < floor:
        return verdict(False, said("under"))
    if active is not None and on_set.get("active_error"):
        return verdict(
            False,
            f"the active model {active} could not be scored on {name} ({on_set['active_error']})",
        )
    if previous is not None and auroc < previous - max_regression:
        return verdict(False, said("regresses"))
    return verdict(True)


def evaluate_model_version(
    version: ModelVersion,
    *,
    processbench: Sequence[str] = (),
    threshold: float = 0.5,
    save: bool = True,
    counter: PhaseProgress | None = None,
    max_length: int | None = None,
    best_of_n: str | None = None,
    best_of_n_sizes: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Re-measure a model: its run's held-out problems (when it has a run), ProcessBench,
    and best-of-N on a samples file."""
    report: dict[str, Any] = {"model_version": version.pk}
    if version.run is not None and (run_dir(version.run) / DATA_FILE).exists():
        _, held_out = load_split(version.run)
        report.update(evaluate_held_out(version.artifact_path, held_out, counter, max_length))
    report.update(
        evaluate_processbench_files(version.artifact_path, processbench, counter, threshold)
    )
    if best_of_n:
        report.update(
            evaluate_best_of_n_file(version.artifact_path, best_of_n, counter, best_of_n_sizes)
        )
        # Stored per evaluation set: reports are compared only among models of the same set.
        current = EvaluationSet.current(version.project_id)
        report["best_of_n"]["evaluation_set"] = current.reference() if current else None
    if save:
        version.metrics = {**(version.metrics or {}), "evaluation": report}
        version.save(update_fields=["metrics"])
    return report


# --- an outcome model (ORM): solution-level AUROC of correctness ------------------------------


def evaluate_outcome_held_out(model_dir: str, held_out: Sequence) -> dict[str, Any]:
    """An ORM on its run's held-out problems' graded solutions (their one label, the last)."""
    graded = [GradedSolution(e.problem, list(e.steps), e.ratings[-1] == 1) for e in held_out]
    if not graded:
        return {"held_out": None}
    measured = finite(evaluate_outcome(load_model_dir(model_dir), graded))
    return {"held_out": measured, "solution_auroc": measured["solution_auroc"]}


def evaluation_set_graded(evaluation_set: EvaluationSet) -> list[GradedSolution]:
    """The graded solutions Stepwise holds of the set's problems: what an ORM is gated on."""
    rows = (
        Solution.objects.filter(
            problem_id__in=evaluation_set.problem_ids, answer_correct__isnull=False
        )
        .order_by("pk")
        .values_list("problem__text", "steps", "answer_correct")
    )
    return [
        GradedSolution(problem, list(steps), bool(right)) for problem, steps, right in rows if steps
    ]


def evaluate_outcome_on_evaluation_set(recorded: dict[str, Any], model_dir: str) -> dict[str, Any]:
    """Solution AUROC of correctness of the ORM on the recorded set's problems' graded
    solutions; a set that is gone is an `error` that fails the gate."""
    evaluation_set = EvaluationSet.objects.filter(pk=recorded.get("id") or 0).first()
    report: dict[str, Any] = {**recorded, "solution_auroc": None}
    if evaluation_set is None:
        return {**report, "error": f"evaluation set v{recorded['version']} is gone"}
    graded = evaluation_set_graded(evaluation_set)
    if not graded:
        return {**report, "solutions": 0, "correct": 0}
    return {**report, **finite(evaluate_outcome(load_model_dir(model_dir), graded))}


def outcome_gate(metrics: dict[str, Any], *, missing: str = NO_SET) -> dict[str, Any]:
    """Whether an ORM passed: solution AUROC of correctness at least STEPWISE_ORM_EVAL_MIN_AUROC
    on the evaluation set's graded solutions (without a set: on its own held-out problems).
    An ORM is never compared with the active model (a PRM, another measure) nor activated."""
    floor = settings.STEPWISE_ORM_EVAL_MIN_AUROC
    on_set = metrics.get("evaluation_set")
    gate: dict[str, Any] = {"metric": "solution_auroc", "min_auroc": floor}
    if on_set is None:
        auroc = metrics.get("solution_auroc")
        gate.update(evaluation_set=None, auroc=auroc, missing=missing)
        where = f"this run's held-out problems ({missing})"
    else:
        auroc = on_set.get("solution_auroc")
        gate.update(evaluation_set=on_set["version"], evaluation_set_id=on_set.get("id"))
        gate["auroc"] = auroc
        where = f"evaluation set v{on_set['version']}'s graded solutions"
        if on_set.get("error"):
            return {**gate, "passed": False, "reason": on_set["error"]}
    if floor <= 0:
        return {**gate, "passed": True, "reason": "not gated: the ORM gate is off (floor 0)"}
    if auroc is None:
        reason = f"no correct and wrong solutions to measure solution AUROC on in {where}"
        return {**gate, "passed": False, "reason": reason}
    if auroc < floor:
        reason = f"solution AUROC {auroc:.3f} on {where} is under {floor:.3f}"
        return {**gate, "passed": False, "reason": reason}
    return {**gate, "passed": True, "reason": f"solution AUROC {auroc:.3f} on {where}"}
