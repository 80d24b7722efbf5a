"""Every route of the URLconf, fetched (GET) by each signed-in role, in a fresh process: what a
web process imports and renders, with the model stack (`heavy_imports.HEAVY`) watched from the
first line. `python -m tests.helpers.page_walk PLAN REPORT`: PLAN (JSON, written by the test) names
the test database, the users by role and the rows whose ids fill each route's arguments; REPORT
gets each route's answers by role, the routes it could not fill, and the heavy packages loaded
with who imported them. With `outsiders` in the PLAN (users by role holding it in another project
only, whose slug is `other_slug`), every route of the Default project is also sent as each of them,
GET and POST, under its own link and under the other project's (the same ids): REPORT's
`outsider_answers`, and the rows of every model of both apps counted before and after
(`outsider_wrote`: the models whose count changed)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers.heavy_imports import heavy_loaded, watch

# Django's admin asks every other role to sign in again: a redirect, nothing rendered.
ADMIN_ROLE = "admin"


def routes() -> Iterator[tuple[str, str, Any]]:
    """(namespaced name or "", the pattern as written, the URLPattern) for every route."""
    from django.urls import URLResolver, get_resolver

    def walk(patterns: list[Any], prefix: str, namespace: str) -> Iterator[tuple[str, str, Any]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = ":".join(part for part in (namespace, pattern.namespace) if part)
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
            else:
                name = f"{namespace}:{pattern.name}" if namespace and pattern.name else pattern.name
                yield name or "", prefix + str(pattern.pattern), pattern

    yield from walk(get_resolver().url_patterns, "", "")


def first_row(pattern: Any) -> int | None:
    """The first row of the model whose admin serves the route (Django marks each of its
    views with `model_admin`), or None."""
    model_admin = getattr(pattern.callback, "model_admin", None)
    if model_admin is None:
        return None
    return model_admin.model._default_manager.order_by("pk").values_list("pk", flat=True).first()


def route_kwargs(
    name: str, pattern: Any, wanted: list[str], plan: dict[str, Any]
) -> dict[str, Any] | None:
    """The route's arguments from the plan (by route, then by argument name; an API route's
    `pk` by its basename; an admin route's row the first of its model), or None where one
    cannot be filled."""
    values = dict(plan["kwargs"], **plan["route_kwargs"].get(name, {}))
    if "pk" in wanted:
        values["pk"] = plan["api_pks"].get(name.rpartition(":")[2].rpartition("-")[0])
    if hasattr(pattern.callback, "model_admin"):
        values["object_id"] = values["id"] = first_row(pattern)
    filled = {arg: values.get(arg) for arg in wanted}
    return None if any(value is None for value in filled.values()) else filled


def filled_in(written: str, kwargs: dict[str, Any]) -> str:
    """A route without a name (favicon, the admin's old links to a change page) as a URL."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda arg: str(kwargs[arg[1]]), written)


def main(plan_path: str, report_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = plan["database"]  # the test's, rows committed
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    setup_test_environment()
    logging.disable(logging.CRITICAL)  # every 403 and 405 logged would bury a failure's traceback
    clients = {}
    for role, user_id in plan["users"].items():
        clients[role] = Client()
        clients[role].force_login(get_user_model().objects.get(pk=user_id))
    answers: dict[str, dict[str, int]] = {}
    unfilled: list[str] = []
    for name, written, pattern in routes():
        wanted = sorted(pattern.pattern.regex.groupindex)
        if "format" in wanted:
            continue  # the same view as the route without the suffix
        kwargs = route_kwargs(name, pattern, wanted, plan)
        if kwargs is None:
            unfilled.append(name or written)
            continue
        # The Default project's link whatever the last request's project was (its URLconf stays
        # the thread's until the response is closed).
        url = (
            reverse(name, kwargs=kwargs, urlconf="stepwise.urls")
            if name
            else filled_in(written, kwargs)
        )
        roles = [ADMIN_ROLE] if written.startswith("admin/") else list(clients)
        answers[name or written] = {}
        for role in roles:
            try:
                answers[name or written][role] = clients[role].get(url).status_code
            except Exception as exc:
                raise RuntimeError(f"GET {url} as {role} raised") from exc
    report = {"answers": answers, "unfilled": unfilled, "heavy": heavy_loaded()}
    if plan.get("outsiders"):
        report.update(_outsiders_walk(plan))
    Path(report_path).write_text(json.dumps(report, indent=1))


def _counts(project_slug: str | None = None) -> dict[str, int]:
    """Rows of every model of both apps; with `project_slug`, of the models a project owns
    (their own column, or their solution's or batch's), that project's only."""
    from django.apps import apps

    counts = {}
    for app in ("labeling", "modeling"):
        for model in apps.get_app_config(app).get_models():
            rows = model._default_manager.all()
            if project_slug is not None:
                fields = {f.name for f in model._meta.get_fields()}
                path = next(
                    (
                        p
                        for p in ("project", "solution__project", "batch__project")
                        if p.split("__")[0] in fields
                    ),
                    None,
                )
                if path is None:
                    continue
                rows = rows.filter(**{f"{path}__slug": project_slug})
            counts[model._meta.label] = rows.count()
    return counts


def _outsiders_walk(plan: dict[str, Any]) -> dict[str, Any]:
    """Every project route sent by members of the other project only, GET and POST: under the
    Default project's own links (nothing may be written at all), then under their project's
    link with the same ids (nothing of the Default project may change)."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    clients = {}
    for role, user_id in plan["outsiders"].items():
        clients[role] = Client()
        clients[role].force_login(get_user_model().objects.get(pk=user_id))
    links = []
    for name, written, pattern in routes():
        if not written.startswith("p/default/"):
            continue
        wanted = sorted(pattern.pattern.regex.groupindex)
        if "format" in wanted:
            continue
        kwargs = route_kwargs(name, pattern, wanted, plan)
        if kwargs is None:
            continue
        url = (
            reverse(name, kwargs=kwargs, urlconf="stepwise.urls")
            if name
            else filled_in(written, kwargs)
        )
        links.append((name or written, "row" if kwargs else "list", url))
    answers: dict[str, dict[str, int]] = {}
    wrote = {}
    for where in ("own", "other"):
        before = _counts() if where == "own" else _counts("default")
        for route, kind, url in links:
            link = (
                url
                if where == "own"
                else url.replace("/p/default/", f"/p/{plan['other_slug']}/", 1)
            )
            for role, client in clients.items():
                for method in ("GET", "POST"):
                    send = client.get if method == "GET" else client.post
                    key = f"{method} {where} {kind} {route}"
                    answers.setdefault(key, {})[role] = send(link).status_code
        after = _counts() if where == "own" else _counts("default")
        wrote[where] = sorted(label for label in after if after[label] != before[label])
    return {"outsider_answers": answers, "outsider_wrote": wrote}


if __name__ == "__main__":
    watch()
    main(*sys.argv[1:])
