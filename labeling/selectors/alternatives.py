"""The alternatives protocol's page (PRM800K phase 1, and phase 2's alternatives after a −1):
the labeler's path so far, the open step's candidates with their ratings, and where the
candidates stand. Reads only: the candidates are requested by the actions that make them
needed (`labeling.services.alternatives`), never by showing or polling the page."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from labeling.models import (
    Batch,
    Completion,
    FinishReason,
    Labeling,
    ProposedSteps,
    StepLabel,
)

# Past the generate task's time limit: a request still open has lost its worker.
PROPOSAL_STALE = timedelta(seconds=660)


def prefix_hash(prefix: list[str]) -> str:
    return hashlib.sha256(json.dumps(prefix).encode("utf-8")).hexdigest()


def candidates_per_step(labeling: Labeling) -> int:
    """The batch's setting (5 for a solution in no batch)."""
    batch = labeling.solution.batch
    return batch.alternatives_k if batch else 5


def find_proposal(labeling: Labeling, prefix: list[str], k: int) -> ProposedSteps | None:
    """The candidates asked for this prefix of the labeling's problem, if anyone asked."""
    return ProposedSteps.objects.filter(
        problem_id=labeling.solution.problem_id, prefix_sha256=prefix_hash(prefix), k=k
    ).first()


def task_lost(proposal: ProposedSteps, now: datetime) -> bool:
    """Still open, but nothing will come of it: its task went out, or it was asked for and
    waited for one, longer ago than the task's time limit (its worker died, or the web
    process that ran it in a thread restarted)."""
    since = proposal.sent_at or proposal.requested_at
    return proposal.writing and since < now - PROPOSAL_STALE


def rated_steps(labeling: Labeling) -> list[StepLabel]:
    """The labeling's step labels in order, their completions with them."""
    return list(labeling.step_labels.prefetch_related("completions").order_by("index"))


def path_of(labeling: Labeling) -> tuple[list[str], StepLabel | None]:
    """The step texts chosen or written so far, and the open step (candidates being rated)."""
    path: list[str] = []
    open_step = None
    for step in rated_steps(labeling):
        completions = {c.index: c for c in step.completions.all()}
        if step.chosen_completion is not None:
            path.append(completions[step.chosen_completion].text)
        elif -1 in completions:
            path.append(completions[-1].text)
        else:
            open_step = step
    return path, open_step


def after_error_step(labeling: Labeling) -> tuple[StepLabel, list[str]] | None:
    """Rate the steps, PRM800K phase 2: the step a labeling ended on with a −1, in a batch that
    asks for the model's alternatives to it, and the solution's steps before it; None for any
    other labeling (read from the loaded batch: no statement)."""
    batch = labeling.solution.batch
    if (
        batch is None
        or not batch.alternatives_after_error
        or batch.protocol != Batch.Protocol.STEPS
        or labeling.status != Labeling.Status.COMPLETED
        or labeling.finish_reason != FinishReason.FOUND_ERROR
    ):
        return None
    wrong = labeling.step_labels.prefetch_related("completions").order_by("-index").first()
    if wrong is None:
        return None
    return wrong, list(labeling.solution.steps[: wrong.index])


@dataclass(frozen=True)
class PathStep:
    index: int
    text: str
    rating: int | None  # the chosen candidate's; None for the labeler's own step
    written: bool
    candidates_rated: int


@dataclass(frozen=True)
class Candidate:
    index: int
    text: str
    rating: int | None
    flagged: bool

    @property
    def choosable(self) -> bool:
        return self.rating in (0, 1)


@dataclass(frozen=True)
class AlternativesPanel:
    """What the labeling page shows in the alternatives protocol."""

    path: list[PathStep]
    step_index: int  # the step being labeled (or the last one, when done)
    candidates: list[Candidate]  # the open step's, with what the labeler gave them so far
    proposal: ProposedSteps | None  # None once the labeling is done, or where nobody asked
    wanted: bool  # the step still needs candidates: its labeling is open (or ended on a −1)
    lost: bool  # its request is open but its task was lost (`task_lost`)

    @property
    def waiting(self) -> bool:
        """Candidates are still being written (some may be shown already): the page polls."""
        return self.proposal is not None and self.proposal.writing and not self.lost

    @property
    def still_to_come(self) -> int:
        return self.proposal.k - len(self.candidates) if self.waiting and self.proposal else 0

    @property
    def failed(self) -> bool:
        return self.proposal is not None and self.proposal.status == ProposedSteps.Status.FAILED

    @property
    def needs_asking(self) -> bool:
        """Nothing is writing the candidates the step needs: never asked for (an action's
        request lost with its process), stopped before all k came, or its task lost. The page
        offers to ask (a POST); it never asks by itself."""
        if not self.wanted:
            return False
        if self.proposal is None or self.lost:
            return True
        stopped = self.proposal.status == ProposedSteps.Status.STOPPED
        return stopped and len(self.proposal.steps) < self.proposal.k

    @property
    def rated_count(self) -> int:
        return sum(c.rating is not None for c in self.candidates)


def alternatives_panel(labeling: Labeling) -> AlternativesPanel:
    """The path so far and the open step's candidates, as far as they are written."""
    path: list[PathStep] = []
    saved: dict[int, Completion] = {}
    for step in rated_steps(labeling):
        completions = {c.index: c for c in step.completions.all()}
        rated = sum(1 for i, c in completions.items() if i >= 0 and c.rating is not None)
        if step.chosen_completion is not None:
            chosen = completions[step.chosen_completion]
            path.append(PathStep(step.index, chosen.text, chosen.rating, False, rated))
        elif -1 in completions:
            path.append(PathStep(step.index, completions[-1].text, None, True, rated))
        else:
            saved = completions
    proposal = None
    candidates: list[Candidate] = []
    wanted = labeling.status == Labeling.Status.IN_PROGRESS
    if wanted or saved:
        proposal = find_proposal(
            labeling, [step.text for step in path], candidates_per_step(labeling)
        )
        for index, text in enumerate(proposal.steps if proposal is not None else []):
            completion = saved.get(index)
            candidates.append(
                Candidate(
                    index,
                    text,
                    completion.rating if completion else None,
                    bool(completion and completion.flagged),
                )
            )
    lost = proposal is not None and task_lost(proposal, timezone.now())
    return AlternativesPanel(path, len(path), candidates, proposal, wanted, lost)


def after_error_panel(labeling: Labeling) -> AlternativesPanel | None:
    """Rate the steps, PRM800K phase 2: once a labeling ends on a −1 (in a batch that asks for
    it), the model's alternatives to the wrong step, each with the labeler's rating so far.
    They are stored after the step's own completion (index 1..k), as in the release."""
    found = after_error_step(labeling)
    if found is None:
        return None
    wrong, prefix = found
    proposal = find_proposal(labeling, prefix, candidates_per_step(labeling))
    saved = {c.index - 1: c for c in wrong.completions.all() if c.index >= 1}
    candidates = [
        Candidate(
            index,
            text,
            saved[index].rating if index in saved else None,
            bool(index in saved and saved[index].flagged),
        )
        for index, text in enumerate(proposal.steps if proposal else [])
    ]
    lost = proposal is not None and task_lost(proposal, timezone.now())
    return AlternativesPanel([], wrong.index, candidates, proposal, True, lost)
