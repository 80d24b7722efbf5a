"""Quality control: gold labels and results, screening, a labeler's state, pausing."""

from __future__ import annotations

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
    Labeling,
    Solution,
)
from labeling.services.errors import LabelingError


def labeler_set_state(
    *, labeler: Labeler, state: str, reason: str = "", actor: User | None = None
) -> Labeler:
    """Move a labeler to screening/active/paused/rejected; reinstating restarts the gold window."""
    if state not in Labeler.State.values:
        raise LabelingError(f"Unknown labeler state {state!r}.")
    now = timezone.now()
    labeler.state = state
    labeler.state_reason = reason[:300]
    labeler.state_changed_at = now
    labeler.state_changed_by = actor
    fields = ["state", "state_reason", "state_changed_at", "state_changed_by"]
    if state == Labeler.State.ACTIVE:
        labeler.gold_window_start = now
        fields.append("gold_window_start")
    labeler.save(update_fields=fields)
    return labeler


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
    """Score a finished gold labeling, update the labeler's counters, screen or pause them."""
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
    Labeler.objects.filter(user_id=labeling.labeler_id).update(
        gold_labelings=F("gold_labelings") + 1,
        gold_steps=F("gold_steps") + compared,
        gold_steps_exact=F("gold_steps_exact") + exact,
        gold_steps_binary=F("gold_steps_binary") + binary,
        gold_first_error_total=F("gold_first_error_total") + (0 if match is None else 1),
        gold_first_error_match=F("gold_first_error_match") + (1 if match else 0),
    )
    labeler = Labeler.objects.select_for_update().get(user_id=labeling.labeler_id)
    if labeler.state == Labeler.State.SCREENING and result.is_screening:
        screening_evaluate(labeler=labeler)
    elif labeler.state == Labeler.State.ACTIVE:
        pause_if_inaccurate(labeler=labeler)
    return result


def gold_result_forget(*, labeling: Labeling) -> None:
    """A gold labeling reopened by undo: take its result back out of the counters."""
    result = GoldResult.objects.filter(labeling=labeling).first()
    if result is None:
        return
    match = result.first_error_match
    Labeler.objects.filter(user_id=labeling.labeler_id).update(
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


def screening_evaluate(*, labeler: Labeler) -> Labeler:
    """After the whole screening set: pass (active) at the threshold, else wait for a lead."""
    size = selectors.screening_size()
    results = GoldResult.objects.filter(labeler_id=labeler.user_id, is_screening=True)
    score, done = _accuracy(results)
    if done < size:
        return labeler
    labeler.screening_score = score
    labeler.screening_passed = score is not None and score >= settings.STEPWISE_SCREENING_PASS
    labeler.screening_done_at = timezone.now()
    labeler.save(update_fields=["screening_score", "screening_passed", "screening_done_at"])
    percent = f"{(score or 0):.0%}"
    if labeler.screening_passed:
        return labeler_set_state(
            labeler=labeler, state=Labeler.State.ACTIVE, reason=f"passed screening ({percent})"
        )
    labeler.state_reason = (
        f"Screening score {percent} is under {settings.STEPWISE_SCREENING_PASS:.0%}: "
        "a lead will review your screening."
    )
    labeler.save(update_fields=["state_reason"])
    return labeler


def rolling_gold_accuracy(labeler: Labeler) -> tuple[float | None, int]:
    """Exact step accuracy over the last STEPWISE_GOLD_WINDOW regular gold labelings."""
    results = GoldResult.objects.filter(labeler_id=labeler.user_id, is_screening=False)
    if labeler.gold_window_start:
        results = results.filter(created_at__gte=labeler.gold_window_start)
    window = results.order_by("-created_at")[: settings.STEPWISE_GOLD_WINDOW]
    return _accuracy(window)


def pause_if_inaccurate(*, labeler: Labeler) -> Labeler:
    accuracy, count = rolling_gold_accuracy(labeler)
    if accuracy is None or count < settings.STEPWISE_GOLD_MIN_RESULTS:
        return labeler
    if accuracy < settings.STEPWISE_PAUSE_BELOW:
        reason = (
            f"Your accuracy on quality-control solutions fell to {accuracy:.0%} over the last "
            f"{count} (the bar is {settings.STEPWISE_PAUSE_BELOW:.0%}). A lead will review your "
            "work and reinstate you; please re-read the guidelines meanwhile."
        )
        return labeler_set_state(labeler=labeler, state=Labeler.State.PAUSED, reason=reason)
    return labeler


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
