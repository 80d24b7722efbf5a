"""Roles are Django groups. A superuser holds every role."""

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

LABELER = "labeler"
LEAD = "lead"
RESEARCHER = "researcher"
ADMIN = "admin"
ALL_ROLES = (LABELER, LEAD, RESEARCHER, ADMIN)


def user_roles(user: AbstractBaseUser | AnonymousUser) -> set[str]:
    if not user.is_authenticated:
        return set()
    if user.is_superuser:
        return set(ALL_ROLES)
    cached = getattr(user, "_stepwise_roles", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True)) & set(ALL_ROLES)
        if ADMIN in cached:
            cached = set(ALL_ROLES)
        user._stepwise_roles = cached  # type: ignore[attr-defined]
    return cached


def has_role(user: AbstractBaseUser | AnonymousUser, *roles: str) -> bool:
    return bool(user_roles(user) & set(roles))
