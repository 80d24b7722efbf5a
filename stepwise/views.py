"""The home page (one cockpit per role the user holds), project-wide answers to errors
(Django's handler403, handler404, handler500) and the favicon.

The home page reads both apps (`labeling` never imports `modeling`), so it lives here.

403 and 404 are pages of the app (base.html: the user, the navigation, the way back). A database
that cannot be reached (restarting, failing over, an SQLite file locked past its timeout) is a 503
with Retry-After, not a 500: it is temporary, nothing was saved, and clients (the labeling page,
API scripts, load balancers) should try again. The 500/503 page is rendered without the request's
context, so it needs no session or user, and therefore no database. Under /api/ every one of
them answers JSON, as DRF's own errors do."""

from __future__ import annotations

import re
import sys
from typing import Any, cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.views.decorators.cache import cache_control, never_cache
from rest_framework.views import APIView

from labeling import selectors as labeling_selectors
from labeling.access import all_projects
from labeling.roles import (
    LABELER,
    LEAD,
    RESEARCHER,
    has_role,
    member_projects,
    refuse_outsider,
    request_project,
    user_roles,
)
from labeling.views.common import chosen_batch_id
from modeling import selectors as modeling_selectors
from stepwise.links import project_reverse

DATABASE_UNAVAILABLE = (
    "The database cannot be reached right now, so nothing was saved. Try again in a few seconds."
)
SERVER_ERROR = (
    "Something went wrong on our side and nothing was saved. It has been logged; "
    "try again, and tell your lead or administrator if it keeps happening."
)
FORBIDDEN = "Your role does not allow this."
CSRF_REFUSED = (
    "This form was not sent: the page was opened in an earlier session (you signed out or in "
    "since, or the page is old). Nothing was saved. Reload the page and send it again."
)
NOT_FOUND = "Not found."  # DRF's words for its own 404s
RETRY_AFTER_SECONDS = 5


@never_cache  # its labeler section changes with every solution (Continue, what waits)
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """A project's home: a section per role the user holds there, each one selector: a lead
    who labels sees both."""
    user = cast(User, request.user)
    project = request_project(request)
    refuse_outsider(user, project)
    context: dict[str, Any] = {}
    if has_role(user, LABELER, project=project):
        context["labeler_cockpit"] = labeling_selectors.labeler_cockpit(
            user,
            labeling_selectors.labeler_record(user, project),
            chosen_batch_id=chosen_batch_id(request),
            project=project,
        )
    if has_role(user, LEAD, project=project):
        context["lead_cockpit"] = modeling_selectors.lead_cockpit(project=project)
    if has_role(user, RESEARCHER, project=project):
        context["research_cockpit"] = modeling_selectors.research_cockpit(project=project)
    return render(request, "home.html", context)


def _my_projects(user: Any) -> list[tuple[int, str, str]]:
    mine = member_projects(user)
    return all_projects() if mine is None else mine


@never_cache
@login_required
def projects_home(request: HttpRequest) -> HttpResponse:
    """/: a user with one project goes straight to its home; with several, each project and
    what waits in it for them."""
    projects = _my_projects(request.user)
    if len(projects) == 1:
        return redirect(project_reverse(projects[0][1], "home"))
    rows = labeling_selectors.projects_waiting(request.user, [pk for pk, _, _ in projects])
    listed = [
        {
            "name": name,
            "url": project_reverse(slug, "home"),
            "roles": sorted(user_roles(request.user, pk)),
            **rows.get(pk, {}),
        }
        for pk, slug, name in projects
    ]
    return render(request, "projects.html", {"projects_listed": listed})


@login_required
def into_project(request: HttpRequest, rest: str) -> HttpResponse:
    """An old link without a project (/label/...): the same page in the user's project when
    they have exactly one, else the choice of theirs."""
    return _into_project(request, rest)


class OldApiPath(APIView):
    """An old API path without a project (/api/batches/...): signed in as every endpoint is (a
    token or the session; none is a 401/403 in JSON, not the sign-in page), then as a page."""

    schema = None  # a way into the documented paths, not one of them

    def _into(self, request: Any, rest: str) -> HttpResponse:
        return _into_project(request, rest)

    get = post = put = patch = delete = _into


