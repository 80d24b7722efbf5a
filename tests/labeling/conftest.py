"""Fixtures shared by the labeling tests."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.services.importing import import_prm800k


@pytest.fixture
def samples(shared_data):
    """The six reference PRM800K lines, imported; returns the file's path."""
    path = shared_data / "prm800k" / "samples.jsonl"
    import_prm800k(path)
    return path


@pytest.fixture
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def api_client_for(user) -> APIClient:
    """An API client authenticated with the user's token (as a script would be)."""
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client
