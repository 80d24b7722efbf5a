"""Pre-label runs for leads and researchers: start a judge on a batch, follow its progress, its
estimate and its no-label count, cancel or resume it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling.roles import LEAD, RESEARCHER, has_role, require
from modeling.forms import PrelabelForm
from modeling.models import PreLabelRun
from modeling.services import prelabeling, sampling
from stepwise.request_types import AuthenticatedRequest

PRELABEL_REFUSED = "Pre-label runs are for leads and researchers."


@login_required
def prelabel_list(request: AuthenticatedRequest) -> HttpResponse:
    """The runs (htmx polls #prelabel-runs while one is open) and the form that starts one."""
    require(request, LEAD, RESEARCHER, message=PRELABEL_REFUSED)
    form = PrelabelForm(
        request.POST or None,
        may_edit_template=has_role(request.user, LEAD, project=request.project),
        project=request.project,
    )
    if request.method == "POST" and form.is_valid():
        try:
            prelabeling.start_prelabel_run(
                batch=form.cleaned_data["batch"],
                judge=form.cleaned_data["judge"],
                created_by=request.user,
                options=form.options(),
                project=request.project,
            )
        except prelabeling.PrelabelError as exc:
            messages.error(request, str(exc))
        else:
            return redirect("modeling_prelabel:list")
    runs = list(PreLabelRun.objects.filter(project=request.project).select_related("batch")[:20])
    context = {
        "form": form,
        "runs": runs,
        "polling": any(run.is_open for run in runs),
        "generator": sampling.generator_description(),
    }
    template = "modeling/prelabel/runs.html#runs" if request.htmx else "modeling/prelabel/runs.html"
    return render(request, template, context, status=400 if form.errors else 200)


@login_required
@require_POST
def prelabel_cancel(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=PRELABEL_REFUSED)
    prelabeling.cancel_prelabel_run(
        get_object_or_404(PreLabelRun.objects.filter(project=request.project), pk=run_id)
    )
    return redirect("modeling_prelabel:list")


@login_required
@require_POST
def prelabel_resume(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=PRELABEL_REFUSED)
    try:
        prelabeling.resume_prelabel_run(
            get_object_or_404(PreLabelRun.objects.filter(project=request.project), pk=run_id)
        )
    except prelabeling.PrelabelError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_prelabel:list")
