"""Processes a test starts: stopping them, and the test database they should use."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()


def current_database_url() -> str:
    """The PostgreSQL test database as a URL, for a worker or server started by a test."""
    from django.db import connection

    settings_dict = connection.settings_dict
    user = settings_dict.get("USER") or "postgres"
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    password = settings_dict.get("PASSWORD")
    auth = f"{user}:{password}" if password else user
    return f"postgres://{auth}@{host}:{port}/{settings_dict['NAME']}"
