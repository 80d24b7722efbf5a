"""Personas, service-aware skipping, and the real processes some tests drive (Celery, chromium)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.browser_trace import TRACE_SCRIPT, PageLog
from tests.helpers.paths import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    REQUIRE_ALL,
    ROOT,
    require_shared_data,
)
from tests.helpers.processes import current_database_url, stop_process
from tests.helpers.threads import recording, wait_for_started
from tests.helpers.tiny_models import save_tiny_llama
from tests.helpers.users import make_user


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The shared cache (solution counts, lease medians) starts empty for every test: this
    session's own Redis database (scripts/run_tests.py), or this process's memory."""
    from django.core.cache import cache

    from stepwise.caching import CACHE_DOWN

    try:
        cache.clear()
    except CACHE_DOWN:
        pass  # no Redis: what needs it is skipped or fails by itself
    yield


# The SQLite pass (scripts/run_tests.py) runs the tests marked `sqlite`: the embedded default a
# new user gets from `make demo` is proven end to end, at a fraction of a second full pass's cost.
# The PostgreSQL pass runs every test. Marked here, by file or by test:
# - every branch on the database vendor: the rating's statements (views, flow), the counters
#   (dashboard), the COPY importer and its fallback, snapshots, compiled reads, sessions, the
#   cache, the error pages, and the id bounds SQLite's driver needs (views, API, its fuzzing);
# - the migrations (every SQLite test database is made by running them) and the demo itself;
# - every page as every role (test_torch_free's walk), and one end-to-end test of each feature.
SQLITE_FILES = {
    ROOT / "tests" / path
    for path in (
        "labeling/test_adjudication.py",
        "labeling/test_api.py",
        "labeling/test_batch_choice.py",
        "labeling/test_batch_writers.py",
        "labeling/test_dashboard.py",
        "labeling/test_demo.py",
        "labeling/test_exporting.py",
        "labeling/test_guidelines.py",
        "labeling/test_import_fuzz.py",
        "labeling/test_importing.py",
        "labeling/test_items.py",
        "labeling/test_labeling_flow.py",
        "labeling/test_machine_labels.py",
        "labeling/test_notes.py",
        "labeling/test_one_open_labeling.py",
        "labeling/test_pausing.py",
        "labeling/test_people.py",
        "labeling/test_projects.py",
        "labeling/test_projects_migration.py",
        "labeling/test_quality.py",
        "labeling/test_records.py",
        "labeling/test_revisit.py",
        "labeling/test_snapshots.py",
        "labeling/test_suggest.py",
        "labeling/test_tokens.py",
        "labeling/test_views.py",
        "modeling/test_best_of_n.py",
        "modeling/test_evaluation_sets.py",
        "modeling/test_import_prm.py",
        "modeling/test_loop.py",
        "modeling/test_review.py",
        "modeling/test_run_input.py",
        "modeling/test_runs_pages.py",
        "test_admin.py",
        "test_api_fuzz.py",
        "test_browser_labeling.py",
        "test_compiled.py",
        "test_database_down.py",
        "test_demo_browser.py",
        "test_error_pages.py",
        "test_fragments.py",
        "test_home.py",
        "test_login.py",
        "test_navigation.py",
        "test_null_characters.py",
        "test_sessions.py",
        "test_shared_cache.py",
        "test_torch_free.py",
    )
}
# One end-to-end test of each feature whose file is mostly model work, the same on both.
SQLITE_TESTS = {
    "tests/labeling/test_alternatives.py::test_a_whole_path_rated_chosen_written_and_exported_in_the_phase1_shape",
    "tests/labeling/test_alternatives_views.py::test_the_page_waits_for_candidates_then_the_labeler_rates_continues_and_writes",
    "tests/modeling/test_demo.py::test_a_generation_runs_on_the_demo_gated_on_its_evaluation_set_to_the_labelers_queue",
    "tests/modeling/test_demo.py::test_setup_demo_loads_the_graded_pool_once",
    "tests/modeling/test_import_checks.py::test_an_archive_bomb_is_refused_by_what_it_declares_and_leaves_nothing",
    "tests/modeling/test_model_export.py::test_the_embedded_default_exports_in_a_thread_and_the_page_answers_at_once",
    "tests/modeling/test_orm.py::test_the_embedded_default_compares_in_a_thread_and_the_page_shows_the_curves",
    "tests/modeling/test_run_data_files.py::test_a_run_started_with_a_data_file_trains_on_it_and_its_labelings_end_to_end",
    "tests/modeling/test_runs.py::test_the_embedded_default_trains_one_run_at_a_time_and_a_cancel_stops_it_in_seconds",
    "tests/modeling/test_runs.py::test_cancel_a_running_run_then_resume_it_from_its_checkpoint",
    "tests/modeling/test_sampling.py::test_the_embedded_default_samples_in_a_thread_and_answers_at_once",
    "tests/modeling/test_prelabel_runs.py::test_the_embedded_default_prelabels_in_a_thread_and_the_api_answers_at_once",
    "tests/modeling/test_prelabel_runs.py::test_an_mc_run_writes_one_prelabel_per_solution_with_soft_and_hard_labels",
    "tests/modeling/training/test_best_of_n_compare.py::test_best_of_n_on_equal_footing_prints_the_table_and_the_hand_computed_last_line",
    "tests/modeling/training/test_outcome.py::test_cli_trains_an_orm_on_graded_jsonl_and_evaluates_its_held_out_problems",
}


