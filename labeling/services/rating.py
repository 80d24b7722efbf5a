"""Rating steps as they are made, finishing, undoing and editing a labeling.

A finished labeling updates the lead counters, gold results and agreement in the transaction
that finishes it, and stores its PRM800K release line once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import (
    Count,
    F,
    IntegerField,
    Model,
    OuterRef,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from labeling import prm800k, selectors
from labeling.models import (
    Batch,
    BatchHourStats,
    BatchLabelerStats,
    Completion,
    FinishReason,
    GoldLabel,
    Labeling,
    RatingEvent,
    Solution,
    StepLabel,
)
from labeling.roles import LEAD, has_role
from labeling.services import adjudication, counters, quality
from labeling.services.errors import Conflict, LabelingError
from labeling.services.queue import (
    SKIPPED_ALREADY,
    labeler_public_id_of,
    labeler_state_of,
    lease_until,
    reactivate_expired,
    refuse_if_not_a_labeler_there,
    refuse_if_stopped,
)
from stepwise.compiled import CompiledQuery

MAX_STEP_TIME_MS = 60 * 60 * 1000  # a step shown for over an hour was a tab left open


def labeling_for_update(labeling_id: int, user: User) -> Labeling:
    """The user's labeling, locked for a change; refused (403) while they are paused."""
    labeling = (
        Labeling.objects.select_for_update(of=("self",))
        .select_related("solution__batch")
        .annotate(labeler_state=labeler_state_of())
        .filter(pk=labeling_id)
        .first()
    )
    if labeling is None or labeling.labeler_id != user.pk:
        raise LabelingError("This labeling is not yours.")
    refuse_if_not_a_labeler_there(user, labeling)
    refuse_if_stopped(cast(Any, labeling).labeler_state)
    if labeling.status == Labeling.Status.SKIPPED:
        raise Conflict(SKIPPED_ALREADY)
    return labeling


def _renew_lease(labeling: Labeling, now) -> None:
    labeling.lease_expires_at = lease_until(labeling.solution.batch, now)


def _locked_rating_read(labeling_id: int) -> QuerySet[Labeling]:
    # Each rated step is one StepLabel (with its completion 0): counting them needs no join.
    rated_count = (
        StepLabel.objects.filter(labeling=OuterRef("pk"))
        .order_by()
        .values("labeling")
        .annotate(n=Count("pk"))
        .values("n")
    )
    # A suggest batch's judge labels: the rating checks the one it claims was shown.
    locked = selectors.with_suggestion(Labeling.objects.select_for_update(of=("self",)))
    return (
        locked.select_related("solution__batch", "solution__problem")
        .annotate(rated_count=Coalesce(Subquery(rated_count, output_field=IntegerField()), 0))
        .annotate(labeler_state=labeler_state_of())
        # For the release line, should this rating finish the labeling.
        .annotate(labeler_public_id=labeler_public_id_of())
        .filter(pk=labeling_id)
    )


# Compiled once per connection: building and compiling this queryset cost four times the
# query itself, on every rating (stepwise/compiled.py).
LOCKED_RATING_READ = CompiledQuery(_locked_rating_read, "labeling_id")


SOLUTION_COUNTERS_LOCKED = CompiledQuery(
    lambda solution_id: (
        Solution.objects.select_for_update()
        .filter(pk=solution_id)
        .values_list("completed_count", "active_count")
    ),
    "solution_id",
)
# A labeling's completions in order, each with its step: what a finish reads of its ratings.
RATED_STEPS = CompiledQuery(
    lambda labeling_id: (
        Completion.objects.filter(step__labeling_id=labeling_id)
        .select_related("step")
        .order_by("step__index", "index")
    ),
    "labeling_id",
)


def _with_counters_locked(labeling: Labeling) -> Solution:
    """The labeling's solution with its counters read again under a lock: the read the labeling
    came from did not lock them. Its other fields (the batch with them) came with the labeling
    and do not change here."""
    solution = labeling.solution
    ((solution.completed_count, solution.active_count),) = SOLUTION_COUNTERS_LOCKED.rows(
        solution_id=solution.pk
    )
    return solution


