"""The lead's reads about labelers: who waits for a lead's decision, the roster, who is locked
out of signing in, a labeler's recent work and screening results, a labeling's history, the
screening's size."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from axes.helpers import get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from labeling.models import (
    GoldResult,
    Labeler,
    Labeling,
    Membership,
    RatingEvent,
    Solution,
    default_project_id,
)


def labelers_needing_attention(project: Any = None) -> list[Labeler]:
    """Paused labelers and screened labelers waiting for a lead's decision (the project's
    labelers, where named)."""
    waiting = Q(state=Labeler.State.PAUSED) | Q(
        state=Labeler.State.SCREENING, screening_passed=False
    )
    labelers = Labeler.objects.filter(waiting)
    if project is not None:
        members = Membership.objects.filter(project_id=project.pk, role="labeler")
        labelers = labelers.filter(user_id__in=members.values("user_id"))
    return list(labelers.select_related("user").order_by("state_changed_at"))


def all_labelers(project: Any = None) -> list[Labeler]:
    """The labelers of the project (the Default project's when none is named) with a record."""
    project_id = default_project_id() if project is None else project.pk
    users = Membership.objects.filter(project_id=project_id, role="labeler").values("user_id")
    return list(
        Labeler.objects.filter(user__in=users).select_related("user").order_by("user__username")
    )


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


def screening_results(user_id: int) -> list[GoldResult]:
    return list(
        GoldResult.objects.filter(labeler_id=user_id)
        .select_related("solution__problem")
        .order_by("-created_at")[:60]
    )


def recent_labelings(user_id: int, limit: int = 30) -> list[Labeling]:
    return list(
        Labeling.objects.filter(labeler_id=user_id)
        .select_related("solution__problem", "solution__batch")
        .order_by("-updated_at")[:limit]
    )


def labeling_history(labeling: Labeling) -> list[RatingEvent]:
    return list(labeling.events.select_related("actor").order_by("created_at", "id"))


def screening_size() -> int:
    """Solutions in a screening: the setting, or fewer when fewer screening solutions exist."""
    available = Solution.objects.filter(
        is_screening=True, is_quality_control=True, gold__isnull=False
    )
    return min(settings.STEPWISE_SCREENING_SIZE, available.count())
