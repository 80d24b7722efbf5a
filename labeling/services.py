"""Writes that span models: claiming solutions, rating steps, finishing labelings, quality control.

The queue invariant, held under the solution's row lock, for every regular (non-gold) solution:

    solution.completed_count + solution.active_count <= batch.overlap

where active_count counts in-progress labelings with a live lease and completed_count counts
completed labelings that are not surplus (so completed_count <= N always). A claim takes the row with
`select_for_update(skip_locked=True)` (PostgreSQL; other labelers skip it instead of waiting)
and then increments through a conditional UPDATE on the counters it read, so even a backend
without row locks (SQLite, the demo) cannot hand out more than N. A submit after the lease
expired is kept: counted if the solution still has room, else kept and marked surplus.

Gold solutions (is_quality_control, with a GoldLabel) sit outside the invariant: every labeler
may label each once, so their counters are unbounded and never mark surplus. Which work a
labeler may claim follows Labeler.state: screening -> screening gold only; active -> regular
work with gold mixed in at the batch's gold rate; paused/rejected -> nothing new.

Counters for leads (BatchLabelerStats, BatchHourStats, gold and agreement counters) are
updated in the transaction that finishes a labeling, so dashboards never scan labels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, F, Model, OuterRef, Q, QuerySet
from django.utils import timezone

from labeling import agreement as agreement_math
from labeling import prm800k
from labeling.models import (
    Adjudication,
    Batch,
    BatchAgreement,
    BatchHourStats,
    BatchLabelerStats,
    Completion,
    FinishReason,
    GoldLabel,
    GoldResult,
    Guidelines,
    Labeler,
    Labeling,
    PairAgreement,
    RatingEvent,
    Solution,
    SolutionAgreement,
    StepLabel,
    Tally,
)
from labeling.roles import LABELER, has_role
from labeling.selectors import release_record

MAX_STEP_TIME_MS = 60 * 60 * 1000  # a step shown for over an hour was a tab left open


class LabelingError(Exception):
    """A request the labeling cannot accept; the message is shown to the labeler."""

    status_code = 400


class Conflict(LabelingError):
    """The request disagrees with the saved state (stale page, double submit of an old step)."""

    status_code = 409


def ensure_labeler(user: AbstractBaseUser) -> Labeler:
    labeler, _ = Labeler.objects.get_or_create(user=user)
    return labeler


# --- leases ---------------------------------------------------------------------------------


_MEDIAN_CACHE: dict[int | None, tuple[float, float | None]] = {}
MEDIAN_CACHE_SECONDS = 30.0


def _median_solution_ms(batch_id: int | None) -> float | None:
    """Median time of the last 200 finished labelings (of a batch), cached for 30 s per process."""
    hit = _MEDIAN_CACHE.get(batch_id)
    if hit is not None and time.monotonic() - hit[0] < MEDIAN_CACHE_SECONDS:
        return hit[1]
    recent = Labeling.objects.filter(status=Labeling.Status.COMPLETED, total_time_ms__isnull=False)
    if batch_id is not None:
        recent = recent.filter(solution__batch_id=batch_id)
    values = sorted(recent.order_by("-finished_at").values_list("total_time_ms", flat=True)[:200])
    median = values[len(values) // 2] if values else None
    _MEDIAN_CACHE[batch_id] = (time.monotonic(), median)
    return median


def lease_duration(batch: Batch | None = None) -> timedelta:
    """A lease lasts about three times the median time per solution, within configured bounds.

    The bounds are the batch's own (lease_seconds_min/max) where set, else the settings.
    """
    floor = settings.STEPWISE_LEASE_SECONDS_MIN
    ceiling = settings.STEPWISE_LEASE_SECONDS_MAX
    if batch is not None:
        floor = batch.lease_seconds_min or floor
        ceiling = max(batch.lease_seconds_max or ceiling, floor)
    median = _median_solution_ms(batch.pk if batch is not None else None)
    seconds = floor if median is None else 3 * median / 1000
    return timedelta(seconds=min(max(seconds, floor), ceiling))


def expire_stale_leases(now=None) -> int:
    """Return expired claims to the pool. Safe to run concurrently with claims and submits.

    Locks in the same order as a submit (labeling, then solution) so the two cannot deadlock;
    a labeling locked by a submit in flight is skipped (it is being finished anyway).
    """
    now = now or timezone.now()
    expired = 0
    stale = Labeling.objects.filter(status=Labeling.Status.IN_PROGRESS, lease_expires_at__lt=now)
    for labeling_id, solution_id in stale.values_list("id", "solution_id")[:1000]:
        with transaction.atomic():
            labeling = (
                Labeling.objects.select_for_update(skip_locked=True)
                .filter(
                    pk=labeling_id, status=Labeling.Status.IN_PROGRESS, lease_expires_at__lt=now
                )
                .first()
            )
            if labeling is None:
                continue
            Solution.objects.select_for_update().filter(pk=solution_id).first()
            Labeling.objects.filter(pk=labeling_id).update(status=Labeling.Status.EXPIRED)
            Solution.objects.filter(pk=solution_id, active_count__gt=0).update(
                active_count=F("active_count") - 1
            )
            expired += 1
    return expired


# --- claiming -------------------------------------------------------------------------------


def batches_for(user: AbstractBaseUser) -> QuerySet[Batch]:
    """Active batches this user may label: assigned to them, or open to every labeler."""
    assigned = Batch.labelers.through.objects.filter(batch_id=OuterRef("pk"))
    return (
        Batch.objects.filter(is_active=True).filter(Q(labelers=user) | ~Exists(assigned)).distinct()
    )


def _open_solutions(user: AbstractBaseUser, batch: Batch) -> QuerySet[Solution]:
    """Regular solutions of one batch this user may claim, closest to their N first.

    Filters on literal N so PostgreSQL walks solution_queue_idx (batch, completed_count, id)
    backwards and stops at the first unlocked row instead of sorting the batch.
    """
    mine = Labeling.objects.filter(solution_id=OuterRef("pk"), labeler=user)
    return (
        Solution.objects.filter(batch_id=batch.pk, completed_count__lt=batch.overlap)
        .filter(active_count__lt=batch.overlap - F("completed_count"))
        .filter(is_quality_control=False)
        .exclude(Exists(mine))
        .order_by("-completed_count", "-id")
    )


def _gold_pool(user: AbstractBaseUser, *, screening: bool) -> QuerySet[Solution]:
    mine = Labeling.objects.filter(solution_id=OuterRef("pk"), labeler=user)
    pool = Solution.objects.filter(is_quality_control=True, gold__isnull=False).exclude(
        Exists(mine)
    )
    return pool.filter(is_screening=screening)


def _start(solution: Solution, user: AbstractBaseUser, batch: Batch | None) -> Labeling:
    now = timezone.now()
    return Labeling.objects.create(
        solution=solution,
        labeler=user,
        started_at=now,
        lease_expires_at=now + lease_duration(batch),
    )


def _claim_gold(user: AbstractBaseUser, *, screening: bool) -> Labeling | None:
    """Start a gold labeling. Gold has no overlap limit: each labeler labels each gold once."""
    solution = _gold_pool(user, screening=screening).order_by("completed_count", "id").first()
    if solution is None:
        return None
    Solution.objects.filter(pk=solution.pk).update(active_count=F("active_count") + 1)
    return _start(solution, user, solution.batch)


def screening_size() -> int:
    """Solutions in a screening: the setting, or fewer when fewer screening solutions exist."""
    available = Solution.objects.filter(
        is_screening=True, is_quality_control=True, gold__isnull=False
    )
    return min(settings.STEPWISE_SCREENING_SIZE, available.count())


def _claim_screening(user: AbstractBaseUser, labeler: Labeler) -> Labeling | None:
    size = screening_size()
    if size == 0:
        # No screening set configured: nothing to pass, so the labeler starts regular work.
        labeler_set_state(labeler=labeler, state=Labeler.State.ACTIVE, reason="no screening set")
        return None
    done = GoldResult.objects.filter(labeler=user, is_screening=True).count()
    if done >= size:
        return None  # screened, failed the threshold: waiting for a lead to admit or reject
    with transaction.atomic():
        return _claim_gold(user, screening=True)


def _gold_due(labeler: Labeler, batch: Batch) -> bool:
    rate = settings.STEPWISE_GOLD_RATE if batch.gold_rate is None else batch.gold_rate
    if rate <= 0:
        return False
    return labeler.claims_since_gold + 1 >= round(1 / min(rate, 1.0))


def claim_next(user: AbstractBaseUser, *, batch: Batch | None = None) -> Labeling | None:
    """The labeling this user should work on now: their open one, else a newly claimed one.

    Screening labelers get screening gold; paused and rejected ones get nothing new; active
    ones get the highest-priority batch's solution closest to N, with a gold solution instead
    every 1/gold_rate claims (gold looks like any other solution to the labeler).
    """
    if not has_role(user, LABELER):
        raise LabelingError("Only labelers can claim solutions.")
    labeler = ensure_labeler(user)
    current = (
        Labeling.objects.filter(labeler=user, status=Labeling.Status.IN_PROGRESS)
        .order_by("started_at")
        .first()
    )
    if current is not None:
        return current
    if labeler.state == Labeler.State.SCREENING:
        claimed = _claim_screening(user, labeler)
        if claimed is not None or labeler.state != Labeler.State.ACTIVE:
            return claimed
    if labeler.state != Labeler.State.ACTIVE:
        return None
    expire_stale_leases()
    batches = batches_for(user).order_by("-priority", "id")
    if batch is not None:
        batches = batches.filter(pk=batch.pk)
    for candidate_batch in batches:
        claimed = _claim_in_batch(user, labeler, candidate_batch)
        if claimed is not None:
            return claimed
    return None


def _claim_in_batch(user: AbstractBaseUser, labeler: Labeler, batch: Batch) -> Labeling | None:
    for _attempt in range(5):
        with transaction.atomic():
            candidate = (
                _open_solutions(user, batch)
                .select_for_update(skip_locked=True, of=("self",))
                .first()
            )
            if candidate is None:
                return None
            if _gold_due(labeler, batch):
                gold = _claim_gold(user, screening=False)
                if gold is not None:
                    labeler.claims_since_gold = 0
                    labeler.save(update_fields=["claims_since_gold"])
                    return gold
            # Conditional update on the counters we read: a racing claim makes this a no-op.
            took = Solution.objects.filter(
                pk=candidate.pk,
                completed_count=candidate.completed_count,
                active_count=candidate.active_count,
            ).update(active_count=F("active_count") + 1)
            if not took:
                continue
            Labeler.objects.filter(pk=labeler.pk).update(
                claims_since_gold=F("claims_since_gold") + 1
            )
            labeler.claims_since_gold += 1
            return _start(candidate, user, batch)
    return None


# --- rating ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepView:
    index: int
    text: str
    rating: int | None
    flagged: bool | None


def labeling_for_update(labeling_id: int, user: AbstractBaseUser) -> Labeling:
    labeling = (
        Labeling.objects.select_for_update(of=("self",))
        .select_related("solution__batch")
        .filter(pk=labeling_id)
        .first()
    )
    if labeling is None or labeling.labeler_id != user.pk:
        raise LabelingError("This labeling is not yours.")
    return labeling


def rated_steps(labeling: Labeling) -> list[StepLabel]:
    return list(labeling.step_labels.prefetch_related("completions").order_by("index"))


def _renew_lease(labeling: Labeling, now) -> None:
    labeling.lease_expires_at = now + lease_duration(labeling.solution.batch)


def rate_step(
    *,
    labeling_id: int,
    user: AbstractBaseUser,
    step_index: int,
    rating: int,
    flagged: bool = False,
    elapsed_ms: int | None = None,
) -> Labeling:
    """Save one step's rating as it is made. Re-sending the same rating is a no-op."""
    if rating not in (-1, 0, 1):
        raise LabelingError("A rating is -1, 0 or +1.")
    with transaction.atomic():
        labeling = labeling_for_update(labeling_id, user)
        steps = labeling.solution.steps
        if not 0 <= step_index < len(steps):
            raise LabelingError(f"This solution has no step {step_index + 1}.")
        # One read gives both the saved rating of this step (a retry?) and the next step due.
        saved = dict(
            (index, (saved_rating, saved_flag))
            for index, saved_rating, saved_flag in Completion.objects.filter(
                step__labeling=labeling, index=0
            ).values_list("step__index", "rating", "flagged")
        )
        if step_index in saved:
            saved_rating, saved_flag = saved[step_index]
            if saved_rating == rating and bool(saved_flag) == flagged:
                return labeling  # a retry or double submit of a saved rating
            raise Conflict(
                f"Step {step_index + 1} is already rated {saved_rating:+d}; undo to change it."
            )
        if labeling.status == Labeling.Status.COMPLETED:
            raise Conflict("This labeling is already submitted.")
        next_index = len(saved)
        if step_index != next_index:
            raise Conflict(f"Rate step {next_index + 1} first (the page was out of date).")
        now = timezone.now()
        step_time = None if elapsed_ms is None else max(0, min(int(elapsed_ms), MAX_STEP_TIME_MS))
        step = StepLabel.objects.create(
            labeling=labeling,
            index=step_index,
            # PRM800K's chosen_completion is null at the step that ends the solution with -1.
            chosen_completion=None if rating == -1 else 0,
            time_ms=step_time,
            created_at=now,
        )
        Completion.objects.create(
            step=step, index=0, text=steps[step_index], rating=rating, flagged=flagged
        )
        RatingEvent.objects.create(
            labeling=labeling,
            step_index=step_index,
            new_rating=rating,
            reason=RatingEvent.Reason.RATE,
            detail="flagged" if flagged else "",
            actor=user,
            created_at=now,
        )
        labeling.total_time_ms = (labeling.total_time_ms or 0) + (step_time or 0)
        if rating == -1:
            _finish(labeling, FinishReason.FOUND_ERROR, user, now)
        elif step_index == len(steps) - 1:
            _finish(labeling, FinishReason.SOLUTION, user, now)
        else:
            _renew_lease(labeling, now)
            labeling.save(update_fields=["total_time_ms", "lease_expires_at", "updated_at"])
        return labeling


