from django.contrib import admin

from labeling.models import Batch, Labeler, Labeling, Problem, RatingEvent, Solution


@admin.register(Problem)
class ProblemAdmin(admin.ModelAdmin):
    list_display = ("id", "unique_id", "subject", "level", "ground_truth_answer")
    list_filter = ("subject", "level")
    search_fields = ("unique_id", "text")


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "generation",
        "overlap",
        "priority",
        "is_active",
        "origin",
        "created_at",
    )
    list_filter = ("is_active", "origin")
    filter_horizontal = ("labelers",)


@admin.register(Solution)
class SolutionAdmin(admin.ModelAdmin):
    list_display = ("id", "problem", "batch", "generator", "completed_count", "active_count")
    list_filter = ("batch", "format", "is_quality_control", "is_screening")
    raw_id_fields = ("problem",)


@admin.register(Labeling)
class LabelingAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "solution",
        "labeler",
        "status",
        "finish_reason",
        "finished_at",
        "is_surplus",
    )
    list_filter = ("status", "finish_reason", "is_surplus")
    raw_id_fields = ("solution", "labeler")


@admin.register(Labeler)
class LabelerAdmin(admin.ModelAdmin):
    list_display = ("user", "public_id", "created_at")
    search_fields = ("user__username", "public_id")


@admin.register(RatingEvent)
class RatingEventAdmin(admin.ModelAdmin):
    list_display = (
        "labeling",
        "step_index",
        "old_rating",
        "new_rating",
        "reason",
        "actor",
        "created_at",
    )
    list_filter = ("reason",)
    raw_id_fields = ("labeling",)
