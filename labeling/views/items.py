"""The lead's item browser: a batch's solutions, filtered and searched on the server (htmx
swaps the list as filters change), and one item's page: every labeler's ratings side by side,
the notes, and its whole history. Leads only: anyone else gets the app's 403."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling import selectors
from labeling.forms import ItemFilterForm
from labeling.models import Batch, Labeling, Solution
from labeling.roles import LEAD, require
from labeling.services import notes
from labeling.services.errors import LabelingError
from labeling.views.common import int_param
from labeling.views.lead import LEADS_ONLY, paths_of
from stepwise.request_types import AuthenticatedRequest

ITEMS_PER_PAGE = 25


@login_required
def item_list(request: AuthenticatedRequest, batch_id: int) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    batch = get_object_or_404(Batch.objects.filter(project=request.project), pk=batch_id)
    form = ItemFilterForm(request.GET or None, batch=batch)
    if form.is_bound and not form.is_valid():
        solutions = Solution.objects.none()
    else:
        filters = form.filters() if form.is_bound else selectors.ItemFilters()
        solutions = selectors.batch_items(batch, filters)
    page = Paginator(solutions, ITEMS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "batch": batch,
        "form": form,
        "page": page,
        "rows": selectors.item_rows(list(page.object_list)),
        "query": query.urlencode(),
    }
    template = "labeling/lead/items.html#results" if request.htmx else "labeling/lead/items.html"
    return render(request, template, context)


def _item_context(solution: Solution, *, error: str | None = None, text: str = "") -> dict:
    labelings = list(
        Labeling.objects.filter(solution=solution).select_related("labeler").order_by("pk")
    )
    return {
        "solution": solution,
        "problem": solution.problem,
        "labelings": labelings,
        "steps": selectors.side_by_side(solution, labelings),
        "paths": paths_of(solution, labelings),
        "agreement": getattr(solution, "agreement", None),
        "adjudication": getattr(solution, "adjudication", None),
        "item_notes": selectors.notes_by_step(solution).get(None, []),
        "history": selectors.item_history(solution),
        "error": error,
        "draft": text,
    }


def _solution(solution_id: int, project: Any) -> Solution:
    return get_object_or_404(
        Solution.objects.select_related("problem", "batch", "agreement", "adjudication"),
        pk=solution_id,
        project=project,
    )


@login_required
def item_detail(request: AuthenticatedRequest, solution_id: int) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    return render(
        request, "labeling/lead/item.html", _item_context(_solution(solution_id, request.project))
    )


@login_required
@require_POST
def item_reply(request: AuthenticatedRequest, solution_id: int) -> HttpResponse:
    """A lead's note on the item (about one step, or the whole solution)."""
    require(request, LEAD, message=LEADS_ONLY)
    solution = _solution(solution_id, request.project)
    text = request.POST.get("text", "")
    try:
        step = int_param(request, "step", required=False)
        notes.note_reply(
            solution=solution,
            lead=request.user,
            text=text,
            step_index=None if step is None else step - 1,
        )
    except LabelingError as refused:
        context = _item_context(solution, error=str(refused), text=text)
        return render(request, "labeling/lead/item.html", context, status=refused.status_code)
    messages.info(request, "Note saved.")
    return redirect("labeling:item_detail", solution_id=solution.pk)
