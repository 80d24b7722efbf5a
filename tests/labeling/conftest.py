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


@pytest.fixture
def seeded_candidates(settings):
    """The local generator's candidate steps, short and seeded. A seed fixes the draw on one
    CPU only: another vector unit sums the logits in another order and the samples change. At
    24 tokens a step, both samples of a proposal came back cut on one machine ("The generator
    gave no step."); at 48 a step nearly always ends first, whatever the draw."""
    settings.STEPWISE_GENERATOR_STEP_MAX_TOKENS = 48
    settings.STEPWISE_GENERATOR_SEED = 0
