"""The shared cache (Django's: Redis beside PostgreSQL, local memory in the embedded default),
read so that a cache that is down costs the computation, never the request."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.core.cache import cache

log = logging.getLogger(__name__)
# Redis's errors (connection refused, timeouts) are OSErrors or redis.RedisError; both mean
# "no cache now". Imported lazily: the embedded default has no use for the redis package.
try:
    from redis.exceptions import RedisError

    CACHE_DOWN: tuple[type[Exception], ...] = (RedisError, OSError)
except ImportError:  # pragma: no cover - redis is a dependency of every install
    CACHE_DOWN = (OSError,)


def get_many(keys: Iterable[str]) -> dict[str, Any]:
    try:
        return cache.get_many(list(keys))
    except CACHE_DOWN as exc:
        log.warning("cache unavailable, computing afresh: %s", exc)
        return {}


def set_many(values: dict[str, Any], timeout: float | None) -> None:
    try:
        cache.set_many(values, timeout)
    except CACHE_DOWN as exc:
        log.warning("cache unavailable, not caching: %s", exc)


def cached(key: str, compute: Callable[[], Any], timeout: float) -> Any:
    """`compute()`, or its value cached under `key` by any process within `timeout` seconds.
    A computed None is cached too."""
    hit = get_many([key])
    if key in hit:
        return hit[key]
    value = compute()
    set_many({key: value}, timeout)
    return value


def forget(*keys: str) -> None:
    """Drop `keys` for every process. A cache that is down keeps nothing to drop later, except
    what it held before it went down: those expire by their timeout."""
    try:
        cache.delete_many(list(keys))
    except CACHE_DOWN as exc:
        log.warning("cache unavailable, nothing to forget: %s", exc)
