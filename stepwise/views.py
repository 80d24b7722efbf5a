"""Project-wide answers to errors: Django's handler500.

A database that cannot be reached (restarting, failing over, an SQLite file locked past its
timeout) is a 503 with Retry-After, not a 500: it is temporary, nothing was saved, and clients
(the labeling page, API scripts, load balancers) should try again. The page is rendered without
the request's context, so it needs no session or user, and therefore no database."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

DATABASE_UNAVAILABLE = (
    "The database cannot be reached right now, so nothing was saved. Try again in a few seconds."
)
SERVER_ERROR = (
    "Something went wrong on our side and nothing was saved. It has been logged; "
    "try again, and tell your lead or administrator if it keeps happening."
)
RETRY_AFTER_SECONDS = 5


def server_error(request: HttpRequest) -> HttpResponse:
    error = sys.exc_info()[1]
    unavailable = isinstance(error, (OperationalError, InterfaceError))
    status, message = (503, DATABASE_UNAVAILABLE) if unavailable else (500, SERVER_ERROR)
    wants_json = request.path.startswith("/api/") or "json" in request.headers.get("Accept", "")
    if wants_json:
        response: HttpResponse = JsonResponse({"detail": message}, status=status)
    else:
        page = render_to_string("error.html", {"status": status, "message": message})
        response = HttpResponse(page, status=status)
    if unavailable:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
