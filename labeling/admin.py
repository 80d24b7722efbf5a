"""Every labeling model in the admin. Rows that services write and invariants bind (the rating
history, counters, agreement, gold, adjudications, versioned guidelines, snapshots, solutions
and labelers whose counters the queue keeps) are read-only here: changes go through the pages,
whose services keep counters, audit trail and checksums right. Problems and batches are
configuration and stay editable, but for the fields imports match on."""

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from labeling.models import (
    Adjudication,
    ApiToken,
    Batch,
    BatchAgreement,
    BatchHourStats,
    BatchLabelerStats,
    Completion,
    GoldLabel,
    GoldResult,
    Guidelines,
    Labeler,
    LabelerRecord,
    Labeling,
    Membership,
    Note,
    PairAgreement,
    PreLabel,
    Problem,
    Project,
    ProposedSteps,
    RatingEvent,
    Snapshot,
    Solution,
    SolutionAgreement,
    StepLabel,
)
from labeling.services.batches import prelabel_refusal


class ReadOnlyAdmin(admin.ModelAdmin):
    """View only: no add, change or delete, for a superuser too."""

    show_full_result_count = False  # no second COUNT(*) over a table of millions

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ("user",)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    """The admin creates projects and names their members (leads add the rest on the people
    pages); a project that owns rows cannot be deleted (its rows protect it)."""

    list_display = ("name", "slug", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    readonly_fields = ("created_by", "created_at")
    inlines = (MembershipInline,)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("project", "user", "role", "created_at")
    list_filter = ("project", "role")
    autocomplete_fields = ("user",)


@admin.register(Problem)
class ProblemAdmin(admin.ModelAdmin):
    list_display = ("id", "unique_id", "subject", "level", "ground_truth_answer")
    list_filter = ("subject", "level")
    search_fields = ("unique_id", "text")
    # Imports match a problem by its text's hash and its unique id.
    readonly_fields = ("text", "text_sha256", "unique_id", "created_at")


class BatchAdminForm(forms.ModelForm):
    prelabel_judge = forms.ChoiceField(
        choices=[("", "none"), *PreLabel.Kind.choices], required=False, label="Pre-label judge"
    )

    class Meta:
        model = Batch
        exclude: list[str] = []  # every field, as the admin's own form

    def clean(self):
        data = super().clean()
        refusal = prelabel_refusal(
            data.get("prelabel_mode") or "", data.get("prelabel_judge") or ""
        )
        if refusal:
            self.add_error("prelabel_judge", refusal)
        return data


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin):
    form = BatchAdminForm
    list_display = (
        "name",
        "project",
        "generation",
        "overlap",
        "priority",
        "is_active",
        "origin",
        "prelabel_mode",
        "prelabel_judge",
        "created_at",
    )
    list_filter = ("project", "is_active", "origin", "protocol", "prelabel_mode")
    filter_horizontal = ("labelers",)
    # The protocol is set on the batch form, which keeps it once the batch has solutions.
    readonly_fields = ("origin", "protocol", "created_by", "created_at")


@admin.register(PreLabel)
class PreLabelAdmin(ReadOnlyAdmin):
    list_display = ("id", "solution_id", "kind", "judge", "run_id", "first_error", "created_at")
    list_filter = ("kind",)


@admin.register(Solution)
class SolutionAdmin(ReadOnlyAdmin):
    list_display = ("id", "problem_id", "batch", "generator", "completed_count", "active_count")
    list_filter = ("batch", "format", "is_quality_control", "is_screening")
    list_select_related = ("batch",)


@admin.register(Labeling)
class LabelingAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "solution_id",
        "labeler",
        "status",
        "finish_reason",
        "finished_at",
        "is_surplus",
    )
    list_filter = ("status", "finish_reason", "is_surplus")
    list_select_related = ("labeler",)


