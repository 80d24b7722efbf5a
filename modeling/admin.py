from django.contrib import admin

from modeling.models import GenerationRun, ModelVersion, PoolEntry, TrainingRun


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "status", "phase", "step", "total_steps", "created_at")
    list_filter = ("status",)
    search_fields = ("name", "dataset_version")
    raw_id_fields = ("created_by",)


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "backbone", "passed_evaluation", "is_active", "created_at")
    list_filter = ("is_active", "passed_evaluation")
    search_fields = ("name", "backbone")
    raw_id_fields = ("run",)


@admin.register(GenerationRun)
class GenerationRunAdmin(admin.ModelAdmin):
    list_display = ("generation", "status", "current_step", "trigger", "batch", "created_at")
    list_filter = ("status", "trigger")
    raw_id_fields = ("training_run", "model_version", "batch", "created_by")


@admin.register(PoolEntry)
class PoolEntryAdmin(admin.ModelAdmin):
    list_display = ("id", "solution", "extracted_answer", "source", "created_at")
    search_fields = ("source",)
    raw_id_fields = ("solution",)
