"""The lead's reads about labelers, each in one project (a labeler's record there): who waits
for a lead's decision, the roster, who is locked out of signing in, a labeler's record, recent
work and screening results, a labeling's history, the screening's size."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from axes.helpers import get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q, Sum
from django.utils import timezone

from labeling.models import (
    GoldResult,
    LabelerRecord,
    Labeling,
    Membership,
    RatingEvent,
    Solution,
)
from labeling.models.projects import in_project, project_pk


def labeler_record(user: Any, project: Any = None) -> LabelerRecord:
    """The user's record in the project (the Default project when none is named), or, where
    none was made yet, the record a new labeler starts with (unsaved: a page writes nothing)."""
    project_id = project_pk(project)
    record = LabelerRecord.objects.filter(user_id=user.pk, project_id=project_id).first()
    return record or LabelerRecord(user=user, project_id=project_id)


def labelers_needing_attention(project: Any = None) -> list[LabelerRecord]:
    """Labelers of the project (the Default project when none is named) paused there, or
    screened there and waiting for a lead's decision: their records in it."""
    project_id = project_pk(project)
    waiting = Q(state=LabelerRecord.State.PAUSED) | Q(
        state=LabelerRecord.State.SCREENING, screening_passed=False
    )
    members = Membership.objects.filter(project_id=project_id, role="labeler")
    records = LabelerRecord.objects.filter(waiting, project_id=project_id).filter(
        user_id__in=members.values("user_id")
    )
    return list(records.select_related("user").order_by("state_changed_at"))


def all_labelers(project: Any = None) -> list[LabelerRecord]:
    """The labelers of the project (the Default project's when none is named), each with their
    record in it (a new labeler's, unsaved, for a member who has none yet)."""
    project_id = project_pk(project)
    users = Membership.objects.filter(project_id=project_id, role="labeler").values("user_id")
    records = {
        record.user_id: record
        for record in LabelerRecord.objects.filter(project_id=project_id, user__in=users)
    }
    members = get_user_model().objects.filter(pk__in=users).order_by("username")
    return [
        _with_user(records.get(user.pk) or LabelerRecord(project_id=project_id), user)
        for user in members
    ]


def _with_user(record: LabelerRecord, user: Any) -> LabelerRecord:
    record.user = user  # read once, with the roster
    return record


def locked_out_usernames(usernames: Collection[str]) -> set[str]:
    """Which of these usernames django-axes refuses now: the failure limit reached within the
    cool-off from one address (its lockout is by username and address together,
    AXES_LOCKOUT_PARAMETERS). A lead's password reset lifts it."""
    since = timezone.now() - get_cool_off()
    locked = (
        AccessAttempt.objects.filter(username__in=usernames, attempt_time__gte=since)
        .values("username", "ip_address")
        .order_by()
        .annotate(failures=Sum("failures_since_start"))
        .filter(failures__gte=get_failure_limit(None, None))
    )
    return {row["username"] for row in locked}


def screening_results(user_id: int, project: Any = None) -> list[GoldResult]:
    """The user's gold results on the project's gold (the Default project's when none is named)."""
    return list(
        GoldResult.objects.filter(labeler_id=user_id, solution__project_id=project_pk(project))
        .select_related("solution__problem")
        .order_by("-created_at")[:60]
    )


def recent_labelings(user_id: int, limit: int = 30, project: Any = None) -> list[Labeling]:
    """The user's latest labelings in the project (the Default project's when none is named)."""
    return list(
        Labeling.objects.filter(labeler_id=user_id, solution__project_id=project_pk(project))
        .select_related("solution__problem", "solution__batch")
        .order_by("-updated_at")[:limit]
    )


def labeling_history(labeling: Labeling) -> list[RatingEvent]:
    return list(labeling.events.select_related("actor").order_by("created_at", "id"))


def screening_size(project_id: int | None = None) -> int:
    """Solutions in a project's screening (the Default project's where None): the setting, or
    fewer when fewer of its screening solutions exist."""
    available = Solution.objects.filter(
        is_screening=True, is_quality_control=True, gold__isnull=False, **in_project(project_id)
    )
    return min(settings.STEPWISE_SCREENING_SIZE, available.count())
