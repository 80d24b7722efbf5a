"""Labeler pages: queue, claim, the labeling page (rate, undo, finish), guidelines.

Views fetch, validate, call a service, render; htmx gets the fragment.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labeling import selectors
from labeling.models import FinishReason, Labeling
from labeling.roles import LABELER, LEAD, has_role, require
from labeling.services import rating
from labeling.services.errors import LabelingError
from labeling.services.queue import claim_next, ensure_labeler, extend_lease
from labeling.views.navigation import safe_return_url


def _int_param(request: HttpRequest, name: str, *, required: bool = True) -> int | None:
    value = request.POST.get(name, "")
    if value == "" and not required:
        return None
    try:
        return int(value)
    except ValueError:
        raise LabelingError(f"{name} must be an integer, got {value!r}.") from None


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    """The labeler's section of the home page, with their recent labelings."""
    require(request, LABELER, message="You need the labeler role to label.")
    recent = (
        Labeling.objects.filter(labeler=request.user, status=Labeling.Status.COMPLETED)
        .select_related("solution__problem")
        .order_by("-finished_at")[:10]
    )
    cockpit = selectors.labeler_cockpit(request.user, ensure_labeler(request.user))
    return render(request, "labeling/queue.html", {"labeler_cockpit": cockpit, "recent": recent})


@login_required
@require_POST
def claim(request: HttpRequest) -> HttpResponse:
    require(request, LABELER, message="You need the labeler role to label.")
    had_open = Labeling.objects.filter(
        labeler=request.user, status=Labeling.Status.IN_PROGRESS
    ).exists()
    labeling = claim_next(request.user)
    if labeling is not None and not had_open and labeling.step_labels.exists():
        messages.info(
            request,
            "Your claim on this solution had expired while you were away; it is yours again. "
            "Continue where you stopped.",
        )
    if labeling is None:
        labeler = ensure_labeler(request.user)
        if labeler.state == labeler.State.ACTIVE:
            messages.info(request, "Nothing is waiting for you right now. Thank you!")
        return redirect("labeling:queue")
    return redirect("labeling:labeling", labeling_id=labeling.pk)


def _panel_context(labeling: Labeling, error: str | None = None) -> dict:
    steps = selectors.step_views(labeling)
    rated = [s for s in steps if s.rating is not None]
    current = None
    if labeling.status != Labeling.Status.COMPLETED:
        current = steps[len(rated)] if len(rated) < len(steps) else None
    return {
        "labeling": labeling,
        "solution": labeling.solution,
        "problem": labeling.solution.problem,
        "rated": rated,
        "current": current,
        "hidden_count": len(steps) - len(rated) - (1 if current else 0),
        "step_total": len(steps),
        "error": error,
        "finish_reasons": FinishReason,
    }


def _own_labeling(request: HttpRequest, labeling_id: int) -> Labeling:
    # Labelers see only their own work; leads may read anyone's.
    labeling = get_object_or_404(
        Labeling.objects.select_related("solution__problem", "solution__batch"), pk=labeling_id
    )
    if labeling.labeler_id != request.user.pk and not has_role(request.user, LEAD):
        raise PermissionDenied("This labeling is not yours.")
    return labeling


@login_required
def labeling_page(request: HttpRequest, labeling_id: int) -> HttpResponse:
    labeling = _own_labeling(request, labeling_id)
    context = _panel_context(labeling)
    context["read_only"] = labeling.labeler_id != request.user.pk
    template = "labeling/labeling.html#panel" if request.htmx else "labeling/labeling.html"
    return render(request, template, context)


def _act(request: HttpRequest, labeling_id: int, action) -> HttpResponse:
    """Run a labeling action and answer with the panel; errors keep the saved state visible."""
    try:
        labeling = action()
        status, error = 200, None
    except LabelingError as exc:
        labeling = _own_labeling(request, labeling_id)
        status, error = exc.status_code, str(exc)
    if labeling.labeler_id != request.user.pk:
        raise PermissionDenied("This labeling is not yours.")
    labeling = Labeling.objects.select_related("solution__problem", "solution__batch").get(
        pk=labeling.pk
    )
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("labeling:labeling", labeling_id=labeling.pk)
    return render(
        request, "labeling/labeling.html#panel", _panel_context(labeling, error), status=status
    )


@login_required
@require_POST
def rate(request: HttpRequest, labeling_id: int) -> HttpResponse:
    def action() -> Labeling:
        return rating.rate_step(
            labeling_id=labeling_id,
            user=request.user,
            step_index=_int_param(request, "step_index"),
            rating=_int_param(request, "rating"),
            flagged=request.POST.get("flagged") in ("1", "on", "true"),
            elapsed_ms=_int_param(request, "elapsed_ms", required=False),
        )

    return _act(request, labeling_id, action)


@login_required
@require_POST
def extend(request: HttpRequest, labeling_id: int) -> HttpResponse:
    """The page calls this while the labeler is active: the claim does not expire under them."""
    try:
        labeling = extend_lease(labeling_id, request.user)
    except LabelingError as exc:
        return JsonResponse({"detail": str(exc)}, status=exc.status_code)
    return JsonResponse({"lease_expires_at": labeling.lease_expires_at.isoformat()})


@login_required
@require_POST
def undo(request: HttpRequest, labeling_id: int) -> HttpResponse:
    return _act(
        request, labeling_id, lambda: rating.undo_last(labeling_id=labeling_id, user=request.user)
    )


@login_required
@require_POST
def finish(request: HttpRequest, labeling_id: int) -> HttpResponse:
    def action() -> Labeling:
        return rating.finish_labeling(
            labeling_id=labeling_id,
            user=request.user,
            reason=request.POST.get("reason", ""),
            elapsed_ms=_int_param(request, "elapsed_ms", required=False),
        )

    return _act(request, labeling_id, action)


@login_required
def guidelines(request: HttpRequest) -> HttpResponse:
    text, version = selectors.current_guidelines()
    return render(
        request,
        "labeling/guidelines.html",
        {
            "text": text,
            "version": version,
            "back": safe_return_url(request, request.GET.get("back")),
        },
    )