def _in_the_sqlite_pass(item) -> bool:
    return Path(item.fspath) in SQLITE_FILES or item.nodeid.split("[")[0] in SQLITE_TESTS


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _in_the_sqlite_pass(item):
            item.add_marker(pytest.mark.sqlite)
    reasons = {
        "postgres": os.environ.get("STEPWISE_SKIP_POSTGRES"),
        "redis": os.environ.get("STEPWISE_SKIP_REDIS"),
        "browser": None if os.path.exists(CHROMIUM) else f"{CHROMIUM} is not installed",
    }
    for item in items:
        for marker, why in reasons.items():
            if why and item.get_closest_marker(marker):
                if REQUIRE_ALL:  # CI never skips: the test fails, naming what is missing
                    item.add_marker(pytest.mark.fail_required(why))
                else:
                    item.add_marker(pytest.mark.skip(reason=why))


def pytest_runtest_setup(item):
    required = item.get_closest_marker("fail_required")
    if required:
        pytest.fail(f"CI=true requires this test's service: {required.args[0]}", pytrace=False)


def pytest_configure(config):
    config.addinivalue_line("markers", "fail_required(why): a required service is missing under CI")


# Model work the embedded default runs in a thread of the test process (a sampling run, a
# generation, a training run started through a page or the API) ends with the test that started
# it: left running, it went on into the next tests, took their CPU and torch's random numbers (a
# later seeded test drew other samples) and failed on their database.
BACKGROUND_WORK_LIMIT_S = 600


@pytest.fixture(scope="session", autouse=True)
def _record_background_work():
    from stepwise import celery

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(celery, "run_in_thread", recording(celery.run_in_thread))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    # Before the test's fixtures are torn down: the work still has its database.
    try:
        result = yield
    except BaseException:
        wait_for_started(BACKGROUND_WORK_LIMIT_S)
        raise
    still_running = wait_for_started(BACKGROUND_WORK_LIMIT_S)
    if still_running:
        raise AssertionError(
            f"background work still running {BACKGROUND_WORK_LIMIT_S} s after the test: {still_running}"
        )
    return result


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return require_shared_data()


@pytest.fixture
def labeler(db):
    return make_user("lena", "labeler")


@pytest.fixture
def labeler2(db):
    return make_user("lars", "labeler")


@pytest.fixture
def lead(db):
    return make_user("lea", "lead", "labeler")


@pytest.fixture
def researcher(db):
    return make_user("rhea", "researcher")


@pytest.fixture
def outsider(db):
    return make_user("otto")


