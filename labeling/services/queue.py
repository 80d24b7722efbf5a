"""Claiming solutions: labelers, leases, the claim under concurrency.

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
labeler may claim in a project follows their state there (`LabelerRecord.state`, one record per
project): screening -> the project's screening gold only; active -> regular work with gold mixed
in at the batch's gold rate; paused/rejected -> nothing there, not even their open labeling
there (rating and extending it are refused too: `refuse_if_stopped`). A claim in another
project follows their record in that one.

A labeler holds at most one open labeling, in all batches: the database's
one_open_labeling_per_labeler constraint. Concurrent claims of one labeler (several tabs) race
to insert; the losers' transactions roll back and they return the winner's labeling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Final, cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Case, Exists, F, OuterRef, Q, QuerySet, Subquery, When
from django.utils import timezone

from labeling import access, selectors
from labeling.models import (
    Batch,
    GoldResult,
    Labeler,
    LabelerRecord,
    Labeling,
    Solution,
    StepLabel,
)
from labeling.models.projects import DEFAULT_SLUG, default_project_id
from labeling.roles import LABELER, has_role
from labeling.services.errors import Conflict, Forbidden, LabelingError
from labeling.services.quality import labeler_set_state, record_ensure
from stepwise import caching
from stepwise.compiled import CompiledQuery

# A pause (or a rejection) stops all work, the labeling in progress included.
STOPPED = (LabelerRecord.State.PAUSED, LabelerRecord.State.REJECTED)


def refuse_if_stopped(state: str | None) -> None:
    """Refuse (403) a paused or rejected labeler's change to a labeling. The caller's locked
    read brings their state (`labeler_state_of`), so a rating costs no query more."""
    if state == LabelerRecord.State.PAUSED:
        raise Forbidden(
            "Your labeling is paused: a lead reviews your work and reinstates you. Nothing was "
            "saved; your earlier ratings are kept. Your queue page says why."
        )
    if state == LabelerRecord.State.REJECTED:
        raise Forbidden("You were not admitted to labeling: there is no labeling work for you.")


def refuse_if_not_a_labeler_there(user: User, labeling: Labeling) -> None:
    """Refuse (403) a change to a labeling whose project the user is no longer a labeler of
    (a lead took the role away while it was open): read from their cached roles, no query."""
    if not has_role(user, LABELER, project=labeling.solution.project_id):
        raise Forbidden(
            "You are no longer a labeler in this labeling's project: nothing was saved. "
            "Your work there is kept."
        )


def labeler_state_of(outer: str = "labeler_id", project: str = "solution__project_id") -> Subquery:
    """The labeler's state in the labeling's project as an annotation of a Labeling query
    (`outer`: its labeler column; `project`: its project's). None where they have no record
    there."""
    records = LabelerRecord.objects.filter(user_id=OuterRef(outer), project_id=OuterRef(project))
    return Subquery(records.values("state")[:1])


def labeler_public_id_of(outer: str = "labeler_id") -> Subquery:
    """The labeler's public id (the release's `labeler`) as an annotation of a Labeling query."""
    return Subquery(Labeler.objects.filter(user_id=OuterRef(outer)).values("public_id")[:1])


def ensure_labeler(user: User) -> Labeler:
    labeler, _ = Labeler.objects.get_or_create(user=user)
    return labeler


def _project_of_claim(project: Any, batch: Batch | None) -> int:
    """The project a claim works in: the page's, else the chosen batch's, else the Default
    project (callers from before projects: commands, tests), read from the cached project
    list (no query on a hit)."""
    if project is not None:
        return getattr(project, "pk", project)
    if batch is not None:
        return cast(int, batch.project_id)
    found = access.project_by_slug(DEFAULT_SLUG)
    return found.pk if found is not None else default_project_id()


MEDIAN_CACHE_SECONDS = 30


def _median_solution_ms(batch_id: int | None) -> float | None:
    """Median time of the last 200 finished labelings (of a batch), cached for 30 s in the
    cache every process shares: one process computes it, the others read it."""
    key = f"labeling:median-solution-ms:{'all' if batch_id is None else batch_id}"
    return caching.cached(key, lambda: _median_of_recent(batch_id), MEDIAN_CACHE_SECONDS)


def _median_of_recent(batch_id: int | None) -> float | None:
    recent = Labeling.objects.filter(status=Labeling.Status.COMPLETED, total_time_ms__isnull=False)
    if batch_id is not None:
        recent = recent.filter(solution__batch_id=batch_id)
    times = recent.order_by("-finished_at").values_list("total_time_ms", flat=True)[:200]
    values = sorted(t for t in times if t is not None)  # filtered above; narrows the type
    return values[len(values) // 2] if values else None


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


def lease_until(batch: Batch | None, now: datetime) -> datetime:
    """When a claim made or renewed at `now` runs out: the one place a lease is set."""
    return now + lease_duration(batch)


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


def reactivate_expired(labeling_id: int, user: User, now=None) -> Labeling | None:
    """Put a claim that expired back in progress for its labeler, with a fresh lease, if its
    solution still has room for it (gold always has) and its batch is active; None otherwise.

    Locks in the order of a submit (labeling, then solution), and takes the room with the same
    counters a claim uses, so a solution never ends up with more than N counted labelings."""
    now = now or timezone.now()
    try:
        return _reactivate(labeling_id, user, now)
    except IntegrityError:
        # The labeler has another labeling open (one_open_labeling_per_labeler): this one
        # stays expired, its ratings kept; nothing of the attempt was written.
        return None


def _reactivate(labeling_id: int, user: User, now) -> Labeling | None:
    with transaction.atomic():
        labeling = (
            Labeling.objects.select_for_update(of=("self",))
            .filter(pk=labeling_id, labeler=user, status=Labeling.Status.EXPIRED)
            .first()
        )
        if labeling is None:
            return None
        solution = (
            Solution.objects.select_for_update(of=("self",))
            .select_related("batch")
            .get(pk=labeling.solution_id)
        )
        labeling.solution = solution  # its project names the page it opens on
        batch = solution.batch
        if batch is not None and not batch.is_active:
            return None
        overlap = batch.overlap if batch is not None else 1
        if (
            not solution.is_quality_control
            and solution.completed_count + solution.active_count >= overlap
        ):
            return None
        Solution.objects.filter(pk=solution.pk).update(active_count=F("active_count") + 1)
        labeling.status = Labeling.Status.IN_PROGRESS
        labeling.lease_expires_at = lease_until(batch, now)
        labeling.save(update_fields=["status", "lease_expires_at", "updated_at"])
        return labeling


def extend_lease(labeling_id: int, user: User, now=None) -> Labeling:
    """Called while the labeler is active on the page: renew the lease of their claim, or take
    back one that has just expired if it still has room. Raises Conflict when it cannot."""
    now = now or timezone.now()
    with transaction.atomic():
        labeling = (
            Labeling.objects.select_for_update(of=("self",))
            .select_related("solution__batch")
            .annotate(labeler_state=labeler_state_of())
            .filter(pk=labeling_id, labeler=user)
            .first()
        )
        if labeling is None:
            raise Forbidden("This labeling is not yours.")
        refuse_if_not_a_labeler_there(user, labeling)
        refuse_if_stopped(labeling.labeler_state)
        if labeling.status == Labeling.Status.IN_PROGRESS:
            labeling.lease_expires_at = lease_until(labeling.solution.batch, now)
            labeling.save(update_fields=["lease_expires_at", "updated_at"])
            return labeling
        if labeling.status == Labeling.Status.COMPLETED:
            raise Conflict("This labeling is already submitted.")
        if labeling.status == Labeling.Status.SKIPPED:
            raise Conflict(SKIPPED_ALREADY)
    taken_back = reactivate_expired(labeling_id, user, now)
    if taken_back is None:
        raise Conflict(EXPIRED_AND_TAKEN)
    return taken_back


SKIPPED_ALREADY = "You skipped this solution; open the queue for the next one."

EXPIRED_AND_TAKEN = (
    "Your claim on this solution expired and it has since received its labels from others "
    "(or its batch was paused, or you have another solution open). The steps you rated are kept in its history but not counted; "
    "open the queue for the next solution."
)


def _open_solutions(user_id: int, batch_id: int, overlap: int) -> QuerySet[Solution]:
    """Regular solutions of one batch (its N `overlap`) this user may claim, closest to their N
    first.

    Filters on literal N so PostgreSQL walks solution_queue_idx (batch, completed_count, id)
    backwards and stops at the first unlocked row instead of sorting the batch.
    """
    mine = Labeling.objects.filter(solution_id=OuterRef("pk"), labeler_id=user_id)
    return (
        Solution.objects.filter(batch_id=batch_id, completed_count__lt=overlap)
        .filter(active_count__lt=overlap - F("completed_count"))
        .filter(is_quality_control=False)
        .exclude(Exists(mine))
        .order_by("-completed_count", "-id")
    )


def _labelings_to_continue(user_id: int) -> QuerySet[Labeling]:
    """The user's labelings a claim continues instead of starting another: their open one,
    and those whose claim expired with steps rated (taken back while the solution has room)."""
    return Labeling.objects.filter(labeler_id=user_id).filter(
        Q(status=Labeling.Status.IN_PROGRESS)
        | Q(status=Labeling.Status.EXPIRED)
        & Exists(StepLabel.objects.filter(labeling_id=OuterRef("pk")))
    )


def next_claims(user: User, batch: Batch, count: int) -> list[Solution]:
    """The solutions of `batch` this user would claim next, in claim order (nothing locked:
    a guess, for work done ahead such as generating the first candidate steps)."""
    return list(_open_solutions(user.pk, batch.pk, batch.overlap).select_related("problem")[:count])


def _gold_pool(
    user_id: int, *, screening: bool, project_id: int | None = None
) -> QuerySet[Solution]:
    """The gold a labeler has not labeled yet (of one project, where named)."""
    mine = Labeling.objects.filter(solution_id=OuterRef("pk"), labeler_id=user_id)
    pool = Solution.objects.filter(is_quality_control=True, gold__isnull=False).exclude(
        Exists(mine)
    )
    if project_id is not None:
        pool = pool.filter(project_id=project_id)
    return pool.filter(is_screening=screening)


def _start(solution: Solution, user: User, batch: Batch | None) -> Labeling:
    now = timezone.now()
    return Labeling.objects.create(
        solution=solution,
        labeler=user,
        started_at=now,
        lease_expires_at=lease_until(batch, now),
    )


def _claim_gold(user: User, *, screening: bool, project_id: int | None = None) -> Labeling | None:
    """Start a gold labeling. Gold has no overlap limit: each labeler labels each gold once."""
    solution = (
        _gold_pool(user.pk, screening=screening, project_id=project_id)
        .order_by("completed_count", "id")
        .first()
    )
    if solution is None:
        return None
    Solution.objects.filter(pk=solution.pk).update(active_count=F("active_count") + 1)
    return _start(solution, user, solution.batch)


def _claim_screening(user: User, record: LabelerRecord, project_id: int) -> Labeling | None:
    size = selectors.screening_size(project_id)
    if size == 0:
        # No screening set in the project: nothing to pass, so the labeler starts regular work.
        labeler_set_state(
            record=record, state=LabelerRecord.State.ACTIVE, reason="no screening set"
        )
        return None
    done = GoldResult.objects.filter(
        labeler=user, is_screening=True, solution__project_id=project_id
    ).count()
    if done >= size:
        return None  # screened, failed the threshold: waiting for a lead to admit or reject
    with transaction.atomic():
        return _claim_gold(user, screening=True, project_id=project_id)


def _gold_due(claims_since_gold: int, batch: Batch) -> bool:
    rate = settings.STEPWISE_GOLD_RATE if batch.gold_rate is None else batch.gold_rate
    if rate <= 0:
        return False
    return claims_since_gold + 1 >= round(1 / min(rate, 1.0))


class Take(Enum):
    """What a claim path's `instead` answers for the solution it has locked: take it (None
    is an answer too: the claim ends with nothing)."""

    TAKE = "take"


TAKE: Final = Take.TAKE


@dataclass(frozen=True)
class Claim:
    """What `claim` hands the labeling page: the labeling to work on, and whether it was the
    labeler's own expired one, taken up again (the page says so)."""

    labeling: Labeling
    resumed_expired: bool = False

    @classmethod
    def of(cls, labeling: Labeling | None) -> Claim | None:
        return None if labeling is None else cls(labeling)


