"""The labeling app's models, by topic: `core` (problems, solutions, batches, labelings and
their ratings), `quality` (gold, counters, agreement, adjudication), `datasets` (guidelines,
snapshots, API tokens), `projects` (projects and their members). Import them from here."""

from .core import (
    Batch,
    Completion,
    FinishReason,
    Labeler,
    Labeling,
    Note,
    PreLabel,
    Problem,
    ProposedSteps,
    Rating,
    RatingEvent,
    Solution,
    StepLabel,
)
from .datasets import ApiToken, Guidelines, Snapshot
from .projects import Membership, Project, default_project_id
from .quality import (
    Adjudication,
    BatchAgreement,
    BatchHourStats,
    BatchLabelerStats,
    GoldLabel,
    GoldResult,
    PairAgreement,
    SolutionAgreement,
    Tally,
)

__all__ = [
    "Adjudication",
    "ApiToken",
    "Batch",
    "BatchAgreement",
    "BatchHourStats",
    "BatchLabelerStats",
    "Completion",
    "FinishReason",
    "GoldLabel",
    "GoldResult",
    "Guidelines",
    "Labeler",
    "Labeling",
    "Membership",
    "Note",
    "PreLabel",
    "PairAgreement",
    "Problem",
    "Project",
    "ProposedSteps",
    "Rating",
    "RatingEvent",
    "Snapshot",
    "Solution",
    "SolutionAgreement",
    "StepLabel",
    "Tally",
    "default_project_id",
]
