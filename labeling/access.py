"""Who may do what, per user, in the cache every process shares: their roles (groups) and the
batches they may claim from. A claim reads both without a query; any change to a group, a
membership, or a batch (its activation, priority, overlap, labelers) forgets them all, in the
change's transaction and again when it commits (so that no process caches what it read before
the commit under the new generation)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.db import transaction

from stepwise import caching

GENERATION = "labeling:access-generation"
ACCESS_CACHE_SECONDS = 300


def cached_for_user(user_id: int, what: str, compute: Callable[[], Any]) -> Any:
    """`compute()`, or its value cached for this user under the current generation: one cache
    round trip on a hit."""
    key = f"labeling:access:{what}:{user_id}"
    hit = caching.get_many([GENERATION, key])
    generation = hit.get(GENERATION)
    if generation is not None and key in hit and hit[key][0] == generation:
        return hit[key][1]
    value = compute()
    if generation is None:
        generation = uuid.uuid4().hex
        caching.set_many({GENERATION: generation}, None)
    caching.set_many({key: (generation, value)}, ACCESS_CACHE_SECONDS)
    return value


def _new_generation() -> None:
    caching.set_many({GENERATION: uuid.uuid4().hex}, None)


def forget_access(**_: Any) -> None:
    """Every user's cached roles and batches are stale: now, and when the change commits.
    (A signal receiver: groups, memberships, batches.)"""
    _new_generation()
    transaction.on_commit(_new_generation)


# --- projects --------------------------------------------------------------------------------

ANYONE = 0  # the cache key's "user" for what every user reads alike


def project_by_slug(slug: str) -> Any:
    """The project a link's /p/<slug>/ names, as an unsaved-looking Project carrying its pk,
    name and slug (from the shared cache: no query on a hit), or None."""
    from labeling.models import Project

    rows = cached_for_user(
        ANYONE, "projects", lambda: list(Project.objects.values_list("pk", "slug", "name"))
    )
    for pk, row_slug, name in rows:
        if row_slug == slug:
            return Project(pk=pk, slug=row_slug, name=name)
    return None


def all_projects() -> list[tuple[int, str, str]]:
    """Every project as (pk, slug, name), by name (cached as `project_by_slug`)."""
    from labeling.models import Project

    rows = cached_for_user(
        ANYONE, "projects", lambda: list(Project.objects.values_list("pk", "slug", "name"))
    )
    return sorted(rows, key=lambda row: row[2])