def _locked_for_rating(labeling_id: int, user: User) -> Labeling:
    """The labeling, locked, with its solution and batch and `rated_count`, the number of steps
    rated so far (the index of the next one), in one query; refused (403) while its labeler is
    paused (their state is read by the same query). The problem and the labeler's public id come
    with it: the rating that finishes the labeling renders its release line from them."""
    labeling = LOCKED_RATING_READ.first(labeling_id=labeling_id)
    if labeling is None or labeling.labeler_id != user.pk:
        raise LabelingError("This labeling is not yours.")
    refuse_if_not_a_labeler_there(user, labeling)
    refuse_if_stopped(cast(Any, labeling).labeler_state)
    if labeling.status == Labeling.Status.SKIPPED:
        raise Conflict(SKIPPED_ALREADY)
    return labeling


@dataclass(frozen=True)
class RatedStep:
    """What `rate_step` leaves: the labeling (finished by a −1 or the last step), and how many
    of its steps are rated now (the page shows the next one without a query)."""

    labeling: Labeling
    rated_count: int


def rate_step(
    *,
    labeling_id: int,
    user: User,
    step_index: int,
    rating: int,
    flagged: bool = False,
    elapsed_ms: int | None = None,
    suggestion_id: int | None = None,
    accepted: bool = False,
) -> RatedStep:
    """Save one step's rating as it is made. Re-sending the same rating is a no-op.

    `suggestion_id` is the PreLabel whose label the page showed for the step (suggest mode),
    `accepted` that the labeler rated with the accept key. Both are checked against what the
    locked read found (the batch's latest pre-label for the step): the judge, label and score
    stored with the rating are the server's, never the client's.

    A rating in the middle of a solution is four queries: the locked read and three inserts
    (the step, its completion, the audit event). The labeling row itself is written only when
    its lease is past half its length; its total time is summed from the steps when it is
    finished."""
    if rating not in (-1, 0, 1):
        raise LabelingError("A rating is -1, 0 or +1.")
    with transaction.atomic():
        labeling = _locked_for_rating(labeling_id, user)
        rated = cast(Any, labeling).rated_count  # annotated by the locked read
        steps = labeling.solution.steps
        if not 0 <= step_index < len(steps):
            raise LabelingError(f"This solution has no step {step_index + 1}.")
        if step_index < rated:
            saved = Completion.objects.filter(
                step__labeling=labeling, step__index=step_index, index=0
            ).first()
            if saved is not None and saved.rating == rating and bool(saved.flagged) == flagged:
                return RatedStep(labeling, rated)  # a retry or double submit of a saved rating
            raise Conflict(
                f"Step {step_index + 1} is already rated"
                f"{'' if saved is None or saved.rating is None else f' {saved.rating:+d}'}; "
                "undo to change it."
            )
        if labeling.status == Labeling.Status.COMPLETED:
            raise Conflict("This labeling is already submitted.")
        now = timezone.now()
        renew = False
        if labeling.status == Labeling.Status.EXPIRED and reactivate_expired(labeling_id, user):
            # Back from a pause past the lease, and the solution still has room: counted again.
            # Without room the rating is still kept (a late finish is marked surplus).
            labeling.status = Labeling.Status.IN_PROGRESS
            renew = True
        if step_index != rated:
            raise Conflict(f"Rate step {rated + 1} first (the page was out of date).")
        shown = _shown_suggestion(labeling, step_index, suggestion_id, rating, accepted)
        step_time = None if elapsed_ms is None else max(0, min(int(elapsed_ms), MAX_STEP_TIME_MS))
        step = StepLabel(
            labeling=labeling,
            index=step_index,
            # PRM800K's chosen_completion is null at the step that ends the solution with -1.
            chosen_completion=None if rating == -1 else 0,
            time_ms=step_time,
            created_at=now,
            suggestion_shown=shown is not None,
            suggestion_judge="" if shown is None else shown.judge,
            suggestion_label=None if shown is None else shown.label,
            suggestion_score=None if shown is None else shown.score,
            suggestion_accepted=None if shown is None else accepted,
        )
        completion = Completion(index=0, text=steps[step_index], rating=rating, flagged=flagged)
        event = RatingEvent(
            labeling=labeling,
            step_index=step_index,
            new_rating=rating,
            reason=RatingEvent.Reason.RATE,
            detail="flagged" if flagged else "",
            actor=user,
            created_at=now,
        )
        if rating == -1 or step_index == len(steps) - 1:
            # The finish writes this event with its own, in one statement.
            _insert_rating(step, completion)
            reason = FinishReason.FOUND_ERROR if rating == -1 else FinishReason.SOLUTION
            end_labeling(labeling, reason, user, now, events=[event], rated_count=rated + 1)
            return RatedStep(labeling, rated + 1)
        _insert_rating(step, completion, event)
        if renew or _lease_half_gone(labeling, now):
            _renew_lease(labeling, now)
            labeling.save(update_fields=["lease_expires_at", "updated_at"])
        return RatedStep(labeling, rated + 1)


