"""The modeling part of the demo: a candidate pool, so a generation can be tried at once, and
the frozen evaluation set its first run and generation are gated on.

`setup_demo` (modeling's command) hands `DEMO_PART` to `labeling.services.demo.demo_setup`.
"""

from __future__ import annotations

from labeling.services.demo import SAMPLE_DIR, DemoPart
from modeling.services.evaluation_sets import ensure_evaluation_set
from modeling.services.pool import import_pool, pool_solutions

DEMO_POOL = SAMPLE_DIR / "pool.jsonl"
DEMO_POOL_PREFIX = "demo-pool-"  # the pool lines' source_id (build.py)


def load_demo_pool() -> list[str]:
    """Import the sample pool, graded; a re-run finds every line already present."""
    return [import_pool(DEMO_POOL).summary()]


def demo_evaluation_set() -> list[str]:
    """The evaluation set, drawn from the reference labels before any run trains on them (a
    re-run finds it current); the runs train on the other problems."""
    evaluation_set, missing = ensure_evaluation_set()
    if evaluation_set is None:
        return [missing]
    return [
        f"evaluation set v{evaluation_set.version}: {len(evaluation_set.problem_ids)} problems "
        f"({evaluation_set.row_count} labelings) the gate scores models on, never trained on"
    ]


def demo_pool_counts() -> dict[str, int]:
    """The demo's pool solutions, queued by a generation or not."""
    return {
        "pool solutions": pool_solutions().filter(source_id__startswith=DEMO_POOL_PREFIX).count()
    }


DEMO_PART = DemoPart(
    setup=lambda: load_demo_pool() + demo_evaluation_set(), counts=demo_pool_counts
)
