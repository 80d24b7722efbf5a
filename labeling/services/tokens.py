"""API tokens: each user makes and revokes their own (django-rest-knox stores only a digest)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from labeling.models import ApiToken
from labeling.services.errors import LabelingError

# Enough for every script a person runs; a cap keeps a runaway loop from filling the table.
MAX_TOKENS_PER_USER = 50


def token_create(
    *, user: AbstractBaseUser, name: str, expires_in: timedelta | None
) -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the key, which is never stored nor shown
    again (the row holds its first characters and a digest)."""
    with transaction.atomic():
        if ApiToken.objects.filter(user=user).count() >= MAX_TOKENS_PER_USER:
            raise LabelingError(
                f"You have {MAX_TOKENS_PER_USER} tokens: revoke one before making another."
            )
        token, key = ApiToken.objects.create(user=user, expiry=expires_in, name=name)
    return token, key


def token_revoke(*, user: AbstractBaseUser, digest: str) -> bool:
    """Delete one of `user`'s tokens: the next request with it gets 401. False when `user` has
    no such token (another user's is not theirs to revoke)."""
    with transaction.atomic():
        deleted, _ = ApiToken.objects.filter(user=user, digest=digest).delete()
    return deleted > 0


def tokens_revoke_all(*, user: AbstractBaseUser) -> int:
    """Delete every token of `user`'s (a new password, a deactivation): returns how many."""
    with transaction.atomic():
        deleted, _ = ApiToken.objects.filter(user=user).delete()
    return deleted


def note_password_change(sender: type, instance: AbstractBaseUser, **kwargs: Any) -> None:
    """pre_save of a user: remember whether this save writes a new password hash (a save that
    names its fields and leaves the password out, as a sign-in's last_login, reads nothing)."""
    update_fields = kwargs.get("update_fields")
    changed = False
    if instance.pk is not None and (update_fields is None or "password" in update_fields):
        users = type(instance)._default_manager
        stored = users.filter(pk=instance.pk).values_list("password", flat=True)
        changed = stored.first() not in (None, instance.password)
    instance._stepwise_password_changed = changed  # type: ignore[attr-defined]


def revoke_tokens_after_password_change(
    sender: type, instance: AbstractBaseUser, **kwargs: Any
) -> None:
    """post_save of a user: a new password revokes every API token, whoever set it (our pages,
    Django admin, `manage.py changepassword`, a shell). Sessions need nothing: each carries the
    old password's hash and ends on its next request."""
    if getattr(instance, "_stepwise_password_changed", False):
        instance._stepwise_password_changed = False  # type: ignore[attr-defined]
        tokens_revoke_all(user=instance)
