"""Lead pages: dashboard, batches, labelers, adjudication, audit history, guidelines editing."""

from __future__ import annotations

from dataclasses import replace

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_POST

from labeling import selectors
from labeling.forms import BatchForm, GuidelinesForm, MachineLabelsForm
from labeling.models import Batch, Guidelines, LabelerRecord, Labeling, Membership, Solution
from labeling.roles import LEAD, current_project, require, require_batch_writer
from labeling.services import (
    adjudication,
    alternatives,
    batches,
    importing,
    machine_labels,
    quality,
)
from labeling.services.errors import LabelingError
from labeling.views import people
from labeling.views.navigation import safe_return_url
from stepwise.request_types import AuthenticatedRequest

LEADS_ONLY = "This page is for leads."


@login_required
def lead_home(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    return render(
        request,
        "labeling/lead/home.html",
        {
            "batches": selectors.batches_overview(
                list(
                    Batch.objects.filter(project=request.project).order_by(
                        "-is_active", "-priority", "-created_at"
                    )
                )
            ),
            "attention": selectors.labelers_needing_attention(project=request.project),
            "adjudication": selectors.adjudication_queue(limit=10, project=request.project),
        },
    )


@login_required
def batch_dashboard(request: AuthenticatedRequest, batch_id: int) -> HttpResponse:
    """The live dashboard of one batch; htmx polls the `live` fragment every 5 s."""
    require(request, LEAD, message=LEADS_ONLY)
    batch = get_object_or_404(Batch.objects.filter(project=request.project), pk=batch_id)
    context = {
        "summary": selectors.batch_summary(batch),
        "rows": selectors.batch_labeler_rows(batch),
    }
    if not request.htmx:  # the full page only: the 5 s poll refreshes the counters alone
        context["judges"] = selectors.judge_agreement(batch)
        context["machine"] = _machine_context(batch)
        if batch.prelabel_mode == Batch.PrelabelMode.SUGGEST:
            context["anchoring"] = selectors.anchoring_check(batch)
    template = "labeling/lead/batch.html#live" if request.htmx else "labeling/lead/batch.html"
    return render(request, template, context)


def _machine_context(batch: Batch, form: MachineLabelsForm | None = None, report=None) -> dict:
    """The machine-labels card: the lead's settings, and (when on) the audited precision."""
    return {
        "batch": batch,
        "form": form or MachineLabelsForm.for_batch(batch),
        "summary": selectors.machine_label_precision(batch) if batch.machine_labels else None,
        "report": report,
    }


@login_required
def batch_machine_labels(request: AuthenticatedRequest, batch_id: int) -> HttpResponse:
    """The machine-labels card of a batch (leads only): GET renders it (the page polls it, so
    the audited precision is live), POST stores the settings and, when asked, accepts the
    solutions every judge agrees on. A bad value is a 400 that writes nothing."""
    require(request, LEAD, message=LEADS_ONLY)
    batch = get_object_or_404(Batch.objects.filter(project=request.project), pk=batch_id)
    template = "labeling/lead/_machine_labels.html"
    if request.method != "POST":
        return render(request, template, {"machine": _machine_context(batch)})
    form = MachineLabelsForm.for_batch(batch, request.POST)
    report = None
    if form.is_valid():
        data = form.cleaned_data
        try:
            report = machine_labels.update_machine_labels(batch=batch, **data)
        except LabelingError as exc:
            form.add_error(None, str(exc))
    if not form.is_valid():
        batch.refresh_from_db()
        context = {"machine": _machine_context(batch, form)}
        return render(request, template, context, status=400)
    if not request.htmx:
        return redirect("labeling:batch_dashboard", batch_id=batch.pk)
    return render(request, template, {"machine": _machine_context(batch, report=report)})


@login_required
def batch_edit(request: AuthenticatedRequest, batch_id: int | None = None) -> HttpResponse:
    """Create or edit a batch; take solutions from another batch or upload samples into it.

    One transaction: an upload the import service rejects (size, a bad line, not UTF-8)
    leaves nothing behind, not even a new batch, and shows its errors on the form.
    """
    require(request, LEAD, message=LEADS_ONLY)
    batch = (
        get_object_or_404(Batch.objects.filter(project=request.project), pk=batch_id)
        if batch_id
        else None
    )
    if batch is not None:  # a lead may add to any batch: the one rule, asked on every path
        require_batch_writer(request.user, batch)
    form = BatchForm(
        request.POST or None, request.FILES or None, instance=batch, project=request.project
    )
    if request.method == "POST" and form.is_valid():
        creating = batch is None
        notes = []
        try:
            with transaction.atomic():
                saved = form.save(commit=False)
                if creating:
                    saved.created_by = request.user
                    saved.project = request.project
                saved.save()
                form.save_m2m()
                source = form.cleaned_data.get("take_from")
                if source is not None:
                    moved = batches.batch_move_solutions(
                        batch=saved, source=source, limit=form.cleaned_data.get("take_limit")
                    )
                    notes.append(f"Moved {moved} unlabeled solutions from {source.name}.")
                upload = form.cleaned_data.get("upload")
                if upload is not None:
                    report = importing.samples_upload(
                        upload,
                        batch_name=saved.name,
                        overlap=saved.overlap,
                        generation=saved.generation,
                        project_id=saved.project_id,
                    )
                    notes.append(report.summary())
                problem_ids = form.cleaned_data.get("problems")
                if problem_ids:
                    added = alternatives.add_problems(batch=saved, problem_ids=problem_ids)
                    notes.append(f"Added {added} problem{pluralize(added)} to label step by step.")
        except LabelingError as refused:  # an unknown problem id: nothing is saved
            form.add_error("problems", str(refused))
            context = {"form": form, "batch": batch}
            return render(request, "labeling/lead/batch_form.html", context, status=400)
        except importing.UploadRejected as rejected:
            form.add_error("upload", rejected.message)
            for error in rejected.errors:
                form.add_error("upload", str(error))
            context = {"form": form, "batch": batch}
            return render(request, "labeling/lead/batch_form.html", context, status=400)
        for note in notes:
            messages.info(request, note)
        messages.info(request, f"Batch “{saved.name}” {'created' if creating else 'saved'}.")
        return redirect("labeling:batch_dashboard", batch_id=saved.pk)
    return render(request, "labeling/lead/batch_form.html", {"form": form, "batch": batch})


@login_required
def labelers_page(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    return people.labelers_page(request)  # with the form to add one


def _members(request: AuthenticatedRequest):
    """The users with a role in the request's project: a lead sees and changes these only."""
    members = Membership.objects.filter(project=request.project).values("user_id")
    return get_user_model().objects.filter(pk__in=members)


@login_required
def labeler_detail(request: AuthenticatedRequest, user_id: int) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    return people.labeler_page(request, get_object_or_404(_members(request), pk=user_id))


@login_required
@require_POST
def labeler_state(request: AuthenticatedRequest, user_id: int) -> HttpResponse:
    """Admit or reject after screening, pause, or reinstate, in the request's project."""
    require(request, LEAD, message=LEADS_ONLY)
    user = get_object_or_404(_members(request), pk=user_id)
    record = quality.record_ensure(user_id=user.pk, project_id=current_project(request).pk)
    state = request.POST.get("state", "")
    default_reasons: dict[str, str] = {
        LabelerRecord.State.ACTIVE: f"admitted by {request.user.username}",
        LabelerRecord.State.REJECTED: f"not admitted by {request.user.username}",
        LabelerRecord.State.PAUSED: f"paused by {request.user.username}",
        LabelerRecord.State.SCREENING: f"sent back to screening by {request.user.username}",
    }
    reason = request.POST.get("reason", "").strip() or default_reasons.get(state, "")
    try:
        quality.labeler_set_state(record=record, state=state, reason=reason, actor=request.user)
        messages.info(request, f"{user.username} is now {record.get_state_display()}.")
    except LabelingError as exc:
        messages.error(request, str(exc))
    detail = reverse("labeling:labeler_detail", args=[user.pk])
    return redirect(safe_return_url(request, request.POST.get("next"), fallback=detail))


@login_required
def adjudication_queue(request: AuthenticatedRequest) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    return render(
        request,
        "labeling/lead/adjudication_queue.html",
        {"rows": selectors.adjudication_queue(project=request.project)},
    )


def _posted_ratings(request: AuthenticatedRequest) -> list[int | None]:
    """One entry per step, in order; None where the lead left the step unset (kept in place,
    so that a gap is refused by name rather than closed up)."""
    try:
        return [None if v == "" else int(v) for v in request.POST.getlist("rating")]
    except ValueError:
        raise LabelingError("Final ratings are -1, 0 or +1 for each step.") from None


def paths_of(solution: Solution, labelings: list[Labeling]) -> list[selectors.LabelingPath]:
    """Step by step, each labeler's own path with its notes (the steps table has no rows: the
    solution has no steps of its own)."""
    if solution.format != Solution.Format.PHASE1:
        return []
    return selectors.labeling_paths(labelings)


@login_required
def adjudicate(request: AuthenticatedRequest, solution_id: int) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    solution = get_object_or_404(
        Solution.objects.select_related("problem", "batch"),
        pk=solution_id,
        project=request.project,
    )
    error = None
    posted: list[int | None] | None = None
    if request.method == "POST":
        try:
            posted = _posted_ratings(request)
            adjudication.adjudication_save(
                solution=solution,
                lead=request.user,
                ratings=posted,
                note=request.POST.get("note", ""),
            )
            messages.info(request, f"Final ratings saved for solution {solution.pk}.")
            following = selectors.adjudication_queue(limit=1)
            if following:
                return redirect("labeling:adjudicate", solution_id=following[0].solution_id)
            return redirect("labeling:adjudication_queue")
        except LabelingError as exc:
            error = str(exc)
    labelings, steps, final = selectors.adjudication_view(solution)
    if error and posted is not None:  # a refused save shows what the lead chose, to fix it
        steps = [
            replace(s, final=posted[s.index] if s.index < len(posted) else None) for s in steps
        ]
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
            "item_notes": selectors.notes_by_step(solution).get(None, []),
            "paths": paths_of(solution, labelings),
        },
        status=400 if error else 200,
    )


