"""/api/best-of-n/: start a best-of-N comparison of model versions (PRMs, ORMs) on a sampling
run or a best-of-N file under STEPWISE_DATA_ROOT, and follow it to its report; the same
service as the page (`modeling.services.best_of_n`). Leads see every comparison, a researcher
their own."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from labeling.api import IdCursorPagination, InProject
from labeling.roles import LEAD, RESEARCHER, HasRole, current_project, request_project
from modeling.models import BestOfNComparison, SamplingRun
from modeling.services import best_of_n
from stepwise.paths import shown_path, shown_paths_in


class BestOfNComparisonSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, read_only=True
    )
    png_url = serializers.SerializerMethodField()

    class Meta:
        model = BestOfNComparison
        fields = [
            "id",
            "model_ids",
            "sampling_run",
            "input_path",
            "ns",
            "allow_mismatch",
            "status",
            "phase",
            "error",
            "report",
            "png_url",
            "attempts",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_png_url(self, comparison: BestOfNComparison) -> str | None:
        if comparison.png is None:
            return None
        url = reverse("modeling_runs:best_of_n_png", args=[comparison.pk])
        request = self.context.get("request")
        return request.build_absolute_uri(url) if request is not None else url

    def to_representation(self, instance: BestOfNComparison) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["input_path"] = shown_path(data["input_path"]) if data["input_path"] else ""
        data["error"] = shown_paths_in(data["error"])
        return data


class StartComparisonSerializer(serializers.Serializer):
    models = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**31 - 1),
        min_length=1,
        max_length=best_of_n.MAX_MODELS,
        help_text="Model version ids, each once (PRMs and ORMs).",
    )
    sampling_run = serializers.PrimaryKeyRelatedField(
        queryset=SamplingRun.objects.all(), required=False, allow_null=True, default=None
    )
    input = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=1000,
        help_text="A best-of-N samples file (read_best_of_n's JSONL) under STEPWISE_DATA_ROOT.",
    )
    file = serializers.FileField(
        required=False,
        help_text="Or upload the best-of-N file (multipart): it is kept under "
        "STEPWISE_DATA_ROOT/best-of-n-uploads/ and compared on.",
    )

    def validate(self, data: dict) -> dict:
        if data.get("file") is not None and data.get("input"):
            raise serializers.ValidationError("send either a file or an input path, not both")
        return data

    ns = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=best_of_n.MAX_N),
        default=list,
        max_length=best_of_n.MAX_NS,
        help_text="The Ns; empty: 1, 2, 4, ... up to the samples a problem has.",
    )
    allow_mismatch = serializers.BooleanField(
        default=False,
        help_text="Compare models trained on different problems, backbones or steps anyway "
        "(the report says what differed).",
    )


class BestOfNComparisonViewSet(
    InProject, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = BestOfNComparisonSerializer
    permission_classes = [IsAuthenticated, HasRole]
    required_roles = (LEAD, RESEARCHER)
    role_message = "You do not have permission to perform this action."
    pagination_class = IdCursorPagination
    parser_classes = [JSONParser, MultiPartParser, FormParser]

    def get_queryset(self) -> QuerySet[BestOfNComparison]:
        return best_of_n.visible_comparisons(self.request.user, request_project(self.request))

    @extend_schema(request=StartComparisonSerializer, responses={201: BestOfNComparisonSerializer})
    def create(self, request: Request) -> Response:
        start = StartComparisonSerializer(data=request.data)
        start.is_valid(raise_exception=True)
        data = start.validated_data
        try:
            project = current_project(request)
            best_of_n.checked_model_ids(  # before an upload is kept
                data["models"], project_id=project.pk
            )
            upload = data.get("file")
            input_path = (
                best_of_n.store_upload(upload, upload.size) if upload is not None else data["input"]
            )
            comparison = best_of_n.comparison_start(
                model_ids=data["models"],
                sampling_run=data["sampling_run"],
                input_path=input_path,
                ns=data["ns"],
                allow_mismatch=data["allow_mismatch"],
                user=request.user,
                project_id=project.pk,
            )
        except best_of_n.ComparisonError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        comparison.refresh_from_db()
        body = BestOfNComparisonSerializer(comparison, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED)
