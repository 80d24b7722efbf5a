"""What a view's request carries, for the type checker: django-htmx's `request.htmx` (its
middleware sets it on every request), the project its link names, and behind @login_required a signed-in `User`."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails

from labeling.models.projects import Project


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
    # The project its link names (/p/<slug>/), None outside one (stepwise.middleware).
    project: Project | None


class AuthenticatedRequest(HtmxHttpRequest):
    """A request past @login_required: its user is signed in, never AnonymousUser."""

    user: User
