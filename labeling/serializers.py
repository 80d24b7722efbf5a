"""DRF serializers: they parse and validate, nothing else.

`ExportRequestSerializer` is the one validator of an export request (format, filters,
stepwise options): the CLI, the researchers' page, the API and a training run's data filters
(`modeling.services.runs.check_run_filters`) all pass their input through it, so a filter
means the same everywhere.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.urls import reverse
from rest_framework import serializers

from labeling.bounds import INT32, ROW_ID
from labeling.models import (
    Batch,
    Completion,
    FinishReason,
    Labeling,
    PreLabel,
    Problem,
    Snapshot,
    Solution,
    StepLabel,
    default_project_id,
)
from labeling.prm800k import NEUTRAL_MAPPINGS
from labeling.services.exporting import LABEL_CHOICES, ExportFilters, ExportFormat, StepwiseOptions

THREE_WAY = ("include", "exclude", "only")


class ExportRequestSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=Snapshot.Format.choices, default=ExportFormat.PRM800K)
    batch = serializers.ListField(
        child=serializers.IntegerField(validators=[ROW_ID]),
        required=False,
        default=list,
        help_text="Batch ids (any of).",
    )
    generation = serializers.ListField(
        child=serializers.IntegerField(validators=[INT32]),
        required=False,
        default=list,
        help_text="PRM800K generations (any of).",
    )
    finished_after = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Inclusive; a date means its midnight UTC.",
    )
    finished_before = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Exclusive."
    )
    labeler = serializers.ListField(
        child=serializers.CharField(max_length=150),
        required=False,
        default=list,
        help_text="Usernames or labeler public ids (the PRM800K `labeler`).",
    )
    finish_reason = serializers.ListField(
        child=serializers.ChoiceField(choices=FinishReason.choices), required=False, default=list
    )
    quality_control = serializers.ChoiceField(choices=THREE_WAY, default="include")
    screening = serializers.ChoiceField(choices=THREE_WAY, default="include")
    complete_only = serializers.BooleanField(
        default=True, help_text="Only completed labelings (finished by the labeler, or imported)."
    )
    since_snapshot = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        validators=[ROW_ID],
        help_text="Only labelings created or changed after this (done) snapshot.",
    )
    machine_labels = serializers.BooleanField(
        default=False,
        help_text="Include the judges' machine labelings (off: human labels only).",
    )
    neutral = serializers.ChoiceField(choices=NEUTRAL_MAPPINGS, default="positive")
    labels = serializers.ChoiceField(
        choices=LABEL_CHOICES,
        default="final",
        help_text="Stepwise formats: 'final' gives an adjudicated or multiply labeled solution one row "
        "with its final ratings (the lead's, else the per-step majority); 'every' gives every labeling's rows.",
    )
    alternatives = serializers.BooleanField(
        default=True, help_text="Stepwise: rated alternatives as extra rows."
    )
    test_fraction = serializers.FloatField(
        default=0.0,
        min_value=0.0,
        max_value=0.9,
        help_text="Stepwise: share of problems in `test`.",
    )
    seed = serializers.IntegerField(default=0, min_value=0, max_value=2**31 - 1)

    @classmethod
    def from_query(cls, query: Any, project_id: int | None = None) -> ExportRequestSerializer:
        """From a QueryDict (query string or form): lists for list fields, the last value for
        others, blanks dropped. (DRF would read a missing boolean in a QueryDict as false.)
        `project_id`: the project exported (the Default project's when None)."""
        data: dict[str, Any] = {}
        for name, field in cls().fields.items():
            values = [v for v in query.getlist(name) if v != ""]
            if not values:
                continue
            data[name] = values if isinstance(field, serializers.ListField) else values[-1]
        return cls(data=data, context={"project_id": project_id})

    def validate_batch(self, value: list[int]) -> list[int]:
        # Another project's batch is as unknown as a missing one.
        project_id = self.context.get("project_id") or default_project_id()
        in_project = Batch.objects.filter(pk__in=value, project_id=project_id)
        known = set(in_project.values_list("pk", flat=True))
        unknown = [str(pk) for pk in value if pk not in known]
        if unknown:
            raise serializers.ValidationError(f"Unknown batch id(s): {', '.join(unknown)}.")
        return sorted(set(value))

    def validate_labeler(self, value: list[str]) -> list[str]:
        self._labeler_ids = resolve_labelers(value)
        return value

    def validate_since_snapshot(self, value: int | None) -> int | None:
        if value is None:
            return None
        snapshot = Snapshot.objects.filter(pk=value).first()
        if snapshot is None:
            raise serializers.ValidationError(f"No snapshot {value}.")
        if snapshot.status != Snapshot.Status.DONE or snapshot.cutoff_at is None:
            raise serializers.ValidationError(f"Snapshot {value} is {snapshot.status}, not done.")
        self._since_cutoff = snapshot.cutoff_at
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        after, before = attrs.get("finished_after"), attrs.get("finished_before")
        if after and before and after >= before:
            raise serializers.ValidationError(
                {"finished_before": "Must be later than finished_after."}
            )
        return attrs

    def export_filters(self) -> ExportFilters:
        data = self.validated_data
        return ExportFilters(
            batches=data["batch"],
            generations=sorted(set(data["generation"])),
            finished_after=data["finished_after"],
            finished_before=data["finished_before"],
            labeler_ids=getattr(self, "_labeler_ids", []),
            labelers=data["labeler"],
            finish_reasons=sorted(set(data["finish_reason"])),
            quality_control=data["quality_control"],
            screening=data["screening"],
            complete_only=data["complete_only"],
            since_snapshot=data["since_snapshot"],
            since_cutoff=getattr(self, "_since_cutoff", None),
            project=self.context.get("project_id"),
            machine_labels=data["machine_labels"],
        )

    def stepwise_options(self) -> StepwiseOptions:
        data = self.validated_data
        return StepwiseOptions(
            neutral=data["neutral"],
            alternatives=data["alternatives"],
            labels=data["labels"],
            test_fraction=data["test_fraction"],
            seed=data["seed"],
        )


def resolve_labelers(names: list[str]) -> list[int]:
    """User ids for usernames or labeler public ids; unknown ones are a validation error."""
    if not names:
        return []
    uuids = []
    for name in names:
        try:
            uuids.append(uuid.UUID(name))
        except ValueError:
            pass
    users = get_user_model().objects.filter(Q(username__in=names) | Q(labeler__public_id__in=uuids))
    found = {}
    for pk, username, public_id in users.values_list("pk", "username", "labeler__public_id"):
        found[username] = pk
        if public_id is not None:
            found[str(public_id)] = pk
    unknown = [name for name in names if name not in found and _canonical(name) not in found]
    if unknown:
        raise serializers.ValidationError(f"Unknown labeler(s): {', '.join(unknown)}.")
    return sorted({found.get(name) or found[_canonical(name)] for name in names})


def _canonical(name: str) -> str:
    try:
        return str(uuid.UUID(name))
    except ValueError:
        return name


# --- API resources --------------------------------------------------------------------------


class ProblemSerializer(serializers.ModelSerializer):
    class Meta:
        model = Problem
        fields = [
            "id",
            "unique_id",
            "text",
            "ground_truth_answer",
            "ground_truth_solution",
            "subject",
            "level",
            "created_at",
        ]


class BatchSerializer(serializers.ModelSerializer):
    class Meta:
        model = Batch
        fields = [
            "id",
            "name",
            "generation",
            "overlap",
            "priority",
            "is_active",
            "origin",
            "protocol",
            "alternatives_k",
            "alternatives_after_error",
            "prelabel_mode",
            "prelabel_judge",
            "created_at",
        ]


class BatchPrelabelSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=Batch.PrelabelMode.choices)
    judge = serializers.ChoiceField(
        choices=[("", "none"), *PreLabel.Kind.choices],
        required=False,
        allow_blank=True,
        default="",
        help_text="The judge kind whose latest pre-labels a suggest batch shows.",
    )


class BatchMachineLabelsSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="Accept machine labels on this batch.")
    min_confidence = serializers.FloatField(
        default=0.9, help_text="Every judge's score on every step at least this (0 to 1)."
    )
    audit_share = serializers.FloatField(
        default=0.1, help_text="Share of machine labelings still sent to humans (0 to 1)."
    )
    audit_seed = serializers.IntegerField(default=0, validators=[INT32])
    accept = serializers.BooleanField(
        default=False, help_text="Accept the solutions every judge agrees on now."
    )


class BatchProblemsSerializer(serializers.Serializer):
    problems = serializers.ListField(
        child=serializers.IntegerField(validators=[ROW_ID]),
        min_length=1,
        max_length=10_000,
        help_text="Problem ids: each becomes a solution labeled in the alternatives protocol.",
    )


class PreLabelSerializer(serializers.ModelSerializer):
    class Meta:
        model = PreLabel
        fields = [
            "id",
            "kind",
            "judge",
            "run_id",
            "labels",
            "scores",
            "soft_scores",
            "first_error",
            "raw",
            "created_at",
        ]


class SolutionSerializer(serializers.ModelSerializer):
    # Machine pre-labels (issue 46), newest first: prefetched by the view, no query per row.
    prelabels = PreLabelSerializer(many=True, read_only=True)

    class Meta:
        model = Solution
        fields = [
            "id",
            "problem",
            "batch",
            "steps",
            "final_answer",
            "verifier_score",
            "generator",
            "source_id",
            "format",
            "generation",
            "is_quality_control",
            "is_screening",
            "answer_correct",
            "completed_count",
            "created_at",
            "prelabels",
        ]


class CompletionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Completion
        fields = ["index", "text", "rating", "flagged", "is_human", "source"]


class StepLabelSerializer(serializers.ModelSerializer):
    completions = CompletionSerializer(many=True, read_only=True)

    class Meta:
        model = StepLabel
        fields = [
            "index",
            "chosen_completion",
            "has_completions",
            "time_ms",
            "completions",
            # Provenance (issue 46): the judge's suggestion on the page when it was rated.
            "suggestion_shown",
            "suggestion_judge",
            "suggestion_label",
            "suggestion_score",
            "suggestion_accepted",
        ]


class LabelingSerializer(serializers.ModelSerializer):
    labeler = serializers.CharField(source="labeler.username", read_only=True)
    batch = serializers.IntegerField(source="solution.batch_id", read_only=True, allow_null=True)

    class Meta:
        model = Labeling
        fields = [
            "id",
            "solution",
            "batch",
            "labeler",
            "status",
            "finish_reason",
            "total_time_ms",
            "started_at",
            "finished_at",
            "updated_at",
            "is_surplus",
        ]


class LabelingDetailSerializer(LabelingSerializer):
    step_labels = StepLabelSerializer(many=True, read_only=True)

    class Meta(LabelingSerializer.Meta):
        fields = [*LabelingSerializer.Meta.fields, "step_labels"]


class SnapshotSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    progress_percent = serializers.IntegerField(read_only=True)
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = Snapshot
        fields = [
            "id",
            "format",
            "filters",
            "options",
            "status",
            "progress_percent",
            "total",
            "processed",
            "row_count",
            "step_label_count",
            "size_bytes",
            "sha256",
            "error",
            "cutoff_at",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "download_url",
        ]
        read_only_fields = fields

    def get_download_url(self, snapshot: Snapshot) -> str | None:
        if snapshot.status != Snapshot.Status.DONE:
            return None
        request = self.context.get("request")
        path = reverse("snapshot-download", args=[snapshot.pk])
        return request.build_absolute_uri(path) if request else path


class ImportUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="JSONL, one record a line, UTF-8.")


class SampleUploadSerializer(ImportUploadSerializer):
    batch_name = serializers.CharField(max_length=200)
    overlap = serializers.IntegerField(min_value=1, max_value=100, default=1)
    generation = serializers.IntegerField(
        required=False, allow_null=True, default=None, validators=[INT32]
    )


class ImportReportSerializer(serializers.Serializer):
    lines = serializers.IntegerField()
    created = serializers.DictField(child=serializers.IntegerField())
    duplicates = serializers.IntegerField()


class LineErrorSerializer(serializers.Serializer):
    line = serializers.IntegerField()
    field = serializers.CharField()
    message = serializers.CharField()


class OwnLabelingSerializer(LabelingSerializer):
    """A labeler's view of their own labelings: without the batch, which would single out gold."""

    class Meta(LabelingSerializer.Meta):
        fields = [f for f in LabelingSerializer.Meta.fields if f != "batch"]


class OwnLabelingDetailSerializer(OwnLabelingSerializer):
    step_labels = StepLabelSerializer(many=True, read_only=True)

    class Meta(OwnLabelingSerializer.Meta):
        fields = [*OwnLabelingSerializer.Meta.fields, "step_labels"]
