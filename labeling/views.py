"""Labeler pages. Views fetch, validate, call a service, render; htmx gets the fragment."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from labeling import selectors, services
from labeling.forms import BatchForm, GuidelinesForm
from labeling.importers import LineError, NoRecords, import_samples
from labeling.models import (
    Batch,
    BatchLabelerStats,
    FinishReason,
    Guidelines,
    Labeler,
    Labeling,
    Solution,
)
from labeling.roles import LABELER, LEAD, RESEARCHER, has_role


def _int_param(request: HttpRequest, name: str, *, required: bool = True) -> int | None:
    value = request.POST.get(name, "")
    if value == "" and not required:
        return None
    try:
        return int(value)
    except ValueError:
        raise services.LabelingError(f"{name} must be an integer, got {value!r}.") from None


@login_required
def home(request: HttpRequest) -> HttpResponse:
    if has_role(request.user, LABELER) and not has_role(request.user, LEAD, RESEARCHER):
        return redirect("labeling:queue")
    return render(request, "home.html")


def _require_labeler(request: HttpRequest) -> None:
    if not has_role(request.user, LABELER):
        raise PermissionDenied("You need the labeler role to label.")


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    _require_labeler(request)
    labeler = services.ensure_labeler(request.user)
    open_labeling = Labeling.objects.filter(
        labeler=request.user, status=Labeling.Status.IN_PROGRESS
    ).first()
    batches = list(services.batches_for(request.user).order_by("-priority", "id"))
    # Labels still wanted per batch, from counters: no scan of labelings.
    counts = selectors.solution_counts([b.pk for b in batches])
    done = dict(
        BatchLabelerStats.objects.filter(batch__in=batches)
        .values_list("batch_id")
        .annotate(n=Sum("labelings"))
        .values_list("batch_id", "n")
    )
    for batch in batches:
        batch.waiting = max(0, counts.get(batch.pk, 0) * batch.overlap - (done.get(batch.pk) or 0))
    stats = BatchLabelerStats.objects.filter(labeler=request.user).aggregate(
        labelings=Sum("labelings"), steps=Sum("steps"), time_ms=Sum("time_ms")
    )
    recent = (
        Labeling.objects.filter(labeler=request.user, status=Labeling.Status.COMPLETED)
        .select_related("solution__problem")
        .order_by("-finished_at")[:10]
    )
    return render(
        request,
        "labeling/queue.html",
        {
            "batches": batches,
            "open_labeling": open_labeling,
            "stats": stats,
            "recent": recent,
            "labeler": labeler,
        },
    )


@login_required
@require_POST
def claim(request: HttpRequest) -> HttpResponse:
    _require_labeler(request)
    labeling = services.claim_next(request.user)
    if labeling is None:
        labeler = services.ensure_labeler(request.user)
        if labeler.state == labeler.State.ACTIVE:
            messages.info(request, "Nothing is waiting for you right now. Thank you!")
        return redirect("labeling:queue")
    return redirect("labeling:labeling", labeling_id=labeling.pk)


def _panel_context(labeling: Labeling, error: str | None = None) -> dict:
    steps = services.step_views(labeling)
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
    except services.LabelingError as exc:
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
        return services.rate_step(
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
def undo(request: HttpRequest, labeling_id: int) -> HttpResponse:
    return _act(
        request, labeling_id, lambda: services.undo_last(labeling_id=labeling_id, user=request.user)
    )


@login_required
@require_POST
def finish(request: HttpRequest, labeling_id: int) -> HttpResponse:
    def action() -> Labeling:
        return services.finish_labeling(
            labeling_id=labeling_id,
            user=request.user,
            reason=request.POST.get("reason", ""),
            elapsed_ms=_int_param(request, "elapsed_ms", required=False),
        )

    return _act(request, labeling_id, action)


# --- leads ----------------------------------------------------------------------------------

DEFAULT_GUIDELINES = Path(__file__).resolve().parent / "guidelines_default.txt"


def _require_lead(request: HttpRequest) -> None:
    if not has_role(request.user, LEAD):
        raise PermissionDenied("This page is for leads.")


@login_required
def lead_home(request: HttpRequest) -> HttpResponse:
    _require_lead(request)
    return render(
        request,
        "labeling/lead/home.html",
        {
            "batches": selectors.batches_overview(),
            "attention": selectors.labelers_needing_attention(),
            "adjudication": selectors.adjudication_queue(limit=10),
        },
    )


@login_required
def batch_dashboard(request: HttpRequest, batch_id: int) -> HttpResponse:
    """The live dashboard of one batch; htmx polls the `live` fragment every 5 s."""
    _require_lead(request)
    batch = get_object_or_404(Batch, pk=batch_id)
    context = {
        "summary": selectors.batch_summary(batch),
        "rows": selectors.batch_labeler_rows(batch),
    }
    template = "labeling/lead/batch.html#live" if request.htmx else "labeling/lead/batch.html"
    return render(request, template, context)


@login_required
def batch_edit(request: HttpRequest, batch_id: int | None = None) -> HttpResponse:
    _require_lead(request)
    batch = get_object_or_404(Batch, pk=batch_id) if batch_id else None
    form = BatchForm(request.POST or None, request.FILES or None, instance=batch)
    if request.method == "POST" and form.is_valid():
        creating = batch is None
        batch = form.save(commit=False)
        if creating:
            batch.created_by = request.user
        batch.save()
        form.save_m2m()
        source = form.cleaned_data.get("take_from")
        if source is not None:
            moved = services.batch_move_solutions(
                batch=batch, source=source, limit=form.cleaned_data.get("take_limit")
            )
            messages.info(request, f"Moved {moved} unlabeled solutions from {source.name}.")
        upload = form.cleaned_data.get("upload")
        if upload is not None:
            with tempfile.NamedTemporaryFile(suffix=".jsonl") as handle:
                for chunk in upload.chunks():
                    handle.write(chunk)
                handle.flush()
                try:
                    report = import_samples(
                        handle.name,
                        batch_name=batch.name,
                        overlap=batch.overlap,
                        generation=batch.generation,
                    )
                    messages.info(request, report.summary().replace(handle.name, upload.name))
                except (LineError, NoRecords) as exc:
                    messages.error(request, str(exc).replace(handle.name, upload.name))
        messages.info(request, f"Batch “{batch.name}” {'created' if creating else 'saved'}.")
        return redirect("labeling:batch_dashboard", batch_id=batch.pk)
    return render(request, "labeling/lead/batch_form.html", {"form": form, "batch": batch})


@login_required
def labelers_page(request: HttpRequest) -> HttpResponse:
    _require_lead(request)
    return render(request, "labeling/lead/labelers.html", {"labelers": selectors.all_labelers()})


@login_required
def labeler_detail(request: HttpRequest, user_id: int) -> HttpResponse:
    _require_lead(request)
    user = get_object_or_404(get_user_model(), pk=user_id)
    labeler = services.ensure_labeler(user)
    rolling, rolling_n = services.rolling_gold_accuracy(labeler)
    return render(
        request,
        "labeling/lead/labeler.html",
        {
            "subject": user,
            "labeler": labeler,
            "rolling": rolling,
            "rolling_n": rolling_n,
            "results": selectors.screening_results(user.pk),
            "recent": selectors.recent_labelings(user.pk),
            "states": Labeler.State,
        },
    )


@login_required
@require_POST
def labeler_state(request: HttpRequest, user_id: int) -> HttpResponse:
    """Admit or reject after screening, pause, or reinstate."""
    _require_lead(request)
    user = get_object_or_404(get_user_model(), pk=user_id)
    labeler = services.ensure_labeler(user)
    state = request.POST.get("state", "")
    reason = request.POST.get("reason", "").strip() or {
        Labeler.State.ACTIVE: f"admitted by {request.user.username}",
        Labeler.State.REJECTED: f"not admitted by {request.user.username}",
        Labeler.State.PAUSED: f"paused by {request.user.username}",
        Labeler.State.SCREENING: f"sent back to screening by {request.user.username}",
    }.get(state, "")
    try:
        services.labeler_set_state(labeler=labeler, state=state, reason=reason, actor=request.user)
        messages.info(request, f"{user.username} is now {labeler.get_state_display()}.")
    except services.LabelingError as exc:
        messages.error(request, str(exc))
    return redirect(request.POST.get("next") or reverse("labeling:labeler_detail", args=[user.pk]))


@login_required
def adjudication_queue(request: HttpRequest) -> HttpResponse:
    _require_lead(request)
    return render(
        request, "labeling/lead/adjudication_queue.html", {"rows": selectors.adjudication_queue()}
    )


@login_required
def adjudicate(request: HttpRequest, solution_id: int) -> HttpResponse:
    _require_lead(request)
    solution = get_object_or_404(
        Solution.objects.select_related("problem", "batch"), pk=solution_id
    )
    error = None
    if request.method == "POST":
        try:
            ratings = [int(v) for v in request.POST.getlist("rating") if v != ""]
            services.adjudication_save(
                solution=solution,
                lead=request.user,
                ratings=ratings,
                note=request.POST.get("note", ""),
            )
            messages.info(request, f"Final ratings saved for solution {solution.pk}.")
            following = selectors.adjudication_queue(limit=1)
            if following:
                return redirect("labeling:adjudicate", solution_id=following[0].solution_id)
            return redirect("labeling:adjudication_queue")
        except (ValueError, services.LabelingError) as exc:
            error = str(exc)
    labelings, steps, final = selectors.adjudication_view(solution)
    agreement = getattr(solution, "agreement", None)
    return render(
        request,
        "labeling/lead/adjudicate.html",
        {
            "solution": solution,
            "problem": solution.problem,
            "labelings": labelings,
            "steps": steps,
            "final": final,
            "agreement": agreement,
            "error": error,
        },
        status=400 if error else 200,
    )


@login_required
def labeling_history(request: HttpRequest, labeling_id: int) -> HttpResponse:
    _require_lead(request)
    labeling = get_object_or_404(
        Labeling.objects.select_related("solution__problem", "solution__batch", "labeler"),
        pk=labeling_id,
    )
    return render(
        request,
        "labeling/lead/history.html",
        {
            "labeling": labeling,
            "events": selectors.labeling_history(labeling),
            "steps": services.step_views(labeling),
        },
    )


def current_guidelines() -> tuple[str, Guidelines | None]:
    latest = Guidelines.objects.order_by("-version").first()
    if latest is not None:
        return latest.text, latest
    return DEFAULT_GUIDELINES.read_text(encoding="utf-8"), None


@login_required
def guidelines(request: HttpRequest) -> HttpResponse:
    text, version = current_guidelines()
    return render(
        request,
        "labeling/guidelines.html",
        {
            "text": text,
            "version": version,
            "back": request.GET.get("back", ""),
        },
    )


@login_required
def guidelines_edit(request: HttpRequest) -> HttpResponse:
    _require_lead(request)
    text, version = current_guidelines()
    form = GuidelinesForm(request.POST or None, initial={"text": text})
    if request.method == "POST" and form.is_valid():
        try:
            saved = services.guidelines_save(text=form.cleaned_data["text"], user=request.user)
            messages.info(request, f"Guidelines saved as version {saved.version}.")
            return redirect("labeling:guidelines")
        except services.LabelingError as exc:
            form.add_error("text", str(exc))
    history = Guidelines.objects.select_related("created_by").order_by("-version")[:20]
    return render(
        request,
        "labeling/lead/guidelines_edit.html",
        {
            "form": form,
            "version": version,
            "history": history,
        },
    )
