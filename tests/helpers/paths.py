"""Where things are: the checkout, the reference data, the demo's sample data, chromium."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("STEPWISE_SHARED_DATA", ROOT.parent / "shared" / "data"))
SAMPLE_DIR = ROOT / "labeling" / "sample_data"  # the demo's problems, pool and labels
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REQUIRE_ALL = os.environ.get("STEPWISE_REQUIRE_ALL") == "1"


def require_shared_data() -> Path:
    """The reference data: ../shared/data beside the checkout (a worktree's too), or
    $STEPWISE_SHARED_DATA. Skips the calling test when it is absent; fails it under CI=true."""
    if not SHARED_DATA.exists():
        if REQUIRE_ALL:
            pytest.fail(f"CI=true needs the reference data at {SHARED_DATA}", pytrace=False)
        pytest.skip(f"reference data not found at {SHARED_DATA} (set STEPWISE_SHARED_DATA)")
    return SHARED_DATA