@pytest.fixture
def phase2(db):
    """A second project beside the Default one (slug phase-2), members to be named by the test."""
    from labeling.models import Project

    return Project.objects.create(name="Phase 2", slug="phase-2")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of a 2-layer random Llama causal LM with its tokenizer, built once a session (read
    only: a test that trains from it writes its run elsewhere)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def celery_worker_process(transactional_db, tmp_path):
    """A real Celery worker (Redis broker) on the test database, for pipeline tests."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a real worker needs the PostgreSQL test database")
    env = dict(os.environ)
    env.update(
        DATABASE_URL=current_database_url(),
        CELERY_TASK_ALWAYS_EAGER="0",
        STEPWISE_VAR_DIR=str(tmp_path),
        PYTHONPATH=str(ROOT),
    )
    log = open(tmp_path / "worker.log", "w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "stepwise",
            "worker",
            "-Q",
            "default,gpu,generate",
            "--concurrency",
            "1",
            "--pool",
            "solo",
            "-l",
            "info",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "ready" in (tmp_path / "worker.log").read_text():
            break
        if process.poll() is not None:
            pytest.fail("celery worker exited:\n" + (tmp_path / "worker.log").read_text())
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail("celery worker did not start:\n" + (tmp_path / "worker.log").read_text())
    try:
        yield process
    finally:
        stop_process(process)
        log.close()


@pytest.fixture(scope="session")
def generator_server(tmp_path_factory):
    """`manage.py serve_generator` on a free loopback port: the local SmolLM2 behind the OpenAI
    completions API, for tests of the HTTP client path. Yields its base URL (…/v1)."""
    import select

    log_path = tmp_path_factory.mktemp("generator") / "server.log"
    log = open(log_path, "w")  # model loading's progress bars: never fill the stdout pipe
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve_generator", "--port", "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert process.stdout is not None
    output = []
    deadline = time.monotonic() + 120
    url = None
    while url is None and time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            line = process.stdout.readline()
            output.append(line)
            if line.startswith("Serving "):
                url = line.rsplit(" ", 1)[1].strip()
    if url is None:
        stop_process(process)
        log.close()
        pytest.fail("serve_generator did not start:\n" + "".join(output) + log_path.read_text())
    try:
        yield url
    finally:
        stop_process(process)
        log.close()


@pytest.fixture
def open_evaluation_gate(settings, monkeypatch):
    """Tiny random models cannot reach the default AUROC floor: turn the gate off, here and in
    worker processes started after this fixture (they read the environment)."""
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 0.0
    settings.STEPWISE_PRM_EVAL_MAX_REGRESSION = 1.0
    monkeypatch.setenv("STEPWISE_PRM_EVAL_MIN_AUROC", "0")
    monkeypatch.setenv("STEPWISE_PRM_EVAL_MAX_REGRESSION", "1")


@pytest.fixture
def eager_tasks(django_capture_on_commit_callbacks):
    """`with eager_tasks(): ...` runs tasks enqueued on commit in-process, at the block's end."""
    from stepwise.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = before


@pytest.fixture
def celery_live(settings):
    """Send tasks through the real broker instead of running them in-process."""
    from stepwise.celery import app

    settings.CELERY_TASK_ALWAYS_EAGER = False
    app.conf.task_always_eager = False
    yield app
    app.conf.task_always_eager = settings.CELERY_TASK_ALWAYS_EAGER


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still synchronous, so Django's async guard does not apply to them.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


# The traced pages of the running test: a failure's report carries what each saw.
_PAGE_LOGS: list[PageLog] = []


def _new_page(browser, *, enforce_csp: bool):
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, bypass_csp=not enforce_csp
    )
    # Every wait is for a condition; the bound only has to outlast a loaded machine.
    context.set_default_timeout(60_000)
    context.add_init_script(TRACE_SCRIPT)
    page = context.new_page()
    _PAGE_LOGS.append(PageLog(page))
    return context, page


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        for number, log in enumerate(_PAGE_LOGS, start=1):
            report.sections.append((f"page {number}: what it saw", log.report()))
    if report.when == "teardown":
        _PAGE_LOGS.clear()
    return report


@pytest.fixture
def page(browser):
    # Behaviour tests: Playwright's wait_for_function evaluates strings, which the CSP forbids
    # (no 'unsafe-eval'). The pages themselves run under the CSP in `strict_page` tests.
    context, page = _new_page(browser, enforce_csp=False)
    yield page
    context.close()


@pytest.fixture
def strict_page(browser):
    """A page that enforces the site's Content-Security-Policy, as a user's browser does."""
    context, page = _new_page(browser, enforce_csp=True)
    yield page
    context.close()
