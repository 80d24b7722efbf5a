"""Best-of-N comparisons for leads and researchers: start one (a form, or the buttons on the
sampling page), follow it, read its curves and table; and the researcher's "Train the ORM"."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling.roles import LEAD, RESEARCHER, current_project, require
from modeling.forms import BestOfNForm
from modeling.models import SamplingRun
from modeling.services import best_of_n, runs
from modeling.views.runs import RUNS_REFUSED
from stepwise.paths import shown_path
from stepwise.request_types import AuthenticatedRequest

RECENT = 50


@login_required
def comparison_list(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    form = BestOfNForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        sampling_run = None
        if data["sampling_run"] is not None:
            sampling_run = SamplingRun.objects.filter(
                pk=data["sampling_run"], project=request.project
            ).first()
            if sampling_run is None:
                form.add_error("sampling_run", f"No sampling run {data['sampling_run']}.")
        if not form.errors:
            try:
                best_of_n.checked_model_ids(  # before an upload is kept
                    data["models"], project_id=current_project(request).pk
                )
                upload = data["file"]
                input_path = (
                    best_of_n.store_upload(upload, upload.size)
                    if upload is not None
                    else data["input"].strip()
                )
                comparison = best_of_n.comparison_start(
                    model_ids=data["models"],
                    sampling_run=sampling_run,
                    input_path=input_path,
                    ns=data["ns"],
                    allow_mismatch=data["allow_mismatch"],
                    user=request.user,
                    project_id=current_project(request).pk,
                )
            except best_of_n.ComparisonError as exc:
                form.add_error(None, str(exc))
            else:
                return redirect("modeling_runs:best_of_n", comparison_id=comparison.pk)
    context = {
        "form": form,
        "comparisons": best_of_n.visible_comparisons(request.user, request.project)[:RECENT],
    }
    return render(request, "modeling/runs/best_of_n_list.html", context)


@login_required
def comparison_detail(request: AuthenticatedRequest, comparison_id: int) -> HttpResponse:
    """The curves, the table of accuracy [low, high] per N and method, and the footing check;
    htmx polls the page's state while it waits or runs."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    comparison = get_object_or_404(
        best_of_n.visible_comparisons(request.user, request.project), pk=comparison_id
    )
    report = comparison.report or {}
    context = {
        "comparison": comparison,
        "models": best_of_n.comparison_models(comparison),
        "methods": list((report.get("methods") or {}).keys()),
        "table": best_of_n.comparison_table(report),
        "input_shown": shown_path(comparison.input_path) if comparison.input_path else "",
    }
    template = (
        "modeling/runs/best_of_n.html#state" if request.htmx else "modeling/runs/best_of_n.html"
    )
    return render(request, template, context)


@login_required
def comparison_png(request: AuthenticatedRequest, comparison_id: int) -> HttpResponseBase:
    """The curves as a PNG, inline; `?download=1` as a file."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    comparison = get_object_or_404(
        best_of_n.visible_comparisons(request.user, request.project), pk=comparison_id
    )
    png = comparison.png
    if png is None:
        raise Http404("This comparison has no curves (yet).")
    return FileResponse(
        png.open("rb"),
        as_attachment=request.GET.get("download") == "1",
        filename=f"best-of-n-{comparison.pk}.png",
        content_type="image/png",
    )


@login_required
@require_POST
def comparison_anyway(request: AuthenticatedRequest, comparison_id: int) -> HttpResponse:
    """A comparison refused for unequal footing, started again with the mismatch allowed."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    comparison = get_object_or_404(
        best_of_n.visible_comparisons(request.user, request.project), pk=comparison_id
    )
    try:
        again = best_of_n.comparison_anyway(comparison, user=request.user)
    except best_of_n.ComparisonError as exc:
        messages.error(request, str(exc))
        return redirect("modeling_runs:best_of_n", comparison_id=comparison.pk)
    return redirect("modeling_runs:best_of_n", comparison_id=again.pk)


@login_required
@require_POST
def compare_sampling_run(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    """The sampling page's "Compare best-of-N": the active PRM and the latest ORM on it."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    sampling_run = get_object_or_404(SamplingRun.objects.filter(project=request.project), pk=run_id)
    try:
        comparison = best_of_n.comparison_start(
            model_ids=best_of_n.default_models(current_project(request).pk),
            sampling_run=sampling_run,
            user=request.user,
            project_id=current_project(request).pk,
        )
    except best_of_n.ComparisonError as exc:
        messages.error(request, str(exc))
        return redirect("modeling_loop:sampling")
    return redirect("modeling_runs:best_of_n", comparison_id=comparison.pk)


@login_required
@require_POST
def train_orm(request: AuthenticatedRequest) -> HttpResponse:
    """ "Train the ORM" on the pool (or `sampling_run`'s solutions): an outcome run with the
    active PRM's backbone and steps."""
    require(request, LEAD, RESEARCHER, message=RUNS_REFUSED)
    sampling_run = None
    chosen = request.POST.get("sampling_run", "")
    if chosen:
        if not chosen.isdigit() or len(chosen) > 10:
            raise Http404("No such sampling run.")
        sampling_run = get_object_or_404(
            SamplingRun.objects.filter(project=request.project), pk=int(chosen)
        )
    try:
        run = runs.start_orm_training(
            sampling_run=sampling_run, created_by=request.user, project=request.project
        )
    except runs.RunError as exc:
        messages.error(request, str(exc))
        return redirect("modeling_loop:sampling")
    return redirect("modeling_runs:detail", run_id=run.pk)
