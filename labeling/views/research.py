"""The researchers' page: snapshots (create, watch progress, download) and direct exports."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from labeling.api import export_response
from labeling.models import Batch, FinishReason, Snapshot
from labeling.prm800k import NEUTRAL_MAPPINGS
from labeling.roles import ADMIN, RESEARCHER, current_project, require
from labeling.serializers import ExportRequestSerializer
from labeling.services import snapshots
from labeling.services.exporting import snapshot_filename
from stepwise.request_types import AuthenticatedRequest

RECENT = 50
RESEARCHERS_ONLY = "Only researchers and admins can export."


def _context(request: AuthenticatedRequest, form_errors=None, form_data=None) -> dict:
    project = current_project(request)
    recent = list(Snapshot.objects.filter(project=project).select_related("created_by")[:RECENT])
    batches = Batch.objects.filter(project=project)
    return {
        "snapshots": recent,
        "polling": any(not s.is_finished for s in recent),
        "batches": batches.order_by("-created_at")[:200],
        "generations": sorted(
            {g for g in batches.values_list("generation", flat=True) if g is not None}
        ),
        "formats": Snapshot.Format.choices,
        "finish_reasons": FinishReason.choices,
        "neutral_choices": NEUTRAL_MAPPINGS,
        "form_errors": form_errors or {},
        "form_data": form_data,
    }


@login_required
def index(request: AuthenticatedRequest) -> HttpResponse:
    require(request, RESEARCHER, ADMIN, message=RESEARCHERS_ONLY)
    return render(request, "labeling/research.html", _context(request))


@login_required
@require_GET
def snapshot_list(request: AuthenticatedRequest) -> HttpResponse:
    """The snapshot table alone for htmx, which polls it while a snapshot is being written;
    the whole page when visited directly."""
    require(request, RESEARCHER, ADMIN, message=RESEARCHERS_ONLY)
    template = "labeling/research.html#snapshots" if request.htmx else "labeling/research.html"
    return render(request, template, _context(request))


@login_required
@require_POST
def snapshot_create(request: AuthenticatedRequest) -> HttpResponse:
    require(request, RESEARCHER, ADMIN, message=RESEARCHERS_ONLY)
    data = ExportRequestSerializer.from_query(request.POST, project_id=current_project(request).pk)
    if not data.is_valid():
        context = _context(request, form_errors=data.errors, form_data=request.POST)
        template = "labeling/research.html#form" if request.htmx else "labeling/research.html"
        return render(request, template, context, status=400)
    snapshots.snapshot_create(
        user=request.user,
        fmt=data.validated_data["format"],
        filters=data.export_filters(),
        options=data.stepwise_options(),
    )
    if request.htmx:
        return render(request, "labeling/research.html#created", _context(request))
    return redirect("research:index")


@login_required
@require_GET
def snapshot_download(request: AuthenticatedRequest, snapshot_id: int) -> HttpResponseBase:
    require(request, RESEARCHER, ADMIN, message=RESEARCHERS_ONLY)
    snapshot = get_object_or_404(Snapshot.objects.filter(project=request.project), pk=snapshot_id)
    try:
        path = snapshots.snapshot_file(snapshot)
    except snapshots.SnapshotError as error:
        return HttpResponse(
            str(error), status=409 if not snapshot.is_finished else 410, content_type="text/plain"
        )
    response = FileResponse(
        open(path, "rb"), as_attachment=True, filename=snapshot_filename(snapshot)
    )
    response["X-Checksum-SHA256"] = snapshot.sha256
    return response


@login_required
@require_POST
def export_now(request: AuthenticatedRequest) -> HttpResponseBase:
    """Stream an export straight away (nothing recorded): same filters as a snapshot. A POST,
    so the form's CSRF token stays out of the URL and the browser's history."""
    require(request, RESEARCHER, ADMIN, message=RESEARCHERS_ONLY)
    data = ExportRequestSerializer.from_query(request.POST, project_id=current_project(request).pk)
    if not data.is_valid():
        return render(
            request,
            "labeling/research.html",
            _context(request, data.errors, request.POST),
            status=400,
        )
    return export_response(data)
