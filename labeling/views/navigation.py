"""Where a page may send the user back to: only this site, never a script or another host."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme


def safe_return_url(request: HttpRequest, url: str | None, fallback: str = "") -> str:
    """`url` when it is a link on this site (a `next`/`back` parameter), else `fallback`.
    Refuses `javascript:` and other schemes, other hosts and scheme-relative `//host` links."""
    if url and url_has_allowed_host_and_scheme(
        url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return url
    return fallback
