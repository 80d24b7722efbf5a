"""/api/generations/: start, list, inspect and retry generations (same services as the pages)."""

from __future__ import annotations

from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from labeling.roles import LEAD, RESEARCHER, HasRole
from modeling.models import GenerationRun, SelectionReason
from modeling.services import loop


class SelectionSerializer(serializers.ModelSerializer):
    problem = serializers.IntegerField(source="solution.problem_id")

    class Meta:
        model = SelectionReason
        fields = ["solution", "problem", "model_version", "score", "rank", "rule", "correct"]


class GenerationSerializer(serializers.ModelSerializer):
    steps = serializers.SerializerMethodField()

    class Meta:
        model = GenerationRun
        fields = [
            "id",
            "generation",
            "status",
            "current_step",
            "steps",
            "params",
            "trigger",
            "training_run",
            "model_version",
            "batch",
            "error",
            "attempts",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_steps(self, run: GenerationRun) -> list[dict]:
        return run.step_rows()


class StartSerializer(serializers.Serializer):
    k = serializers.IntegerField(min_value=1, max_value=1_000_000, default=50)
    convincing_wrong_fraction = serializers.FloatField(min_value=0, max_value=1, default=0.8)
    per_problem_cap = serializers.IntegerField(
        min_value=1, max_value=1_000_000, allow_null=True, default=2
    )
    scope = serializers.ChoiceField(choices=["pool", "per_problem"], default="pool")
    per_problem_k = serializers.IntegerField(
        min_value=1, max_value=1_000_000, allow_null=True, default=None
    )
    seed = serializers.IntegerField(default=0, min_value=0, max_value=2**32 - 1)
    overlap = serializers.IntegerField(min_value=1, max_value=100, default=1)
    priority = serializers.IntegerField(default=10, min_value=-(2**31), max_value=2**31 - 1)
    retrain = serializers.BooleanField(default=True)
    train_config = serializers.DictField(default=dict)


class GenerationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = GenerationSerializer
    permission_classes = [permissions.IsAuthenticated, HasRole]
    required_roles = (LEAD, RESEARCHER)
    role_message = "You do not have permission to perform this action."
    lookup_field = "generation"

    def get_queryset(self):
        return GenerationRun.objects.all()

    def create(self, request: Request) -> Response:
        start = StartSerializer(data=request.data)
        start.is_valid(raise_exception=True)
        try:
            run = loop.start_generation(
                params=dict(start.validated_data),
                created_by=request.user,
                trigger=GenerationRun.Trigger.API,
            )
        except loop.GenerationError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(GenerationSerializer(run).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def retry(self, request: Request, generation: int) -> Response:
        try:
            run = loop.retry_generation(self.get_object())
        except loop.GenerationError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(GenerationSerializer(run).data)

    @action(detail=True, methods=["get"])
    def selections(self, request: Request, generation: int) -> Response:
        run = self.get_object()
        rows = run.selections.select_related("solution")
        return Response(SelectionSerializer(rows, many=True).data)
