"""Labeler pages: queue, claim, the labeling page (rate, undo, finish), guidelines.

Views fetch, validate, call a service, render; htmx gets the fragment.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget

from labeling import selectors
from labeling.access import all_projects
from labeling.models import Batch, FinishReason, Labeling
from labeling.roles import ALL_ROLES, LABELER, require
from labeling.services import alternatives as alternatives_service
from labeling.services import notes, rating
from labeling.services import queue as queue_service
from labeling.services.errors import LabelingError
from labeling.services.queue import claimable_batch, extend_lease, labeling_skip
from labeling.views import alternatives
from labeling.views.common import (
    CHOSEN_BATCH,
    Key,
    Panel,
    answer,
    chosen_batch_id,
    int_param,
    notes_card,
    readable_labeling,
    refused,
)
from labeling.views.navigation import safe_return_url
from stepwise.links import project_reverse
from stepwise.request_types import AuthenticatedRequest

PANEL = "labeling/labeling.html#panel"
NOTE_SAVED = "labeling/_note_saved.html"  # a saved note, added to the notes card (htmx)
NOTE_ERROR = "labeling/_note_error.html"  # why a note was refused, in the card's error line


# The labeler's pages are never kept by the browser: Back after a skip, a finish or a claim asks
# the server again, which shows what became of the solution instead of its live buttons.
@never_cache
@login_required
def queue(request: AuthenticatedRequest) -> HttpResponse:
    """The labeler's section of the home page, with their recent labelings."""
    require(request, LABELER, message="You need the labeler role to label.")
    return _queue_page(request)


def _queue_page(request: AuthenticatedRequest, status: int = 200) -> HttpResponse:
    recent = (
        Labeling.objects.filter(labeler=request.user, status=Labeling.Status.COMPLETED)
        .select_related("solution__problem")
        .order_by("-finished_at")[:10]
    )
    cockpit = selectors.labeler_cockpit(
        request.user,
        selectors.labeler_record(request.user, request.project),
        chosen_batch_id=chosen_batch_id(request),
    )
    context = {"labeler_cockpit": cockpit, "recent": recent}
    return render(request, "labeling/queue.html", context, status=status)


@login_required
@require_POST
def claim(request: AuthenticatedRequest) -> HttpResponse:
    """The next solution to label. A posted `batch` is a choice from the home page ("Continue
    in …", kept for the claims after it) or, empty, the choice taken back (every batch open to
    the labeler, highest priority first)."""
    require(request, LABELER, message="You need the labeler role to label.")
    if "batch" in request.POST:
        try:
            _choose_batch(request, request.POST["batch"].strip())
        except LabelingError as refused:
            messages.error(request, str(refused))
            return _queue_page(request, status=refused.status_code)
    return _claim_and_open(request)


def _choose_batch(request: AuthenticatedRequest, value: str) -> None:
    if value == "":
        request.session.pop(CHOSEN_BATCH, None)
        return
    try:
        batch_id = int(value)
    except ValueError:
        raise LabelingError(f"batch must be a batch's number, got {value[:50]!r}.") from None
    batch = claimable_batch(request.user, batch_id, request.project)
    if batch is None:
        raise LabelingError(
            f"Batch {batch_id} is not open to you: it is paused, finished or assigned to other "
            "labelers. Pick one of the batches listed here."
        )
    if request.session.get(CHOSEN_BATCH) != batch.pk:
        request.session[CHOSEN_BATCH] = batch.pk


def labeling_url(labeling: Labeling, project: Any) -> str:
    """The labeling's page in its own project (the one a labeler has open may be in another
    project than the page they claimed on); the project is read where the claim left it."""
    project_id = getattr(labeling, "in_project_id", None)
    if project_id is None:
        project_id = labeling.solution.project_id
    if project is not None and project_id == project.pk:
        return reverse("labeling:labeling", args=[labeling.pk])
    slug = next(slug for pk, slug, _ in all_projects() if pk == project_id)
    return project_reverse(slug, "labeling:labeling", labeling.pk)


def _claim_and_open(request: AuthenticatedRequest) -> HttpResponse:
    """Claim (from the chosen batch while it has work for the labeler) and open it."""
    chosen_id = chosen_batch_id(request)
    chosen = (
        None if chosen_id is None else claimable_batch(request.user, chosen_id, request.project)
    )
    found = None
    if chosen is not None:
        found = queue_service.claim(request.user, batch=chosen, project=request.project)
    if found is None:
        if chosen_id is not None:
            request.session.pop(CHOSEN_BATCH, None)
            record = selectors.labeler_record(request.user, request.project)
            if chosen is not None and record.may_do_regular_work:
                messages.info(
                    request,
                    f"“{chosen.name}” has nothing more for you: on to the other batches.",
                )
        found = queue_service.claim(request.user, project=request.project)
    labeling = None if found is None else found.labeling
    if labeling is not None:  # step by step: the page's first paint finds its candidates asked
        alternatives_service.request_candidates(labeling)
    if found is not None and found.resumed_expired:
        messages.info(
            request,
            "Your claim on this solution had expired while you were away; it is yours again. "
            "Continue where you stopped.",
        )
    if labeling is None:
        if selectors.labeler_record(request.user, request.project).may_do_regular_work:
            messages.info(request, "Nothing is waiting for you right now. Thank you!")
        return redirect("labeling:queue")
    return redirect(labeling_url(labeling, request.project))


