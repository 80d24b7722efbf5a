"""The shared cache (Django's: Redis beside PostgreSQL, local memory in the embedded default),
read so that a cache that is down costs the computation, never the request."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient

log = logging.getLogger(__name__)
# Redis's errors (connection refused, timeouts) are OSErrors or redis.RedisError; both mean
# "no cache now". Imported lazily: the embedded default has no use for the redis package.
try:
    from redis.exceptions import RedisError

    CACHE_DOWN: tuple[type[Exception], ...] = (RedisError, OSError)
except ImportError:  # pragma: no cover - redis is a dependency of every install
    CACHE_DOWN = (OSError,)


class RedisCacheClient(DjangoRedisCacheClient):
    """Django's client, keeping one redis.Redis per connection pool. Django builds a new one for
    every cache call, which rebuilds its table of ~170 response callbacks each time: 0.07 ms,
    half a GET's cost, on every request's session read. A redis.Redis is safe to share between
    threads (each command takes a connection from the pool), and its pool reconnects in a
    forked child."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        # Django's own attributes, which its type stubs do not list.
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)  # type: ignore[attr-defined]
        return client


class RedisCache(DjangoRedisCache):
    """Django's Redis cache (CACHES' BACKEND) with `RedisCacheClient`."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient


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
