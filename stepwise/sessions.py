"""Sessions read from the shared cache and written through to the database (SESSION_ENGINE
beside PostgreSQL), for which a cache that is down costs a query, never the request; and the
session's user read by SQL compiled once (`ModelBackend`, in AUTHENTICATION_BACKENDS).

Django's cached_db store already survives a failed cache read or write on save, but not a
failed write after a database read (`load`), a lookup for a new key (`exists`, at every sign
in) or a delete (sign out): with Redis down, every signed-in page would answer 500."""

from __future__ import annotations

import logging
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.auth import backends as auth_backends
from django.contrib.auth.models import User
from django.contrib.sessions.backends.cached_db import SessionStore as CachedDBStore
from django.contrib.sessions.backends.db import SessionStore as DBStore
from django.db.models import QuerySet
from django.utils import timezone

from stepwise.caching import CACHE_DOWN
from stepwise.compiled import CompiledQuery

log = logging.getLogger(__name__)


class SessionStore(CachedDBStore):
    def load(self) -> dict[str, Any]:
        try:
            return super().load()
        except CACHE_DOWN as exc:
            log.warning("session cache unavailable, reading the database: %s", exc)
            return DBStore.load(self)

    def exists(self, session_key: str) -> bool:
        try:
            return super().exists(session_key)
        except CACHE_DOWN as exc:
            log.warning("session cache unavailable, asking the database: %s", exc)
            return DBStore.exists(self, session_key)

    def delete(self, session_key: str | None = None) -> None:
        # The database row goes first: that is the session's end. The cached copy cannot be
        # deleted while the cache is down; a Redis that comes back without persistence (as a
        # cache should run) has lost it, one that persists serves it until the session's expiry.
        try:
            super().delete(session_key)
        except CACHE_DOWN as exc:
            log.warning("session cache unavailable, the database row is deleted: %s", exc)


def user_sessions_end(user_id: int) -> int:
    """End every live session signed in as the user, through the configured store's own delete:
    the database row and, beside PostgreSQL, the cached copy. Sessions are not indexed by user, so
    each live row is decoded (as Zulip's delete_user_sessions does): a lead's rare action, never a
    request's. Returns how many ended."""
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    live = store_class.get_model_class().objects.filter(expire_date__gt=timezone.now())
    rows = live.values_list("session_key", "session_data").iterator(chunk_size=1000)
    theirs = [
        session_key
        for session_key, session_data in rows
        if store_class().decode(session_data).get(SESSION_KEY) == str(user_id)
    ]
    for session_key in theirs:  # deleted once the read is over, not under its cursor
        store_class().delete(session_key)
    return len(theirs)


def _user_read(user_id: int) -> QuerySet[User]:
    return get_user_model()._default_manager.filter(pk=user_id)


# Every signed-in request reads its user: compiled once per connection (stepwise/compiled.py),
# as building and compiling Django's `get(pk=...)` cost more than the query itself.
USER_READ = CompiledQuery(_user_read, "user_id")


class ModelBackend(auth_backends.AllowAllUsersModelBackend):
    """Django's ModelBackend (AUTHENTICATION_BACKENDS), reading a session's user with the same
    SQL compiled once per connection; the rest (sign-in, permissions) is Django's own.

    A deactivated user's right password authenticates (Django's AllowAllUsersModelBackend), so
    the sign-in form, whose `confirm_login_allowed` refuses an inactive user (the admin's too),
    can say the account is deactivated rather than that the password is wrong; a wrong password
    is refused as any other. A session's user must be active: deactivating signs them out."""

    def get_user(self, user_id: Any) -> User | None:
        user = USER_READ.first(user_id=user_id)
        return user if user is not None and user.is_active else None
