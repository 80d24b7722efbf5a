"""Generation pages for leads and researchers: start the loop, watch its steps, see the picks."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling.roles import LEAD, RESEARCHER, require
from modeling.forms import GenerationForm
from modeling.models import GenerationRun, ModelVersion
from modeling.services import loop

GENERATIONS_REFUSED = "Generations are for leads and researchers."


@login_required
def generation_list(request: HttpRequest) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    form = GenerationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = loop.start_generation(params=form.params(), created_by=request.user)
        except loop.GenerationError as exc:
            messages.error(request, str(exc))
        else:
            return redirect("modeling_loop:generation", generation=run.generation)
    context = {
        "form": form,
        "runs": loop.recent_runs()[:20],
        "pool": loop.pool_stats(),
        "active_model": ModelVersion.active(),
        "open_run": GenerationRun.objects.filter(status__in=GenerationRun.OPEN).first(),
    }
    return render(request, "modeling/loop/generations.html", context)


@login_required
def generation_detail(request: HttpRequest, generation: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    run = get_object_or_404(loop.recent_runs(), generation=generation)
    context = {"run": run, "selections": loop.selections_of(run)}
    template = (
        "modeling/loop/generation.html#progress"
        if request.htmx
        else "modeling/loop/generation.html"
    )
    return render(request, template, context)


@login_required
@require_POST
def generation_retry(request: HttpRequest, generation: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    run = get_object_or_404(GenerationRun, generation=generation)
    try:
        loop.retry_generation(run)
    except loop.GenerationError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_loop:generation", generation=generation)


@login_required
@require_POST
def generation_cancel(request: HttpRequest, generation: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=GENERATIONS_REFUSED)
    run = get_object_or_404(GenerationRun, generation=generation)
    try:
        loop.cancel_generation(run)
    except loop.GenerationError as exc:
        messages.error(request, str(exc))
    return redirect("modeling_loop:generation", generation=generation)
