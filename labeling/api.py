"""REST API (Django REST framework). Thin: permission, validate, call a service or selector.

Roles: problems, solutions and batches are readable by leads, researchers and admins; they
and leads may upload imports, into a batch only where `roles.may_add_to_batch` allows (leads:
any; others: a batch they created). Labelings: leads, researchers and admins read all, a labeler
only their own. Exports and snapshots: researchers and admins only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import UTC
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, Prefetch
from django.http import FileResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone
from django.utils.http import content_disposition_header
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotAuthenticated
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import CursorPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from labeling import selectors
from labeling.access import all_projects
from labeling.bounds import ROW_ID
from labeling.models import (
    Batch,
    Completion,
    Labeling,
    PreLabel,
    Problem,
    Snapshot,
    Solution,
    StepLabel,
)
from labeling.roles import (
    ADMIN,
    LABELER,
    LEAD,
    RESEARCHER,
    HasRole,
    current_project,
    has_role,
    is_admin,
    request_project,
    require_batch_writer,
    user_project_ids,
    user_roles,
)
from labeling.serializers import (
    BatchMachineLabelsSerializer,
    BatchPrelabelSerializer,
    BatchProblemsSerializer,
    BatchSerializer,
    ExportRequestSerializer,
    ImportReportSerializer,
    ImportUploadSerializer,
    LabelingDetailSerializer,
    LabelingSerializer,
    LineErrorSerializer,
    OwnLabelingDetailSerializer,
    OwnLabelingSerializer,
    ProblemSerializer,
    SampleUploadSerializer,
    SnapshotSerializer,
    SolutionSerializer,
)
from labeling.services import alternatives, batches, importing, machine_labels, snapshots
from labeling.services.errors import LabelingError
from labeling.services.exporting import (
    ExportFormat,
    export_filename,
    iter_prm800k_lines,
    select_labelings,
    snapshot_filename,
    write_export,
)
from labeling.services.projects import project_create

# --- permissions and paging -------------------------------------------------------------------


class TokenScheme(OpenApiAuthenticationExtension):
    """The schema's description of labeling.authentication (here, not there: that module is
    loaded by DRF's settings, before drf-spectacular may be imported)."""

    target_class = "labeling.authentication.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Token"
        )


# Who may use what: HasRole reads each view's required_roles and role_message.
STAFF_READERS = (LEAD, RESEARCHER, ADMIN)
STAFF_ONLY = "Only leads, researchers and admins can use this endpoint."
EXPORTERS = (RESEARCHER, ADMIN)
EXPORTERS_ONLY = "Only researchers and admins can export."
ANY_ROLE = (LABELER, LEAD, RESEARCHER, ADMIN)
NO_ROLE = "You have no role in Stepwise yet."


class IdCursorPagination(CursorPagination):
    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class Gone(APIException):
    status_code = status.HTTP_410_GONE
    default_detail = "The file is no longer available."


