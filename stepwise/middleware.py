"""Project middleware: Server-Timing (the time Django spent on a request, as browsers' devtools
and benchmarks/queue_load.py read it; on only where settings.SERVER_TIMING),
Permissions-Policy, the app's 404 page for a missing row in every mode, the refusal of a NUL
character in any text a request carries; and the client's address as the sign-in throttle sees
it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import get_resolver, get_urlconf
from django.utils.functional import SimpleLazyObject

from stepwise.views import is_api_path, refused

PROJECT_PREFIX = re.compile(r"^/p/(?P<slug>[-a-zA-Z0-9_]+)/")


class ProjectMiddleware:
    """A request under /p/<slug>/ is in that project: `request.project` and the project's
    URLconf, so its links stay in it. The project is read when first used (from the shared
    cache; a query only where the cache has not got it), so the rating, which has the labeling
    of its locked read, reads nothing more. An unknown slug is a 404 then; whether the user may
    see the project is the view's check (`roles.require`, `HasRole`: a non-member gets 404), as
    an API token is only read by the view."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from labeling.access import project_by_slug
        from labeling.roles import member_project
        from stepwise.urls import urlconf_for

        request.project = None  # type: ignore[attr-defined]
        match = PROJECT_PREFIX.match(request.path_info)
        if match is not None:
            slug = match["slug"]

            def project() -> Any:
                # A member's own projects are in their cached roles; else every project's list.
                found = member_project(request.user, slug) or project_by_slug(slug)
                if found is None:
                    raise Http404("No such project.")
                return found

            request.project = SimpleLazyObject(project)  # type: ignore[attr-defined]
            request.urlconf = urlconf_for(slug)  # type: ignore[attr-defined]
        return self.get_response(request)


class ServerTimingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
        return response


class PermissionsPolicyMiddleware:
    """Permissions-Policy on every response: the pages need no camera, microphone, location…"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response
        self.policy = settings.PERMISSIONS_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Permissions-Policy", self.policy)
        return response


class NotFoundPageMiddleware:
    """A view's Http404 (a missing labeling, solution, batch, run) answers with the project's
    handler404 in every mode. With DEBUG on (a developer's DEBUG=1) Django would show its
    technical 404 page instead. An unknown address never reaches a view: with DEBUG on it keeps
    Django's page, which lists the routes for the developer (the demo runs with DEBUG off)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, Http404):
            return None
        # The handler Django itself would call with DEBUG off (urls.handler404), this URLconf's.
        handler = get_resolver(get_urlconf()).resolve_error_handler(404)
        response: HttpResponse = handler(request, exception)
        return response


prohibit_null_characters = ProhibitNullCharactersValidator()


class NullCharacterMiddleware:
    """A NUL character (\\u0000) in the text a request carries is a 400 before any view runs,
    nothing saved: PostgreSQL's text columns cannot hold one (the write was a 500 there, while
    SQLite stored it), and no input here means one. One check, the validator forms' and DRF's
    CharFields carry, for the address, every query parameter, every form field and its name,
    including those a view reads without a form. The API's bodies (JSON, its forms and uploads)
    are its serializers' to validate: each field with that validator, or its own type."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = null_character_in(request)
        if where is not None:
            return refused(
                request,
                f"{where} holds a NUL character (\\u0000), which no text here may hold. "
                "Nothing was saved.",
            )
        return self.get_response(request)


def null_character_in(request: HttpRequest) -> str | None:
    """Which input of the request holds a NUL character, in words; None where none does."""
    if _holds_null(request.path_info):
        return "The address"
    inputs = [("query parameter", request.GET)]
    if request.method == "POST" and not is_api_path(request.path_info):
        inputs.append(("form field", request.POST))
    for kind, params in inputs:
        for name, values in params.lists():
            if any(_holds_null(text) for text in (name, *values)):
                return f"The {kind} {name!r}"
    return None


def _holds_null(text: str) -> bool:
    try:
        prohibit_null_characters(text)
    except ValidationError:
        return True
    return False


def client_address(request: HttpRequest) -> str | None:
    """The client's address for django-axes (AXES_CLIENT_IP_CALLABLE).

    Behind our proxy (settings.BEHIND_TLS_PROXY) it is the last X-Forwarded-For entry: the one the
    proxy itself wrote (Caddy replaces a client's header, others append to it), so a client cannot
    choose it. Without a proxy the header is the client's own and is ignored: REMOTE_ADDR.
    """
    if settings.BEHIND_TLS_PROXY:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")[-1].strip()
        if forwarded:
            return forwarded
    return request.META.get("REMOTE_ADDR")
