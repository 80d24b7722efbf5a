"""The home pages, one cockpit per role: the labeler's (the work waiting for them, claims
that expired, their pace, what the big button does) and the lead's (batch progress, who
and what waits for a lead, alerts)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db.models import Count, Exists, F, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone

from labeling.models import (
    Batch,
    BatchLabelerStats,
    LabelerRecord,
    Labeling,
    Snapshot,
    SolutionAgreement,
)
from labeling.models.projects import in_project as rows_in_project
from labeling.selectors.adjudication import adjudication_queue
from labeling.selectors.labelers import labelers_needing_attention, screening_size
from labeling.selectors.notes import UnreadReplies, unread_replies
from labeling.selectors.progress import (
    TALLIED_STEP,
    BatchProgress,
    batches_overview,
    hour_start,
    solution_counts,
    tallied_labelings,
)

# --- the labeler's work: claims that expired, the batches they may label ---------------------


@dataclass(frozen=True)
class ExpiredClaim:
    labeling: Labeling
    steps_rated: int
    batch_paused: bool
    has_room: bool  # for the labeler to take it back (gold always has)


def expired_claims(user, *, within=timedelta(days=1)) -> list[ExpiredClaim]:
    """The labeler's claims that expired with steps rated in the last day, newest first: what
    their home explains (taken back where they stopped, or kept in the history and not
    counted, and why). `has_room` reads the rule of queue.reactivate_expired, taking nothing."""
    since = timezone.now() - within
    rows = (
        Labeling.objects.filter(
            labeler=user, status=Labeling.Status.EXPIRED, lease_expires_at__gte=since
        )
        .annotate(steps_rated=Count("step_labels"))
        .filter(steps_rated__gt=0)
        .select_related("solution__problem", "solution__batch")
        .order_by("-lease_expires_at")[:5]
    )
    claims = []
    for labeling in rows:
        solution, batch = labeling.solution, labeling.solution.batch
        overlap = batch.overlap if batch is not None else 1
        claims.append(
            ExpiredClaim(
                labeling=labeling,
                steps_rated=labeling.steps_rated,
                batch_paused=batch is not None and not batch.is_active,
                has_room=solution.is_quality_control
                or solution.completed_count + solution.active_count < overlap,
            )
        )
    return claims


def batches_for(user, project: Any = None) -> QuerySet[Batch]:
    """Active batches this user may label: in a project where they are a labeler (in
    `project` only, where named), assigned to them or open to every labeler."""
    from labeling.roles import LABELER, projects_with_role

    assigned = Batch.labelers.through.objects.filter(batch_id=OuterRef("pk"))
    # Two EXISTS rather than a join: no DISTINCT over every active batch on each claim.
    batches = Batch.objects.filter(is_active=True).filter(
        Exists(assigned.filter(user_id=user.pk)) | ~Exists(assigned)
    )
    if project is not None:
        batches = batches.filter(project_id=getattr(project, "pk", project))
    labeling_in = projects_with_role(user, LABELER)
    if labeling_in is not None:
        batches = batches.filter(project_id__in=labeling_in)
    return batches


def projects_waiting(user, project_ids: list[int]) -> dict[int, dict[str, int]]:
    """Per project: the labels its active batches still want from this labeler ("waiting") and
    its open batches ("batches"), for the list of a user's projects. Two queries."""
    from labeling.roles import LABELER, has_role

    rows: dict[int, dict[str, int]] = {pk: {"waiting": 0, "batches": 0} for pk in project_ids}
    active = Batch.objects.filter(is_active=True, project_id__in=project_ids)
    for project_id, n in active.values_list("project_id").annotate(n=Count("id")):
        rows[cast(int, project_id)]["batches"] = n
    labeling_in = [pk for pk in project_ids if has_role(user, LABELER, project=pk)]
    if labeling_in:
        for batch in batches_for(user).filter(project_id__in=labeling_in):
            rows[cast(int, batch.project_id)]["waiting"] += 1
    return rows


# --- home pages: one cockpit per role -----------------------------------------------------------


@dataclass
class WaitingBatch:
    batch: Batch
    labels_remaining: int  # labels the batch still wants
    yours: int  # of those, how many this labeler may take (one per solution they never had)


@dataclass
class LabelerCockpit:
    """What a labeler's home shows: the work waiting, their pace, and what the big button does.

    `action` is what the primary button does: "continue" (open the labeling in progress),
    "resume" (take back the claim that expired), "screening", "start", or "" when it cannot
    hand out work; `blocked` then says why: "paused", "rejected", "screening_failed",
    "no_batch", "nothing_waiting".
    """

    record: LabelerRecord  # their record in the page's project (state, screening)
    open_labeling: Labeling | None
    expired: list[ExpiredClaim]
    waiting: list[WaitingBatch]
    in_screening: bool  # screening work is what a claim hands out
    action: str
    blocked: str
    today_solutions: int
    today_steps: int
    total_solutions: int
    total_steps: int
    total_time_ms: int
    replies: UnreadReplies  # leads' replies to their notes that they have not opened yet
    chosen_batch_id: int | None = None  # the batch they chose to label in ("Continue in …")

    @property
    def chosen(self) -> WaitingBatch | None:
        """The chosen batch, while it has work for this labeler."""
        return next(
            (w for w in self.waiting if w.batch.pk == self.chosen_batch_id and w.yours), None
        )

    @property
    def waiting_total(self) -> int:
        return sum(w.yours for w in self.waiting)

    @property
    def seconds_per_step(self) -> float | None:
        return self.total_time_ms / self.total_steps / 1000 if self.total_steps else None


def labeler_cockpit(
    user,
    record: LabelerRecord,
    *,
    now: datetime | None = None,
    chosen_batch_id: int | None = None,
    project: Any = None,
) -> LabelerCockpit:
    """The labeler's home, in at most ten queries whatever their history: counters for the
    totals and the work waiting, today's finished labelings, counted as the counters count
    them, for today's progress, and the leads' replies they have not read."""
    now = now or timezone.now()
    open_labeling = (
        Labeling.objects.filter(labeler=user, status=Labeling.Status.IN_PROGRESS)
        .select_related("solution__problem", "solution__batch")
        .annotate(steps_rated=Count("step_labels"))
        .order_by("started_at")
        .first()
    )
    expired = [] if open_labeling else expired_claims(user)
    batches = list(batches_for(user, project).order_by("-priority", "id"))
    ids = [b.pk for b in batches]
    counts = solution_counts(ids)
    done = dict(
        BatchLabelerStats.objects.filter(batch_id__in=ids)
        .values_list("batch_id")
        .annotate(n=Sum("labelings"))
        .values_list("batch_id", "n")
    )
    mine = list(
        BatchLabelerStats.objects.filter(labeler=user).values_list(
            "batch_id", "labelings", "surplus", "steps", "time_ms"
        )
    )
    mine_per_batch = {batch_id: n + surplus for batch_id, n, surplus, _, _ in mine}
    waiting = []
    for batch in batches:
        remaining, yours = _waiting_in(
            batch, counts.get(batch.pk, 0), done.get(batch.pk) or 0, mine_per_batch.get(batch.pk, 0)
        )
        waiting.append(WaitingBatch(batch, remaining, yours))
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    # Counted as the counters count (`tallied_labelings`): gold and screening labelings, and
    # steps without a rating, were once in today's figure but never in "all time".
    today = (
        tallied_labelings()
        .filter(labeler=user, finished_at__gte=midnight)
        .aggregate(
            solutions=Count("id", distinct=True),
            steps=Count("step_labels__completions", filter=TALLIED_STEP),
        )
    )
    cockpit = LabelerCockpit(
        record=record,
        open_labeling=open_labeling,
        expired=expired,
        waiting=waiting,
        # With no screening set, the first claim makes a screening labeler active.
        in_screening=record.state == LabelerRecord.State.SCREENING
        and record.screening_passed is not False
        and screening_size(record.project_id) > 0,
        action="",
        blocked="",
        today_solutions=today["solutions"] or 0,
        today_steps=today["steps"] or 0,
        total_solutions=sum(n + surplus for _, n, surplus, _, _ in mine),
        total_steps=sum(steps for *_, steps, _ in mine),
        total_time_ms=sum(time_ms for *_, time_ms in mine),
        replies=unread_replies(user, limit=SHOWN),
        chosen_batch_id=chosen_batch_id,
    )
    cockpit.action, cockpit.blocked = _next_action(cockpit)
    return cockpit


def _waiting_in(batch: Batch, solutions: int, done: int, mine: int) -> tuple[int, int]:
    """(labels the batch still wants, how many of them this labeler may take: one per solution
    they never had), from its regular solutions, its finished labelings and this labeler's."""
    remaining = max(0, solutions * batch.overlap - done)
    return remaining, max(0, min(remaining, solutions - mine))


def waiting_for(user, *, after: Labeling | None = None) -> int:
    """The cockpit's "waiting for you" total for the labeling page's header, in one query beside
    the cached solution counts (`solution_counts`). `after`: a labeling in progress that is one
    of them is not counted ("N more after this one"); a finished one is counted as done already."""
    stats = BatchLabelerStats.objects.filter(batch_id=OuterRef("pk")).order_by()
    batches = list(
        batches_for(user)
        .annotate(
            done=Coalesce(
                Subquery(stats.values("batch_id").annotate(n=Sum("labelings")).values("n")), 0
            ),
            mine=Coalesce(
                Subquery(stats.filter(labeler=user).values(n=F("labelings") + F("surplus"))), 0
            ),
        )
        .only("pk", "overlap")
    )
    counts = solution_counts([b.pk for b in batches])
    current = None
    if after is not None and after.status == Labeling.Status.IN_PROGRESS:
        solution = after.solution
        current = None if solution.is_quality_control else solution.batch_id
    total = 0
    for batch in batches:
        taken = 1 if batch.pk == current else 0  # claimed: as if done, and had by this labeler
        annotated = cast(Any, batch)
        total += _waiting_in(
            batch, counts.get(batch.pk, 0), annotated.done + taken, annotated.mine + taken
        )[1]
    return total


