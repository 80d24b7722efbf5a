import pytest


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    """Models and frozen training data go under the test's own folder."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT
