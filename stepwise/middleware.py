"""Project middleware: Server-Timing (the time Django spent on a request, as browsers' devtools
and benchmarks/queue_load.py read it; on only where settings.SERVER_TIMING),
Permissions-Policy, the app's 404 page for a missing row in every mode, the refusal of a NUL
character in any text a request carries; and the client's address as the sign-in throttle sees
it."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import get_resolver, get_urlconf

from stepwise.views import refused


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
    if request.method == "POST" and not request.path_info.startswith("/api/"):
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