def _shown_suggestion(
    labeling: Labeling, step_index: int, suggestion_id: int | None, rating: int, accepted: bool
) -> selectors.StepSuggestion | None:
    """The suggestion the rating says was shown, checked against the one the page shows now;
    refused (nothing written) where it was not shown or an accept is not its label."""
    if suggestion_id is None:
        if accepted:
            raise LabelingError("Only a suggestion shown for the step can be accepted.")
        return None
    suggestion = selectors.suggestion_of(labeling)
    shown = None if suggestion is None else suggestion.at(step_index)
    if shown is None or shown.prelabel_id != suggestion_id:
        raise LabelingError(
            f"Suggestion {suggestion_id} is not the one shown for step {step_index + 1}: "
            "reload the page; nothing was saved."
        )
    if accepted and rating != shown.label:
        raise LabelingError("An accepted suggestion is rated with the judge's own label.")
    return shown


def _insert_rating(
    step: StepLabel, completion: Completion, event: RatingEvent | None = None
) -> None:
    """Store a rated step, its completion 0 and (unless the finish writes it) its audit event.

    On PostgreSQL one statement writes all three (data-modifying CTEs), where the ORM takes a
    round trip each: most of a rating's time is the database's answers. Elsewhere (SQLite) the
    ORM writes them. Every column is the model's own, with its Python default where not given.
    """
    if connection.vendor != "postgresql":
        step.save(force_insert=True)
        completion.step = step
        completion.save(force_insert=True)
        if event is not None:
            event.save(force_insert=True)
        return
    step_columns, step_values = _insert_values(step)
    completion_columns, completion_values = _insert_values(completion)
    at = completion_columns.index(connection.ops.quote_name("step_id"))
    # The completion's step id is the one the step's insert returns.
    picks = ["%s"] * len(completion_columns)
    picks[at] = "step.id"
    del completion_values[at]
    sql = (
        f"WITH step AS (INSERT INTO {_table(StepLabel)} ({', '.join(step_columns)}) "
        f"VALUES ({', '.join(['%s'] * len(step_columns))}) RETURNING id)"
        f", completion AS (INSERT INTO {_table(Completion)} ({', '.join(completion_columns)}) "
        f"SELECT {', '.join(picks)} FROM step RETURNING id)"
    )
    params = [*step_values, *completion_values]
    if event is None:
        sql += " SELECT 1 FROM completion"
    else:
        event_columns, event_values = _insert_values(event)
        sql += (
            f" INSERT INTO {_table(RatingEvent)} ({', '.join(event_columns)}) "
            f"SELECT {', '.join(['%s'] * len(event_columns))} FROM completion"
        )
        params += event_values
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _insert_values(row: Model) -> tuple[list[str], list[Any]]:
    """An unsaved row's columns (its primary key left to the database) and their values,
    prepared as Django's own insert prepares them."""
    fields = [f for f in row._meta.concrete_fields if not f.primary_key]
    return (
        [connection.ops.quote_name(f.column) for f in fields],
        [f.get_db_prep_save(f.pre_save(row, add=True), connection) for f in fields],
    )


def _lease_half_gone(labeling: Labeling, now) -> bool:
    """Renew a claim only once half of it has passed: a rating then writes no labeling row,
    and the page extends the claim of a labeler at work anyway. The claim was last set when
    the row was last written (`updated_at`), so its half-way point needs no lease lookup."""
    if labeling.lease_expires_at is None:
        return True
    return now >= labeling.updated_at + (labeling.lease_expires_at - labeling.updated_at) / 2


