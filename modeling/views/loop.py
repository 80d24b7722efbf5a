"""Generation pages for leads and researchers: start the loop, watch its steps, see the picks."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling.roles import LEAD, RESEARCHER, current_project, require
from modeling.forms import GenerationForm, SamplingForm
from modeling.models import GenerationRun, ModelVersion, SamplingRun
from modeling.services import loop, pool, sampling
from stepwise.request_types import AuthenticatedRequest

GENERATIONS_REFUSED = "Generations are for leads and researchers."


@login_required
def generation_list(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    form = GenerationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = loop.start_generation(
                params=form.params(),
                created_by=request.user,
                project_id=current_project(request).pk,
            )
        except loop.GenerationError as exc:
            messages.error(request, str(exc))
        else:
            return redirect("modeling_loop:generation", generation=run.generation)
    context = {
        "form": form,
        "runs": loop.recent_runs(current_project(request).pk)[:20],
        "pool": pool.pool_stats(current_project(request).pk),
        "active_model": ModelVersion.active(current_project(request).pk),
        "open_run": GenerationRun.objects.filter(
            status__in=GenerationRun.OPEN, project=request.project
        ).first(),
    }
    return render(request, "modeling/loop/generations.html", context)


@login_required
def generation_detail(request: AuthenticatedRequest, generation: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    run = get_object_or_404(loop.recent_runs(current_project(request).pk), generation=generation)
    context = {"run": run, "selections": loop.selections_of(run)}
    template = (
        "modeling/loop/generation.html#progress"
        if request.htmx
        else "modeling/loop/generation.html"
    )
    return render(request, template, context)


@login_required
@require_POST
def generation_retry(request: AuthenticatedRequest, generation: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    run = get_object_or_404(
        GenerationRun.objects.filter(project=request.project), generation=generation
    )
    try:
        loop.retry_generation(run)
    except loop.GenerationError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_loop:generation", generation=generation)


@login_required
@require_POST
def generation_cancel(request: AuthenticatedRequest, generation: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    run = get_object_or_404(
        GenerationRun.objects.filter(project=request.project), generation=generation
    )
    try:
        loop.cancel_generation(run)
    except loop.GenerationError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_loop:generation", generation=generation)


@login_required
def sampling_list(request: AuthenticatedRequest) -> HttpResponse:
    """generate_pool from the page: start a sampling run, follow the runs (htmx polls #runs)."""
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    form = SamplingForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            sampling.create_sampling_run(
                **form.params(), user=request.user, project_id=current_project(request).pk
            )
        except sampling.SamplingError as exc:
            messages.error(request, str(exc))
        else:
            return redirect("modeling_loop:sampling")
    runs = SamplingRun.objects.filter(project=request.project)[:20]
    context = {
        "form": form,
        "runs": runs,
        "polling": any(run.is_open for run in runs),
        "pool": pool.pool_stats(current_project(request).pk),
        "generator": sampling.generator_description(),
    }
    template = "modeling/loop/sampling.html#runs" if request.htmx else "modeling/loop/sampling.html"
    return render(request, template, context)


@login_required
def sampling_estimate(request: AuthenticatedRequest) -> HttpResponse:
    """The time the sampling form's run should take (htmx swaps it in as the form changes)."""
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    form = SamplingForm(request.GET)
    context: dict = {"estimate": None, "estimate_error": ""}
    if form.is_valid():
        params = form.params()
        try:
            problems = sampling.choose_problems(
                batch_id=params["batch_id"],
                subject=params["subject"],
                level=params["level"],
                limit=params["limit"],
                project_id=current_project(request).pk,
            )
        except sampling.SamplingError as exc:
            context["estimate_error"] = str(exc)
        else:
            context["estimate"] = sampling.estimate(
                problems=len(problems), samples=params["samples"], max_tokens=params["max_tokens"]
            )
            context["problems"] = len(problems)
    else:
        context["estimate_error"] = "Fix the form to see an estimate."
    return render(request, "modeling/loop/sampling.html#estimate", context)


@login_required
@require_POST
def sampling_resume(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    try:
        sampling.resume_sampling_run(
            get_object_or_404(SamplingRun.objects.filter(project=request.project), pk=run_id)
        )
    except sampling.SamplingError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_loop:sampling")


@login_required
@require_POST
def sampling_cancel(request: AuthenticatedRequest, run_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    sampling.cancel_sampling_run(
        get_object_or_404(SamplingRun.objects.filter(project=request.project), pk=run_id)
    )
    return redirect("modeling_loop:sampling")
