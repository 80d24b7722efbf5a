"""Roles are per project: a Membership row is a user's role in one project. The admin is global
(the `admin` group, or a superuser) and holds every role in every project.

One check for pages (`require`) and one DRF permission class (`HasRole`, reading the
view's `required_roles`), so who may do what reads the same everywhere; `may_add_to_batch` is
the one rule for writing into a batch, on every path that does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from rest_framework import permissions

from labeling import access

if TYPE_CHECKING:
    from labeling.models import Batch, Project

LABELER = "labeler"
LEAD = "lead"
RESEARCHER = "researcher"
ADMIN = "admin"
ALL_ROLES = (LABELER, LEAD, RESEARCHER, ADMIN)


ROLES_CACHE_SECONDS = 300


def _access_of(user: AbstractUser) -> dict[str, Any]:
    """{"admin": bool, "projects": {project_id: [role, ...]}}: kept on the user for the request,
    and in the cache every process shares until a group, a membership or a project changes
    (`access.forget_access`); one query to compute."""
    cached = getattr(user, "_stepwise_access", None)
    if cached is None:
        cached = access.cached_for_user(user.pk, "roles", lambda: _access_computed(user))
        user._stepwise_access = cached  # type: ignore[attr-defined]  # per-request cache
    return cached


def _access_computed(user: AbstractUser) -> dict[str, Any]:
    """One query: the user's memberships with their projects' slugs and names (so a link's
    project is known without another read), and whether they are in the admin group."""
    from django.db.models import CharField, Value

    from labeling.models import Membership

    rows = Membership.objects.filter(user_id=user.pk).values_list(
        "project_id", "project__slug", "project__name", "role"
    )
    blank = Value("", output_field=CharField())
    admin = (
        user.groups.filter(name=ADMIN)
        .annotate(none=Value(0), no_slug=blank, no_name=blank)
        .values_list("none", "no_slug", "no_name", "name")
    )
    projects: dict[int, list[str]] = {}
    known: dict[str, tuple[int, str]] = {}
    is_admin = False
    for project_id, slug, name, role in rows.union(admin, all=True):
        if role == ADMIN and project_id == 0:
            is_admin = True
        else:
            projects.setdefault(project_id, []).append(role)
            known[slug] = (project_id, name)
    return {"admin": is_admin, "projects": projects, "known": known}


def member_project(user: AbstractUser | AnonymousUser, slug: str) -> Project | None:
    """The project `slug` names, as the user's own cached memberships know it (no query past
    theirs), or None where they are not a member (the caller then reads every project)."""
    if not user.is_authenticated or user.is_superuser:
        return None
    found = _access_of(user)["known"].get(slug)
    if found is None:
        return None
    from labeling.models import Project

    return Project(pk=found[0], slug=slug, name=found[1])


def member_projects(user: AbstractUser | AnonymousUser) -> list[tuple[int, str, str]] | None:
    """The user's projects as (pk, slug, name), by name, from their cached memberships; None
    for the admin (every project: `access.all_projects`)."""
    if not user.is_authenticated:
        return []
    if is_admin(user):
        return None
    known = _access_of(user)["known"]
    return sorted(((pk, slug, name) for slug, (pk, name) in known.items()), key=lambda r: r[2])


def is_admin(user: AbstractUser | AnonymousUser) -> bool:
    if not user.is_authenticated:
        return False
    return bool(user.is_superuser or _access_of(user)["admin"])


def _project_id(project: Any) -> int | None:
    return getattr(project, "pk", project)


def user_roles(user: AbstractUser | AnonymousUser, project: Any = None) -> set[str]:
    """The user's roles in `project` (a Project or its pk); with none named, their roles in any
    of their projects (the pages outside a project: the home page's list, one's tokens)."""
    if not user.is_authenticated:
        return set()
    if user.is_superuser:
        return set(ALL_ROLES)
    known = _access_of(user)
    if known["admin"]:
        return set(ALL_ROLES)
    project_id = _project_id(project)
    if project_id is None:
        return {role for roles in known["projects"].values() for role in roles}
    return set(known["projects"].get(project_id, ()))


def user_project_ids(user: AbstractUser | AnonymousUser) -> set[int] | None:
    """The projects the user is a member of; None for the admin (every project)."""
    if not user.is_authenticated:
        return set()
    if is_admin(user):
        return None
    return set(_access_of(user)["projects"])


def projects_with_role(user: AbstractUser | AnonymousUser, role: str) -> list[int] | None:
    """The projects where the user holds `role`; None for the admin (every project)."""
    if not user.is_authenticated:
        return []
    if is_admin(user):
        return None
    return sorted(pk for pk, roles in _access_of(user)["projects"].items() if role in roles)


def has_role(user: AbstractUser | AnonymousUser, *roles: str, project: Any = None) -> bool:
    return bool(user_roles(user, project) & set(roles))


def request_project(request: Any) -> Any:
    """The project a request's link names (/p/<slug>/: `stepwise.middleware.ProjectMiddleware`),
    or None outside one."""
    return getattr(request, "project", None)


def current_project(request: Any) -> Project:
    """The request's project, for views that exist only in one (404 outside)."""
    project = request_project(request)
    if project is None:
        raise Http404("This page is in a project: /p/<slug>/...")
    return project


