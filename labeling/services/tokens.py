"""API tokens: each user makes and revokes their own (django-rest-knox stores only a digest)."""

from __future__ import annotations

from datetime import timedelta

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