def finish_labeling(
    *, labeling_id: int, user: User, reason: str, elapsed_ms: int | None = None
) -> Labeling:
    """Give up or report a bad problem. Repeating the same request is a no-op."""
    if reason not in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM):
        raise LabelingError("Only give_up and bad_problem end a labeling by hand.")
    with transaction.atomic():
        labeling = labeling_for_update(labeling_id, user)
        if labeling.status == Labeling.Status.COMPLETED:
            if labeling.finish_reason == reason:
                return labeling
            raise Conflict(f"This labeling already ended ({labeling.get_finish_reason_display()}).")
        step_time = 0 if elapsed_ms is None else max(0, min(int(elapsed_ms), MAX_STEP_TIME_MS))
        end_labeling(labeling, reason, user, timezone.now(), extra_ms=step_time)
        return labeling


def end_labeling(
    labeling: Labeling,
    reason: str,
    user: User,
    now,
    *,
    extra_ms: int = 0,
    events: list[RatingEvent] | None = None,
    rated_count: int | None = None,
) -> None:
    """Complete the labeling inside the caller's transaction, move it from active to completed,
    and update the lead counters (the alternatives protocol ends a path this way too).

    Its total time is its steps' times, plus `extra_ms` (time on a step left unrated). `events`
    (the rating that ends it) are written with the 'finish' event. Given `rated_count`, the
    labeling was read by `_locked_for_rating` (its problem and labeler's public id known): it
    finishes in one read of its ratings, its release line rendered from that read."""
    rated = None if rated_count is None else _rated_steps(labeling, rated_count)
    if rated is not None:
        steps, completions = rated
        steps_ms = sum(step.time_ms or 0 for step in steps)
        ratings = [(cast(int, c.rating), bool(c.flagged)) for c in completions if c.index == 0]
    else:
        steps_ms = StepLabel.objects.filter(labeling=labeling).aggregate(ms=Sum("time_ms"))["ms"]
        ratings = []
    labeling.total_time_ms = (steps_ms or 0) + extra_ms
    solution = _with_counters_locked(labeling)
    was_active = labeling.status == Labeling.Status.IN_PROGRESS
    overlap = solution.batch.overlap if solution.batch else 1
    room = solution.completed_count + solution.active_count - (1 if was_active else 0) < overlap
    labeling.status = Labeling.Status.COMPLETED
    labeling.finish_reason = reason
    labeling.finished_at = now
    labeling.lease_expires_at = None
    labeling.is_surplus = not room and not solution.is_quality_control
    fields = [
        "status",
        "finish_reason",
        "finished_at",
        "lease_expires_at",
        "is_surplus",
        "total_time_ms",
        "updated_at",
    ]
    if rated is not None:
        public_id = cast(Any, labeling).labeler_public_id
        record = selectors.label_record(
            labeling,
            public_id=str(labeling.labeler_id) if public_id is None else str(public_id),
            steps=rated[0],
            completions=rated[1],
        )
        labeling.release_line = prm800k.render_record(record)
        fields.append("release_line")
    labeling.save(update_fields=fields)
    moved = {"completed_count": F("completed_count") + (0 if labeling.is_surplus else 1)}
    if was_active:
        moved["active_count"] = F("active_count") - 1
    Solution.objects.filter(pk=solution.pk).update(**moved)
    finished = RatingEvent(
        labeling=labeling,
        reason=RatingEvent.Reason.FINISH,
        detail=reason,
        actor=user,
        created_at=now,
    )
    RatingEvent.objects.bulk_create([*(events or []), finished])
    if rated is None:
        store_release_line(labeling)
        ratings = selectors.labeling_ratings(labeling)
    if solution.is_quality_control:
        gold = GoldLabel.objects.filter(solution=solution).first()
        if gold is not None:
            quality.gold_result_record(
                labeling=labeling, gold=gold, ratings=ratings, solution=solution
            )
        return
    reached_n = not labeling.is_surplus and solution.completed_count + 1 == overlap
    if solution.batch is not None:
        counters.tally(labeling, solution.batch, ratings, sign=1, solutions_done=int(reached_n))
    # Step agreement compares ratings of the same steps: labelers who built their own paths
    # from candidates (the alternatives protocol) rated different steps.
    same_steps = solution.batch is None or solution.batch.protocol == Batch.Protocol.STEPS
    if reached_n and overlap >= 2 and same_steps:
        adjudication.agreement_record(solution=solution)


def _rated_steps(
    labeling: Labeling, rated_count: int
) -> tuple[list[StepLabel], list[Completion]] | None:
    """A labeling read by the rating path (`_locked_for_rating`): its steps in order and their
    completions in one query. None with a step that has no completion (the release record then
    reads them its own way)."""
    completions = RATED_STEPS.all(labeling_id=labeling.pk)
    steps = list({c.step_id: c.step for c in completions}.values())
    if len(steps) != rated_count:
        return None
    return steps, completions


