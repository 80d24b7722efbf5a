"""/api/prelabel-runs/: start a judge on a batch (or the candidate pool), list and read the runs, cancel or resume one
(the page's services)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from labeling.api import InProject
from labeling.bounds import ROW_ID
from labeling.models import Batch
from labeling.roles import LEAD, RESEARCHER, HasRole, current_project, has_role
from modeling import judges
from modeling.models import PreLabelRun
from modeling.services import prelabeling


class PreLabelRunSerializer(serializers.ModelSerializer):
    batch_name = serializers.CharField(source="batch.name", read_only=True, allow_null=True)

    class Meta:
        model = PreLabelRun
        fields = [
            "id",
            "batch",
            "batch_name",
            "kind",
            "judge",
            "status",
            "options",
            "estimate",
            "done",
            "total",
            "no_label",
            "error",
            "attempts",
            "created_at",
            "started_at",
            "heartbeat_at",
            "finished_at",
        ]
        read_only_fields = fields


class ThresholdsSerializer(serializers.Serializer):
    neg = serializers.FloatField(min_value=0.01, max_value=1)
    pos = serializers.FloatField(min_value=0.01, max_value=1)


class PreLabelStartSerializer(serializers.Serializer):
    batch = serializers.IntegerField(validators=[ROW_ID], required=False)
    pool = serializers.BooleanField(
        default=False,
        help_text="Judge the candidate pool's selectable solutions instead of a batch (for the "
        "disagreement rule); give a batch or the pool, not both.",
    )
    judge = serializers.ChoiceField(choices=list(judges.KINDS))
    model_version = serializers.IntegerField(validators=[ROW_ID], required=False)
    thresholds = ThresholdsSerializer(required=False)
    template = serializers.CharField(
        required=False, max_length=judges.MAX_TEMPLATE_CHARS, trim_whitespace=False
    )
    k = serializers.IntegerField(min_value=1, max_value=64, required=False)
    max_steps = serializers.IntegerField(min_value=1, max_value=200, required=False)
    max_tokens = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    max_solutions = serializers.IntegerField(min_value=1, max_value=100_000, required=False)


class PreLabelRunViewSet(
    InProject, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Pre-label runs over the API: POST starts one on its queue (gpu for prm, generate for llm
    and mc); a bad option is a 400 that writes nothing."""

    serializer_class = PreLabelRunSerializer
    permission_classes = [permissions.IsAuthenticated, HasRole]
    required_roles = (LEAD, RESEARCHER)
    role_message = "You do not have permission to perform this action."

    def get_queryset(self):
        return PreLabelRun.objects.select_related("batch")

    @extend_schema(request=PreLabelStartSerializer, responses={201: PreLabelRunSerializer})
    def create(self, request: Request) -> Response:
        start = PreLabelStartSerializer(data=request.data)
        start.is_valid(raise_exception=True)
        data = dict(start.validated_data)
        pool, batch_id = data.pop("pool"), data.pop("batch", None)
        if pool == (batch_id is not None):
            return Response({"detail": "Give a batch or pool: true, one of them."}, status=400)
        batch = None
        if not pool:
            batch = Batch.objects.filter(pk=batch_id, project=current_project(request)).first()
            if batch is None:
                return Response({"detail": "There is no such batch."}, status=400)
        judge = data.pop("judge")
        if "template" in data and not has_role(
            request.user, LEAD, project=current_project(request)
        ):
            return Response({"detail": "Only a lead may change the critic template."}, status=403)
        if "thresholds" in data:
            data["thresholds"] = dict(data["thresholds"])
        try:
            run = prelabeling.start_prelabel_run(
                batch=batch,
                judge=judge,
                created_by=request.user,
                options=data,
                project=current_project(request),
            )
        except prelabeling.PrelabelError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(PreLabelRunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: PreLabelRunSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        run = prelabeling.cancel_prelabel_run(self.get_object())
        return Response(PreLabelRunSerializer(run).data)

    @extend_schema(request=None, responses={200: PreLabelRunSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        try:
            run = prelabeling.resume_prelabel_run(self.get_object())
        except prelabeling.PrelabelError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(PreLabelRunSerializer(run).data)