@login_required
def labeling_history(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    require(request, LEAD, message=LEADS_ONLY)
    labeling = get_object_or_404(
        Labeling.objects.select_related("solution__problem", "solution__batch", "labeler"),
        pk=labeling_id,
        solution__project=request.project,
    )
    return render(
        request,
        "labeling/lead/history.html",
        {
            "labeling": labeling,
            "events": selectors.labeling_history(labeling),
            "steps": selectors.step_views(labeling),
        },
    )


@login_required
def guidelines_edit(request: AuthenticatedRequest) -> HttpResponse:
    """Edit the guidelines: "Preview" shows the text as labelers will see it and what changed
    from the current version; "Publish" (offered with the preview) saves a new version."""
    require(request, LEAD, message=LEADS_ONLY)
    text, version = selectors.current_guidelines(request.project)
    form = GuidelinesForm(request.POST or None, initial={"text": text})
    preview = None
    status = 200
    if request.method == "POST":
        if not form.is_valid():
            status = 400
        elif request.POST.get("action") == "publish":
            try:
                saved = batches.guidelines_save(
                    text=form.cleaned_data["text"], user=request.user, project=request.project
                )
                messages.info(request, f"Guidelines published as version {saved.version}.")
                return redirect("labeling:guidelines")
            except LabelingError as exc:
                form.add_error("text", str(exc))
                status = exc.status_code
        else:
            new_text = form.cleaned_data["text"]
            preview = {"text": new_text, "diff": selectors.text_diff(text, new_text)}
    history = (
        Guidelines.objects.filter(project=request.project)
        .select_related("created_by")
        .order_by("-version")[:20]
    )
    return render(
        request,
        "labeling/lead/guidelines_edit.html",
        {
            "form": form,
            "version": version,
            "history": history,
            "preview": preview,
        },
        status=status,
    )
