"""Quality control: gold labels and results, screening, a labeler's state, pausing. Each is per
project: a labeler's `LabelerRecord` of the project the work belongs to (its solution's)."""

from __future__ import annotations

from typing import cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from labeling import agreement as agreement_math
from labeling import selectors
from labeling.models import (
    FinishReason,
    GoldLabel,
    GoldResult,
    Labeler,
    LabelerRecord,
    Labeling,
    Solution,
)
from labeling.services.errors import LabelingError


def record_ensure(*, user_id: int, project_id: int) -> LabelerRecord:
    """The labeler's record in the project, made (in screening, as any new labeler) where it is
    missing, with their labeler identity (`Labeler`, the public id exports carry): one read when
    both exist. A user becoming a labeler member gets it (`projects.member_add`); a claim makes
    it where a membership came another way (the admin's pages)."""
    record, created = LabelerRecord.objects.get_or_create(user_id=user_id, project_id=project_id)
    if created:
        Labeler.objects.get_or_create(user_id=user_id)
    return record


def labeler_set_state(
    *, record: LabelerRecord, state: str, reason: str = "", actor: User | None = None
) -> LabelerRecord:
    """Move a labeler to screening/active/paused/rejected in the record's project; reinstating
    restarts the gold window."""
    if state not in LabelerRecord.State.values:
        raise LabelingError(f"Unknown labeler state {state!r}.")
    now = timezone.now()
    record.state = state
    record.state_reason = reason[:300]
    record.state_changed_at = now
    record.state_changed_by = actor
    fields = ["state", "state_reason", "state_changed_at", "state_changed_by"]
    if state == LabelerRecord.State.ACTIVE:
        record.gold_window_start = now
        fields.append("gold_window_start")
    record.save(update_fields=fields)
    return record


def gold_compare(ratings: list[int], gold_ratings: list[int], reached_verdict: bool):
    """(steps compared, exact, -1-vs-not agreements, first-error match or None)."""
    shared = min(len(ratings), len(gold_ratings))
    exact = sum(1 for i in range(shared) if ratings[i] == gold_ratings[i])
    binary = sum(1 for i in range(shared) if (ratings[i] == -1) == (gold_ratings[i] == -1))
    match = None
    if reached_verdict:
        match = agreement_math.first_error(ratings) == agreement_math.first_error(gold_ratings)
    return shared, exact, binary, match


# The ends that give a verdict on the solution (a give-up or a bad problem gives none).
VERDICT_REASONS = (FinishReason.SOLUTION, FinishReason.FOUND_ERROR)


def reached_verdict(labeling: Labeling) -> bool:
    return labeling.finish_reason in VERDICT_REASONS


def gold_result_record(
    *, labeling: Labeling, gold: GoldLabel, ratings: list[tuple[int, bool]], solution: Solution
) -> GoldResult:
    """Score a finished gold labeling, update the labeler's counters in the solution's project,
    screen or pause them there."""
    values = [r for r, _ in ratings]
    compared, exact, binary, match = gold_compare(values, gold.ratings, reached_verdict(labeling))
    result = GoldResult.objects.create(
        labeling=labeling,
        labeler_id=labeling.labeler_id,
        solution=solution,
        is_screening=solution.is_screening,
        steps_compared=compared,
        steps_exact=exact,
        steps_binary=binary,
        first_error_match=match,
        created_at=labeling.finished_at or timezone.now(),
    )
    project_id = cast(int, solution.project_id)
    mine = LabelerRecord.objects.filter(user_id=labeling.labeler_id, project_id=project_id)
    added = {
        "gold_labelings": F("gold_labelings") + 1,
        "gold_steps": F("gold_steps") + compared,
        "gold_steps_exact": F("gold_steps_exact") + exact,
        "gold_steps_binary": F("gold_steps_binary") + binary,
        "gold_first_error_total": F("gold_first_error_total") + (0 if match is None else 1),
        "gold_first_error_match": F("gold_first_error_match") + (1 if match else 0),
    }
    if not mine.update(**added):
        # No record there (a labeling older than its project's records): one, then counted.
        record_ensure(user_id=labeling.labeler_id, project_id=project_id)
        mine.update(**added)
    record = mine.select_for_update().get()
    if record.state == LabelerRecord.State.SCREENING and result.is_screening:
        screening_evaluate(record=record)
    elif record.state == LabelerRecord.State.ACTIVE:
        pause_if_inaccurate(record=record)
    return result