def claim(user: User, *, batch: Batch | None = None, project: Any = None) -> Claim | None:
    """The labeling this user should work on now: their open one, else a newly claimed one.

    New work comes from one project (`project`, the page's; else `batch`'s; else the Default
    project) and follows the labeler's record there: screening labelers get its screening gold;
    paused and rejected ones get nothing, not even their open labeling; active ones get the
    highest-priority batch's solution closest to N, with a gold solution instead every
    1/gold_rate claims (gold looks like any other solution to the labeler). The first claim in
    a project where they have no record makes one (screening). A claim that loses the race to
    another claim of the same labeler (another tab) returns the labeling that won.

    The labeling they have open is theirs to continue wherever it is (they hold one at most, in
    all projects), unless they are paused or rejected in its project.
    """
    if not has_role(user, LABELER, project=project):
        raise LabelingError("Only labelers can claim solutions.")
    project_id = _project_of_claim(project, batch)
    for attempt in range(3):
        try:
            if attempt == 0:
                claimed = _claim_plain(user, batch, project_id)
                if claimed is not None:
                    return Claim(claimed)
            record = record_ensure(user_id=user.pk, project_id=project_id)
            if record.state in STOPPED:
                return None
            return _claim_next(user, record, batch, project_id)
        except IntegrityError:
            # one_open_labeling_per_labeler: a concurrent claim of this labeler committed
            # first (ours rolled back whole); theirs is the one to work on.
            pass
    raise Conflict("Another tab keeps claiming for you at the same moment; open the queue again.")