def _into_project(request: Any, rest: str) -> HttpResponse:
    projects = _my_projects(request.user)
    query = f"?{request.META['QUERY_STRING']}" if request.META.get("QUERY_STRING") else ""
    targets = [(name, f"/p/{slug}/{rest}{query}") for _, slug, name in projects]
    if len(targets) == 1:
        status = 302 if request.method in ("GET", "HEAD") else 307  # 307 keeps a POST a POST
        response = HttpResponseRedirect(targets[0][1])
        response.status_code = status
        return response
    if _wants_json(request):
        return JsonResponse(
            {
                "detail": "This path is in a project: use /p/<slug>/ before it "
                "(GET /api/projects/ lists yours).",
                "choices": [url for _, url in targets],
            },
            status=404,
        )
    return render(request, "projects.html", {"choices": targets}, status=300 if targets else 404)


API_PATH = re.compile(r"^(?:/p/[-a-zA-Z0-9_]+)?/api/")


def is_api_path(path: str) -> bool:
    """/api/... and a project's /p/<slug>/api/..."""
    return API_PATH.match(path) is not None


def _wants_json(request: HttpRequest) -> bool:
    return is_api_path(request.path) or "json" in request.headers.get("Accept", "")


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The refusal's own message (`roles.require` names who may come in) and the roles needed."""
    return _refusal(request, str(exception) or FORBIDDEN, getattr(exception, "roles", ()))


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF refusal (settings.CSRF_FAILURE_VIEW) as a page of the app: what to do,
    not Django's plain page for developers. Django logs the reason."""
    return _refusal(request, CSRF_REFUSED, json_detail=f"CSRF failed: {reason}")


def _refusal(
    request: HttpRequest, message: str, needed_roles: Any = (), json_detail: str = ""
) -> HttpResponse:
    """A 403: JSON under /api/, the card alone for htmx, else the page."""
    if _wants_json(request):
        return JsonResponse({"detail": json_detail or message}, status=403)
    template = "403.html#refusal" if getattr(request, "htmx", False) else "403.html"
    return render(request, template, {"message": message, "needed_roles": needed_roles}, status=403)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse({"detail": NOT_FOUND}, status=404)
    template = "404.html#missing" if getattr(request, "htmx", False) else "404.html"
    return render(request, template, {"path": request.path}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    error = sys.exc_info()[1]
    unavailable = isinstance(error, (OperationalError, InterfaceError))
    status, message = (503, DATABASE_UNAVAILABLE) if unavailable else (500, SERVER_ERROR)
    if _wants_json(request):
        response: HttpResponse = JsonResponse({"detail": message}, status=status)
    else:
        page = render_to_string("error.html", {"status": status, "message": message})
        response = HttpResponse(page, status=status)
    if unavailable:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def not_here(request: HttpRequest, message: str) -> HttpResponse:
    """A 404 that says why (a page this project does not have), rendered without the request's
    context as `refused` is: JSON under /api/, the card for htmx, else the page."""
    if _wants_json(request):
        return JsonResponse({"detail": message}, status=404)
    template = "error.html#card" if getattr(request, "htmx", False) else "error.html"
    page = render_to_string(template, {"status": 404, "message": message})
    return HttpResponse(page, status=404)


def refused(request: HttpRequest, message: str) -> HttpResponse:
    """A 400 the app answers before any view runs (stepwise.middleware): JSON under /api/, the
    card alone for htmx, else the page; rendered without the request, as the 500 page is."""
    if _wants_json(request):
        return JsonResponse({"detail": message}, status=400)
    template = "error.html#card" if getattr(request, "htmx", False) else "error.html"
    page = render_to_string(template, {"status": 400, "message": message})
    return HttpResponse(page, status=400)


@cache_control(max_age=24 * 3600)
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page links: send them to the SVG."""
    return HttpResponseRedirect(static("favicon.svg"))
