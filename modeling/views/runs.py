"""PRM training pages for leads and researchers: start a run, watch it train, activate its model."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import OuterRef, Subquery
from django.http import FileResponse, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from labeling.roles import LEAD, RESEARCHER, current_project, require
from modeling import selectors
from modeling.forms import EvaluationSetForm, TrainingRunForm
from modeling.models import EvaluationSet, ModelExport, ModelVersion, TrainingRun
from modeling.services import evaluation_sets, exporting, runs
from stepwise.celery import model_tasks_in_thread
from stepwise.paths import shown_path
from stepwise.request_types import AuthenticatedRequest

RECENT_RUNS = 50
RUN_SET_FIELDS = ("output_dir", "dataset_version")


def _shown(value: Any) -> Any:
    """A config value as a page shows it: a step separator's "\\n\\n" quoted, not blank."""
    return json.dumps(value) if isinstance(value, str) and not value.isprintable() else value


RUNS_REFUSED = "Training runs are for leads and researchers."


@login_required
def run_list(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    # ?backbone=NAME: start from the settings README suggests for that backbone.
    backbone = request.GET.get("backbone", "").strip()[: runs.MAX_BACKBONE_CHARS] or None
    form = TrainingRunForm(request.POST or None, backbone=backbone, project=request.project)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = runs.start_training_run(
                config=form.config(),
                created_by=request.user,
                name=data["name"],
                filters=form.filters(),
                data_files=[] if form.is_outcome() else data["data_files"],
                use_labelings=form.use_labelings(),
                holdout_fraction=data["holdout_fraction"],
                activate=data["activate"],
                project=request.project,
            )
        except runs.RunError as exc:
            messages.error(request, str(exc))
        else:
            return redirect("modeling_runs:detail", run_id=run.pk)
    return _render_list(request, form=form)


def _render_list(
    request: AuthenticatedRequest,
    *,
    form: TrainingRunForm | None = None,
    set_form: EvaluationSetForm | None = None,
) -> HttpResponse:
    context = {
        "form": form or TrainingRunForm(project=request.project),
        "set_form": set_form or EvaluationSetForm(),
        "runs": TrainingRun.objects.filter(project=request.project).select_related("model_version")[
            :RECENT_RUNS
        ],
        "active_model": ModelVersion.active(current_project(request).pk),
        "evaluation_set": EvaluationSet.objects.select_related("created_by")
        .filter(is_current=True, project=request.project)
        .first(),
    }
    return render(request, "modeling/runs/list.html", context)


@login_required
@require_POST
def evaluation_set_create(request: AuthenticatedRequest) -> HttpResponse:
    """Create or renew the evaluation set; errors come back in its form on the runs page."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    form = EvaluationSetForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            created = evaluation_sets.create_evaluation_set(
                share=data["share"],
                count=data["count"],
                seed=data["seed"],
                created_by=request.user,
                project_id=current_project(request).pk,
            )
        except evaluation_sets.EvaluationSetError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Evaluation set v{created.version} is now current.")
            return redirect("modeling_runs:list")
    return _render_list(request, set_form=form)


@login_required
def run_detail(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    run = get_object_or_404(
        TrainingRun.objects.select_related("created_by", "model_version"),
        pk=run_id,
        project=request.project,
    )
    template = "modeling/runs/detail.html#progress" if request.htmx else "modeling/runs/detail.html"
    return render(request, template, {"run": run, **run_report(run)})


@login_required
@require_POST
def run_cancel(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    run = get_object_or_404(TrainingRun.objects.filter(project=request.project), pk=run_id)
    try:
        runs.cancel_training_run(run)
    except runs.RunError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_runs:detail", run_id=run.pk)


@login_required
@require_POST
def run_resume(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    run = get_object_or_404(TrainingRun.objects.filter(project=request.project), pk=run_id)
    try:
        runs.resume_training_run(run)
    except runs.RunError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_runs:detail", run_id=run.pk)


@login_required
def model_list(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    # The latest export's state: the download serves only the latest (`export_archive`).
    latest = ModelExport.objects.filter(version=OuterRef("pk")).order_by("-created_at", "-id")
    versions = ModelVersion.objects.filter(project=request.project).annotate(
        export_status=Subquery(latest.values("status")[:1])
    )
    context = {"versions": versions, "succeeded": ModelExport.Status.SUCCEEDED}
    return render(request, "modeling/runs/models.html", context)


@login_required
def model_detail(request: AuthenticatedRequest, version_id: int) -> HttpResponse:
    """A model version and its Hugging Face export; htmx polls the export's fragment while it
    waits or runs."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    version = get_object_or_404(ModelVersion.objects.filter(project=request.project), pk=version_id)
    context = {"version": version, "export": exporting.latest_export(version)}
    template = "modeling/runs/model.html#export" if request.htmx else "modeling/runs/model.html"
    return render(request, template, context)


@login_required
@require_POST
def model_export_start(request: AuthenticatedRequest, version_id: int) -> HttpResponse:
    """Start the export (or find the one running, or the finished zip); its page follows it."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    version = get_object_or_404(ModelVersion.objects.filter(project=request.project), pk=version_id)
    export = exporting.export_start(version=version, user=request.user)
    if request.htmx:
        context = {"version": version, "export": export}
        return render(request, "modeling/runs/model.html#export", context)
    return redirect("modeling_runs:model", version_id=version.pk)


@login_required
@require_POST
def model_activate(request: AuthenticatedRequest, version_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    version = get_object_or_404(ModelVersion.objects.filter(project=request.project), pk=version_id)
    try:
        runs.activate_model_version(version)
    except runs.RunError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{version.name} is now the active model.")
    return redirect("modeling_runs:models")


@login_required
def model_export(request: AuthenticatedRequest, version_id: int) -> HttpResponseBase:
    """The finished export's zip; without one, a plain-text answer that says why (404, 409 while
    it is built, 410 once its zip is gone), never a page in the zip's place. Builds nothing."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    version = get_object_or_404(ModelVersion.objects.filter(project=request.project), pk=version_id)
    try:
        archive = exporting.export_archive(version)
    except exporting.ExportUnavailable as exc:
        return HttpResponse(f"{exc}\n", status=exc.status, content_type="text/plain; charset=utf-8")
    return FileResponse(
        archive.open("rb"),
        as_attachment=True,
        filename=archive.name,
        content_type="application/zip",
    )


