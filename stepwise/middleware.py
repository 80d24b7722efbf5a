"""Server-Timing on every response: the time Django spent on the request, as browsers' devtools
and benchmarks/queue.py read it (separating server work from queueing and the network)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


class ServerTimingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
        return response