def gold_result_forget(*, labeling: Labeling) -> None:
    """A gold labeling reopened by undo: take its result back out of the counters."""
    result = GoldResult.objects.filter(labeling=labeling).select_related("solution").first()
    if result is None:
        return
    match = result.first_error_match
    LabelerRecord.objects.filter(
        user_id=labeling.labeler_id, project_id=cast(int, result.solution.project_id)
    ).update(
        gold_labelings=F("gold_labelings") - 1,
        gold_steps=F("gold_steps") - result.steps_compared,
        gold_steps_exact=F("gold_steps_exact") - result.steps_exact,
        gold_steps_binary=F("gold_steps_binary") - result.steps_binary,
        gold_first_error_total=F("gold_first_error_total") - (0 if match is None else 1),
        gold_first_error_match=F("gold_first_error_match") - (1 if match else 0),
    )
    result.delete()


def _accuracy(results: QuerySet[GoldResult]) -> tuple[float | None, int]:
    rows = list(results.values_list("steps_compared", "steps_exact"))
    compared = sum(c for c, _ in rows)
    return (sum(e for _, e in rows) / compared if compared else None), len(rows)


def project_gold_results(record: LabelerRecord) -> QuerySet[GoldResult]:
    """The labeler's gold results in the record's project (the gold solutions' own)."""
    return GoldResult.objects.filter(
        labeler_id=record.user_id, solution__project_id=record.project_id
    )


def screening_evaluate(*, record: LabelerRecord) -> LabelerRecord:
    """After the project's whole screening set: pass (active) at the threshold, else wait for a
    lead."""
    size = selectors.screening_size(record.project_id)
    score, done = _accuracy(project_gold_results(record).filter(is_screening=True))
    if done < size:
        return record
    record.screening_score = score
    record.screening_passed = score is not None and score >= settings.STEPWISE_SCREENING_PASS
    record.screening_done_at = timezone.now()
    record.save(update_fields=["screening_score", "screening_passed", "screening_done_at"])
    percent = f"{(score or 0):.0%}"
    if record.screening_passed:
        return labeler_set_state(
            record=record, state=LabelerRecord.State.ACTIVE, reason=f"passed screening ({percent})"
        )
    record.state_reason = (
        f"Screening score {percent} is under {settings.STEPWISE_SCREENING_PASS:.0%}: "
        "a lead will review your screening."
    )
    record.save(update_fields=["state_reason"])
    return record


def rolling_gold_accuracy(record: LabelerRecord) -> tuple[float | None, int]:
    """Exact step accuracy over the last STEPWISE_GOLD_WINDOW regular gold labelings of the
    record's project."""
    results = project_gold_results(record).filter(is_screening=False)
    if record.gold_window_start:
        results = results.filter(created_at__gte=record.gold_window_start)
    window = results.order_by("-created_at")[: settings.STEPWISE_GOLD_WINDOW]
    return _accuracy(window)


def pause_if_inaccurate(*, record: LabelerRecord) -> LabelerRecord:
    accuracy, count = rolling_gold_accuracy(record)
    if accuracy is None or count < settings.STEPWISE_GOLD_MIN_RESULTS:
        return record
    if accuracy < settings.STEPWISE_PAUSE_BELOW:
        reason = (
            f"Your accuracy on quality-control solutions fell to {accuracy:.0%} over the last "
            f"{count} (the bar is {settings.STEPWISE_PAUSE_BELOW:.0%}). A lead will review your "
            "work and reinstate you; please re-read the guidelines meanwhile."
        )
        return labeler_set_state(record=record, state=LabelerRecord.State.PAUSED, reason=reason)
    return record


def gold_label_set(
    *, solution: Solution, ratings: list[int], screening: bool = False, source: str = ""
) -> GoldLabel:
    """Make a solution gold: its reference ratings (cut at the first -1) leave the regular pool."""
    if any(r not in (-1, 0, 1) for r in ratings) or not ratings:
        raise LabelingError("Gold ratings are a non-empty list of -1, 0, +1.")
    first = agreement_math.first_error(ratings)
    ratings = ratings[: first + 1] if first is not None else ratings
    if len(ratings) > len(solution.steps):
        raise LabelingError("More gold ratings than steps.")
    with transaction.atomic():
        gold, _ = GoldLabel.objects.update_or_create(
            solution=solution, defaults={"ratings": ratings, "first_error": first, "source": source}
        )
        solution.is_quality_control = True
        solution.is_screening = screening
        solution.save(update_fields=["is_quality_control", "is_screening"])
    return gold
