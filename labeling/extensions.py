"""What another app plugs into labeling, named here so a reader finds it.

labeling never imports modeling (import-linter's contract). Where a labeling page needs a
model's view of the data, modeling registers a function here from its AppConfig.ready(): the
dependency is then an ordinary import, modeling → labeling, that the contracts see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labeling.models import Batch

# (batch, at_least) -> ids of the batch's solutions where the active PRM disagrees with a
# labeler by at least `at_least`; None when no model is active.
DisagreementSource = Callable[["Batch", float], "list[int] | None"]

_model_disagreement: DisagreementSource | None = None


def provide_model_disagreement(source: DisagreementSource) -> None:
    global _model_disagreement
    _model_disagreement = source


def model_disagreement(batch: Batch, at_least: float) -> list[int] | None:
    """None when no app provides it (labeling without modeling) or no model is active."""
    return None if _model_disagreement is None else _model_disagreement(batch, at_least)
