"""PRM800K's alternatives protocol (phase 1): at each step the labeler rates k candidate next
steps from the generator, then chooses one to continue with or writes their own.

Storage is the release's: step i of the labeling is a StepLabel whose Completions are the rated
candidates (index 0..k-1, `source` the generator), `chosen_completion` the one chosen, and a
labeler-written step the human completion (index -1, unrated). The labeling's solution is a
phase-1 Solution with no pre-generated steps; the path lives in the labeling. A step that gives
the final answer (a `# Answer` heading line, alone or after the step's text: the release's
shape, `prm800k.is_final_step`) ends the labeling with `solution`.

Candidates come from the modeling app's generator: a request is a ProposedSteps row, sent by
task name to `modeling.tasks.generate_proposal`, which fills it (labeling never imports
modeling; the page polls the row). They are requested by the actions that make them needed,
never by showing the page (`labeling.selectors.alternatives` reads it): the first step's at
the claim (`request_candidates`, with the next solution's first step), the next step's as soon
as the labeler rates a candidate +1 (the likely choice) and again when they continue, the
reopened step's at a step back, the alternatives to a −1 at that rating
(`request_alternatives_after_error`). So the common case never waits on the model. Each
candidate is stored as soon as its sample ends, so the labeler reads and rates the first ones
while the others are written; the generator stops for a prefix nobody waits for
(`proposal_wanted`). Each labeler has at most STEPWISE_CANDIDATE_SETS_PER_LABELER requests
wanted, and as many tasks out, so that one labeler never floods the generator
(`request_proposal`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from labeling import selectors
from labeling.models import (
    Batch,
    Completion,
    FinishReason,
    Labeling,
    Problem,
    ProposedSteps,
    RatingEvent,
    Solution,
    StepLabel,
)
from labeling.prm800k import is_final_step
from labeling.selectors.alternatives import (
    PROPOSAL_STALE,
    after_error_step,
    candidates_per_step,
    find_proposal,
    path_of,
    prefix_hash,
    rated_steps,
)
from labeling.services import rating
from labeling.services.errors import Conflict, LabelingError
from labeling.services.importing import solution_content_hash
from labeling.services.queue import lease_until, next_claims
from labeling.services.rating import MAX_STEP_TIME_MS
from stepwise.celery import start_on_commit

logger = logging.getLogger(__name__)

MAX_STEP_CHARS = 4000
# The modeling app's task that fills a request (`modeling.services.sampling.fill_proposal`);
# PROPOSAL_STALE is past its time limit.
PROPOSAL_TASK = "modeling.tasks.generate_proposal"


# --- problems into an alternatives batch --------------------------------------------------------


def add_problems(*, batch: Batch, problem_ids: list[int]) -> int:
    """One phase-1 solution (no pre-generated steps) per problem in the batch; returns how many
    were new (a problem already there is skipped)."""
    if batch.protocol != Batch.Protocol.ALTERNATIVES:
        raise LabelingError("Only a batch with the alternatives protocol takes bare problems.")
    problems = list(Problem.objects.filter(pk__in=problem_ids))
    missing = set(problem_ids) - {p.pk for p in problems}
    if missing:
        raise LabelingError(f"No problem with id {', '.join(map(str, sorted(missing)))}.")
    created = 0
    for problem in problems:
        digest = solution_content_hash(
            problem_sha256=problem.text_sha256,
            fmt=Solution.Format.PHASE1,
            steps=[],
            final_answer=None,
            verifier_score=None,
            generation=batch.generation,
            is_quality_control=False,
            is_screening=False,
            question_override=None,
            generator=f"alternatives:{batch.pk}",
        )
        _, made = Solution.objects.get_or_create(
            project_id=batch.project_id,
            content_sha256=digest,
            defaults={
                "problem": problem,
                "batch": batch,
                "steps": [],
                "format": Solution.Format.PHASE1,
                "generation": batch.generation,
                "generator": f"alternatives:{batch.pk}",
            },
        )
        created += made
    if created:
        selectors.clear_count_cache(batch.pk)  # the dashboards' cached solution count
    return created


# --- candidates, generated ahead ----------------------------------------------------------------


def request_proposal(
    *,
    problem: Problem,
    prefix: list[str],
    k: int,
    labeler_id: int,
    again: bool = False,
    ahead: bool = False,
) -> ProposedSteps | None:
    """The candidates for this prefix: existing ones, or a request sent to the generator for
    the labeler. `again` sends a failed request once more (the page's "ask the model again"); a
    request whose task was lost (still open past the task's time limit), or that was stopped,
    is sent again by itself. The candidates it has are kept: the generator only adds to them.

    A labeler has at most STEPWISE_CANDIDATE_SETS_PER_LABELER sets wanted (pending or running)
    and as many tasks out. At the cap, a new request first stops their sets nobody can use any
    more, then their oldest; one asked `ahead` (a guess at what comes next) is not made then
    (None). A request that finds their tasks all out waits, pending, until one of them ends."""
    digest = prefix_hash(prefix)
    proposal = ProposedSteps.objects.filter(problem=problem, prefix_sha256=digest, k=k).first()
    if proposal is not None and not _needs_sending(proposal, again):
        return proposal
    with transaction.atomic():
        _lock_labeler(labeler_id)  # two tabs of one labeler count their sets one at a time
        mine = ProposedSteps.objects.filter(requested_by_id=labeler_id, status__in=OPEN)
        if proposal is not None:
            mine = mine.exclude(pk=proposal.pk)
        wanted = list(mine.order_by("requested_at").values("pk", "problem_id", "prefix", "k"))
        cap = settings.STEPWISE_CANDIDATE_SETS_PER_LABELER
        if len(wanted) >= cap:  # at the cap: first the sets nobody can use any more go
            stopped = _stop_unusable(wanted, labeler_id)
            wanted = [row for row in wanted if row["pk"] not in stopped]
        over = len(wanted) + 1 - cap
        if over > 0:
            if ahead:
                return proposal
            # The labeler waits for this one: their oldest sets make room.
            ProposedSteps.objects.filter(pk__in=[row["pk"] for row in wanted[:over]]).update(
                status=ProposedSteps.Status.STOPPED
            )
        now = timezone.now()
        asked = {
            "status": ProposedSteps.Status.PENDING,
            "error": "",
            "requested_at": now,
            "requested_by_id": labeler_id,
        }
        if proposal is None:
            try:
                with transaction.atomic():
                    proposal = ProposedSteps.objects.create(
                        problem=problem, prefix=prefix, prefix_sha256=digest, k=k, **asked
                    )
            except IntegrityError:  # another labeler's request made it meanwhile
                return ProposedSteps.objects.get(problem=problem, prefix_sha256=digest, k=k)
        # Conditional on what was read: of two requests racing here, one sends.
        elif ProposedSteps.objects.filter(
            pk=proposal.pk, status=proposal.status, sent_at=proposal.sent_at
        ).update(**asked):
            for field, value in asked.items():
                setattr(proposal, field, value)
        else:
            proposal.refresh_from_db()
            return proposal
        if proposal.pk in _send_waiting(labeler_id, now):
            proposal.sent_at = now
    return proposal


OPEN = (ProposedSteps.Status.PENDING, ProposedSteps.Status.RUNNING)


def _needs_sending(proposal: ProposedSteps, again: bool) -> bool:
    if proposal.status in OPEN:
        return not _task_out(proposal)  # waiting for room, or its task was lost
    return proposal.status == ProposedSteps.Status.STOPPED or (
        again and proposal.status == ProposedSteps.Status.FAILED
    )


def _task_out(proposal: ProposedSteps) -> bool:
    return proposal.sent_at is not None and proposal.sent_at >= timezone.now() - PROPOSAL_STALE


def _lock_labeler(labeler_id: int) -> None:
    # NO KEY: a foreign key check on the user row (an insert that names them) does not wait.
    list(User.objects.select_for_update(no_key=True).filter(pk=labeler_id).values_list("pk"))


def _stop_unusable(requests: Sequence[Mapping[str, Any]], asker: int) -> set[int]:
    """Stop those of the asker's open `requests` (rows of pk, problem_id, prefix, k) that
    nobody can use any more (`_usable`): a queued task finds its request stopped and does
    nothing, a running one stops at its next check. Returns their ids."""
    unusable = {
        row["pk"]
        for row in requests
        if not _usable(problem_id=row["problem_id"], prefix=row["prefix"], k=row["k"], asker=asker)
    }
    if unusable:
        ProposedSteps.objects.filter(pk__in=unusable, status__in=OPEN).update(
            status=ProposedSteps.Status.STOPPED
        )
    return unusable


def _send_waiting(labeler_id: int, now: datetime) -> set[int]:
    """Send the labeler's requests waiting for a task, newest first, while fewer than the cap
    of theirs are out; returns their ids. The caller holds the labeler's lock."""
    fresh = now - PROPOSAL_STALE
    rows = ProposedSteps.objects.filter(
        Q(sent_at__gte=fresh) | Q(status=ProposedSteps.Status.PENDING), requested_by_id=labeler_id
    ).values_list("pk", "sent_at", "requested_at")
    out = [row for row in rows if row[1] is not None and row[1] >= fresh]
    waiting = sorted((row for row in rows if row not in out), key=lambda row: row[2])
    room = settings.STEPWISE_CANDIDATE_SETS_PER_LABELER - len(out)
    sent = {pk for pk, _, _ in waiting[::-1][: max(room, 0)]}
    if sent:
        ProposedSteps.objects.filter(pk__in=sent).update(sent_at=now)
    for pk in sent:
        # By task name: the modeling app fills it (labeling never imports modeling).
        start_on_commit(PROPOSAL_TASK, pk)
    return sent


def proposal_task_done(proposal_id: int) -> None:
    """The request's task is through, whatever it did: the labeler's next request waiting for
    a task is sent. A request running meanwhile is another task's, still out."""
    with transaction.atomic():
        labeler_id = (
            ProposedSteps.objects.filter(pk=proposal_id)
            .values_list("requested_by_id", flat=True)
            .first()
        )
        if labeler_id is not None:
            _lock_labeler(labeler_id)
        ProposedSteps.objects.filter(pk=proposal_id).exclude(
            status=ProposedSteps.Status.RUNNING
        ).update(sent_at=None)
        if labeler_id is not None:
            _send_waiting(labeler_id, timezone.now())


def proposal_wanted(proposal_id: int) -> bool:
    """Whether anyone still waits for this request's candidates: the generator asks every few
    tokens (and while it waits for the model) and stops when nobody does. Wanted while it is
    running (not answered, stopped, reset or deleted meanwhile) and usable (`_usable`)."""
    row = (
        ProposedSteps.objects.filter(pk=proposal_id, status=ProposedSteps.Status.RUNNING)
        .values("problem_id", "prefix", "k", "requested_by_id")
        .first()
    )
    if row is None:
        return False
    return _usable(
        problem_id=row["problem_id"], prefix=row["prefix"], k=row["k"], asker=row["requested_by_id"]
    )


def _usable(*, problem_id: int, prefix: list[str], k: int, asker: int | None) -> bool:
    """Whether anyone can still use the candidates after `prefix`: an open labeling of the
    problem is at that prefix, or one step before it and rated that step +1 among its
    candidates (asked ahead of the choice); a first step whose asker has not left a labeling
    of the problem (asked ahead of a claim); or the alternatives to the step a labeling of the
    problem ended on with a −1 (PRM800K phase 2)."""
    open_labelings = Labeling.objects.filter(
        solution__problem_id=problem_id,
        solution__format=Solution.Format.PHASE1,
        status=Labeling.Status.IN_PROGRESS,
    ).select_related("solution__batch")
    for labeling in open_labelings:
        if candidates_per_step(labeling) != k:
            continue
        path, open_step = path_of(labeling)
        if path == prefix:
            return True
        if prefix and path == prefix[:-1] and open_step is not None:
            rated_up = {c.text for c in open_step.completions.all() if c.rating == 1}
            if prefix[-1] in rated_up:
                return True
    if not prefix:
        left = Labeling.objects.filter(labeler_id=asker, solution__problem_id=problem_id).exclude(
            status=Labeling.Status.IN_PROGRESS
        )
        if asker is None or not left.exists():
            return True
    ended_on_minus_one = (
        Labeling.objects.filter(
            solution__problem_id=problem_id,
            solution__batch__protocol=Batch.Protocol.STEPS,
            solution__batch__alternatives_after_error=True,
            solution__batch__alternatives_k=k,
            status=Labeling.Status.COMPLETED,
            finish_reason=FinishReason.FOUND_ERROR,
        )
        .annotate(wrong=Max("step_labels__index"))
        .filter(wrong=len(prefix))
    )
    return any(
        steps[: len(prefix)] == prefix
        for steps in ended_on_minus_one.values_list("solution__steps", flat=True)
    )


# --- what the labeler's actions ask for ------------------------------------------------------
# The candidates a page shows are asked for by the action (a POST) that makes them needed, so
# the page's first paint finds them asked for and showing or polling the page writes nothing.

# Solutions whose first candidates are generated while the labeler works on this one.
FIRST_STEPS_AHEAD = 1


def _first_steps_ahead(labeling: Labeling, batch: Batch, k: int) -> None:
    """The first step of a solution has no step before it to generate ahead from: ask for the
    first candidates of the solution this labeler will claim next, so it is ready by then."""
    for solution in next_claims(labeling.labeler, batch, FIRST_STEPS_AHEAD):
        request_proposal(
            problem=solution.problem, prefix=[], k=k, labeler_id=labeling.labeler_id, ahead=True
        )


def _builds_its_path(labeling: Labeling) -> bool:
    """In the alternatives protocol. The solution is read first (a phase-1 solution with no
    steps of its own), so that a claim of fixed steps pays no statement for the batch."""
    solution = labeling.solution
    if solution.format != Solution.Format.PHASE1 or solution.steps:
        return False
    return solution.batch is not None and solution.batch.protocol == Batch.Protocol.ALTERNATIVES


def request_candidates(labeling: Labeling, *, again: bool = False) -> ProposedSteps | None:
    """The candidates for the open step of a labeling built step by step, requested for its
    labeler (`request_proposal`: a request already out is left as it is); at its first step the
    next solution's first step is asked for ahead too. The claim calls it, so the labeling page
    finds its first step asked for; "ask the model" too, where the page says nothing is writing
    them (never asked, stopped, or the task lost) or, with `again`, that the model failed. None
    for a labeling of fixed steps, or one no longer open."""
    if not labeling.is_open or not _builds_its_path(labeling):
        return None
    path, _ = path_of(labeling)
    k = candidates_per_step(labeling)
    proposal = request_proposal(
        problem=labeling.solution.problem,
        prefix=path,
        k=k,
        labeler_id=labeling.labeler_id,
        again=again,
    )
    batch = labeling.solution.batch
    if not path and batch is not None:
        _first_steps_ahead(labeling, batch, k)
    return proposal


def request_alternatives_after_error(
    labeling: Labeling, *, again: bool = False
) -> ProposedSteps | None:
    """PRM800K phase 2: the model's alternatives to the step a labeling ended on with a −1, in a
    batch that asks for them, requested for its labeler at that rating (or by "ask the model";
    `again`: a failed request sent once more). None for any other labeling."""
    found = after_error_step(labeling)
    if found is None:
        return None
    _, prefix = found
    return request_proposal(
        problem=labeling.solution.problem,
        prefix=prefix,
        k=candidates_per_step(labeling),
        labeler_id=labeling.labeler_id,
        again=again,
    )


# --- the labeler's path -------------------------------------------------------------------------


def rate_after_error(
    *, labeling_id: int, user: User, candidate_index: int, rating_value: int, flagged: bool = False
) -> Labeling:
    """Rate one alternative to the labeling's −1 step. The same rating again is a no-op, another
    one an edit; the labeling's release line is rendered again with it."""
    if rating_value not in (-1, 0, 1):
        raise LabelingError("A rating is -1, 0 or +1.")
    with transaction.atomic():
        labeling = rating.labeling_for_update(labeling_id, user)
        panel = selectors.after_error_panel(labeling)
        if panel is None:
            raise LabelingError("Only a labeling that ended on a −1 has alternatives to rate.")
        # An alternative shown while the others are written is rated at once: the list only grows.
        if panel.proposal is None or not panel.candidates:
            raise Conflict("The alternatives are not ready yet.")
        if not 0 <= candidate_index < len(panel.candidates):
            raise LabelingError(f"There is no alternative {candidate_index + 1}.")
        step = StepLabel.objects.get(labeling=labeling, index=panel.step_index)
        before = panel.candidates[candidate_index]
        if before.rating == rating_value and before.flagged == flagged:
            return labeling  # a double submit
        detail = f"alternative {candidate_index + 1}" + (", flagged" if flagged else "")
        if before.rating is None:
            Completion.objects.create(
                step=step,
                index=candidate_index + 1,
                text=before.text,
                rating=rating_value,
                flagged=flagged,
                source=panel.proposal.generator[:32],
            )
            reason = RatingEvent.Reason.RATE
        else:
            Completion.objects.filter(step=step, index=candidate_index + 1).update(
                rating=rating_value, flagged=flagged
            )
            reason = RatingEvent.Reason.EDIT
        RatingEvent.objects.create(
            labeling=labeling,
            step_index=panel.step_index,
            old_rating=before.rating,
            new_rating=rating_value,
            reason=reason,
            detail=detail,
            actor=user,
        )
        rating.store_release_line(labeling)
        return labeling


def _open_alternatives(labeling: Labeling, step_index: int) -> list[str]:
    """The path of a labeling locked by the caller, checked to be open at `step_index`."""
    if labeling.solution.format != Solution.Format.PHASE1:
        raise LabelingError("This labeling rates fixed steps, not candidates.")
    if labeling.status == Labeling.Status.COMPLETED:
        raise Conflict("This labeling is already submitted.")
    path, _ = path_of(labeling)
    if step_index != len(path):
        raise Conflict(f"Step {len(path) + 1} is the one to label (the page was out of date).")
    # The path becomes the solution: bounded as an imported one is.
    limit = settings.STEPWISE_MAX_STEPS_PER_SOLUTION
    if step_index >= limit:
        raise LabelingError(f"A solution has at most {limit} steps: give up on this one.")
    return path


def rate_candidate(
    *,
    labeling_id: int,
    user: User,
    step_index: int,
    candidate_index: int,
    rating_value: int,
    flagged: bool = False,
) -> Labeling:
    """Save one candidate's rating as it is made; the same rating again is a no-op. A +1 asks
    for the candidates after it at once (generated ahead)."""
    if rating_value not in (-1, 0, 1):
        raise LabelingError("A rating is -1, 0 or +1.")
    with transaction.atomic():
        labeling = rating.labeling_for_update(labeling_id, user)
        path = _open_alternatives(labeling, step_index)
        k = candidates_per_step(labeling)
        proposal = find_proposal(labeling, path, k)
        # A candidate shown while the others are written is rated at once: the list only grows.
        if proposal is None or not proposal.steps:
            raise Conflict("The candidates for this step are not ready yet.")
        if not 0 <= candidate_index < len(proposal.steps):
            if proposal.writing:
                raise Conflict(f"Candidate {candidate_index + 1} is still being written.")
            raise LabelingError(f"There is no candidate {candidate_index + 1} at this step.")
        step, _ = StepLabel.objects.get_or_create(
            labeling=labeling, index=step_index, defaults={"chosen_completion": None}
        )
        saved = Completion.objects.filter(step=step, index=candidate_index).first()
        text = proposal.steps[candidate_index]
        if saved is not None:
            if saved.rating == rating_value and bool(saved.flagged) == flagged:
                return labeling  # a double submit
            # The step is still open (nothing chosen or written): a change of mind is an edit.
            Completion.objects.filter(pk=saved.pk).update(rating=rating_value, flagged=flagged)
            RatingEvent.objects.create(
                labeling=labeling,
                step_index=step_index,
                old_rating=saved.rating,
                new_rating=rating_value,
                reason=RatingEvent.Reason.EDIT,
                detail=f"candidate {candidate_index + 1}" + (", flagged" if flagged else ""),
                actor=user,
            )
            _ask_ahead(labeling, path, text, rating_value, k)
            return labeling
        try:
            with transaction.atomic():
                Completion.objects.create(
                    step=step,
                    index=candidate_index,
                    text=text,
                    rating=rating_value,
                    flagged=flagged,
                    source=proposal.generator[:32],
                )
        except IntegrityError as exc:  # a concurrent double submit won the race
            raise Conflict("This candidate was just rated.") from exc
        RatingEvent.objects.create(
            labeling=labeling,
            step_index=step_index,
            new_rating=rating_value,
            reason=RatingEvent.Reason.RATE,
            detail=f"candidate {candidate_index + 1}" + (", flagged" if flagged else ""),
            actor=user,
        )
        _ask_ahead(labeling, path, text, rating_value, k)
        return labeling


def _ask_ahead(labeling: Labeling, path: list[str], text: str, rating_value: int, k: int) -> None:
    """A +1 is the likely choice: its successors are generated while the labeler rates on."""
    if rating_value == 1 and not is_final_step(text):
        request_proposal(
            problem=labeling.solution.problem,
            prefix=[*path, text],
            k=k,
            labeler_id=labeling.labeler_id,
            ahead=True,
        )


def choose_candidate(
    *,
    labeling_id: int,
    user: User,
    step_index: int,
    candidate_index: int,
    elapsed_ms: int | None = None,
) -> Labeling:
    """Continue the path with a rated candidate (+1 or 0); a final-answer step ends the labeling
    with `solution`. Choosing the same candidate again is a no-op.

    Not while the step's other candidates are still being written: as in PRM800K's phase 1,
    the labeler has seen every candidate before continuing (and a choice made earlier would
    leave the rest unseen, and unrated, in the data)."""
    with transaction.atomic():
        labeling = rating.labeling_for_update(labeling_id, user)
        step = StepLabel.objects.filter(labeling=labeling, index=step_index).first()
        if step is not None and step.chosen_completion == candidate_index:
            return labeling
        path = _open_alternatives(labeling, step_index)
        chosen = Completion.objects.filter(step=step, index=candidate_index).first()
        if step is None or chosen is None:
            raise Conflict(f"Rate candidate {candidate_index + 1} before choosing it.")
        if chosen.rating not in (0, 1):
            raise LabelingError("Continue with a candidate rated +1 or 0, or write your own step.")
        proposal = find_proposal(labeling, path, candidates_per_step(labeling))
        if proposal is not None and proposal.writing:
            raise Conflict(
                "The model is still writing this step's other candidates: continue once they "
                "are all shown."
            )
        StepLabel.objects.filter(pk=step.pk).update(chosen_completion=candidate_index)
        return _after_step(
            labeling, user, step, [*path, chosen.text], f"chose {candidate_index + 1}", elapsed_ms
        )


def write_step(
    *, labeling_id: int, user: User, step_index: int, text: str, elapsed_ms: int | None = None
) -> Labeling:
    """The labeler's own step when no candidate will do (PRM800K's human completion)."""
    # A plain form post sends CRLF line ends; the release's texts have LF only.
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        raise LabelingError("Write the step before submitting it.")
    if len(text) > MAX_STEP_CHARS:
        raise LabelingError(f"A step has at most {MAX_STEP_CHARS} characters.")
    with transaction.atomic():
        labeling = rating.labeling_for_update(labeling_id, user)
        step = StepLabel.objects.filter(labeling=labeling, index=step_index).first()
        human = step and Completion.objects.filter(step=step, index=-1).first()
        if human:
            if human.text == text:
                return labeling  # a double submit
            raise Conflict(f"Step {step_index + 1} already has your own step.")
        path = _open_alternatives(labeling, step_index)
        step, _ = StepLabel.objects.get_or_create(
            labeling=labeling, index=step_index, defaults={"chosen_completion": None}
        )
        Completion.objects.create(
            step=step,
            index=-1,
            text=text,
            rating=None,
            flagged=False,
            is_human=True,
            source="human",
        )
        return _after_step(labeling, user, step, [*path, text], "wrote a step", elapsed_ms)


def step_back(*, labeling_id: int, user: User) -> Labeling:
    """Take back the last step of the path (the candidate continued with, or the labeler's own
    step): that step is open again with its candidates' ratings, to choose again. Ratings
    already given at the step after it go too. Allowed where undo is; a labeling that ended on
    its final step moments ago is reopened."""
    with transaction.atomic():
        labeling = rating.labeling_for_update(labeling_id, user)
        if labeling.solution.format != Solution.Format.PHASE1:
            raise LabelingError("This labeling rates fixed steps: use undo.")
        now = timezone.now()
        refusal = rating.revisit_refusal(labeling, now)
        if refusal:
            raise Conflict(refusal)
        steps = rated_steps(labeling)
        open_step = next(
            (
                s
                for s in steps
                if s.chosen_completion is None and all(c.index != -1 for c in s.completions.all())
            ),
            None,
        )
        settled = [s for s in steps if s is not open_step]
        if not settled:
            raise Conflict("There is no step to take back yet.")
        if labeling.status == Labeling.Status.COMPLETED:
            rating.reopen(labeling, user, now)
        last = settled[-1]
        events = [
            RatingEvent(
                labeling=labeling,
                step_index=last.index,
                reason=RatingEvent.Reason.UNDO,
                detail=f"took back step {last.index + 1}",
                actor=user,
                created_at=now,
            )
        ]
        if open_step is not None:
            events += [
                RatingEvent(
                    labeling=labeling,
                    step_index=open_step.index,
                    old_rating=c.rating,
                    reason=RatingEvent.Reason.UNDO,
                    detail=f"candidate {c.index + 1}",
                    actor=user,
                    created_at=now,
                )
                for c in open_step.completions.all()
            ]
            open_step.delete()
        RatingEvent.objects.bulk_create(events)
        Completion.objects.filter(step=last, index=-1).delete()
        StepLabel.objects.filter(pk=last.pk).update(chosen_completion=None, time_ms=None)
        labeling.lease_expires_at = lease_until(labeling.solution.batch, now)
        labeling.save(update_fields=["lease_expires_at", "updated_at"])
        # The path moved back: what the labeler asked past it, unless rated +1, is of no use now.
        asked = ProposedSteps.objects.filter(
            requested_by_id=user.pk, problem_id=labeling.solution.problem_id, status__in=OPEN
        ).values("pk", "problem_id", "prefix", "k")
        _stop_unusable([row for row in asked if len(row["prefix"]) >= len(settled)], user.pk)
        # The reopened step's candidates, sent again if they were stopped while it was settled.
        request_candidates(labeling)
        return labeling


def _after_step(
    labeling: Labeling,
    user: User,
    step: StepLabel,
    path: list[str],
    detail: str,
    elapsed_ms: int | None,
) -> Labeling:
    """The step is settled: time it, then end on a final answer or ask for the next candidates."""
    now = timezone.now()
    step_time = None if elapsed_ms is None else max(0, min(int(elapsed_ms), MAX_STEP_TIME_MS))
    if step_time is not None:  # the labeling's total is summed from its steps at the finish
        StepLabel.objects.filter(pk=step.pk).update(time_ms=step_time)
    RatingEvent.objects.create(
        labeling=labeling,
        step_index=len(path) - 1,
        reason=RatingEvent.Reason.RATE,
        detail=detail,
        actor=user,
        created_at=now,
    )
    if is_final_step(path[-1]):
        rating.end_labeling(labeling, FinishReason.SOLUTION, user, now)
        return labeling
    batch = labeling.solution.batch
    request_proposal(
        problem=labeling.solution.problem,
        prefix=path,
        k=candidates_per_step(labeling),
        labeler_id=user.pk,
    )
    labeling.lease_expires_at = lease_until(batch, now)
    labeling.save(update_fields=["lease_expires_at", "updated_at"])
    return labeling
