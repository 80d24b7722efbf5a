"""Users with roles, and API clients that authenticate as a script would."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from rest_framework.test import APIClient


def make_user(username: str, *roles: str, project: Any = None) -> Any:
    """A user (password "<username>-pw") with the given roles in `project` (the "Default"
    project when none is named); "admin" is the global admin group."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username=username, password=f"{username}-pw")
    grant(user, *roles, project=project)
    return user


def grant(user: Any, *roles: str, project: Any = None) -> None:
    """Give `user` the roles in `project` (the "Default" project when none is named)."""
    from labeling.models import Membership, default_project_id

    project_id = default_project_id() if project is None else getattr(project, "pk", project)
    for role in roles:
        if role == "admin":
            user.groups.add(Group.objects.get_or_create(name=role)[0])
        else:
            Membership.objects.get_or_create(user=user, project_id=project_id, role=role)


def api_client_for(user) -> APIClient:
    """An API client authenticated with a new token of the user's (as a script would be)."""
    from labeling.services import tokens

    client = APIClient()
    _, key = tokens.token_create(user=user, name="tests", expires_in=None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client
