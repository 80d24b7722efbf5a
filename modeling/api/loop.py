"""/api/generations/ and /api/sampling-runs/: start, list, inspect and retry generations and
generate_pool runs (same services as the pages)."""

from __future__ import annotations

from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from labeling.api import InProject
from labeling.bounds import COUNT, INT32, ROW_ID, SEED
from labeling.roles import LEAD, RESEARCHER, HasRole, current_project
from modeling.models import GenerationRun, SamplingRun, SelectionReason
from modeling.services import loop, runs, sampling


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
            "heartbeat_at",  # the worker's last report (it was the running step's "heartbeat")
            "finished_at",
        ]
        read_only_fields = fields

    def get_steps(self, run: GenerationRun) -> list[dict]:
        return run.step_rows()


class StartSerializer(serializers.Serializer):
    rule = serializers.CharField(
        default="convincing_wrong",
        help_text="convincing_wrong, uncertainty (head-mode models: an ensemble of heads), "
        "disagreement (routing: the judges' pre-labels against the PRM), mix (with shares) or "
        "uniform.",
    )
    shares = serializers.DictField(
        child=serializers.FloatField(),
        allow_null=True,
        default=None,
        help_text='Rule "mix": {rule: share} summing to 1, e.g. '
        '{"convincing_wrong": 0.5, "uncertainty": 0.5}.',
    )
    ensemble_heads = serializers.IntegerField(
        min_value=2,
        max_value=32,
        allow_null=True,
        default=None,
        help_text="Heads in the uncertainty rule's ensemble; null: the server's setting.",
    )
    k = serializers.IntegerField(min_value=1, max_value=1_000_000, default=50)
    convincing_wrong_fraction = serializers.FloatField(min_value=0, max_value=1, default=0.8)
    per_problem_cap = serializers.IntegerField(
        min_value=1, max_value=1_000_000, allow_null=True, default=2
    )
    scope = serializers.ChoiceField(choices=["pool", "per_problem"], default="pool")
    per_problem_k = serializers.IntegerField(
        min_value=1, max_value=1_000_000, allow_null=True, default=None
    )
    seed = serializers.IntegerField(default=0, validators=[SEED])
    overlap = serializers.IntegerField(min_value=1, max_value=100, default=1)
    priority = serializers.IntegerField(default=10, validators=[INT32])
    retrain = serializers.BooleanField(default=True)
    train_config = serializers.DictField(
        default=dict,
        help_text="TrainConfig fields for the retrain step (a backbone among those allowed).",
    )

    def validate_rule(self, value: str) -> str:
        try:
            loop.check_rule_name(value)
        except loop.BadParameters as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value

    def validate(self, data: dict) -> dict:
        try:
            data["shares"] = loop.check_rule(data["rule"], data.get("shares"))
        except loop.BadParameters as exc:
            raise serializers.ValidationError({"shares": str(exc)}) from None
        return data

    def validate_train_config(self, value: dict) -> dict:
        if not value:
            return value
        try:
            return runs.allowed_config(value)
        except runs.RunError as exc:
            raise serializers.ValidationError(str(exc)) from None


class GenerationViewSet(
    InProject, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
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
                project_id=current_project(request).pk,
            )
        except loop.BadParameters as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
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


class SamplingRunSerializer(serializers.ModelSerializer):
    total = serializers.IntegerField(read_only=True)

    class Meta:
        model = SamplingRun
        fields = [
            "id",
            "status",
            "samples",
            "sampling",
            "filters",
            "generator",
            "total",
            "next_index",
            "added",
            "graded_correct",
            "graded_wrong",
            "incomplete",
            "duplicates",
            "error",
            "created_at",
            "started_at",
            "heartbeat_at",
            "finished_at",
        ]
        read_only_fields = fields


class SamplingStartSerializer(serializers.Serializer):
    samples = serializers.IntegerField(min_value=1, max_value=64, default=16)
    problems = serializers.ListField(
        child=serializers.IntegerField(validators=[ROW_ID]), required=False, allow_empty=False
    )
    batch = serializers.IntegerField(validators=[ROW_ID], required=False)
    subject = serializers.CharField(required=False, max_length=64)
    level = serializers.IntegerField(min_value=1, max_value=5, required=False)
    limit = serializers.IntegerField(validators=[COUNT], required=False)
    max_tokens = serializers.IntegerField(min_value=1, max_value=8192, required=False)
    temperature = serializers.FloatField(min_value=0, max_value=2, required=False)
    top_p = serializers.FloatField(min_value=0.01, max_value=1, required=False)
    seed = serializers.IntegerField(validators=[SEED], required=False)


class SamplingRunViewSet(
    InProject, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """generate_pool over the API: POST starts a run on the generate queue."""

    serializer_class = SamplingRunSerializer
    permission_classes = [permissions.IsAuthenticated, HasRole]
    required_roles = (LEAD, RESEARCHER)
    role_message = "You do not have permission to perform this action."

    def get_queryset(self):
        return SamplingRun.objects.all()

    def create(self, request: Request) -> Response:
        start = SamplingStartSerializer(data=request.data)
        start.is_valid(raise_exception=True)
        data = dict(start.validated_data)
        try:
            run = sampling.create_sampling_run(
                samples=data["samples"],
                problem_ids=data.get("problems"),
                batch_id=data.get("batch"),
                subject=data.get("subject"),
                level=data.get("level"),
                limit=data.get("limit"),
                max_tokens=data.get("max_tokens"),
                temperature=data.get("temperature"),
                top_p=data.get("top_p"),
                seed=data.get("seed"),
                user=request.user,
                project_id=current_project(request).pk,
            )
        except sampling.SamplingError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(SamplingRunSerializer(run).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        try:
            run = sampling.resume_sampling_run(self.get_object())
        except sampling.SamplingError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(SamplingRunSerializer(run).data)

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        return Response(SamplingRunSerializer(sampling.cancel_sampling_run(self.get_object())).data)