@admin.register(Labeler)
class LabelerAdmin(ReadOnlyAdmin):
    list_display = ("user", "public_id", "created_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "public_id")


@admin.register(LabelerRecord)
class LabelerRecordAdmin(ReadOnlyAdmin):
    """A labeler's record per project; a lead changes its state on the labeler's page."""

    list_display = ("user", "project", "state", "gold_labelings", "state_changed_at")
    list_filter = ("project", "state")
    list_select_related = ("user", "project")
    search_fields = ("user__username",)


@admin.register(StepLabel)
class StepLabelAdmin(ReadOnlyAdmin):
    list_display = ("id", "labeling_id", "index", "chosen_completion", "time_ms")


@admin.register(Completion)
class CompletionAdmin(ReadOnlyAdmin):
    list_display = ("id", "step_id", "index", "rating", "flagged", "is_human")


@admin.register(Note)
class NoteAdmin(ReadOnlyAdmin):
    list_display = ("id", "solution_id", "labeling_id", "step_index", "author", "created_at")
    list_select_related = ("author",)


@admin.register(RatingEvent)
class RatingEventAdmin(ReadOnlyAdmin):
    list_display = (
        "labeling_id",
        "step_index",
        "old_rating",
        "new_rating",
        "reason",
        "actor",
        "created_at",
    )
    list_filter = ("reason",)
    list_select_related = ("actor",)


@admin.register(GoldLabel)
class GoldLabelAdmin(ReadOnlyAdmin):
    list_display = ("solution_id", "first_error", "source", "created_at")


@admin.register(GoldResult)
class GoldResultAdmin(ReadOnlyAdmin):
    list_display = ("labeling_id", "labeler", "is_screening", "steps_compared", "steps_exact")
    list_select_related = ("labeler",)


@admin.register(BatchLabelerStats)
class BatchLabelerStatsAdmin(ReadOnlyAdmin):
    list_display = ("batch", "labeler", "labelings", "steps", "last_finished_at")
    list_select_related = ("batch", "labeler")


@admin.register(BatchHourStats)
class BatchHourStatsAdmin(ReadOnlyAdmin):
    list_display = ("batch", "hour", "labelings", "steps")
    list_select_related = ("batch",)


@admin.register(SolutionAgreement)
class SolutionAgreementAdmin(ReadOnlyAdmin):
    list_display = ("solution_id", "batch_id", "labelings", "alpha", "needs_adjudication")
    list_filter = ("needs_adjudication",)


@admin.register(BatchAgreement)
class BatchAgreementAdmin(ReadOnlyAdmin):
    list_display = ("batch", "solutions", "pairs", "pairs_same")
    list_select_related = ("batch",)


@admin.register(PairAgreement)
class PairAgreementAdmin(ReadOnlyAdmin):
    list_display = ("labeler_a", "labeler_b", "solutions", "steps_compared", "steps_same")
    list_select_related = ("labeler_a", "labeler_b")


@admin.register(Adjudication)
class AdjudicationAdmin(ReadOnlyAdmin):
    list_display = ("solution_id", "lead", "created_at", "updated_at")
    list_select_related = ("lead",)


@admin.register(Guidelines)
class GuidelinesAdmin(ReadOnlyAdmin):
    list_display = ("version", "created_by", "created_at")
    list_select_related = ("created_by",)


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyAdmin):
    list_display = ("id", "format", "status", "row_count", "sha256", "created_by", "created_at")
    list_filter = ("status", "format")
    list_select_related = ("created_by",)


@admin.register(ProposedSteps)
class ProposedStepsAdmin(ReadOnlyAdmin):
    """The generator's candidates, as labelers rated them: changed only by the generate task."""

    list_display = (
        "id",
        "problem_id",
        "k",
        "status",
        "generator",
        "requested_by",
        "requested_at",
        "ready_at",
    )
    list_filter = ("status",)
    list_select_related = ("requested_by",)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Users make their own tokens on their tokens page; here an admin sees them and may revoke
    one (delete). Neither the key nor its digest is shown."""

    list_display = ("name", "user", "created", "expiry", "last_used")
    list_select_related = ("user",)
    search_fields = ("user__username", "name")
    fields = ("name", "user", "created", "expiry", "last_used")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)  # Django's own check
