"""What the labeling pages share: parameters, the labeling a request may see, the keys' shape,
and what an action answers (the page's panel, or the page)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from labeling import selectors
from labeling.bounds import INT32
from labeling.models import Labeling, Solution
from labeling.roles import LEAD, has_role, request_project
from labeling.services import notes
from labeling.services.errors import LabelingError
from stepwise.request_types import AuthenticatedRequest


@overload
def int_param(request: HttpRequest, name: str, *, required: Literal[True] = True) -> int: ...
@overload
def int_param(request: HttpRequest, name: str, *, required: Literal[False]) -> int | None: ...
def int_param(request: HttpRequest, name: str, *, required: bool = True) -> int | None:
    """The posted integer; a required one that is missing or empty is refused (a 400), so
    only `required=False` gives None."""
    value = request.POST.get(name, "")
    if value == "" and not required:
        return None
    try:
        number = int(value)
        INT32(number)  # an index, a rating or a duration: no column here takes more
    except ValueError:
        raise LabelingError(f"{name} must be an integer, got {value[:50]!r}.") from None
    except ValidationError as error:
        raise LabelingError(f"{name}: {error.messages[0]}") from None
    return number


# The batch a labeler chose on their home page ("Continue in …"): their claims take from it while
# it has work for them. Kept in the session, which every request reads anyway: a claim costs no
# statement more for it.
CHOSEN_BATCH = "labeling:chosen-batch"


def chosen_batch_id(request: HttpRequest) -> int | None:
    value = request.session.get(CHOSEN_BATCH)
    return value if isinstance(value, int) else None


def readable_labeling(request: HttpRequest, labeling_id: int) -> Labeling:
    """The labeling if the user may read it: their own, or anyone's to a lead (writing is
    refused elsewhere to all but its labeler)."""
    labeling = get_object_or_404(
        selectors.labelings_for_page(),
        pk=labeling_id,
        solution__project_id=getattr(request_project(request), "pk", None),
    )
    if labeling.labeler_id != request.user.pk and not has_role(
        request.user, LEAD, project=request_project(request)
    ):
        raise PermissionDenied("This labeling is not yours.")
    return labeling


@dataclass(frozen=True)
class Key:
    """One key of a labeling page: the help lists it, labeling.js acts on it."""

    keys: tuple[str, ...]  # KeyboardEvent.key values, letters in lower case
    action: str  # a button's data-key-action, or one labeling.js handles itself
    shown: tuple[str, ...]  # as the help writes them
    help: str


@dataclass(frozen=True)
class Panel:
    """The part of a labeling page an action answers htmx with: its template and its context
    (`context(labeling, user, error)`)."""

    template: str
    context: Callable[[Labeling, Any, str | None], dict[str, Any]]


def answer(
    request: AuthenticatedRequest,
    labeling: Labeling,
    panel: Panel,
    refusal: LabelingError | None = None,
) -> HttpResponse:
    """A labeling action's answer, for the labeling as the action left it (or, refused, as it
    is saved): htmx gets the panel, with the refusal's status and message; a plain post goes
    back to the page, the refusal a message on it."""
    if labeling.labeler_id != request.user.pk:
        raise PermissionDenied("This labeling is not yours.")
    error = None if refusal is None else str(refusal)
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("labeling:labeling", labeling_id=labeling.pk)
    labeling = selectors.labelings_for_page().get(pk=labeling.pk)
    status = 200 if refusal is None else refusal.status_code
    return render(
        request, panel.template, panel.context(labeling, request.user, error), status=status
    )


def refused(
    request: AuthenticatedRequest, labeling_id: int, refusal: LabelingError, panel: Panel
) -> HttpResponse:
    """The answer to an action the service refused: the labeling as it is saved, and why (404
    or 403 where the user may not read it)."""
    return answer(request, readable_labeling(request, labeling_id), panel, refusal)


def notes_card(request: AuthenticatedRequest, labeling: Labeling) -> dict[str, Any]:
    """What the notes card needs (the labeling's solution loaded), on a labeling page's full
    load. From then on its labeler has the leads' replies on screen: they are read."""
    solution = labeling.solution
    # Step by step, the path grows as the labeler goes and the card is not swapped with the
    # panel: the step box takes any step up to the path's bound (the service checks it was rated).
    on_path = solution.format == Solution.Format.PHASE1
    shown = selectors.labeling_notes(labeling)
    notes.note_replies_seen(labeling=labeling, user=request.user, notes=shown)
    return {
        "notes": shown,
        "note_step_max": (
            settings.STEPWISE_MAX_STEPS_PER_SOLUTION if on_path else len(solution.steps)
        ),
        "note_on_path": on_path,
        "note_max_chars": settings.STEPWISE_NOTE_MAX_CHARS,
    }
