"""Model-assisted review for leads: the active PRM's step probabilities beside the labelers'
ratings, largest disagreement first. Labelers never see model scores (PRM800K did not show them)."""

from __future__ import annotations

import time

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from labeling.models import Batch, Solution
from labeling.roles import LEAD, RESEARCHER, current_project, require
from modeling import selectors
from modeling.models import ModelVersion
from modeling.services import runs
from stepwise.request_types import AuthenticatedRequest

REVIEW_REFUSED = "Model-assisted review is for leads and researchers."
# How long the page polls for a scoring it asked for before it says the scoring seems stuck.
SCORING_PATIENCE_SECONDS = 600


def scoring_state(started: str | None, unscored: int) -> str:
    """ "": not scoring; "waiting": the page polls until the solutions are scored; "stuck": asked
    more than SCORING_PATIENCE_SECONDS ago and still not done (the task failed or waits)."""
    if not started or not started.isdigit() or not unscored:
        return ""
    return "stuck" if time.time() - int(started) > SCORING_PATIENCE_SECONDS else "waiting"


@login_required
def review_queue(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=REVIEW_REFUSED)
    batches = Batch.objects.filter(project=request.project).order_by("-created_at")
    batch_id = request.GET.get("batch")
    batch = (
        get_object_or_404(batches, pk=batch_id)
        if batch_id and batch_id.isdigit()
        else batches.first()
    )
    queue = selectors.review_queue(batch) if batch else None
    scoring = (
        scoring_state(request.GET.get("scoring"), queue.unscored)
        if queue and queue.model_version
        else ""
    )
    context = {"batches": batches[:100], "batch": batch, "queue": queue, "scoring": scoring}
    # While scoring, the page polls itself (htmx) and swaps in the whole review when it is done.
    template = "modeling/review/queue.html#review" if request.htmx else "modeling/review/queue.html"
    return render(request, template, context)


@login_required
@require_POST
def review_score(request: AuthenticatedRequest, batch_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=REVIEW_REFUSED)
    batch = get_object_or_404(Batch.objects.filter(project=request.project), pk=batch_id)
    if ModelVersion.active(current_project(request).pk) is None:
        messages.error(request, "There is no active model to score with.")
    else:
        missing = runs.score_for_review(batch)
        messages.info(request, f"Scoring {missing} solutions with the active model.")
        if missing:
            return redirect(
                f"{reverse('modeling_review:queue')}?batch={batch.pk}&scoring={int(time.time())}"
            )
    return redirect(f"{reverse('modeling_review:queue')}?batch={batch.pk}")


@login_required
def review_solution(request: AuthenticatedRequest, solution_id: int) -> HttpResponse:
    require(request, LEAD, RESEARCHER, message=REVIEW_REFUSED)
    solution = get_object_or_404(
        Solution.objects.select_related("problem", "batch"),
        pk=solution_id,
        project=request.project,
    )
    context = {
        "solution": solution,
        "problem": solution.problem,
        "review": selectors.review_solution(solution),
        "active_model": ModelVersion.active(current_project(request).pk),
    }
    return render(request, "modeling/review/solution.html", context)