def refuse_outsider(user: AbstractUser | AnonymousUser, project: Any) -> None:
    """A user with no role in the project is answered as if it did not exist (404): a link to
    another project's batch or run says nothing of it."""
    if project is not None and user.is_authenticated and not user_roles(user, project):
        raise Http404("No such page in this project.")


class RoleRequired(PermissionDenied):
    """A refusal for want of a role: the 403 page shows the message and names the `roles`."""

    def __init__(self, message: str, roles: tuple[str, ...]) -> None:
        super().__init__(message)
        self.roles = roles


def require(
    request: HttpRequest, *roles: str, message: str = "Your role does not allow this."
) -> None:
    """Refuse the request unless its user holds one of `roles` in the request's project: 404
    for a user with no role there (nothing of it is shown), else 403."""
    project = request_project(request)
    refuse_outsider(request.user, project)
    if not has_role(request.user, *roles, project=project):
        raise RoleRequired(message, roles)


def may_add_to_batch(user: AbstractUser | AnonymousUser, batch: Batch) -> bool:
    """Who may put solutions or problems into a batch: a lead (or an admin) into any, anyone
    else only into a batch they created (a researcher's own import). The batch pages are the
    leads'; every path that writes into a batch (sample uploads, problems, the lead's form, a
    generation's queue) asks this, so none is a way around them."""
    if has_role(user, LEAD, project=batch.project_id):
        return True
    if not user_roles(user, batch.project_id):
        return False
    return batch.created_by_id is not None and batch.created_by_id == user.pk


def require_batch_writer(user: AbstractUser | AnonymousUser, batch: Batch) -> None:
    """Refuse (403, on a page and in the API alike) unless `may_add_to_batch`."""
    if not may_add_to_batch(user, batch):
        raise PermissionDenied(
            f"Only leads and the batch's creator can add to batch “{batch.name}”; nothing was added."
        )


class IsMember(permissions.BasePermission):
    """DRF: a signed-in user with a role in the request's project (404 for anyone else): the
    API's root, which lists the project's endpoints."""

    def has_permission(self, request: Any, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        project = request_project(request)
        if project is not None and not user_roles(request.user, project):
            from rest_framework.exceptions import NotFound

            raise NotFound()
        return True


class HasRole(permissions.BasePermission):
    """DRF: the user holds one of the view's `required_roles` (and the view's `role_message`)."""

    message = "Your role does not allow this."

    def has_permission(self, request: Any, view: Any) -> bool:
        roles = getattr(view, "required_roles", ())
        if not roles:
            raise AssertionError(f"{type(view).__name__} uses HasRole without required_roles")
        self.message = getattr(view, "role_message", self.message)
        if not (request.user and request.user.is_authenticated):
            return False
        project = request_project(request)
        if project is not None and not user_roles(request.user, project):
            from rest_framework.exceptions import NotFound

            raise NotFound()  # another project's endpoint: as if it did not exist
        return has_role(request.user, *roles, project=project)