def _claim_next(
    user: User, record: LabelerRecord, batch: Batch | None, project_id: int
) -> Claim | None:
    # One query for both: their open labeling, else their latest expired one with steps rated,
    # with their state in its project (it may be another one's).
    mine = (
        _labelings_to_continue(user.pk)
        .annotate(in_project_id=F("solution__project_id"))  # the page it opens on
        .annotate(labeler_state=labeler_state_of())
        .order_by(
            # Their open labeling (one at most), else the latest expired one, taken back.
            Case(When(status=Labeling.Status.IN_PROGRESS, then=0), default=1),
            "-lease_expires_at",
            "-id",
        )
        .first()
    )
    # Stopped in the project of their open labeling (another one's: this one's was checked),
    # they may neither continue it nor, holding it, claim another.
    stopped_there = mine is not None and cast(Any, mine).labeler_state in STOPPED
    if mine is not None and mine.status == Labeling.Status.IN_PROGRESS:
        return None if stopped_there else Claim(mine)
    if mine is not None and not stopped_there:
        resumed = reactivate_expired(mine.pk, user)
        if resumed is not None:
            return Claim(resumed, resumed_expired=True)
    if record.state == LabelerRecord.State.SCREENING:
        claimed = _claim_screening(user, record, project_id)
        if claimed is not None or record.state != LabelerRecord.State.ACTIVE:
            return Claim.of(claimed)
    if record.state != LabelerRecord.State.ACTIVE:
        return None
    batches = _batches_to_claim_from(user, batch, project_id)

    def gold_instead(candidate: Solution, candidate_batch: Batch) -> Labeling | None | Take:
        return _gold_instead(user, record, candidate_batch)

    claimed = _claim_first_open(user, batches, read=_locked_read, instead=gold_instead)
    if claimed is None and expire_stale_leases():
        # Nothing free, but claims past their lease held some: they are free now.
        claimed = _claim_first_open(user, batches, read=_locked_read, instead=gold_instead)
    return Claim.of(claimed)