class NotReady(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Not ready yet."


# --- resources --------------------------------------------------------------------------------


class ProblemFilter(filters.FilterSet):
    class Meta:
        model = Problem
        fields = {"subject": ["exact"], "level": ["exact"], "unique_id": ["exact"]}


class InProject:
    """A viewset's rows of the request's project (/p/<slug>/api/...) only: another project's row
    is a 404 like a missing one. `project_lookup`: the path from the row to its project."""

    project_lookup = "project"
    request: Any

    def filter_queryset(self, queryset: Any) -> Any:
        """Lists and single rows alike (DRF's get_object filters through here too), whatever
        the viewset's own get_queryset."""
        queryset = super().filter_queryset(queryset)  # type: ignore[misc]
        project = request_project(self.request)
        if project is None:
            return queryset.none()
        return queryset.filter(**{f"{self.project_lookup}_id": project.pk})


class ProjectCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    slug = serializers.SlugField(max_length=64, required=False)
    leads = serializers.ListField(
        child=serializers.CharField(max_length=150), required=False, max_length=100
    )


class ProjectList(APIView):
    """GET /api/projects/: the caller's projects (every project for the admin), with their
    roles there; a project's endpoints are under /p/<slug>/api/."""

    permission_classes = [IsAuthenticated]

    @extend_schema(request=ProjectCreateSerializer, responses={201: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        """The admin creates a project and names its leads (usernames)."""
        if not is_admin(request.user):
            return Response({"detail": "Only an admin creates projects."}, status=403)
        form = ProjectCreateSerializer(data=request.data)
        if not form.is_valid():
            return Response(form.errors, status=400)
        data = form.validated_data
        leads = list(User.objects.filter(username__in=data.get("leads", [])))
        missing = set(data.get("leads", [])) - {user.username for user in leads}
        if missing:
            return Response({"leads": [f"No user {sorted(missing)}."]}, status=400)
        try:
            project = project_create(
                name=data["name"], slug=data.get("slug", ""), leads=leads, created_by=request.user
            )
        except LabelingError as refused:
            return Response({"detail": str(refused)}, status=400)
        return Response({"id": project.pk, "slug": project.slug, "name": project.name}, status=201)

    @extend_schema(
        responses=inline_serializer(
            "Project",
            {
                "id": serializers.IntegerField(),
                "slug": serializers.SlugField(),
                "name": serializers.CharField(),
                "roles": serializers.ListField(child=serializers.CharField()),
                "api": serializers.CharField(),
            },
            many=True,
        )
    )
    def get(self, request: Request) -> Response:
        mine = user_project_ids(request.user)
        return Response(
            [
                {
                    "id": pk,
                    "slug": slug,
                    "name": name,
                    "roles": sorted(user_roles(request.user, pk)),
                    "api": f"/p/{slug}/api/",
                }
                for pk, slug, name in all_projects()
                if mine is None or pk in mine
            ]
        )


class ProblemViewSet(viewsets.ReadOnlyModelViewSet):
    """MATH problems (shared by the projects: those with a solution in this one)."""

    queryset = Problem.objects.all()

    def get_queryset(self) -> Any:
        project = request_project(self.request)
        if project is None:
            return Problem.objects.none()
        in_project = Solution.objects.filter(problem_id=OuterRef("pk"), project_id=project.pk)
        return Problem.objects.filter(Exists(in_project))

    serializer_class = ProblemSerializer
    permission_classes = [HasRole]
    required_roles, role_message = STAFF_READERS, STAFF_ONLY
    pagination_class = IdCursorPagination
    filterset_class = ProblemFilter


class BatchViewSet(InProject, viewsets.ReadOnlyModelViewSet):
    """Labeling rounds (a PRM800K generation each, for imports)."""

    queryset = Batch.objects.all()
    serializer_class = BatchSerializer
    permission_classes = [HasRole]
    required_roles, role_message = STAFF_READERS, STAFF_ONLY
    pagination_class = IdCursorPagination
    filterset_fields = {"generation": ["exact"], "is_active": ["exact"], "origin": ["exact"]}

    @extend_schema(
        request=BatchProblemsSerializer,
        responses={
            200: inline_serializer("ProblemsAdded", {"added": serializers.IntegerField()}),
            400: OpenApiResponse(description="A problem id is unknown, or the batch rates steps."),
        },
    )
    @action(detail=True, methods=["post"])
    def problems(self, request: Request, pk: str | None = None) -> Response:
        """Add problems to a batch of the alternatives protocol (PRM800K phase 1): each becomes
        one solution the labelers build from the model's candidate steps. Idempotent. Leads
        add to any batch, others only to a batch they created (`roles.may_add_to_batch`)."""
        batch = self.get_object()
        require_batch_writer(request.user, batch)
        form = BatchProblemsSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            added = alternatives.add_problems(
                batch=batch, problem_ids=form.validated_data["problems"]
            )
        except LabelingError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response({"added": added})

    @extend_schema(
        request=BatchPrelabelSerializer,
        responses={
            200: BatchSerializer,
            400: OpenApiResponse(description="An unknown mode or judge, or suggest without one."),
            403: OpenApiResponse(description="Neither a lead nor the batch's creator."),
        },
    )
    @action(detail=True, methods=["post"])
    def prelabel(self, request: Request, pk: str | None = None) -> Response:
        """Switch the batch's machine pre-labels: `off`, `blind` (judges run, labelers never
        see them) or `suggest` (the labeling page shows `judge`'s latest label for each step).
        Leads switch any batch, others only a batch they created."""
        batch = self.get_object()
        require_batch_writer(request.user, batch)
        form = BatchPrelabelSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            batches.batch_prelabel_set(
                batch=batch,
                user=request.user,
                mode=form.validated_data["mode"],
                judge=form.validated_data["judge"],
            )
        except LabelingError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(BatchSerializer(batch).data)

    @extend_schema(
        request=BatchMachineLabelsSerializer,
        responses={
            200: OpenApiResponse(description="The settings, what was accepted, the precision."),
            400: OpenApiResponse(description="A value out of range (NaN, < 0, > 1)."),
            403: OpenApiResponse(description="Not a lead."),
        },
    )
    @action(
        detail=True, methods=["get", "post"], url_path="machine-labels", url_name="machine_labels"
    )
    def machine_labels(self, request: Request, pk: str | None = None) -> Response:
        """Machine labels on this batch (leads only): GET reads the settings and the audited
        precision (per batch and per judge, 95% Wilson interval); POST sets them and, with
        `accept`, turns the solutions every judge agrees on into machine labelings. A bad
        value is a 400 that writes nothing."""
        if not has_role(request.user, LEAD, project=request_project(request)):
            return Response({"detail": "Only a lead sets machine labels."}, status=403)
        batch = self.get_object()
        report = None
        if request.method == "POST":
            form = BatchMachineLabelsSerializer(data=request.data)
            form.is_valid(raise_exception=True)
            data = form.validated_data
            try:
                report = machine_labels.update_machine_labels(batch=batch, **data)
            except LabelingError as exc:
                return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        summary = selectors.machine_label_precision(batch)

        def precision(p: selectors.Precision) -> dict:
            return {
                "name": p.name,
                "right": p.right,
                "checked": p.checked,
                "precision": p.share,
                "low": p.low,
                "high": p.high,
            }

        return Response(
            {
                "enabled": batch.machine_labels,
                "min_confidence": batch.machine_min_confidence,
                "audit_share": batch.machine_audit_share,
                "audit_seed": batch.machine_audit_seed,
                "report": report,
                "accepted": summary.accepted,
                "audited": summary.audited,
                "checked": summary.checked,
                "batch_precision": precision(summary.batch),
                "judge_precision": [precision(j) for j in summary.judges],
            }
        )


class SolutionFilter(filters.FilterSet):
    class Meta:
        model = Solution
        fields = {
            "batch": ["exact"],
            "problem": ["exact"],
            "generation": ["exact"],
            "format": ["exact"],
            "is_quality_control": ["exact"],
            "is_screening": ["exact"],
        }


_upload_errors = OpenApiResponse(
    response=inline_serializer(
        "ImportRejected",
        {"detail": serializers.CharField(), "errors": LineErrorSerializer(many=True)},
    ),
    description="Nothing was imported; every bad line is named with its field.",
)


def _form_rejected(form: serializers.Serializer) -> Response:
    """An upload form that did not validate: the shape of a rejected file (`detail`, `errors`)
    plus DRF's usual messages under each field's name."""
    problems = "; ".join(
        f"{name}: {' '.join(str(m).rstrip('.') for m in messages)}"
        for name, messages in form.errors.items()
    )
    body = {**form.errors, "detail": f"{problems}. Nothing was imported.", "errors": []}
    return Response(body, status=status.HTTP_400_BAD_REQUEST)


def _import_response(upload: Callable[[], importing.ImportReport]) -> Response:
    try:
        report = upload()
    except importing.UploadRejected as rejected:
        errors = [{"line": e.line, "field": e.field, "message": e.message} for e in rejected.errors]
        return Response(
            {"detail": rejected.message, "errors": errors}, status=status.HTTP_400_BAD_REQUEST
        )
    body = {"lines": report.lines, "created": dict(report.created), "duplicates": report.duplicates}
    return Response(body, status=status.HTTP_201_CREATED)


class SolutionViewSet(InProject, viewsets.ReadOnlyModelViewSet):
    """Solutions (step lists) and bulk imports of generator samples and PRM800K label lines."""

    queryset = Solution.objects.prefetch_related(
        Prefetch("prelabels", PreLabel.objects.order_by("-created_at", "-pk"))
    )
    serializer_class = SolutionSerializer
    permission_classes = [HasRole]
    required_roles, role_message = STAFF_READERS, STAFF_ONLY
    pagination_class = IdCursorPagination
    filterset_class = SolutionFilter

    @extend_schema(
        request={"multipart/form-data": SampleUploadSerializer},
        responses={201: ImportReportSerializer, 400: _upload_errors},
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import-samples",
        parser_classes=[MultiPartParser, FormParser],
    )
    def import_samples(self, request: Request) -> Response:
        """Upload generator samples (JSONL) into a batch; all or nothing."""
        form = SampleUploadSerializer(data=request.data)
        if not form.is_valid():
            return _form_rejected(form)
        data = form.validated_data
        return _import_response(
            lambda: batches.batch_samples_upload(
                data["file"],
                user=request.user,
                batch_name=data["batch_name"],
                overlap=data["overlap"],
                generation=data["generation"],
                project_id=current_project(request).pk,
            )
        )

    @extend_schema(
        request={"multipart/form-data": ImportUploadSerializer},
        responses={201: ImportReportSerializer, 400: _upload_errors},
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import-prm800k",
        parser_classes=[MultiPartParser, FormParser],
    )
    def import_prm800k(self, request: Request) -> Response:
        """Upload PRM800K label lines (JSONL); all or nothing. Re-uploads add nothing twice."""
        form = ImportUploadSerializer(data=request.data)
        if not form.is_valid():
            return _form_rejected(form)
        return _import_response(lambda: importing.prm800k_upload(form.validated_data["file"]))


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, handed to the database in UTC. 9999-12-31T23:59:59-01:00 parses, then
    overflows in UTC (a 400 here, a 500 before); an offset PostgreSQL refuses (-19:14: it takes
    at most 15:59) is converted here instead of failing the query."""

    def clean(self, value):
        value = super().clean(value)
        if value is None:
            return None
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValidationError(
                "Out of range once converted to UTC (years 1 to 9999).", code="invalid"
            ) from None


class UtcIsoDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class IdFilter(filters.NumberFilter):
    """A row id: a whole number in the id column's range (SQLite cannot compare a larger one)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, validators=[ROW_ID], **kwargs)


class LabelingFilter(filters.FilterSet):
    batch = IdFilter(field_name="solution__batch_id")
    labeler = filters.CharFilter(field_name="labeler__username")
    finished_after = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")

    class Meta:
        model = Labeling
        fields = ["status", "finish_reason", "solution", "batch", "labeler"]


class OwnLabelingFilter(filters.FilterSet):
    """A labeler's filters over their own labelings: no batch (it would single out gold)."""

    finished_after = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UtcIsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")

    class Meta:
        model = Labeling
        fields = ["status", "finish_reason"]


class LabelingViewSet(InProject, viewsets.ReadOnlyModelViewSet):
    project_lookup = "solution__project"
    """Labelings: leads, researchers and admins see all; a labeler only their own."""

    serializer_class = LabelingSerializer
    permission_classes = [HasRole]
    required_roles, role_message = ANY_ROLE, NO_ROLE
    pagination_class = IdCursorPagination

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Labeling.objects.none()
        query = Labeling.objects.select_related("labeler", "solution")
        if self.action == "retrieve":
            query = query.prefetch_related(
                Prefetch(
                    "step_labels",
                    StepLabel.objects.order_by("index").prefetch_related(
                        Prefetch("completions", Completion.objects.order_by("index"))
                    ),
                )
            )
        if self._sees_all():
            return query
        return query.filter(labeler=signed_in_user(self.request))

    def get_serializer_class(self):
        detail = self.action == "retrieve"
        if self._sees_all():
            return LabelingDetailSerializer if detail else LabelingSerializer
        # A labeler must not tell gold from regular work: no batch (gold sits in its own).
        return OwnLabelingDetailSerializer if detail else OwnLabelingSerializer

    @property
    def filterset_class(self):  # read by django-filter's backend
        return LabelingFilter if self._sees_all() else OwnLabelingFilter

    def _sees_all(self) -> bool:
        if getattr(self, "swagger_fake_view", False):  # the schema documents the full view
            return True
        project = request_project(self.request)
        return has_role(self.request.user, LEAD, RESEARCHER, ADMIN, project=project)


# --- exports and snapshots --------------------------------------------------------------------

_CONTENT_TYPES = {
    ExportFormat.PRM800K: "application/jsonl",
    ExportFormat.STEPWISE_JSONL: "application/jsonl",
    ExportFormat.STEPWISE_PARQUET: "application/vnd.apache.parquet",
}


def export_response(request_data) -> HttpResponseBase:
    """A streamed export for validated request data (shared by the API and the web page),
    named for its batches, format and date (`export_filename`)."""
    fmt = request_data.validated_data["format"]
    filters = request_data.export_filters()
    labelings = select_labelings(filters)
    name = export_filename(fmt=fmt, on=timezone.localdate(), batches=filters.batches)
    response: HttpResponseBase
    if fmt == ExportFormat.PRM800K:
        lines = (line + "\n" for line in iter_prm800k_lines(labelings))
        response = StreamingHttpResponse(lines, content_type=_CONTENT_TYPES[fmt])
        disposition = content_disposition_header(True, name)
        assert disposition is not None  # an attachment always has one
        response["Content-Disposition"] = disposition
    else:
        # Parquet needs a seekable sink for its footer; spool to an anonymous temp file, then
        # stream that (memory stays flat either way).
        spool = tempfile.TemporaryFile()
        write_export(spool, fmt, labelings, options=request_data.stepwise_options())
        spool.seek(0)
        response = FileResponse(
            spool, as_attachment=True, filename=name, content_type=_CONTENT_TYPES[fmt]
        )
    return response


def signed_in_user(request: Request) -> User:
    """The request's user, for a service that takes a signed-in one (the permission classes
    refuse anonymous requests before an action runs; this says so to the type checker too)."""
    user = request.user
    if not isinstance(user, User):
        raise NotAuthenticated()
    return user


class ExportNegotiation(DefaultContentNegotiation):
    """`?format=` names the export format here, not a DRF renderer."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ExportView(APIView):
    """Stream an export now (no snapshot is recorded): PRM800K JSONL, stepwise JSONL or Parquet."""

    permission_classes = [HasRole]
    required_roles, role_message = EXPORTERS, EXPORTERS_ONLY
    content_negotiation_class = ExportNegotiation

    @extend_schema(
        parameters=[ExportRequestSerializer],
        responses={
            (200, "application/jsonl"): OpenApiTypes.BINARY,
            (200, "application/vnd.apache.parquet"): OpenApiTypes.BINARY,
        },
    )
    def get(self, request: Request):
        data = ExportRequestSerializer.from_query(
            request.query_params, project_id=current_project(request).pk
        )
        data.is_valid(raise_exception=True)
        return export_response(data)


class SnapshotViewSet(InProject, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Immutable exports written by a worker: create, poll (status, progress), download."""

    queryset = Snapshot.objects.select_related("created_by")
    serializer_class = SnapshotSerializer
    permission_classes = [HasRole]
    required_roles, role_message = EXPORTERS, EXPORTERS_ONLY
    pagination_class = IdCursorPagination
    filterset_fields = {"status": ["exact"], "format": ["exact"]}

    @extend_schema(request=ExportRequestSerializer, responses={202: SnapshotSerializer})
    def create(self, request: Request) -> Response:
        data = ExportRequestSerializer(
            data=request.data, context={"project_id": current_project(request).pk}
        )
        data.is_valid(raise_exception=True)
        snapshot = snapshots.snapshot_create(
            user=signed_in_user(request),
            fmt=data.validated_data["format"],
            filters=data.export_filters(),
            options=data.stepwise_options(),
        )
        snapshot.refresh_from_db()  # an eager task may already have written it
        body = SnapshotSerializer(snapshot, context={"request": request}).data
        return Response(body, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, 409: None, 410: None}
    )
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str | None = None):
        """The snapshot's file, streamed, after checking it against its sha256."""
        snapshot = self.get_object()
        if snapshot.status != Snapshot.Status.DONE:
            raise NotReady(f"Snapshot {snapshot.pk} is {snapshot.status}; nothing to download yet.")
        try:
            path = snapshots.snapshot_file(snapshot)
        except snapshots.SnapshotError as error:
            raise Gone(str(error)) from None
        response = FileResponse(
            open(path, "rb"),
            as_attachment=True,
            filename=snapshot_filename(snapshot),
            content_type=_CONTENT_TYPES[snapshot.format],
        )
        response["ETag"] = f'"{snapshot.sha256}"'
        response["X-Checksum-SHA256"] = snapshot.sha256
        return response