@login_required
@require_POST
def skip(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """Pass a solution on with a reason (not counted, not offered again), and open the next."""
    require(request, LABELER, message="You need the labeler role to label.")
    try:
        labeling_skip(
            labeling_id=labeling_id, user=request.user, reason=request.POST.get("reason", "")
        )
    except LabelingError as refused:
        messages.error(request, str(refused))
        response = labeling_page(request, labeling_id)  # 404/403 where it is not theirs
        response.status_code = refused.status_code
        return response
    messages.info(request, "Skipped: not counted, and it will not come back to you.")
    return _claim_and_open(request)


def panel_context(labeling: Labeling, user, error: str | None = None) -> dict:
    panel = selectors.labeling_panel(labeling)
    own = labeling.labeler_id == user.pk
    context = {
        "labeling": labeling,
        "solution": labeling.solution,
        "problem": labeling.solution.problem,
        "panel": panel,
        "rated": panel.rated,
        "current": panel.current,
        # A skipped solution stops where it was skipped: nothing "comes after" it.
        "hidden_count": 0 if labeling.status == Labeling.Status.SKIPPED else panel.hidden_count,
        "step_total": panel.step_total,
        "read_only": not own,
        # Revisiting (changing a rating, rating again from a step) is allowed where undo is.
        "can_revisit": own and rating.revisit_refusal(labeling, timezone.now()) is None,
        "error": error,
        "finish_reasons": FinishReason,
    }
    after_error = selectors.after_error_panel(labeling)
    if after_error is not None:  # PRM800K phase 2: the model's alternatives to the −1 step
        context.update(
            alternatives.candidates_context(labeling, after_error, own=own, choose=False)
        )
    return context


STEPS_PANEL = Panel(PANEL, panel_context)


# The one list of the page's keys: the help (side panel and the ? overlay) is rendered from it,
# and labeling.js reads its key map from it, so the two cannot drift apart.
LABELING_KEYS = [
    Key(("1", "+", "="), "rate-pos", ("1",), "+1: correct, moves forward (selected step: make +1)"),
    Key(("0",), "rate-neu", ("0",), "0: correct but unhelpful or ambiguous (selected: make 0)"),
    Key(("-", "_"), "rate-neg", ("-",), "\u22121: wrong, unverifiable or a dead end (ends it)"),
    Key(("y",), "accept", ("Y",), "suggest batches: accept the judge's label for this step"),
    Key(("f",), "flag", ("F",), "flag the current step as unsure"),
    Key(("u", "Backspace"), "undo", ("U", "Backspace"), "undo the last rating"),
    Key(("g",), "give-up", ("G",), "give up on this solution"),
    Key(("b",), "bad-problem", ("B",), "report a bad problem"),
    Key(("r",), "retry", ("R",), "retry a rating that did not save"),
    Key(("Enter",), "next", ("Enter",), "next solution when done"),
    Key(("[",), "select-prev", ("[",), "select the previous rated step, to revisit it"),
    Key(("]",), "select-next", ("]",), "select the next rated step (past the last: back)"),
    Key(("a",), "again", ("A",), "rate again from the selected step (takes back later ones)"),
    Key(("Escape",), "deselect", ("Esc",), "back to the current step; closes this help"),
    # Letters only: the arrows keep scrolling a long solution here.
    Key(("j",), "cand-next", ("J",), "after a \u22121: the next alternative to rate"),
    Key(("k",), "cand-prev", ("K",), "after a \u22121: the previous alternative"),
    Key(("?",), "help", ("?",), "show these keys"),
    Key(("h",), "guidelines", ("H",), "open the guidelines"),
    Key(("n",), "note", ("N",), "write a note on the selected (or last rated) step"),
]
LABELING_KEY_MAP = json.dumps({key: k.action for k in LABELING_KEYS for key in k.keys})


@never_cache
@login_required
def labeling_page(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    labeling = readable_labeling(request, labeling_id)
    if alternatives.is_alternatives(labeling):
        return alternatives.page(request, labeling)
    context = panel_context(labeling, request.user)
    context["keys"] = LABELING_KEYS
    context["key_map"] = LABELING_KEY_MAP
    if not request.htmx and not context["read_only"]:
        # The full page only: fragments keep the header's figure (hx-preserve), so no htmx
        # answer, the rating above all, pays for it.
        context["waiting_after"] = selectors.waiting_for(request.user, after=labeling)
    if not request.htmx:  # the notes card is outside the panel: only the full page has it
        context.update(notes_card(request, labeling))
    template = PANEL if request.htmx else "labeling/labeling.html"
    if request.htmx and request.GET.get("part") == "candidates":
        if alternatives.nothing_new(request, context.get("cpanel")):
            return HttpResponse(status=204)
        template = alternatives.CANDIDATES
    return render(request, template, context)


@login_required
@require_POST
def rate(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """Save one step's rating. htmx gets only what changed where it can (`rated_fragment`),
    else the panel; a bad parameter or a refused rating, the panel as saved with why."""
    flagged = request.POST.get("flagged") in ("1", "on", "true")
    try:
        step_index = int_param(request, "step_index")
        value = int_param(request, "rating")
        rated = rating.rate_step(
            labeling_id=labeling_id,
            user=request.user,
            step_index=step_index,
            rating=value,
            flagged=flagged,
            elapsed_ms=int_param(request, "elapsed_ms", required=False),
            suggestion_id=int_param(request, "suggestion", required=False),
            accepted=request.POST.get("accepted") in ("1", "on", "true"),
        )
        if _alternatives_follow(rated.labeling):  # asked for at the −1, not by showing them
            alternatives_service.request_alternatives_after_error(rated.labeling)
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, STEPS_PANEL)
    if request.htmx:
        fragment = rated_fragment(
            request, rated.labeling, step_index, value, flagged, rated.rated_count
        )
        if fragment is not None:
            return fragment
    return answer(request, rated.labeling, STEPS_PANEL)


def rated_fragment(
    request: AuthenticatedRequest,
    labeling: Labeling,
    step_index: int,
    value: int,
    flagged: bool,
    rated_count: int,
) -> HttpResponse | None:
    """After a rating, only what changed, built from what the rating loaded: no query. In the
    middle of a solution, the rated step and the next (labeling/_rated.html); at its end, the
    rated step and the "done" block (labeling/_finished.html). None where the whole panel must
    come (the page is behind, or the model's alternatives to a −1 step follow)."""
    steps = labeling.solution.steps
    next_index = step_index + 1
    if rated_count != next_index or next_index > len(steps):
        return None
    finished = labeling.status == Labeling.Status.COMPLETED
    if finished and _alternatives_follow(labeling):
        return None
    if not finished and (
        labeling.status != Labeling.Status.IN_PROGRESS or next_index == len(steps)
    ):
        return None
    context = {
        "labeling": labeling,
        "rated": selectors.StepView(step_index, steps[step_index], value, flagged, taken_back=1),
        "panel": selectors.PanelProgress(
            rated_count=next_index, step_total=len(steps), done=finished
        ),
        "hidden_count": len(steps) - next_index - (0 if finished else 1),
        "can_revisit": True,  # their own labeling, in progress or submitted a moment ago
        "read_only": False,
        "oob": True,
    }
    if finished:
        # The "done" block's form posts without htmx: the request and its CSRF token, given
        # outright (rendered without the request, so no context processor runs).
        context.update(request=request, csrf_token=get_token(request))
        template = "labeling/_finished.html"
    else:
        upcoming = selectors.StepView(next_index, steps[next_index], None, None)
        context["current"] = selectors.with_step_suggestion(upcoming, labeling)
        template = "labeling/_rated.html"
    # Rendered without the request: the context processors (roles: a query) are not needed.
    # The answer is all out of band: the panel itself stays.
    return reswap(HttpResponse(render_to_string(template, context)), "none")


def _alternatives_follow(labeling: Labeling) -> bool:
    """The batch asks for the model's alternatives to the −1 step: the whole panel shows them
    (`alternatives.after_error_panel`'s rule, read from what the rating loaded)."""
    batch = labeling.solution.batch
    return (
        batch is not None
        and batch.alternatives_after_error
        and batch.protocol == Batch.Protocol.STEPS
        and labeling.finish_reason == FinishReason.FOUND_ERROR
    )


@login_required
@require_POST
def note(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """A note on one of the labeler's rated steps (why −1, why flagged), from either labeling
    page (rate the steps; step by step: a step whose candidates they rated): its own request, so
    the rating path never waits on it. Another user's labeling is a 404. htmx gets the new note
    alone, added to the card's list (the rest of the card is as it was), or the refusal in the
    card's error line, the draft left in its box; a plain post, the page."""
    labeling = get_object_or_404(Labeling.objects.only("pk"), pk=labeling_id, labeler=request.user)
    try:
        step = int_param(request, "step")
        saved = notes.note_add(
            labeling_id=labeling.pk,
            user=request.user,
            step_index=step - 1,
            text=request.POST.get("text", ""),
        )
    except LabelingError as refused:
        if not request.htmx:
            messages.error(request, str(refused))
            return redirect("labeling:labeling", labeling_id=labeling.pk)
        line = render_to_string(NOTE_ERROR, {"note_error": str(refused)})
        answer = HttpResponse(line, status=refused.status_code)
        return retarget(reswap(answer, "outerHTML"), "#note-error")
    if not request.htmx:
        return redirect("labeling:labeling", labeling_id=labeling.pk)
    # Rendered without the request: a note needs no context processor (roles: a query).
    return HttpResponse(render_to_string(NOTE_SAVED, {"note": saved}))


@login_required
@require_POST
def extend(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """The page calls this while the labeler is active: the claim does not expire under them."""
    try:
        labeling = extend_lease(labeling_id, request.user)
    except LabelingError as exc:
        return JsonResponse({"detail": str(exc)}, status=exc.status_code)
    expires = labeling.lease_expires_at
    assert expires is not None  # extend_lease has just set it
    return JsonResponse({"lease_expires_at": expires.isoformat()})


@login_required
@require_POST
def undo(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    try:
        labeling = rating.undo_last(labeling_id=labeling_id, user=request.user)
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, STEPS_PANEL)
    return answer(request, labeling, STEPS_PANEL)


@login_required
@require_POST
def revise(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """Change a rated step between 0 and +1 while revisiting it."""
    try:
        labeling = rating.revise_rating(
            labeling_id=labeling_id,
            user=request.user,
            step_index=int_param(request, "step_index"),
            rating=int_param(request, "rating"),
        )
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, STEPS_PANEL)
    return answer(request, labeling, STEPS_PANEL)


@login_required
@require_POST
def undo_to(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """Rate again from a step: take back its rating and every later one."""
    try:
        labeling = rating.undo_to(
            labeling_id=labeling_id,
            user=request.user,
            step_index=int_param(request, "step_index"),
        )
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, STEPS_PANEL)
    return answer(request, labeling, STEPS_PANEL)


@login_required
@require_POST
def finish(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    # Giving up and reporting a bad problem end a labeling of either protocol.
    shown = readable_labeling(request, labeling_id)
    panel = alternatives.ALTERNATIVES_PANEL if alternatives.is_alternatives(shown) else STEPS_PANEL
    try:
        labeling = rating.finish_labeling(
            labeling_id=labeling_id,
            user=request.user,
            reason=request.POST.get("reason", ""),
            elapsed_ms=int_param(request, "elapsed_ms", required=False),
        )
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, panel)
    return answer(request, labeling, panel)


@login_required
def guidelines(request: AuthenticatedRequest) -> HttpResponse:
    require(request, *ALL_ROLES, message="The guidelines are for the project's members.")
    text, version = selectors.current_guidelines(request.project)
    return render(
        request,
        "labeling/guidelines.html",
        {
            "text": text,
            "version": version,
            "back": safe_return_url(request, request.GET.get("back")),
        },
    )


@login_required
def guidelines_version(request: AuthenticatedRequest, version: int) -> HttpResponse:
    """One version of the guidelines and what it changed from the one before."""
    require(request, *ALL_ROLES, message="The guidelines are for the project's members.")
    change = selectors.guidelines_change(version, request.project)
    if change is None:
        raise Http404(f"There is no version {version} of the guidelines.")
    return render(request, "labeling/guidelines_version.html", {"change": change})


@login_required
@require_POST
def rate_after_error(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """After the −1 (PRM800K phase 2): rate one of the model's alternatives to the wrong step."""
    try:
        labeling = alternatives_service.rate_after_error(
            labeling_id=labeling_id,
            user=request.user,
            candidate_index=int_param(request, "candidate_index"),
            rating_value=int_param(request, "rating"),
            flagged=request.POST.get("flagged") in ("1", "on", "true"),
        )
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, STEPS_PANEL)
    return answer(request, labeling, STEPS_PANEL)


@login_required
@require_POST
def ask_again_after_error(request: AuthenticatedRequest, labeling_id: int) -> HttpResponse:
    """Ask the model for the alternatives to the −1 step: it failed, or nothing is writing
    them."""
    labeling = readable_labeling(request, labeling_id)
    try:
        if labeling.labeler_id == request.user.pk:
            alternatives_service.request_alternatives_after_error(labeling, again=True)
    except LabelingError as refusal:
        return refused(request, labeling_id, refusal, STEPS_PANEL)
    return answer(request, labeling, STEPS_PANEL)
