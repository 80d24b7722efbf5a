"""Users with roles, and API clients that authenticate as a script would."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from rest_framework.test import APIClient


def make_user(username: str, *roles: str) -> Any:
    """A user (password "<username>-pw") in the given role groups."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username=username, password=f"{username}-pw")
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def api_client_for(user) -> APIClient:
    """An API client authenticated with a new token of the user's (as a script would be)."""
    from labeling.services import tokens

    client = APIClient()
    _, key = tokens.token_create(user=user, name="tests", expires_in=None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client