def finish_labeling(
    *, labeling_id: int, user: AbstractBaseUser, reason: str, elapsed_ms: int | None = None
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
        labeling.total_time_ms = (labeling.total_time_ms or 0) + step_time
        _finish(labeling, reason, user, timezone.now())
        return labeling


def _finish(labeling: Labeling, reason: str, user: AbstractBaseUser, now) -> None:
    """Complete the labeling, move it from active to completed, and update the lead counters."""
    solution = (
        Solution.objects.select_for_update(of=("self",))
        .select_related("batch")
        .get(pk=labeling.solution_id)
    )
    was_active = labeling.status == Labeling.Status.IN_PROGRESS
    overlap = solution.batch.overlap if solution.batch else 1
    room = solution.completed_count + solution.active_count - (1 if was_active else 0) < overlap
    labeling.status = Labeling.Status.COMPLETED
    labeling.finish_reason = reason
    labeling.finished_at = now
    labeling.lease_expires_at = None
    labeling.is_surplus = not room and not solution.is_quality_control
    labeling.save(
        update_fields=[
            "status",
            "finish_reason",
            "finished_at",
            "lease_expires_at",
            "is_surplus",
            "total_time_ms",
            "updated_at",
        ]
    )
    counters = {"completed_count": F("completed_count") + (0 if labeling.is_surplus else 1)}
    if was_active:
        counters["active_count"] = F("active_count") - 1
    Solution.objects.filter(pk=solution.pk).update(**counters)
    RatingEvent.objects.create(
        labeling=labeling,
        reason=RatingEvent.Reason.FINISH,
        detail=reason,
        actor=user,
        created_at=now,
    )
    _store_release_line(labeling)
    ratings = labeling_ratings(labeling)
    if solution.is_quality_control:
        gold = GoldLabel.objects.filter(solution=solution).first()
        if gold is not None:
            gold_result_record(labeling=labeling, gold=gold, ratings=ratings, solution=solution)
        return
    reached_n = not labeling.is_surplus and solution.completed_count + 1 == overlap
    if solution.batch is not None:
        _tally(labeling, solution.batch, ratings, sign=1, solutions_done=int(reached_n))
    if reached_n and overlap >= 2:
        agreement_record(solution=solution)


def _store_release_line(labeling: Labeling) -> None:
    """Render the submitted labeling once, so exports stream it instead of rebuilding it."""
    labeling.release_line = prm800k.render_record(release_record(labeling.pk))
    Labeling.objects.filter(pk=labeling.pk).update(release_line=labeling.release_line)


def labeling_ratings(labeling: Labeling) -> list[tuple[int, bool]]:
    """(rating, flagged) per rated step, in step order."""
    rows = (
        Completion.objects.filter(step__labeling=labeling, index=0)
        .order_by("step__index")
        .values_list("rating", "flagged")
    )
    return [(r, bool(f)) for r, f in rows]


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _bump(model: type[Model], keys: dict, deltas: dict, **extra) -> None:
    """Add deltas to a counter row, creating it if needed (an upsert that works on any backend)."""
    changes = {name: F(name) + value for name, value in deltas.items() if value}
    changes.update(extra)
    if model.objects.filter(**keys).update(**changes):
        return
    try:
        with transaction.atomic():  # a savepoint: a racing insert only rolls this back
            model.objects.create(**keys, **{k: v for k, v in deltas.items()}, **extra)
    except IntegrityError:
        model.objects.filter(**keys).update(**changes)


def _tally(labeling: Labeling, batch: Batch, ratings, *, sign: int, solutions_done: int) -> None:
    """Add (sign=1) or take back (sign=-1) one finished labeling in the batch counters."""
    values = [r for r, _ in ratings]
    surplus = labeling.is_surplus
    deltas = {
        "labelings": sign * (0 if surplus else 1),
        "surplus": sign * (1 if surplus else 0),
        "steps": sign * len(values),
        "time_ms": sign * (labeling.total_time_ms or 0),
        "pos": sign * values.count(1),
        "neu": sign * values.count(0),
        "neg": sign * values.count(-1),
        "flagged": sign * sum(1 for _, f in ratings if f),
        f"fin_{labeling.finish_reason}": sign,
        "solutions_done": sign * solutions_done,
    }
    extra = {"last_finished_at": labeling.finished_at} if sign > 0 else {}
    _bump(BatchLabelerStats, {"batch": batch, "labeler_id": labeling.labeler_id}, deltas, **extra)
    _bump(BatchHourStats, {"batch": batch, "hour": _hour(labeling.finished_at)}, deltas)


def rebuild_batch_stats(batch: Batch) -> int:
    """Recount a batch's lead counters from its completed labelings; returns labelings counted.

    The counters normally grow as labelings finish (`_tally`); labelings imported from PRM800K
    files never pass through that, and a repair may be wanted. This recomputes both tables in
    one transaction. A labeling finished while it runs is counted by the next rebuild.
    """
    index0 = Q(step_labels__completions__index=0)
    rows = (
        Labeling.objects.filter(
            solution__batch=batch,
            status=Labeling.Status.COMPLETED,
            solution__is_quality_control=False,
        )
        .order_by("finished_at", "id")
        .values(
            "labeler_id",
            "solution_id",
            "is_surplus",
            "total_time_ms",
            "finish_reason",
            "finished_at",
        )
        .annotate(
            steps=Count("step_labels__completions", filter=index0),
            pos=Count(
                "step_labels__completions", filter=index0 & Q(step_labels__completions__rating=1)
            ),
            neu=Count(
                "step_labels__completions", filter=index0 & Q(step_labels__completions__rating=0)
            ),
            neg=Count(
                "step_labels__completions", filter=index0 & Q(step_labels__completions__rating=-1)
            ),
            flagged=Count(
                "step_labels__completions",
                filter=index0 & Q(step_labels__completions__flagged=True),
            ),
        )
    )
    per_labeler: dict[int, dict] = {}
    per_hour: dict[datetime, dict] = {}
    kept_per_solution: dict[int, int] = {}
    counted = 0
    for row in rows.iterator(chunk_size=5000):
        counted += 1
        kept = 0 if row["is_surplus"] else 1
        kept_per_solution[row["solution_id"]] = kept_per_solution.get(row["solution_id"], 0) + kept
        deltas = {
            "labelings": kept,
            "surplus": 1 - kept,
            "steps": row["steps"],
            "time_ms": row["total_time_ms"] or 0,
            "pos": row["pos"],
            "neu": row["neu"],
            "neg": row["neg"],
            "flagged": row["flagged"],
            f"fin_{row['finish_reason'] or 'give_up'}": 1,
            "solutions_done": int(kept and kept_per_solution[row["solution_id"]] == batch.overlap),
        }
        finished = row["finished_at"] or timezone.now()
        for table, key in ((per_labeler, row["labeler_id"]), (per_hour, _hour(finished))):
            totals = table.setdefault(key, dict.fromkeys(Tally.TALLY_FIELDS, 0))
            for name, value in deltas.items():
                totals[name] += value
        per_labeler[row["labeler_id"]]["last_finished_at"] = finished
    with transaction.atomic():
        BatchLabelerStats.objects.filter(batch=batch).delete()
        BatchHourStats.objects.filter(batch=batch).delete()
        BatchLabelerStats.objects.bulk_create(
            BatchLabelerStats(batch=batch, labeler_id=labeler_id, **totals)
            for labeler_id, totals in per_labeler.items()
        )
        BatchHourStats.objects.bulk_create(
            BatchHourStats(batch=batch, hour=hour, **totals) for hour, totals in per_hour.items()
        )
    return counted


def undo_last(*, labeling_id: int, user: AbstractBaseUser) -> Labeling:
    """Take back the last rating; a labeling finished moments ago is reopened."""
    with transaction.atomic():
        labeling = labeling_for_update(labeling_id, user)
        now = timezone.now()
        if labeling.status == Labeling.Status.COMPLETED:
            window = timedelta(seconds=settings.STEPWISE_UNDO_WINDOW_SECONDS)
            if labeling.finished_at is None or now - labeling.finished_at > window:
                raise Conflict("This labeling was submitted too long ago to undo.")
            _reopen(labeling, user, now)
        elif labeling.status == Labeling.Status.EXPIRED:
            raise Conflict("The claim on this solution expired; open the queue again.")
        last = labeling.step_labels.order_by("-index").prefetch_related("completions").first()
        if last is None:
            return labeling
        completion = next((c for c in last.completions.all() if c.index == 0), None)
        RatingEvent.objects.create(
            labeling=labeling,
            step_index=last.index,
            old_rating=completion.rating if completion else None,
            reason=RatingEvent.Reason.UNDO,
            actor=user,
            created_at=now,
        )
        labeling.total_time_ms = max(0, (labeling.total_time_ms or 0) - (last.time_ms or 0))
        last.delete()
        _renew_lease(labeling, now)
        labeling.save(update_fields=["total_time_ms", "lease_expires_at", "updated_at"])
        return labeling


def _reopen(labeling: Labeling, user: AbstractBaseUser, now) -> None:
    solution = (
        Solution.objects.select_for_update(of=("self",))
        .select_related("batch")
        .get(pk=labeling.solution_id)
    )
    overlap = solution.batch.overlap if solution.batch else 1
    if solution.is_quality_control:
        gold_result_forget(labeling=labeling)
    elif solution.batch is not None:
        was_done = not labeling.is_surplus and solution.completed_count == overlap
        _tally(
            labeling,
            solution.batch,
            labeling_ratings(labeling),
            sign=-1,
            solutions_done=int(was_done),
        )
    counters = {"active_count": F("active_count") + 1}
    if not labeling.is_surplus:
        counters["completed_count"] = F("completed_count") - 1
    Solution.objects.filter(pk=solution.pk).update(**counters)
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


def step_views(labeling: Labeling) -> list[StepView]:
    """Each solution step with this labeling's rating so far (None where not rated yet)."""
    ratings = {
        c.step.index: c
        for c in Completion.objects.filter(step__labeling=labeling, index=0).select_related("step")
    }
    return [
        StepView(
            index=i,
            text=text,
            rating=ratings[i].rating if i in ratings else None,
            flagged=ratings[i].flagged if i in ratings else None,
        )
        for i, text in enumerate(labeling.solution.steps)
    ]


# --- quality control ------------------------------------------------------------------------


def labeler_set_state(
    *, labeler: Labeler, state: str, reason: str = "", actor: AbstractBaseUser | None = None
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


def _reached_verdict(labeling: Labeling) -> bool:
    return labeling.finish_reason in (FinishReason.SOLUTION, FinishReason.FOUND_ERROR)


def gold_result_record(
    *, labeling: Labeling, gold: GoldLabel, ratings: list[tuple[int, bool]], solution: Solution
) -> GoldResult:
    """Score a finished gold labeling, update the labeler's counters, screen or pause them."""
    values = [r for r, _ in ratings]
    compared, exact, binary, match = gold_compare(values, gold.ratings, _reached_verdict(labeling))
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
    size = screening_size()
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


# --- agreement and adjudication -------------------------------------------------------------


def _labelings_for_agreement(solution: Solution) -> list[Labeling]:
    return list(
        Labeling.objects.filter(
            solution=solution, status=Labeling.Status.COMPLETED, is_surplus=False
        ).order_by("id")
    )


def agreement_record(*, solution: Solution) -> SolutionAgreement | None:
    """Compute a solution's agreement and fold it into the batch and pair counters.

    Called when a solution reaches N; a recompute first takes back what it added before.
    """
    labelings = _labelings_for_agreement(solution)
    if len(labelings) < 2:
        return None
    ratings: dict[int, list[int]] = {}
    verdicts: dict[int, bool] = {}
    by_step = Completion.objects.filter(step__labeling__in=labelings, index=0).order_by(
        "step__index"
    )
    for labeling_id, rating in by_step.values_list("step__labeling_id", "rating"):
        ratings.setdefault(labeling_id, []).append(rating)
    owner = {lab.pk: lab.labeler_id for lab in labelings}
    for lab in labelings:
        ratings.setdefault(lab.pk, [])
        verdicts[lab.pk] = _reached_verdict(lab)
    result = agreement_math.solution_agreement(ratings, verdicts)
    needs = not result.first_error_agree or (
        result.raw is not None and result.raw < settings.STEPWISE_ADJUDICATE_BELOW
    )
    contribution = {
        "coincidence": result.coincidence,
        "pairs": [
            {
                "a": min(owner[p.a], owner[p.b]),
                "b": max(owner[p.a], owner[p.b]),
                "compared": p.compared,
                "same": p.same,
                "fe_same": p.first_error_same,
                "coincidence": p.coincidence,
            }
            for p in result.pairs
        ],
        "needs": needs,
    }
    existing = SolutionAgreement.objects.select_for_update().filter(solution=solution).first()
    if existing is not None:
        _fold_agreement(solution.batch_id, existing.contribution, sign=-1)
    _fold_agreement(solution.batch_id, contribution, sign=1)
    row, _ = SolutionAgreement.objects.update_or_create(
        solution=solution,
        defaults={
            "batch_id": solution.batch_id,
            "labelings": len(labelings),
            "steps_compared": result.steps_compared,
            "alpha": result.alpha,
            "raw": result.raw,
            "first_error_agree": result.first_error_agree,
            "needs_adjudication": needs
            and not Adjudication.objects.filter(solution=solution).exists(),
            "contribution": contribution,
            "computed_at": timezone.now(),
        },
    )
    return row


def _fold_agreement(batch_id: int | None, contribution: dict, *, sign: int) -> None:
    if not contribution:
        return
    pairs = contribution.get("pairs", [])
    if batch_id is not None:
        BatchAgreement.objects.get_or_create(batch_id=batch_id)
        row = BatchAgreement.objects.select_for_update().get(batch_id=batch_id)
        row.coincidence = agreement_math.add_coincidence(
            row.coincidence, contribution["coincidence"], sign
        )
        row.solutions += sign
        row.flagged += sign * int(contribution.get("needs", False))
        row.pairs += sign * sum(p["compared"] for p in pairs)
        row.pairs_same += sign * sum(p["same"] for p in pairs)
        row.first_error_pairs += sign * sum(1 for p in pairs if p["fe_same"] is not None)
        row.first_error_same += sign * sum(1 for p in pairs if p["fe_same"])
        row.save()
    for p in pairs:
        PairAgreement.objects.get_or_create(labeler_a_id=p["a"], labeler_b_id=p["b"])
        pair = PairAgreement.objects.select_for_update().get(
            labeler_a_id=p["a"], labeler_b_id=p["b"]
        )
        pair.coincidence = agreement_math.add_coincidence(pair.coincidence, p["coincidence"], sign)
        pair.solutions += sign
        pair.steps_compared += sign * p["compared"]
        pair.steps_same += sign * p["same"]
        pair.first_error_same += sign * int(bool(p["fe_same"]))
        pair.save()
        Labeler.objects.filter(user_id__in=(p["a"], p["b"])).update(
            agree_steps_compared=F("agree_steps_compared") + sign * p["compared"],
            agree_steps_same=F("agree_steps_same") + sign * p["same"],
        )


def adjudication_save(
    *, solution: Solution, lead: AbstractBaseUser, ratings: list[int], note: str = ""
) -> Adjudication:
    """Store a lead's final ratings and record, per labeling, every step the final changes."""
    if not ratings or any(r not in (-1, 0, 1) for r in ratings):
        raise LabelingError("Final ratings are -1, 0 or +1 for each step.")
    first = agreement_math.first_error(ratings)
    if first is not None and first != len(ratings) - 1:
        raise LabelingError("A -1 ends the solution: no step after it can be rated.")
    if first is None and len(ratings) != len(solution.steps):
        raise LabelingError(f"Rate all {len(solution.steps)} steps or end with a -1.")
    with transaction.atomic():
        Solution.objects.select_for_update().filter(pk=solution.pk).first()
        adjudication, _ = Adjudication.objects.update_or_create(
            solution=solution, defaults={"ratings": ratings, "lead": lead, "note": note}
        )
        now = timezone.now()
        events = []
        for labeling in _labelings_for_agreement(solution):
            own = [r for r, _ in labeling_ratings(labeling)]
            changed = False
            for index in range(max(len(own), len(ratings))):
                old = own[index] if index < len(own) else None
                new = ratings[index] if index < len(ratings) else None
                if old != new:
                    changed = True
                    events.append(
                        RatingEvent(
                            labeling=labeling,
                            step_index=index,
                            old_rating=old,
                            new_rating=new,
                            reason=RatingEvent.Reason.ADJUDICATION,
                            actor=lead,
                            created_at=now,
                            detail=note[:200],
                        )
                    )
            if not changed:
                events.append(
                    RatingEvent(
                        labeling=labeling,
                        reason=RatingEvent.Reason.ADJUDICATION,
                        actor=lead,
                        created_at=now,
                        detail="adjudicated: final agrees with this labeling",
                    )
                )
        RatingEvent.objects.bulk_create(events)
        SolutionAgreement.objects.filter(solution=solution).update(needs_adjudication=False)
    return adjudication


def rating_edit(
    *, labeling_id: int, user: AbstractBaseUser, step_index: int, rating: int
) -> Labeling:
    """Change a finished labeling's rating between 0 and +1 (where it stops stays the same).

    The labeler may edit their own labeling; a lead may edit anyone's. Recorded as 'edit'.
    """
    from labeling.roles import LEAD  # local: roles imports nothing of ours, this keeps it obvious

    if rating not in (0, 1):
        raise LabelingError("An edit changes a rating between 0 and +1; use undo to move a -1.")
    with transaction.atomic():
        labeling = Labeling.objects.select_for_update().filter(pk=labeling_id).first()
        if labeling is None or (labeling.labeler_id != user.pk and not has_role(user, LEAD)):
            raise LabelingError("This labeling is not yours.")
        completion = Completion.objects.filter(
            step__labeling=labeling, step__index=step_index, index=0
        ).first()
        if completion is None:
            raise LabelingError(f"Step {step_index + 1} is not rated.")
        if completion.rating == -1:
            raise LabelingError("A -1 ends the solution: undo it instead.")
        if completion.rating == rating:
            return labeling
        old = completion.rating
        completion.rating = rating
        completion.save(update_fields=["rating"])
        RatingEvent.objects.create(
            labeling=labeling,
            step_index=step_index,
            old_rating=old,
            new_rating=rating,
            reason=RatingEvent.Reason.EDIT,
            actor=user,
        )
        if labeling.release_line is not None:
            _store_release_line(labeling)
        if labeling.status == Labeling.Status.COMPLETED and labeling.solution.batch_id:
            delta = {"pos": 1 if rating == 1 else -1, "neu": 1 if rating == 0 else -1}
            batch_id = labeling.solution.batch_id
            BatchLabelerStats.objects.filter(
                batch_id=batch_id, labeler_id=labeling.labeler_id
            ).update(**{k: F(k) + v for k, v in delta.items()})
            if labeling.finished_at:
                BatchHourStats.objects.filter(
                    batch_id=batch_id, hour=_hour(labeling.finished_at)
                ).update(**{k: F(k) + v for k, v in delta.items()})
        return labeling


# --- batches and guidelines -----------------------------------------------------------------


def batch_move_solutions(*, batch: Batch, source: Batch, limit: int | None = None) -> int:
    """Move solutions nobody has started from another batch into this one (regular only)."""
    if source.pk == batch.pk:
        raise LabelingError("Pick a different batch to take solutions from.")
    with transaction.atomic():
        untouched = Solution.objects.filter(
            batch=source, completed_count=0, active_count=0, is_quality_control=False
        ).exclude(Exists(Labeling.objects.filter(solution_id=OuterRef("pk"))))
        ids = list(untouched.order_by("id").values_list("id", flat=True)[:limit])
        moved = Solution.objects.filter(pk__in=ids).update(batch=batch, generation=batch.generation)
    from labeling.selectors import _COUNT_CACHE

    _COUNT_CACHE.pop(batch.pk, None)
    _COUNT_CACHE.pop(source.pk, None)
    return moved


def guidelines_save(*, text: str, user: AbstractBaseUser) -> Guidelines:
    """A new version of the guidelines; earlier versions stay."""
    if not text.strip():
        raise LabelingError("The guidelines cannot be empty.")
    with transaction.atomic():
        last = Guidelines.objects.select_for_update().order_by("-version").first()
        return Guidelines.objects.create(
            version=(last.version + 1) if last else 1, text=text, created_by=user
        )
