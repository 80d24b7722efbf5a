"""Links into a named project from anywhere (a page of another project, a command, a task):
every project's URLconf is the same tree under its own /p/<slug>/ (stepwise.urls), so the link
is the route reversed in any of them with the prefix set to the project's. Imports no URLconf,
so both apps may use it."""

from __future__ import annotations

import re
from typing import Any

from django.urls import reverse

PREFIX = re.compile(r"^/p/[-a-zA-Z0-9_]+/")


def project_reverse(slug: str, viewname: str, *args: Any, **kwargs: Any) -> str:
    """`reverse` into the project `slug`."""
    url = reverse(viewname, args=args or None, kwargs=kwargs or None)
    return PREFIX.sub(f"/p/{slug}/", url, count=1)
