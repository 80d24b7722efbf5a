"""Best-of-N comparisons: two or more model versions (PRMs and ORMs) side by side on problems
with many sampled solutions each, as queued work (`BestOfNComparison`).

`comparison_start` (the page, the API, `compare_best_of_n`) checks the request up front (known,
distinct model versions; a sampling run, or a best-of-N file under STEPWISE_DATA_ROOT; Ns in
range) and sends the row to the gpu worker (`modeling.tasks.gpu_compare_best_of_n`).
`comparison_run` (the task) claims it, checks that the models stand on equal footing (`footing`:
the same backbone, training problems and optimizer steps) and refuses them otherwise unless
`allow_mismatch`, then scores every sample with every model and stores the report
(`compare_best_of_n`) and its PNG (`plot_best_of_n`). The web side of this module loads no
torch: `comparison_run` imports the scorer when it runs.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from labeling.models import Solution
from labeling.models.projects import default_project_id, in_project
from labeling.roles import LEAD, has_role
from modeling.models import BestOfNComparison, ModelVersion, Objective, SamplingRun
from modeling.services.runs import RunError, data_root_path
from stepwise.celery import model_tasks_in_thread, resend_rows, start_on_commit
from stepwise.paths import shown_path

log = logging.getLogger(__name__)

COMPARE_TASK = "modeling.tasks.gpu_compare_best_of_n"
MAX_MODELS = 8
MAX_N = 4096  # samples per problem a comparison may ask for (more is never sampled here)
MAX_NS = 16
PNG_NAME = "best-of-n.png"
BEAT_S = 10.0  # how often scoring writes the heartbeat (well inside stale_after)
EXTERNAL_MANIFEST = "external.json"


class ComparisonError(Exception):
    """A comparison that cannot be started; the message says why in one line."""


# --- the web side ---------------------------------------------------------------------------


def comparison_start(
    *,
    model_ids: Sequence[Any],
    sampling_run: SamplingRun | None = None,
    input_path: str = "",
    ns: Sequence[Any] = (),
    allow_mismatch: bool = False,
    user: User | AnonymousUser | None = None,
    send: bool = True,
    project_id: int | None = None,
) -> BestOfNComparison:
    """A QUEUED comparison in the project (the Default one where None is named) of its models
    and sampling run, sent to the gpu worker once the transaction commits (`send=False`: left
    queued for the caller to run, the command's inline comparison)."""
    if project_id is None:
        project_id = default_project_id()
    ids = checked_model_ids(model_ids, project_id=project_id)
    if (sampling_run is None) == (not input_path):
        raise ComparisonError("compare on either a sampling run or a best-of-N file, not both")
    if sampling_run is not None and sampling_run.project_id != project_id:
        raise ComparisonError(f"no sampling run {sampling_run.pk} in this project")
    path = ""
    if input_path:
        try:
            path = data_root_path(input_path, what="best-of-N files")
        except RunError as exc:
            raise ComparisonError(str(exc)) from None
    sizes = checked_ns(ns)
    created_by = user if user is not None and user.is_authenticated else None
    with transaction.atomic():
        comparison = BestOfNComparison.objects.create(
            model_ids=ids,
            sampling_run=sampling_run,
            input_path=path,
            ns=sizes,
            allow_mismatch=allow_mismatch,
            created_by=created_by,
            project_id=project_id,
        )
        if send:
            start_on_commit(COMPARE_TASK, comparison.pk, row=BestOfNComparison)
    return comparison


UPLOADS = "best-of-n-uploads"  # under STEPWISE_DATA_ROOT
MAX_UPLOAD_BYTES = 256 * 2**20


def store_upload(upload: IO[bytes], size: int) -> str:
    """An uploaded best-of-N file, kept under the data root (`UPLOADS`) where a comparison
    reads it: its name there (relative to the root). Its rows are read by the worker, which
    fails the comparison with the reader's one line if they are not best-of-N rows."""
    if size > MAX_UPLOAD_BYTES:
        raise ComparisonError(
            f"the file is {size:,} bytes; a best-of-N upload may have at most {MAX_UPLOAD_BYTES:,}"
        )
    folder = Path(settings.STEPWISE_DATA_ROOT) / UPLOADS
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{UPLOADS}/upload-{uuid.uuid4().hex[:16]}.jsonl"
    target = Path(settings.STEPWISE_DATA_ROOT) / name
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        shutil.copyfileobj(upload, out)
    partial.replace(target)
    return name


def comparison_anyway(
    comparison: BestOfNComparison, *, user: User | AnonymousUser | None = None
) -> BestOfNComparison:
    """The same comparison again, asked explicitly to compare models not on equal footing
    (its page then says what differed)."""
    return comparison_start(
        model_ids=comparison.model_ids,
        sampling_run=comparison.sampling_run,
        input_path=comparison.input_path,  # checked again: still under the data root
        ns=comparison.ns,
        allow_mismatch=True,
        user=user,
        project_id=comparison.project_id,
    )


def checked_model_ids(model_ids: Sequence[Any], *, project_id: int | None = None) -> list[int]:
    """Distinct model versions of the project (the Default one where None is named), 1 to
    MAX_MODELS of them, in the order given: another project's is missing here."""
    ids: list[int] = []
    for value in model_ids:
        if isinstance(value, bool) or not str(value).strip().isdigit():
            raise ComparisonError(f"{str(value)[:40]!r} is not a model version id")
        number = int(str(value).strip())
        if number in ids:
            raise ComparisonError(f"model version {number} is named twice")
        ids.append(number)
    if not 1 <= len(ids) <= MAX_MODELS:
        raise ComparisonError(f"compare 1 to {MAX_MODELS} model versions, not {len(ids)}")
    mine = ModelVersion.objects.filter(pk__in=ids, **in_project(project_id))
    found = set(mine.values_list("pk", flat=True))
    missing = [str(pk) for pk in ids if pk not in found]
    if missing:
        raise ComparisonError(f"no model version {', '.join(missing)}")
    return ids


def checked_ns(ns: Sequence[Any]) -> list[int]:
    """The Ns asked for (empty: 1, 2, 4, ... up to the samples there are), each 1 to MAX_N."""
    sizes = set()
    for value in ns:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_N:
            raise ComparisonError(f"N must be a whole number from 1 to {MAX_N}, not {value!r}")
        sizes.add(value)
    if len(sizes) > MAX_NS:
        raise ComparisonError(f"at most {MAX_NS} values of N")
    return sorted(sizes)


def default_models(project_id: int | None = None) -> list[int]:
    """The project's active PRM and latest ORM: what the researcher's button compares."""
    prm = ModelVersion.active(project_id)
    orms = ModelVersion.objects.filter(objective=Objective.OUTCOME, **in_project(project_id))
    orm = orms.order_by("-created_at").first()
    if prm is None or orm is None:
        lacking = " and ".join(
            what
            for what, found in (("an active PRM", prm), ("an outcome model (ORM)", orm))
            if found is None
        )
        raise ComparisonError(f"nothing to compare: there is no {lacking} yet")
    return [prm.pk, orm.pk]


def visible_comparisons(
    user: User | AnonymousUser, project: Any = None
) -> QuerySet[BestOfNComparison]:
    """The project's comparisons (the Default project's where None is named): a lead of it sees
    every one, a researcher those they started; another's id is a 404."""
    rows = BestOfNComparison.objects.filter(
        **in_project(None if project is None else project.pk)
    ).select_related("sampling_run", "created_by")
    return rows if has_role(user, LEAD, project=project) else rows.filter(created_by_id=user.pk)


def comparisons_resend(now=None) -> int:
    """The sweeper: send again the comparisons whose task will not come by itself, and the
    running ones whose worker died (their claim takes them over, starting afresh)."""
    if model_tasks_in_thread():
        return 0
    now = now or timezone.now()
    rows = BestOfNComparison.objects.all()
    lost = rows.waiting_too_long(now) | rows.stale(now).filter(
        sent_at__lt=BestOfNComparison.stale_before(now)
    )  # waiting too long, or running with no heartbeat (its worker died): taken over
    return resend_rows(lost, COMPARE_TASK, now=now)


def comparison_models(comparison: BestOfNComparison) -> list[ModelVersion]:
    """Its model versions in the order compared (those deleted since left out)."""
    found = ModelVersion.objects.in_bulk(comparison.model_ids)
    return [found[pk] for pk in comparison.model_ids if pk in found]


def comparison_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report as the page's table: a row per N, a cell per method."""
    methods = report.get("methods") or {}
    rows: dict[int, dict[str, Any]] = {}
    for method, points in methods.items():
        for point in points:
            row = rows.setdefault(point["n"], {"n": point["n"], "problems": point["problems"]})
            row[method] = point
    return [
        {**row, "cells": [row.get(method) for method in methods]} for _, row in sorted(rows.items())
    ]


# --- the worker -------------------------------------------------------------------------------


class _TakenOver(Exception):
    """The row is no longer this worker's (taken over as stale): stop, write nothing."""


class Refused(Exception):
    """The comparison may not be made (unequal footing, nothing to compare): its one line."""


def comparison_run(comparison_id: int) -> BestOfNComparison:
    """Score and compare; a second delivery, or one for a row another worker holds, does
    nothing."""
    comparison = BestOfNComparison.claim(comparison_id, phase="")
    if comparison is None:
        return BestOfNComparison.objects.get(pk=comparison_id)
    try:
        report = _compare(comparison)
        folder = comparison.folder
        folder.mkdir(parents=True, exist_ok=True)
        from modeling.training.evaluate import plot_best_of_n

        png = plot_best_of_n(report, folder / PNG_NAME)
        relative = png.relative_to(Path(settings.MEDIA_ROOT)).as_posix()
        comparison.mark_succeeded(report=report, png_path=relative, phase="done")
    except _TakenOver:
        log.warning("best-of-N comparison %s changed hands; leaving it", comparison_id)
    except Refused as exc:
        comparison.mark_failed(str(exc))
    except Exception as exc:
        log.exception("best-of-N comparison %s failed", comparison_id)
        comparison.mark_failed(exc)
    return BestOfNComparison.objects.get(pk=comparison_id)


def _compare(comparison: BestOfNComparison) -> dict[str, Any]:
    # Scoring loads torch and scikit-learn: on the gpu worker, not where pages import this.
    from modeling import grading
    from modeling.services.scoring import load_model_dir
    from modeling.training.data import Solution as Sample
    from modeling.training.data import problem_key
    from modeling.training.evaluate import compare_best_of_n, finite, footing, overlap
    from modeling.training.score import score_solutions

    versions = comparison_models(comparison)
    if len(versions) != len(comparison.model_ids):
        raise Refused("a model version of this comparison was deleted; start a new one")
    names = _method_names(versions)
    metas = {names[v.pk]: _model_meta(v) for v in versions}
    _beat(comparison, "reading samples")(0, 0)
    problems = _problems(comparison, grading)
    if not problems:
        raise Refused("no problems with a ground-truth answer and sampled solutions to compare on")
    mismatches = footing(metas)
    if mismatches and not comparison.allow_mismatch:
        raise Refused(
            "refused: the models are not on equal footing: "
            + "; ".join(mismatches)
            + ". Compare anyway with allow mismatch (the page's box, --allow-mismatch)."
        )
    samples = [Sample(p.problem, list(steps)) for p in problems for steps, _ in p.samples]
    scores: dict[str, list[list[Any]]] = {}
    for version in versions:
        beat = _beat(comparison, f"scoring #{version.pk}")
        beat(0, 0)
        model = load_model_dir(version.artifact_path)
        flat = iter(score_solutions(model, samples, progress=beat))
        scores[names[version.pk]] = [[next(flat) for _ in p.samples] for p in problems]
    _beat(comparison, "comparing")(0, 0)
    report = compare_best_of_n(
        problems,
        scores,
        {names[v.pk]: v.objective for v in versions},
        equivalent=grading.is_equivalent,
        key=grading.normalise_answer,
        ns=comparison.ns or None,
    )
    trained_on = overlap(metas, [problem_key(p.problem) for p in problems])
    return finite(
        {
            **report,
            "models": [
                {
                    "id": v.pk,
                    "name": names[v.pk],
                    "objective": v.objective,
                    "backbone": shown_path(v.backbone),
                    "optimizer_steps": (metas[names[v.pk]].get("training") or {}).get(
                        "optimizer_steps"
                    ),
                }
                for v in versions
            ],
            "footing": mismatches,
            "compared_despite": mismatches if comparison.allow_mismatch else [],
            "overlap": trained_on,
            "input": (
                {"sampling_run": comparison.sampling_run_id}
                if comparison.sampling_run_id
                else {"file": shown_path(comparison.input_path)}
            ),
        }
    )


def _beat(comparison: BestOfNComparison, phase: str) -> Any:
    """A progress callback that writes the phase and the heartbeat at most every BEAT_S
    seconds (and at once the first time); raises _TakenOver once the row is another
    worker's."""
    last = [-math.inf]

    def beat(done: int, total: int) -> None:
        if time.monotonic() - last[0] < BEAT_S:
            return
        last[0] = time.monotonic()
        shown = f"{phase} {done}/{total}" if total else phase
        if not comparison.heartbeat(phase=shown[:32]):
            raise _TakenOver

    return beat


def _method_names(versions: list[ModelVersion]) -> dict[int, str]:
    """Each model's name in the report's methods: its own, with its id where two share one."""
    counts: dict[str, int] = {}
    for version in versions:
        counts[version.name] = counts.get(version.name, 0) + 1
    return {v.pk: v.name if counts[v.name] == 1 else f"{v.name} #{v.pk}" for v in versions}


def _model_meta(version: ModelVersion) -> dict[str, Any]:
    """Its prm.json (how it was trained), or for an imported model what is known of it."""
    folder = Path(version.artifact_path)
    for name in ("prm.json", EXTERNAL_MANIFEST):
        try:
            meta = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            return {"backbone": version.backbone, **meta} if name != "prm.json" else meta
    return {"backbone": version.backbone}


def _problems(comparison: BestOfNComparison, grading: Any) -> list[Any]:
    """SampledProblem per problem of the input, answers read from the steps where missing."""
    from modeling.training.evaluate import SampledProblem, fill_answers, read_best_of_n

    if comparison.input_path:
        problems = read_best_of_n(comparison.input_path)
    else:
        by_problem: dict[int, SampledProblem] = {}
        rows = (
            Solution.objects.filter(pool_entry__sampling_run_id=comparison.sampling_run_id)
            .exclude(problem__ground_truth_answer__isnull=True)
            .order_by("problem_id", "pk")
            .values_list(
                "problem_id",
                "problem__text",
                "problem__ground_truth_answer",
                "steps",
                "final_answer",
            )
        )
        for problem_id, text, truth, steps, answer in rows.iterator(chunk_size=2000):
            if not steps:
                continue
            problem = by_problem.setdefault(
                problem_id, SampledProblem(str(problem_id), text, truth or "", [])
            )
            problem.samples.append((list(steps), answer))
        problems = list(by_problem.values())
    return fill_answers([p for p in problems if p.samples], grading.extract_answer)