def store_release_line(labeling: Labeling) -> None:
    """Render the submitted labeling once, so exports stream it instead of rebuilding it (and
    again when it gains ratings after its submission: alternatives to its −1 step)."""
    labeling.release_line = prm800k.render_record(selectors.release_record(labeling.pk))
    Labeling.objects.filter(pk=labeling.pk).update(release_line=labeling.release_line)


def undo_last(*, labeling_id: int, user: User) -> Labeling:
    """Take back the last rating; a labeling finished moments ago is reopened."""
    with transaction.atomic():
        labeling = labeling_for_update(labeling_id, user)
        now = timezone.now()
        refusal = revisit_refusal(labeling, now)
        if refusal:
            raise Conflict(refusal)
        if labeling.status == Labeling.Status.COMPLETED:
            reopen(labeling, user, now)
        last = labeling.step_labels.order_by("-index").prefetch_related("completions").first()
        if last is not None:
            _take_back(labeling, user, now, [last])
        return labeling


def revisit_refusal(labeling: Labeling, now) -> str | None:
    """Why its labeler may not take back or change ratings now; None when they may.

    While the claim is theirs, and for a while after submitting (the undo window)."""
    if labeling.status == Labeling.Status.COMPLETED:
        window = timedelta(seconds=settings.STEPWISE_UNDO_WINDOW_SECONDS)
        if labeling.finished_at is None or now - labeling.finished_at > window:
            return "This labeling was submitted too long ago to undo."
    elif labeling.status == Labeling.Status.EXPIRED:
        return "The claim on this solution expired; open the queue again."
    elif labeling.status == Labeling.Status.SKIPPED:
        return SKIPPED_ALREADY
    return None


def undo_to(*, labeling_id: int, user: User, step_index: int) -> Labeling:
    """Take back the ratings from `step_index` on, so the labeler rates again from there.

    Recorded as one 'undo' per rating taken back, last step first, as if undone one by one;
    a labeling finished moments ago is reopened, as by `undo_last`.
    """
    with transaction.atomic():
        labeling = labeling_for_update(labeling_id, user)
        now = timezone.now()
        refusal = revisit_refusal(labeling, now)
        if refusal:
            raise Conflict(refusal)
        taken = list(
            labeling.step_labels.filter(index__gte=step_index)
            .order_by("-index")
            .prefetch_related("completions")
        )
        if not any(step.index == step_index for step in taken):
            # Also what a second send of the same request meets: its ratings are gone already.
            raise Conflict(f"Step {step_index + 1} is not rated: there is nothing to take back.")
        if labeling.status == Labeling.Status.COMPLETED:
            reopen(labeling, user, now)
        _take_back(labeling, user, now, taken, detail=f"rate again from step {step_index + 1}")
        return labeling


def _take_back(
    labeling: Labeling, user: User, now, steps: list[StepLabel], *, detail: str = ""
) -> None:
    """Delete the rated `steps` (completions prefetched), one 'undo' RatingEvent each, last step
    first, and renew the claim (their time leaves the total, which is summed at the finish)."""
    RatingEvent.objects.bulk_create(
        RatingEvent(
            labeling=labeling,
            step_index=step.index,
            old_rating=next((c.rating for c in step.completions.all() if c.index == 0), None),
            reason=RatingEvent.Reason.UNDO,
            detail=detail,
            actor=user,
            created_at=now,
        )
        for step in steps
    )
    StepLabel.objects.filter(pk__in=[step.pk for step in steps]).delete()
    _renew_lease(labeling, now)
    labeling.save(update_fields=["lease_expires_at", "updated_at"])


def revise_rating(*, labeling_id: int, user: User, step_index: int, rating: int) -> Labeling:
    """The labeler changes one of their own ratings between 0 and +1 while revisiting their
    steps: allowed where undo is (`revisit_refusal`), recorded as 'edit' by `edit_rating`."""
    with transaction.atomic():
        labeling = labeling_for_update(labeling_id, user)
        now = timezone.now()
        refusal = revisit_refusal(labeling, now)
        if refusal:
            raise Conflict(refusal)
        edit_rating(labeling_id=labeling_id, user=user, step_index=step_index, rating=rating)
        if labeling.status == Labeling.Status.IN_PROGRESS:
            _renew_lease(labeling, now)  # the labeler is at work on it
            labeling.save(update_fields=["lease_expires_at", "updated_at"])
        return labeling


