"""Roles are Django groups. A superuser holds every role.

One check for pages (`require`) and one DRF permission class (`HasRole`, reading the
view's `required_roles`), so who may do what reads the same everywhere; `may_add_to_batch` is
the one rule for writing into a batch, on every path that does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from rest_framework import permissions

from labeling import access

if TYPE_CHECKING:
    from labeling.models import Batch

LABELER = "labeler"
LEAD = "lead"
RESEARCHER = "researcher"
ADMIN = "admin"
ALL_ROLES = (LABELER, LEAD, RESEARCHER, ADMIN)


ROLES_CACHE_SECONDS = 300


def user_roles(user: AbstractUser | AnonymousUser) -> set[str]:
    """The user's roles: kept on the user for the request, and in the cache every process
    shares until a group or a membership changes (`access.forget_access`)."""
    if not user.is_authenticated:
        return set()
    if user.is_superuser:
        return set(ALL_ROLES)
    cached = getattr(user, "_stepwise_roles", None)
    if cached is None:
        cached = access.cached_for_user(user.pk, "roles", lambda: _roles_of(user))
        user._stepwise_roles = cached  # type: ignore[attr-defined]  # per-request cache
    return cached


def _roles_of(user: AbstractUser) -> set[str]:
    roles = set(user.groups.values_list("name", flat=True)) & set(ALL_ROLES)
    return set(ALL_ROLES) if ADMIN in roles else roles


def has_role(user: AbstractUser | AnonymousUser, *roles: str) -> bool:
    return bool(user_roles(user) & set(roles))


class RoleRequired(PermissionDenied):
    """A refusal for want of a role: the 403 page shows the message and names the `roles`."""

    def __init__(self, message: str, roles: tuple[str, ...]) -> None:
        super().__init__(message)
        self.roles = roles


def require(
    request: HttpRequest, *roles: str, message: str = "Your role does not allow this."
) -> None:
    """Refuse the request (403) unless its user holds one of `roles`."""
    if not has_role(request.user, *roles):
        raise RoleRequired(message, roles)


def may_add_to_batch(user: AbstractUser | AnonymousUser, batch: Batch) -> bool:
    """Who may put solutions or problems into a batch: a lead (or an admin) into any, anyone
    else only into a batch they created (a researcher's own import). The batch pages are the
    leads'; every path that writes into a batch (sample uploads, problems, the lead's form, a
    generation's queue) asks this, so none is a way around them."""
    if has_role(user, LEAD):
        return True
    return batch.created_by_id is not None and batch.created_by_id == user.pk


def require_batch_writer(user: AbstractUser | AnonymousUser, batch: Batch) -> None:
    """Refuse (403, on a page and in the API alike) unless `may_add_to_batch`."""
    if not may_add_to_batch(user, batch):
        raise PermissionDenied(
            f"Only leads and the batch's creator can add to batch “{batch.name}”; nothing was added."
        )


class HasRole(permissions.BasePermission):
    """DRF: the user holds one of the view's `required_roles` (and the view's `role_message`)."""

    message = "Your role does not allow this."

    def has_permission(self, request: Any, view: Any) -> bool:
        roles = getattr(view, "required_roles", ())
        if not roles:
            raise AssertionError(f"{type(view).__name__} uses HasRole without required_roles")
        self.message = getattr(view, "role_message", self.message)
        return bool(
            request.user and request.user.is_authenticated and has_role(request.user, *roles)
        )
