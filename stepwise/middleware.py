"""Project middleware: Server-Timing (the time Django spent on a request, as browsers' devtools
and benchmarks/queue_load.py read it; on only where settings.SERVER_TIMING),
Permissions-Policy and the app's 404 page for a missing row in every mode; and the client's
address as the sign-in throttle sees it."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import get_resolver, get_urlconf


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