def _next_action(cockpit: LabelerCockpit) -> tuple[str, str]:
    """What the labeler's primary button does, or why there is none: the order of `queue.claim`."""
    state, State = cockpit.record.state, LabelerRecord.State
    # A pause stops work in progress too: no Continue for the open labeling.
    if state == State.PAUSED:
        return "", "paused"
    if state == State.REJECTED:
        return "", "rejected"
    if cockpit.open_labeling is not None:
        return "continue", ""
    if state == State.SCREENING and cockpit.record.screening_passed is False:
        return "", "screening_failed"
    latest = cockpit.expired[0] if cockpit.expired else None
    if latest is not None and latest.has_room and not latest.batch_paused:
        return "resume", ""
    if cockpit.in_screening:
        return "screening", ""
    if not cockpit.waiting:
        return "", "no_batch"
    if not cockpit.waiting_total:
        return "", "nothing_waiting"
    return "start", ""


@dataclass(frozen=True)
class Alert:
    """Something a lead should look at, and where to act on it."""

    text: str
    url: str = ""


@dataclass
class LeadCockpit:
    batches: list[BatchProgress]  # the active ones
    attention: list[LabelerRecord]  # records in the lead's project
    adjudication_count: int
    adjudication_top: list[SolutionAgreement]
    alerts: list[Alert]

    @property
    def paused_by_gold(self) -> list[LabelerRecord]:
        return [lab for lab in self.attention if lab.paused_by_gold]

    @property
    def paused_by_hand(self) -> list[LabelerRecord]:
        return [
            lab
            for lab in self.attention
            if lab.state == LabelerRecord.State.PAUSED and not lab.paused_by_gold
        ]

    @property
    def failed_screening(self) -> list[LabelerRecord]:
        return [lab for lab in self.attention if lab.state == LabelerRecord.State.SCREENING]


STALL_AFTER = timedelta(hours=1)
SHOWN = 5  # items of a list a home page shows


def lead_cockpit(*, now: datetime | None = None, project: Any = None) -> LeadCockpit:
    """The lead's home (in `project`, where named): each active batch's depth, pace and ETA,
    the labelers and solutions waiting for a lead, and alerts; a fixed number of queries
    (batches_overview's, plus six)."""
    now = now or timezone.now()
    in_project = {} if project is None else {"project_id": project.pk}
    active = list(
        Batch.objects.filter(is_active=True, **in_project).order_by("-priority", "-created_at")
    )
    batches = batches_overview(active, now=now)
    alerts = [
        Alert(
            f"{row.batch.name}: {row.labels_remaining} label{pluralize(row.labels_remaining)} "
            f"still wanted and none finished since "
            f"{timezone.localtime(hour_start(now) - timedelta(hours=1)):%H:%M}.",
            reverse("labeling:batch_dashboard", args=[row.batch.pk]),
        )
        for row in batches
        if row.labels_remaining
        and not row.labels_this_and_last_hour
        and row.batch.created_at < now - STALL_AFTER
    ]
    threshold = settings.STEPWISE_PAUSE_BELOW
    for record in LabelerRecord.objects.filter(
        **rows_in_project(None if project is None else project.pk),
        state=LabelerRecord.State.ACTIVE,
        gold_labelings__gte=settings.STEPWISE_GOLD_MIN_RESULTS,
        gold_steps__gt=0,
        gold_steps_exact__lt=F("gold_steps") * threshold,
    ).select_related("user")[:SHOWN]:
        alerts.append(
            Alert(
                f"{record.user.username}'s gold accuracy is {record.gold_accuracy:.0%}, "
                f"under the pause threshold ({threshold:.0%}).",
                reverse("labeling:labeler_detail", args=[record.user_id]),
            )
        )
    unsent = Snapshot.objects.waiting_too_long(now).filter(**in_project).count()
    if unsent:
        alerts.append(
            Alert(
                f"{unsent} snapshot{pluralize(unsent)} waiting for a worker: the task queue "
                "may be down.",
                reverse("research:index"),
            )
        )
    return LeadCockpit(
        batches=batches,
        attention=labelers_needing_attention(project),
        adjudication_count=SolutionAgreement.objects.filter(
            needs_adjudication=True,
            **({} if project is None else {"solution__project_id": project.pk}),
        ).count(),
        adjudication_top=adjudication_queue(limit=SHOWN),
        alerts=alerts,
    )
