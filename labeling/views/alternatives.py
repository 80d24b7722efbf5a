"""The labeling page in the alternatives protocol (PRM800K phase 1): rate the generator's
candidate next steps, continue with one or write your own.

The labeler's page (`labeler.labeling_page`) hands a labeling of an alternatives batch to
`page`; the actions answer with the panel, as the rate-the-steps page does.
"""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from labeling import selectors
from labeling.models import Batch, FinishReason, Labeling
from labeling.services import alternatives
from labeling.services.errors import LabelingError
from labeling.views.common import (
    Key,
    Panel,
    answer,
    int_param,
    notes_card,
    readable_labeling,
    refused,
)
from stepwise.request_types import AuthenticatedRequest

# The page's keys: the help is rendered from this list and labeling.js reads its map from it.
# An action of several words is tried word by word: Enter continues with the selected
# candidate, or opens the next solution once the labeling is done.
ALTERNATIVES_KEYS = [
    Key(("ArrowDown", "j"), "cand-next", ("\u2193", "J"), "select the next candidate"),
    Key(("ArrowUp", "k"), "cand-prev", ("\u2191", "K"), "select the previous candidate"),
    Key(("1", "+", "="), "rate-pos", ("1",), "+1: the selected candidate is correct and helps"),
    Key(("0",), "rate-neu", ("0",), "0: correct but unhelpful or ambiguous"),
    Key(("-", "_"), "rate-neg", ("-",), "\u22121: wrong, unverifiable or a dead end"),
    Key(("f",), "flag", ("F",), "flag the next rating as unsure"),
    Key(
        ("Enter",),
        "choose next",
        ("Enter",),
        "continue with the selected candidate (rated +1 or 0); when done, next solution",
    ),
    Key(("w",), "write", ("W",), "write your own step (Ctrl+Enter sends it, Esc closes)"),
    Key(
        ("u", "Backspace"),
        "undo",
        ("U", "Backspace"),
        "back a step: take back the last step of the path and choose again",
    ),
    Key(("r",), "retry", ("R",), "retry what did not save, or ask the model again"),
    Key(("g",), "give-up", ("G",), "give up on this solution"),
    Key(("b",), "bad-problem", ("B",), "report a bad problem"),
    Key(("Escape",), "deselect", ("Esc",), "closes this help"),
    Key(("?",), "help", ("?",), "show these keys"),
    Key(("h",), "guidelines", ("H",), "open the guidelines"),
    Key(("n",), "note", ("N",), "write a note on the step being rated (or the last one rated)"),
]
ALTERNATIVES_KEY_MAP = json.dumps({key: k.action for k in ALTERNATIVES_KEYS for key in k.keys})


PANEL = "labeling/alternatives.html#panel"
CANDIDATES = "labeling/_candidates.html"  # polled while the model writes


def is_alternatives(labeling: Labeling) -> bool:
    batch = labeling.solution.batch
    return batch is not None and batch.protocol == Batch.Protocol.ALTERNATIVES


def candidates_context(labeling: Labeling, panel, *, own: bool, choose: bool) -> dict:
    """What templates/labeling/_candidates.html needs."""
    rate = "labeling:rate_candidate" if choose else "labeling:rate_after_error"
    return {
        "cpanel": panel,
        "choose": choose,
        "title": "Candidates for step" if choose else "Alternatives to step",
        "actionable": own and (labeling.is_open or not choose),
        "rate_url": reverse(rate, args=[labeling.pk]),
        "ask_url": reverse(
            "labeling:ask_again" if choose else "labeling:ask_again_after_error", args=[labeling.pk]
        ),
    }


def panel_context(labeling: Labeling, user, error: str | None = None) -> dict:
    own = labeling.labeler_id == user.pk
    panel = selectors.alternatives_panel(labeling)
    return {
        **candidates_context(labeling, panel, own=own, choose=True),
        "labeling": labeling,
        "solution": labeling.solution,
        "problem": labeling.solution.problem,
        "panel": panel,
        "open": labeling.status == Labeling.Status.IN_PROGRESS,
        "read_only": not own,
        "error": error,
        "finish_reasons": FinishReason,
        "number_today": labeling.earlier_today + 1,  # type: ignore[attr-defined]
    }


ALTERNATIVES_PANEL = Panel(PANEL, panel_context)


def nothing_new(request: AuthenticatedRequest, panel) -> bool:
    """A poll of the candidates being written (`?part=candidates&shown=N`) that would show the
    same N again: answered 204, which htmx does not swap, so the page stays as the labeler
    has it."""
    shown = request.GET.get("shown")
    return panel is not None and panel.waiting and shown == str(len(panel.candidates))


def page(request: AuthenticatedRequest, labeling: Labeling) -> HttpResponse:
    """The whole page, the panel (htmx), or only the candidates while they are generated."""
    context = panel_context(labeling, request.user)
    context["keys"] = ALTERNATIVES_KEYS
    context["key_map"] = ALTERNATIVES_KEY_MAP
    template = "labeling/alternatives.html"
    if not request.htmx:  # the notes card is outside the panel: only the full page has it
        context.update(notes_card(request, labeling))
    if request.htmx:
        template = CANDIDATES if request.GET.get("part") == "candidates" else PANEL
        if template == CANDIDATES and nothing_new(request, context["cpanel"]):
            return HttpResponse(status=204)
    return render(request, template, context)


@login_required
@require_POST
def rate_candidate(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    try:
        labeling = alternatives.rate_candidate(
            labeling_id=labeling_id,
            user=request.user,
            step_index=int_param(request, "step_index"),
            candidate_index=int_param(request, "candidate_index"),
            rating_value=int_param(request, "rating"),
            flagged=request.POST.get("flagged") in ("1", "on", "true"),
        )
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, ALTERNATIVES_PANEL)
    return answer(request, labeling, ALTERNATIVES_PANEL)


@login_required
@require_POST
def choose_candidate(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    try:
        labeling = alternatives.choose_candidate(
            labeling_id=labeling_id,
            user=request.user,
            step_index=int_param(request, "step_index"),
            candidate_index=int_param(request, "candidate_index"),
            elapsed_ms=int_param(request, "elapsed_ms", required=False),
        )
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, ALTERNATIVES_PANEL)
    return answer(request, labeling, ALTERNATIVES_PANEL)


@login_required
@require_POST
def write_step(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    try:
        labeling = alternatives.write_step(
            labeling_id=labeling_id,
            user=request.user,
            step_index=int_param(request, "step_index"),
            text=request.POST.get("text", ""),
            elapsed_ms=int_param(request, "elapsed_ms", required=False),
        )
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, ALTERNATIVES_PANEL)
    return answer(request, labeling, ALTERNATIVES_PANEL)


@login_required
@require_POST
def ask_again(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """Ask the model for this step's candidates: it failed, or nothing is writing them (never
    asked, stopped, or the task lost)."""
    labeling = readable_labeling(request, labeling_id)
    try:
        if labeling.labeler_id == request.user.pk:
            alternatives.request_candidates(labeling, again=True)
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, ALTERNATIVES_PANEL)
    return answer(request, labeling, ALTERNATIVES_PANEL)


@login_required
@require_POST
def step_back(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    try:
        labeling = alternatives.step_back(labeling_id=labeling_id, user=request.user)
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, ALTERNATIVES_PANEL)
    return answer(request, labeling, ALTERNATIVES_PANEL)
