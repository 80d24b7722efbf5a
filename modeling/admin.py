"""Every modeling model in the admin, read-only but for the pool's notes: runs and generations
move through their states only by their services (cancel, resume, retry on their pages), a
model version's files and gate decide activation, scores and selections are the record of why
a solution was picked; an evaluation set is frozen once written."""

from django.contrib import admin

from labeling.admin import ReadOnlyAdmin
from modeling.models import (
    BestOfNComparison,
    EvaluationSet,
    GenerationRun,
    ModelExport,
    ModelVersion,
    PoolEntry,
    PreLabelRun,
    SamplingRun,
    SelectionReason,
    SolutionScore,
    TrainingRun,
)


@admin.register(TrainingRun)
class TrainingRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "status", "phase", "step", "total_steps", "created_at")
    list_filter = ("status",)
    search_fields = ("name", "dataset_version")


@admin.register(ModelVersion)
class ModelVersionAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "backbone", "passed_evaluation", "is_active", "created_at")
    list_filter = ("is_active", "passed_evaluation")
    search_fields = ("name", "backbone")


@admin.register(BestOfNComparison)
class BestOfNComparisonAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "model_ids",
        "sampling_run",
        "status",
        "phase",
        "created_by",
        "created_at",
    )
    list_filter = ("status",)
    list_select_related = ("created_by",)


@admin.register(ModelExport)
class ModelExportAdmin(ReadOnlyAdmin):
    list_display = ("id", "version", "status", "phase", "size_bytes", "created_by", "created_at")
    list_filter = ("status",)
    list_select_related = ("version", "created_by")


@admin.register(EvaluationSet)
class EvaluationSetAdmin(ReadOnlyAdmin):
    list_display = ("version", "is_current", "row_count", "step_count", "sha256", "created_at")


@admin.register(SolutionScore)
class SolutionScoreAdmin(ReadOnlyAdmin):
    list_display = ("solution_id", "model_version", "score", "min_step_score", "created_at")
    list_select_related = ("model_version",)


@admin.register(GenerationRun)
class GenerationRunAdmin(ReadOnlyAdmin):
    list_display = ("generation", "status", "current_step", "trigger", "batch", "created_at")
    list_filter = ("status", "trigger")
    list_select_related = ("batch",)


@admin.register(SelectionReason)
class SelectionReasonAdmin(ReadOnlyAdmin):
    list_display = ("generation_run", "rank", "solution_id", "score", "rule", "correct")
    list_select_related = ("generation_run",)


@admin.register(PoolEntry)
class PoolEntryAdmin(admin.ModelAdmin):
    list_display = ("id", "solution_id", "extracted_answer", "source", "created_at")
    search_fields = ("source",)
    readonly_fields = ("solution", "created_at")


@admin.register(SamplingRun)
class SamplingRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "status", "samples", "generator", "next_index", "added", "created_at")
    list_filter = ("status",)


@admin.register(PreLabelRun)
class PreLabelRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "batch", "kind", "status", "done", "total", "no_label", "created_at")
    list_filter = ("status", "kind")
    list_select_related = ("batch",)
