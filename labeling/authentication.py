"""API token authentication: django-rest-knox's, which also notes when a token was last used."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from knox.auth import TokenAuthentication as KnoxTokenAuthentication


class TokenAuthentication(KnoxTokenAuthentication):
    """`Authorization: Token <key>`. A token's last_used is written at most once per
    STEPWISE_TOKEN_LAST_USED_SECONDS, and by a conditional UPDATE: a script's burst of requests
    costs no write after the first, and concurrent ones at most one each."""

    def validate_user(self, auth_token: Any) -> tuple[Any, Any]:
        user, token = super().validate_user(auth_token)
        now = timezone.now()
        stale = now - timedelta(seconds=settings.STEPWISE_TOKEN_LAST_USED_SECONDS)
        if token.last_used is None or token.last_used < stale:
            type(token).objects.filter(
                Q(last_used__isnull=True) | Q(last_used__lt=stale), pk=token.pk
            ).update(last_used=now)
            token.last_used = now
        return user, token
