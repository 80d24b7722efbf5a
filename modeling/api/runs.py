"""/api/runs/ and /api/models/: start, follow, cancel and resume PRM training; import, activate
and export (/api/models/<id>/export/) models. Their lists are pages, newest first, as /api/labelings/'s are
(`IdCursorPagination`: {"next", "previous", "results"}, `?page_size=` up to 1000).
/api/evaluation-sets/: the frozen evaluation sets, read only (create or renew them on the page).

The same services as the pages; a request the run's state refuses answers 409.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from labeling.api import IdCursorPagination, InProject
from labeling.roles import LEAD, RESEARCHER, HasRole, current_project
from modeling.models import EvaluationSet, ModelExport, ModelVersion, SamplingRun, TrainingRun
from modeling.services import exporting, importing, runs
from modeling.training.config import OBJECTIVES
from modeling.training.external import MATH_SHEPHERD
from stepwise.paths import shown_path, shown_paths_in


class TrainingRunSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, read_only=True
    )
    progress_percent = serializers.IntegerField(read_only=True)
    model_version: serializers.PrimaryKeyRelatedField[ModelVersion] = (
        serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    )

    class Meta:
        model = TrainingRun
        fields = [
            "id",
            "name",
            "status",
            "phase",
            "phase_done",
            "phase_total",
            "step",
            "total_steps",
            "progress_percent",
            "config",
            "dataset_version",
            "dataset_description",
            "metrics",
            "error",
            "attempts",
            "resumable",
            "cancel_requested",
            "model_version",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: TrainingRun) -> dict[str, Any]:
        """Paths in the config (backbone, output_dir), the data's description (ProcessBench
        files), metrics and error under their root's setting, never the server's own."""
        data = super().to_representation(instance)
        for field in ("config", "dataset_description", "metrics", "error"):
            data[field] = shown_paths_in(data[field])
        return data


class TrainingRunDetailSerializer(TrainingRunSerializer):
    """One run with its loss curve (left out of lists: up to thousands of points a run)."""

    class Meta(TrainingRunSerializer.Meta):
        fields = [*TrainingRunSerializer.Meta.fields, "loss_curve"]
        read_only_fields = fields


class StartRunSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    objective = serializers.ChoiceField(
        choices=OBJECTIVES,
        default="process",
        help_text="process: step labels (a PRM); outcome: final-answer correctness of the graded "
        "solutions Stepwise holds (an ORM: no labelings, filters or data files). Also accepted "
        "as config.objective.",
    )
    sampling_run = serializers.PrimaryKeyRelatedField(
        queryset=SamplingRun.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="objective outcome: train on this sampling run's graded solutions only.",
    )
    config = serializers.DictField(
        default=dict, help_text="TrainConfig fields; the rest keep their defaults."
    )
    filters = serializers.DictField(
        default=dict,
        help_text="Which completed labelings: ExportFilters fields, checked as an export request's "
        '(labelers by username or public id), e.g. {"batches": [1]}.',
    )
    holdout_fraction = serializers.FloatField(required=False, allow_null=True, default=None)
    processbench = serializers.ListField(child=serializers.CharField(), default=list)
    data_files = serializers.ListField(
        child=serializers.CharField(),
        default=list,
        help_text="Training data files (or datasets save_to_disk folders) under the data root "
        "(STEPWISE_DATA_ROOT), in any shape docs/training.md 'Training data shapes' lists; "
        "read when the run starts training.",
    )
    use_labelings = serializers.BooleanField(
        default=True,
        help_text="Train on the completed labelings the filters select; false: on data_files "
        "only. A run with neither is refused.",
    )
    activate = serializers.BooleanField(
        default=True, help_text="Make the model active if it passes."
    )

    def validate_processbench(self, paths: list[str]) -> list[str]:
        """Only files under STEPWISE_DATA_ROOT: a request never names a path elsewhere (nor
        learns where that root is on the server)."""
        return [self._under_root(path, "ProcessBench files", folders=False) for path in paths]

    def validate_data_files(self, paths: list[str]) -> list[str]:
        """As ProcessBench files, and a datasets folder too."""
        return [self._under_root(path, "Data files", folders=True) for path in paths]

    @staticmethod
    def _under_root(path: str, what: str, *, folders: bool) -> str:
        try:
            return runs.data_root_path(path, what=what, folders=folders)
        except runs.RunError as exc:
            raise serializers.ValidationError(str(exc)) from None


class ModelVersionSerializer(serializers.ModelSerializer):
    """Paths under their root's setting (`MEDIA_ROOT/models/…`), never the server's own."""

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "name",
            "run",
            "backbone",
            "artifact_path",
            "kind",
            "objective",
            "source",
            "dataset_version",
            "metrics",
            "passed_evaluation",
            "is_active",
            "created_at",
            "activated_at",
        ]
        read_only_fields = fields

    def to_representation(self, instance: ModelVersion) -> dict[str, Any]:
        data = super().to_representation(instance)
        for field in ("artifact_path", "backbone", "source"):
            data[field] = shown_path(data[field])
        data["metrics"] = shown_paths_in(data["metrics"])
        return data


class ModelExportSerializer(serializers.ModelSerializer):
    """A Hugging Face export: its state, the phase it is in, why it failed, and (once it has
    succeeded and its zip is on disk) where to download it."""

    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, read_only=True
    )
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = ModelExport
        fields = [
            "id",
            "version",
            "status",
            "phase",
            "error",
            "size_bytes",
            "attempts",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
            "download_url",
        ]
        read_only_fields = fields

    def get_download_url(self, export: ModelExport) -> str | None:
        if export.archive is None:
            return None
        url = reverse("modeling_runs:export", args=[export.version_id])
        request = self.context.get("request")
        return request.build_absolute_uri(url) if request is not None else url

    def to_representation(self, instance: ModelExport) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["error"] = shown_paths_in(data["error"])
        return data


class ImportModelSerializer(serializers.Serializer):
    """A model trained elsewhere: an uploaded zip/tar of its folder (or of a LoRA adapter's),
    or a folder under the models root (STEPWISE_MODELS_ROOT); never another server path, and
    never a base model by path (an adapter's base is a named backbone or a cached hub model)."""

    file = serializers.FileField(
        required=False, help_text="zip or tar of the model folder or of a LoRA adapter's"
    )
    path = serializers.CharField(
        required=False, max_length=1000, help_text="A folder under STEPWISE_MODELS_ROOT."
    )
    name = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        default="",
        help_text="The version's name (refused if another version has it); default 'imported' "
        "and the folder's or the uploaded file's name, without .zip/.tar.gz.",
    )
    step_separator = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        trim_whitespace=False,
        max_length=100,
        help_text="Token classification: the text after each step the model was trained with "
        "(TRL's PRMConfig.step_separator). Required unless config.json has step_separator (TRL "
        "does not save it there); refused when it differs from config.json's.",
    )
    step_tag = serializers.CharField(
        default=MATH_SHEPHERD["step_tag"], trim_whitespace=False, max_length=100
    )
    good_token = serializers.CharField(
        default=MATH_SHEPHERD["good_token"], trim_whitespace=False, max_length=100
    )
    bad_token = serializers.CharField(
        default=MATH_SHEPHERD["bad_token"], trim_whitespace=False, max_length=100
    )
    activate = serializers.BooleanField(
        default=False, help_text="Make it active if it passes the gate."
    )

    def validate(self, data: dict) -> dict:
        if ("file" in data) == ("path" in data):
            raise serializers.ValidationError("send either a file (zip or tar) or a path")
        return data


class EvaluationSetSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, read_only=True
    )

    class Meta:
        model = EvaluationSet
        fields = [
            "version",
            "is_current",
            "problem_ids",
            "row_count",
            "step_count",
            "sha256",
            "seed",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class UploadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "upload_too_large"


# A request's form fields and multipart framing beside the archive itself.
UPLOAD_FORM_BYTES = 64 * 1024


def refuse_oversized_upload(request: Request) -> None:
    """413 for a request whose declared body is larger than an uploaded model may be (Django
    reads no more of a body than its Content-Length)."""
    limit = settings.STEPWISE_MODEL_UPLOAD_MAX_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # Django reads such a body as empty
    if length > limit + UPLOAD_FORM_BYTES:
        raise UploadTooLarge(
            f"the request is {length:,} bytes; an uploaded model may have at most {limit:,} "
            "(STEPWISE_MODEL_UPLOAD_MAX_BYTES)"
        )


def _conflict(exc: runs.RunError) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)


class TrainingRunViewSet(
    InProject, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    permission_classes = [IsAuthenticated, HasRole]
    required_roles = (LEAD, RESEARCHER)
    role_message = "You do not have permission to perform this action."
    pagination_class = IdCursorPagination

    def get_queryset(self):
        return TrainingRun.objects.select_related("created_by", "model_version")

    def get_serializer_class(self):
        return TrainingRunSerializer if self.action == "list" else TrainingRunDetailSerializer

    @extend_schema(request=StartRunSerializer, responses={201: TrainingRunDetailSerializer})
    def create(self, request: Request) -> Response:
        start = StartRunSerializer(data=request.data)
        start.is_valid(raise_exception=True)
        data = dict(start.validated_data)
        try:
            # Checked here, not only where the run is built: the backbone must be one a request
            # may name (runs.allowed_backbone), not any folder on the server.
            objective = data.pop("objective")
            data["config"] = runs.allowed_config({"objective": objective, **data["config"]})
            run = runs.start_training_run(
                created_by=request.user, project=current_project(request), **data
            )
        except runs.RunError as exc:  # a bad config or filter: the request's fault
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(TrainingRunDetailSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: TrainingRunDetailSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        try:
            run = runs.cancel_training_run(self.get_object())
        except runs.RunError as exc:
            return _conflict(exc)
        return Response(TrainingRunDetailSerializer(run).data)

    @extend_schema(request=None, responses={200: TrainingRunDetailSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        try:
            run = runs.resume_training_run(self.get_object())
        except runs.RunError as exc:
            return _conflict(exc)
        return Response(TrainingRunDetailSerializer(run).data)


class ModelVersionViewSet(
    InProject, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = ModelVersionSerializer
    permission_classes = [IsAuthenticated, HasRole]
    required_roles = (LEAD, RESEARCHER)
    role_message = "You do not have permission to perform this action."
    pagination_class = IdCursorPagination

    def get_queryset(self):
        return ModelVersion.objects.all()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # An import's size is refused from its Content-Length before the body is read: the
        # authentication's CSRF check would otherwise parse it (a file written to disk) first.
        if self.action == "import_model":
            refuse_oversized_upload(request)
        super().initial(request, *args, **kwargs)

    @extend_schema(request=ImportModelSerializer, responses={201: ModelVersionSerializer})
    @action(
        detail=False,
        methods=["post"],
        url_path="import",
        parser_classes=[MultiPartParser, FormParser, JSONParser],
    )
    def import_model(self, request: Request) -> Response:
        """Register the model (checked up front: 400 and nothing written if it cannot be
        read), then gate it on the gpu worker; `activate` makes it active if it passes."""
        form = ImportModelSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        upload, path, activate = (
            data.pop("file", None),
            data.pop("path", None),
            data.pop("activate"),
        )
        try:
            if upload is not None:
                version = importing.import_model_archive(
                    archive=upload,
                    source=f"upload {upload.name}"[:500],
                    project_id=current_project(request).pk,
                    **data,
                )
            else:
                folder = importing.allowed_model_folder(path)
                shown = shown_path(folder)  # STEPWISE_MODELS_ROOT/…: the server's path stays
                version = importing.import_model_version(
                    folder=folder,
                    shown=shown,
                    source=shown,
                    links_within=Path(settings.STEPWISE_MODELS_ROOT),
                    project_id=current_project(request).pk,
                    **data,
                )
        except importing.ModelImportError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        importing.gate_in_background(version, activate=activate)
        return Response(ModelVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(methods=["POST"], request=None, responses={202: ModelExportSerializer})
    @extend_schema(methods=["GET"], responses={200: ModelExportSerializer})
    @action(detail=True, methods=["get", "post"])
    def export(self, request: Request, pk: str) -> Response:
        """POST: start the Hugging Face export, or get the one running or finished (202, its
        state); GET: the latest export's state, with `download_url` once its zip is ready."""
        version = self.get_object()
        answer: int = status.HTTP_200_OK
        found: ModelExport | None
        if request.method == "POST":
            found = exporting.export_start(version=version, user=request.user)
            answer = status.HTTP_202_ACCEPTED
        else:
            found = exporting.latest_export(version)
        if found is None:
            return Response(
                {"detail": f"{version.name} has not been exported yet: POST here to start."},
                status=status.HTTP_404_NOT_FOUND,
            )
        data = ModelExportSerializer(found, context={"request": request}).data
        return Response(data, status=answer)

    @extend_schema(request=None, responses={200: ModelVersionSerializer})
    @action(detail=True, methods=["post"])
    def activate(self, request: Request, pk: str) -> Response:
        try:
            version = runs.activate_model_version(self.get_object())
        except runs.RunError as exc:
            return _conflict(exc)
        return Response(ModelVersionSerializer(version).data)


class EvaluationSetViewSet(
    InProject, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Newest first; the current one has is_current. Looked up by version."""

    serializer_class = EvaluationSetSerializer
    permission_classes = [IsAuthenticated, HasRole]
    required_roles = (LEAD, RESEARCHER)
    role_message = "You do not have permission to perform this action."
    lookup_field = "version"

    def get_queryset(self):
        return EvaluationSet.objects.select_related("created_by")
