"""The routes. Everything a project owns is under /p/<slug>/ (its home, the labeling, lead and
research pages, modeling's pages, the API): a link names its project, so a shared link opens
the same project for everyone who may see it, whatever they looked at before. Outside any
project: the sign-in, one's account and tokens, the list of one's projects (/), the API's
projects, schema and docs, Django's admin.

A request under /p/<slug>/ is resolved with that project's URLconf (`urlconf_for`, set by
`stepwise.middleware.ProjectMiddleware`), in which the prefix is literal: every `reverse()` and
`{% url %}` of the request stays in its project without naming it. This module's own patterns
are the "Default" project's (links made outside a request: commands, tasks, tests).
`stepwise.links.project_reverse` makes a link into a named project. The old paths without a prefix
(/label/..., /api/batches/...) lead into the user's project when they have exactly one, else to
a choice (`views.into_project`)."""

from __future__ import annotations

from functools import cache
from types import ModuleType

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.generic import RedirectView

from labeling import urls as labeling_urls
from labeling.forms import SignInForm
from labeling.models.projects import DEFAULT_SLUG
from stepwise import views

# What a project owns: its home and every page and endpoint of both apps.
project_patterns: list[URLPattern | URLResolver] = [
    path("", views.home, name="home"),
    path("", include(labeling_urls.urlpatterns)),  # /label/, /research/, /api/
    path(
        "", include("modeling.urls")
    ),  # /modeling/, /generations/, /api/{runs,models,generations}/
]

# The first segments of the old paths, before projects.
LEGACY_PAGES = r"(?:label|research|modeling|generations|pool)/.*"
LEGACY_API = r"api/(?!projects/|schema/|docs/|redoc/).*"

global_patterns: list[URLPattern | URLResolver] = [
    path("", views.projects_home, name="projects"),
    path("favicon.ico", views.favicon),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=SignInForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include(labeling_urls.global_urlpatterns)),  # /account/, /api/projects/, schema
    # One page changes one's own password, the one that also revokes one's API tokens.
    path(
        "admin/password_change/",
        RedirectView.as_view(pattern_name="account:password"),
    ),
    path("admin/", admin.site.urls),
    re_path(rf"^(?P<rest>{LEGACY_PAGES})$", views.into_project, name="into_project"),
    re_path(rf"^(?P<rest>{LEGACY_API})$", views.OldApiPath.as_view(), name="api_into_project"),
]


def patterns_for(slug: str) -> list[URLPattern | URLResolver]:
    return [path(f"p/{slug}/", include(project_patterns)), *global_patterns]


@cache
def urlconf_for(slug: str) -> ModuleType:
    """The URLconf of one project: the same module object for every request of it (Django
    caches one resolver per URLconf)."""
    if slug == DEFAULT_SLUG:
        import stepwise.urls

        return stepwise.urls
    module = ModuleType(f"stepwise.urls.p.{slug}")
    module.urlpatterns = patterns_for(slug)  # type: ignore[attr-defined]
    return module


urlpatterns = patterns_for(DEFAULT_SLUG)

# Pages in the app's style (JSON under /api/). A database that cannot be reached answers 503
# with Retry-After; anything else a plain 500.
handler403 = "stepwise.views.permission_denied"
handler404 = "stepwise.views.page_not_found"
handler500 = "stepwise.views.server_error"