def _batches_to_claim_from(
    user: User, batch: Batch | None, project_id: int | None = None
) -> list[Batch]:
    """The active batches the user may claim from (in their projects where they label; of
    `project_id` only, where named), highest priority first (cached per user:
    `labeling.access`), or just `batch` among them."""
    batches = access.cached_for_user(
        user.pk, "batches", lambda: list(selectors.batches_for(user).order_by("-priority", "id"))
    )
    return [
        b
        for b in batches
        if (batch is None or b.pk == batch.pk)
        and (project_id is None or b.project_id == project_id)
    ]


def _claim_read(user_id: int, batch_id: int, overlap: int, project_id: int) -> QuerySet[Solution]:
    """The next open solution of the batch, locked (skipping rows other claims hold), with the
    labeler's state and gold count in the batch's project (their record there), whether they
    have a labeling to continue and whether gold of the project waits for them."""
    profile = LabelerRecord.objects.filter(user_id=user_id, project_id=project_id)
    return (
        _open_solutions(user_id, batch_id, overlap)
        .select_for_update(skip_locked=True, of=("self",))
        .annotate(
            labeler_state=Subquery(profile.values("state")[:1]),
            since_gold=Subquery(profile.values("claims_since_gold")[:1]),
            has_mine=Exists(_labelings_to_continue(user_id)),
            # Where gold is due but none is left for them, they take regular work.
            gold_waiting=Exists(_gold_pool(user_id, screening=False, project_id=project_id)),
        )
    )


