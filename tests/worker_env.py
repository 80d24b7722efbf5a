"""A pytest-xdist worker's own Redis databases and var folder, set before Django reads its
settings (scripts/run_tests.py passes `-p tests.worker_env`, which pytest imports before any
conftest, and xdist names the worker in PYTEST_XDIST_WORKER before that).

Each worker has its own test database already (pytest-django appends the worker's name). The
rest is shared unless split here: two workers on one broker database take each other's Celery
tasks, a cache clear in one drops the other's counts, and both write under one MEDIA_ROOT. The
runner lists a broker and a cache database per worker, comma-separated, in
STEPWISE_TEST_BROKER_URLS and STEPWISE_TEST_CACHE_URLS.
"""

from __future__ import annotations

import os

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
if _worker.startswith("gw"):
    _index = int(_worker[2:])
    for _name, _urls in (
        ("CELERY_BROKER_URL", "STEPWISE_TEST_BROKER_URLS"),
        ("STEPWISE_CACHE_URL", "STEPWISE_TEST_CACHE_URLS"),
    ):
        if os.environ.get(_urls):
            os.environ[_name] = os.environ[_urls].split(",")[_index]
    if os.environ.get("STEPWISE_VAR_DIR"):
        os.environ["STEPWISE_VAR_DIR"] = os.path.join(os.environ["STEPWISE_VAR_DIR"], _worker)
