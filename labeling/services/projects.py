"""Projects and their members: the admin creates a project and names its leads; a lead adds
and removes members of their own projects (`labeling.views.people`, the API, the admin)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils.text import slugify

from labeling.models import Membership, Project
from labeling.services.errors import LabelingError
from labeling.services.quality import record_ensure
from labeling.services.queue import labelings_release

ROLES = tuple(Membership.Role.values)


@transaction.atomic
def project_create(
    *, name: str, slug: str = "", leads: list[User] | None = None, created_by: Any = None
) -> Project:
    """A new project; `leads` hold the lead role in it. Refused (LabelingError) for a name or
    a slug already taken, or a slug that is not one."""
    name = name.strip()
    slug = (slug or slugify(name)).strip()
    if not name or not slug or slugify(slug) != slug:
        raise LabelingError(f"“{slug}” is not a slug: lowercase letters, digits and hyphens.")
    if Project.objects.filter(name=name).exists() or Project.objects.filter(slug=slug).exists():
        raise LabelingError(f"A project named “{name}” or with the slug “{slug}” exists already.")
    project = Project.objects.create(name=name, slug=slug, created_by=created_by)
    for lead in leads or []:
        member_add(project=project, user=lead, role=Membership.Role.LEAD)
    return project


@transaction.atomic
def member_add(*, project: Project, user: User, role: str) -> Membership:
    """The user holds `role` in `project`; a labeler gets their record there (screening, as any
    new labeler; one they had there before is kept, as their work is)."""
    if role not in ROLES:
        raise LabelingError(f"“{role}” is not a role: one of {', '.join(ROLES)}.")
    membership, _ = Membership.objects.get_or_create(project=project, user=user, role=role)
    if role == Membership.Role.LABELER:
        record_ensure(user_id=user.pk, project_id=project.pk)
    return membership


def member_remove(*, project: Project, user: User, role: str) -> int:
    """The user no longer holds `role` in `project`; their work there stays. A labeler's open
    labeling there goes back to the pool (its ratings kept), as a deactivated account's does:
    they may not finish it, and it would hold their one open labeling in every project."""
    deleted, _ = Membership.objects.filter(project=project, user=user, role=role).delete()
    if deleted and role == Membership.Role.LABELER:
        labelings_release(user, project_id=project.pk)
    return deleted
