"""The modeling part of the demo: a candidate pool, so a generation can be tried at once.

`setup_demo` (labeling) finds it through `ModelingConfig.demo_setup` / `demo_counts`.
"""

from __future__ import annotations

from labeling.services.demo import SAMPLE_DIR
from modeling.services.loop import import_pool, pool_solutions

DEMO_POOL = SAMPLE_DIR / "pool.jsonl"
DEMO_POOL_PREFIX = "demo-pool-"  # the pool lines' source_id (build.py)


def load_demo_pool() -> list[str]:
    """Import the sample pool, graded; a re-run finds every line already present."""
    return [import_pool(DEMO_POOL).summary()]


def demo_pool_counts() -> dict[str, int]:
    """The demo's pool solutions, queued by a generation or not."""
    return {
        "pool solutions": pool_solutions().filter(source_id__startswith=DEMO_POOL_PREFIX).count()
    }
