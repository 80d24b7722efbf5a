"""Fixtures shared by the labeling tests."""

from __future__ import annotations

import pytest

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