# Compiled once per connection, as the rating's read (stepwise/compiled.py): building and
# compiling it cost more than running it, on every claim.
CLAIM_READ = CompiledQuery(_claim_read, "user_id", "batch_id", "overlap", "project_id")


def _claim_plain(user: User, batch: Batch | None, project_id: int) -> Labeling | None:
    """The common claim in four statements: an active labeler with nothing to continue, and no
    gold due, takes the next solution of their first batch that has one. The read that locks
    the solution also brings the labeler's state and gold count (their record in the batch's
    project) and whether they have a labeling to continue; anything else (a missing record, or
    nothing free) is None, for `_claim_next`."""
    batches = _batches_to_claim_from(user, batch, project_id)
    return _claim_first_open(user, batches, read=_plain_read, instead=_unless_plain)


def _claim_first_open(
    user: User,
    batches: list[Batch],
    *,
    read: Callable[[User, Batch], Solution | None],
    instead: Callable[[Solution, Batch], Labeling | None | Take],
) -> Labeling | None:
    """The claim loop of both paths. Batch by batch in the order given, `read` locks the next
    open solution (skipping rows other claims hold; none: the next batch) and `instead` says
    what the claim ends with in its place (gold, or None), or TAKE: a place on the solution is
    taken and its labeling started. A claim that lost the place to a racing one reads again,
    five times at most per batch."""
    for candidate_batch in batches:
        for _attempt in range(5):
            with transaction.atomic():
                candidate = read(user, candidate_batch)
                if candidate is None:
                    break  # the next batch
                answer = instead(candidate, candidate_batch)
                if answer is not TAKE:
                    return answer
                if _take(candidate, user):
                    return _start(candidate, user, candidate_batch)
    return None


def _plain_read(user: User, batch: Batch) -> Solution | None:
    return CLAIM_READ.first(
        user_id=user.pk, batch_id=batch.pk, overlap=batch.overlap, project_id=batch.project_id
    )


def _unless_plain(candidate: Solution, batch: Batch) -> Labeling | None | Take:
    """TAKE for the plain claim; None, for `_claim_next`, where the labeler is not active, has
    a labeling to continue, or has gold due and waiting (the read brought all of it)."""
    found = cast(Any, candidate)
    if (
        found.labeler_state != LabelerRecord.State.ACTIVE
        or found.has_mine
        or (found.gold_waiting and _gold_due(found.since_gold, batch))
    ):
        return None
    return TAKE


def _locked_read(user: User, batch: Batch) -> Solution | None:
    return (
        _open_solutions(user.pk, batch.pk, batch.overlap)
        .select_for_update(skip_locked=True, of=("self",))
        .first()
    )


def _gold_instead(user: User, record: LabelerRecord, batch: Batch) -> Labeling | None | Take:
    """Gold in place of the batch's solution when it is due and some waits for the labeler
    (their count in the batch's project starts again), else TAKE."""
    if not _gold_due(record.claims_since_gold, batch):
        return TAKE
    gold = _claim_gold(user, screening=False, project_id=batch.project_id)
    if gold is None:
        return TAKE
    record.claims_since_gold = 0
    record.save(update_fields=["claims_since_gold"])
    return gold


