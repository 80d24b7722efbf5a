"""Reads, by the page or area that uses them: one module each, re-exported here so that a
caller may write `selectors.final_step_ratings` whichever module holds it.

  alternatives   step by step (PRM800K phase 1) and the alternatives after a −1: the path so
                 far, the open step's candidates and where their request stands
  ratings        each labeling's step ratings, a solution's final ratings, a release record
  progress       the batch dashboard and every batch's depth, pace and ETA, from the counter
                 rows; the cached solution counts; what the lead counters count
  labelers       who waits for a lead, the roster, a labeler's work and screening results
  adjudication   the adjudication queue, a disputed solution's labelings side by side (step
                 by step: each labeler's own path, with its notes)
  labeling_page  a labeling's steps with its ratings so far, and the panel beside them
  guidelines     the current guidelines and what each version changed
  home           one cockpit per role: the labeler's and the lead's home pages
  notes          notes on rated steps, leads' replies on an item, a labeler's unread replies
  items          the lead's item browser: filters, a page's rows, an item's history
  tokens         a user's own API tokens
"""

from labeling.agreement import first_error
from labeling.selectors.adjudication import (
    AdjudicationStep,
    LabelingPath,
    PathRow,
    adjudication_queue,
    adjudication_view,
    labeling_paths,
    side_by_side,
)
from labeling.selectors.alternatives import (
    PROPOSAL_STALE,
    AlternativesPanel,
    Candidate,
    PathStep,
    after_error_panel,
    after_error_step,
    alternatives_panel,
    candidates_per_step,
    find_proposal,
    path_of,
    prefix_hash,
    task_lost,
)
from labeling.selectors.guidelines import (
    DEFAULT_GUIDELINES,
    DiffLine,
    GuidelinesChange,
    current_guidelines,
    guidelines_change,
    text_diff,
)
from labeling.selectors.home import (
    SHOWN,
    STALL_AFTER,
    Alert,
    ExpiredClaim,
    LabelerCockpit,
    LeadCockpit,
    WaitingBatch,
    batches_for,
    expired_claims,
    labeler_cockpit,
    lead_cockpit,
    projects_waiting,
    waiting_for,
)
from labeling.selectors.items import (
    MODEL_DISAGREES_AT,
    HistoryEntry,
    ItemFilters,
    ItemLabeling,
    ItemRow,
    ItemState,
    batch_items,
    item_history,
    item_rows,
    model_disagreement_ids,
)
from labeling.selectors.labelers import (
    all_labelers,
    labelers_needing_attention,
    labeling_history,
    locked_out_usernames,
    recent_labelings,
    screening_results,
    screening_size,
)
from labeling.selectors.labeling_page import (
    LabelingPanel,
    PanelProgress,
    StepView,
    labeling_panel,
    labeling_ratings,
    labelings_for_page,
    step_views,
    with_step_suggestion,
)
from labeling.selectors.machine_labels import (
    MachineLabelSummary,
    Precision,
    machine_label_precision,
)
from labeling.selectors.notes import (
    UnreadReplies,
    labeling_notes,
    notes_by_step,
    solution_notes,
    unread_replies,
)
from labeling.selectors.prelabel_agreement import (
    AnchoringRow,
    JudgeAgreement,
    anchoring_check,
    judge_agreement,
    kappa_and_confusion,
)
from labeling.selectors.prelabels import (
    StepSuggestion,
    Suggestion,
    latest_prelabel,
    prelabels_for_solutions,
    suggestion_of,
    with_suggestion,
)
from labeling.selectors.progress import (
    PACE_HOURS,
    SOLUTION_COUNT_SECONDS,
    TALLIED_STEP,
    BatchProgress,
    BatchSummary,
    LabelerRow,
    batch_labeler_rows,
    batch_summary,
    batches_overview,
    clear_count_cache,
    labels_per_hour,
    solution_counts,
    tallied_labelings,
    time_left,
)
from labeling.selectors.ratings import (
    FinalRatings,
    final_step_ratings,
    label_record,
    labeling_step_ratings,
    release_record,
)
from labeling.selectors.tokens import api_tokens

__all__ = [
    "MachineLabelSummary",
    "Precision",
    "machine_label_precision",
    "AnchoringRow",
    "JudgeAgreement",
    "anchoring_check",
    "judge_agreement",
    "kappa_and_confusion",
    "StepSuggestion",
    "Suggestion",
    "latest_prelabel",
    "prelabels_for_solutions",
    "suggestion_of",
    "with_suggestion",
    "with_step_suggestion",
    "adjudication_queue",
    "adjudication_view",
    "AdjudicationStep",
    "after_error_panel",
    "after_error_step",
    "Alert",
    "all_labelers",
    "alternatives_panel",
    "AlternativesPanel",
    "api_tokens",
    "batch_items",
    "batch_labeler_rows",
    "batch_summary",
    "batches_for",
    "batches_overview",
    "BatchProgress",
    "BatchSummary",
    "Candidate",
    "candidates_per_step",
    "clear_count_cache",
    "current_guidelines",
    "DEFAULT_GUIDELINES",
    "DiffLine",
    "expired_claims",
    "ExpiredClaim",
    "final_step_ratings",
    "FinalRatings",
    "find_proposal",
    "first_error",
    "guidelines_change",
    "GuidelinesChange",
    "HistoryEntry",
    "item_history",
    "item_rows",
    "ItemFilters",
    "ItemLabeling",
    "ItemRow",
    "ItemState",
    "label_record",
    "labeler_cockpit",
    "LabelerCockpit",
    "LabelerRow",
    "LabelingPath",
    "labelers_needing_attention",
    "labeling_history",
    "labeling_notes",
    "labeling_paths",
    "labeling_panel",
    "labeling_ratings",
    "labeling_step_ratings",
    "LabelingPanel",
    "labelings_for_page",
    "labels_per_hour",
    "lead_cockpit",
    "projects_waiting",
    "LeadCockpit",
    "locked_out_usernames",
    "model_disagreement_ids",
    "MODEL_DISAGREES_AT",
    "notes_by_step",
    "PACE_HOURS",
    "PanelProgress",
    "path_of",
    "PathRow",
    "PathStep",
    "prefix_hash",
    "PROPOSAL_STALE",
    "recent_labelings",
    "release_record",
    "screening_results",
    "screening_size",
    "SHOWN",
    "side_by_side",
    "SOLUTION_COUNT_SECONDS",
    "solution_counts",
    "solution_notes",
    "STALL_AFTER",
    "step_views",
    "StepView",
    "tallied_labelings",
    "TALLIED_STEP",
    "task_lost",
    "text_diff",
    "time_left",
    "unread_replies",
    "UnreadReplies",
    "waiting_for",
    "WaitingBatch",
]