def reopen(labeling: Labeling, user: User, now) -> None:
    """A labeling submitted moments ago is in progress again: counters and the solution's
    completed count step back (undo, and the alternatives protocol's step back)."""
    solution = _with_counters_locked(labeling)
    overlap = solution.batch.overlap if solution.batch else 1
    if solution.is_quality_control:
        quality.gold_result_forget(labeling=labeling)
    elif solution.batch is not None:
        was_done = not labeling.is_surplus and solution.completed_count == overlap
        counters.tally(
            labeling,
            solution.batch,
            selectors.labeling_ratings(labeling),
            sign=-1,
            solutions_done=int(was_done),
        )
        if was_done and overlap >= 2:
            adjudication.agreement_withdraw(solution=solution)
    moved = {"active_count": F("active_count") + 1}
    if not labeling.is_surplus:
        moved["completed_count"] = F("completed_count") - 1
    Solution.objects.filter(pk=solution.pk).update(**moved)
    RatingEvent.objects.create(
        labeling=labeling,
        reason=RatingEvent.Reason.UNDO,
        detail=f"reopened ({labeling.finish_reason})",
        actor=user,
        created_at=now,
    )
    labeling.status = Labeling.Status.IN_PROGRESS
    labeling.finish_reason = None
    labeling.finished_at = None
    labeling.is_surplus = False
    labeling.release_line = None
    try:
        labeling.save(
            update_fields=[
                "status",
                "finish_reason",
                "finished_at",
                "is_surplus",
                "release_line",
                "updated_at",
            ]
        )
    except IntegrityError:
        # one_open_labeling_per_labeler: they claimed the next solution already. Raised out
        # of the caller's transaction, which rolls back everything reopen wrote.
        raise Conflict(
            "You have started another solution since: finish it first. This one stays as "
            "you submitted it."
        ) from None


def edit_rating(*, labeling_id: int, user: User, step_index: int, rating: int) -> Labeling:
    """Change a finished labeling's rating between 0 and +1 (where it stops stays the same).

    The labeler may edit their own labeling; a lead may edit anyone's. Recorded as 'edit'.
    """
    if rating not in (0, 1):
        raise LabelingError("An edit changes a rating between 0 and +1; use undo to move a -1.")
    with transaction.atomic():
        labeling = Labeling.objects.select_for_update().filter(pk=labeling_id).first()
        if labeling is None or (labeling.labeler_id != user.pk and not has_role(user, LEAD)):
            raise LabelingError("This labeling is not yours.")
        completion = (
            Completion.objects.filter(step__labeling=labeling, step__index=step_index, index=0)
            .select_related("step")
            .first()
        )
        if completion is None:
            raise LabelingError(f"Step {step_index + 1} is not rated.")
        if completion.rating == -1:
            raise LabelingError("A -1 ends the solution: undo it instead.")
        if completion.rating == rating:
            return labeling
        old = completion.rating
        completion.rating = rating
        completion.save(update_fields=["rating"])
        step = completion.step
        if step.suggestion_accepted and rating != step.suggestion_label:
            # Provenance: the rating is no longer the judge's label it was accepted as.
            step.suggestion_accepted = False
            step.save(update_fields=["suggestion_accepted"])
        RatingEvent.objects.create(
            labeling=labeling,
            step_index=step_index,
            old_rating=old,
            new_rating=rating,
            reason=RatingEvent.Reason.EDIT,
            actor=user,
        )
        if labeling.release_line is not None:
            store_release_line(labeling)
        if labeling.status == Labeling.Status.COMPLETED and labeling.solution.batch_id:
            delta = {"pos": 1 if rating == 1 else -1, "neu": 1 if rating == 0 else -1}
            batch_id = labeling.solution.batch_id
            BatchLabelerStats.objects.filter(
                batch_id=batch_id, labeler_id=labeling.labeler_id
            ).update(**{k: F(k) + v for k, v in delta.items()})
            if labeling.finished_at:
                BatchHourStats.objects.filter(
                    batch_id=batch_id, hour=counters.hour_start(labeling.finished_at)
                ).update(**{k: F(k) + v for k, v in delta.items()})
        return labeling