def _take(candidate: Solution, user: User) -> bool:
    """Take one more place on the solution, and count the claim towards the labeler's next gold
    in its project. A conditional update on the counters the claim read: a racing claim makes it
    a no-op (False)."""
    took = Solution.objects.filter(
        pk=candidate.pk,
        completed_count=candidate.completed_count,
        active_count=candidate.active_count,
    ).update(active_count=F("active_count") + 1)
    if took:
        LabelerRecord.objects.filter(
            user_id=user.pk, project_id=cast(int, candidate.project_id)
        ).update(claims_since_gold=F("claims_since_gold") + 1)
    return bool(took)


def claimable_batch(user: User, batch_id: int, project: Any = None) -> Batch | None:
    """The active batch `batch_id` (of `project`, where named) if this user may claim from it,
    else None (read from the cached list a claim reads: no query on a hit)."""
    project_id = None if project is None else project.pk
    return next(
        (b for b in _batches_to_claim_from(user, None, project_id) if b.pk == batch_id), None
    )


SKIP_REASON_MAX = 300


def labeling_skip(*, labeling_id: int, user: User, reason: str) -> Labeling:
    """Pass a solution on, saying why: the labeling ends as skipped (its ratings kept in its
    history, counted nowhere), its place on the solution goes back to the pool for the others,
    and the queue never offers the solution to this labeler again (`_open_solutions` leaves out
    every solution they have a labeling of). Repeating the request is a no-op."""
    reason = reason.strip()
    if not reason:
        raise LabelingError("Say why you skip this solution (a few words are enough).")
    if len(reason) > SKIP_REASON_MAX:
        raise LabelingError(
            f"The reason is {len(reason)} characters long; keep it under {SKIP_REASON_MAX}."
        )
    with transaction.atomic():
        labeling = (
            Labeling.objects.select_for_update(of=("self",))
            .select_related("solution")
            .annotate(labeler_state=labeler_state_of())
            .filter(pk=labeling_id, labeler=user)
            .first()
        )
        if labeling is None:
            raise Forbidden("This labeling is not yours.")
        refuse_if_stopped(cast(Any, labeling).labeler_state)
        if labeling.status == Labeling.Status.SKIPPED:
            return labeling  # a double submit
        if labeling.status == Labeling.Status.COMPLETED:
            raise Conflict("This labeling is already submitted; it cannot be skipped.")
        if labeling.solution.is_screening:
            raise LabelingError(
                "Screening solutions cannot be skipped: the screening compares every one of them."
            )
        # Locked in the order of a submit (labeling, then solution), as `expire_stale_leases`.
        Solution.objects.select_for_update().filter(pk=labeling.solution_id).first()
        was_active = labeling.status == Labeling.Status.IN_PROGRESS
        labeling.status = Labeling.Status.SKIPPED
        labeling.skip_reason = reason
        labeling.finished_at = timezone.now()
        labeling.lease_expires_at = None
        labeling.save(
            update_fields=["status", "skip_reason", "finished_at", "lease_expires_at", "updated_at"]
        )
        if was_active:
            Solution.objects.filter(pk=labeling.solution_id, active_count__gt=0).update(
                active_count=F("active_count") - 1
            )
        return labeling


def labelings_release(
    user: User, now: datetime | None = None, *, project_id: int | None = None
) -> int:
    """Give the user's open labeling back to the pool (a deactivated account; with
    `project_id`, theirs in that project only: a labeler taken off it): it ends as a lapsed
    claim, its ratings kept, as `expire_stale_leases` leaves one. Returns how many."""
    now = now or timezone.now()
    released = 0
    open_ids = Labeling.objects.filter(labeler=user, status=Labeling.Status.IN_PROGRESS)
    if project_id is not None:
        open_ids = open_ids.filter(solution__project_id=project_id)
    for labeling_id, solution_id in open_ids.values_list("id", "solution_id"):
        with transaction.atomic():
            still_open = (
                Labeling.objects.select_for_update()
                .filter(pk=labeling_id, status=Labeling.Status.IN_PROGRESS)
                .first()
            )
            if still_open is None:
                continue  # finished meanwhile
            Solution.objects.select_for_update().filter(pk=solution_id).first()
            Labeling.objects.filter(pk=labeling_id).update(
                status=Labeling.Status.EXPIRED, lease_expires_at=now
            )
            Solution.objects.filter(pk=solution_id, active_count__gt=0).update(
                active_count=F("active_count") - 1
            )
            released += 1
    return released