def run_report(run: TrainingRun) -> dict[str, Any]:
    """What the run page shows beyond the row: ages, metrics by section, chart data."""
    now = timezone.now()
    metrics = run.metrics or {}
    held_out = metrics.get("held_out") or {}
    # Best-of-N is measured later on the run's model (evaluate_prm --best-of-n), stored there.
    version = getattr(run, "model_version", None)  # a run that has not finished has none
    version_metrics = (version.metrics or {}) if version else {}
    best_of_n = (version_metrics.get("evaluation") or {}).get("best_of_n")
    heartbeat_ms = (
        int((now - run.heartbeat_at).total_seconds() * 1000) if run.heartbeat_at else None
    )
    took_ms = (
        int((run.finished_at - run.started_at).total_seconds() * 1000)
        if run.finished_at and run.started_at
        else None
    )
    ahead = selectors.runs_ahead(run)
    return {
        "heartbeat_ms": heartbeat_ms,
        "took_ms": took_ms,
        "ahead": ahead,
        "run_before": ahead[-1] if ahead else None,
        "in_process": model_tasks_in_thread(),
        # A RUNNING row whose worker went quiet: say so before fail_stale_runs marks it failed.
        "stale": run.status == TrainingRun.Status.RUNNING
        and heartbeat_ms is not None
        and heartbeat_ms > settings.STEPWISE_RUN_STALE_SECONDS * 1000,
        "held_out": held_out,
        "processbench": metrics.get("processbench") or [],
        # Under their root's setting, as the API shows them: the page names no server path.
        "processbench_files": [
            shown_path(path) for path in run.dataset_description.get("processbench") or []
        ],
        "gate": metrics.get("gate"),
        "on_set": metrics.get("evaluation_set"),
        "best_of_n": best_of_n,
        # output_dir and dataset_version are set per run when it executes: the dataset card shows them.
        "config_items": sorted(
            (k, _shown(v)) for k, v in (run.config or {}).items() if k not in RUN_SET_FIELDS
        ),
        "filter_text": [
            _filter_text(key, value)
            for key, value in (run.dataset_description.get("filters") or {}).items()
        ],
        "chart_data": {
            "loss": run.loss_curve or [],
            # Empty bins have no mean (null): nothing to plot.
            "reliability": [
                b for b in held_out.get("reliability_negative") or [] if b.get("count")
            ],
            "best_of_n": best_of_n["curve"] if best_of_n else [],
        },
    }


def _filter_text(key: str, value: Any) -> str:
    if isinstance(value, list):
        shown = ", ".join(str(v) for v in value[:10]) + (
            f" … ({len(value)} in all)" if len(value) > 10 else ""
        )
        return f"{key.replace('_', ' ')}: {shown}"
    return f"{key.replace('_', ' ')}: {value}"
