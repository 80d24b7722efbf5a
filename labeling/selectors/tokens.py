"""A user's own API tokens."""

from __future__ import annotations

from typing import Any

from labeling.models import ApiToken


def api_tokens(user: Any) -> list[ApiToken]:
    """The user's own API tokens, newest first (never another user's)."""
    return list(ApiToken.objects.filter(user=user).order_by("-created"))
