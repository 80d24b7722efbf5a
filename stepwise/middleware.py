"""Project middleware: Server-Timing (the time Django spent on a request, as browsers' devtools
and benchmarks/queue_load.py read it; on only where settings.SERVER_TIMING) and
Permissions-Policy; and the client's address as the sign-in throttle sees it."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


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
