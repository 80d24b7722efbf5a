"""Stepwise settings: one module, read top to bottom, driven by environment variables.

`DATABASE_URL` unset means the embedded default: an SQLite file under var/, Celery tasks run
in-process, a secret key of its own under var/, plain HTTP on loopback (DEBUG is off there too).
Production and CI point DATABASE_URL at PostgreSQL and REDIS_URL at Redis.
"""

import json
import os
import re
import secrets
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any, cast, overload

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false)")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def embedded_secret_key(path: Path) -> str:
    """The embedded default's own secret key: read from `path`, or made there the first time
    (random, readable by its owner only). Every install has its own; none is shared or known."""
    try:
        return path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(secrets.token_urlsafe(50))
    try:
        os.link(draft, path)  # atomic: of two processes starting at once, the first key wins
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path.read_text(encoding="ascii").strip()


DATABASE_URL = env_str("DATABASE_URL")
EMBEDDED = DATABASE_URL is None
# The SQLite file, media and the embedded default's secret key live here.
VAR_DIR = Path(env_str("STEPWISE_VAR_DIR", str(BASE_DIR / "var")))

# Off unless asked for, in the embedded default (the demo) too: nobody sees Django's technical
# pages (every route on a 404, a traceback and the settings on a 500). DEBUG=1 is for developers.
DEBUG = env_bool("DEBUG", default=False)
TESTING = env_bool("STEPWISE_TESTING", default=False)
SECRET_KEY = env_str("SECRET_KEY")
if SECRET_KEY is None:
    if EMBEDDED:
        SECRET_KEY = embedded_secret_key(VAR_DIR / "secret_key")
    elif DEBUG:
        SECRET_KEY = "insecure-dev-key-only-for-debug"  # noqa: S105 - DEBUG only
    else:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
CSRF_FAILURE_VIEW = "stepwise.views.csrf_failure"
SITE_NAME = env_str("SITE_NAME", "Stepwise")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "knox",  # API tokens, stored hashed: labeling.ApiToken
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI / Redoc assets served from our static files
    "django_filters",
    "django_htmx",
    "template_partials",
    "axes",
    "csp",
    "labeling",
    "modeling",
]

# Server-Timing tells anyone how long each request took: in development, tests and benchmarks
# (STEPWISE_SERVER_TIMING=1), never by default in production.
SERVER_TIMING = env_bool("STEPWISE_SERVER_TIMING", default=DEBUG or TESTING)
MIDDLEWARE = [
    *(["stepwise.middleware.ServerTimingMiddleware"] if SERVER_TIMING else []),  # outermost
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "stepwise.middleware.PermissionsPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "stepwise.middleware.ProjectMiddleware",  # /p/<slug>/: request.project and its URLconf
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "stepwise.middleware.NullCharacterMiddleware",  # a NUL in any text: 400 before a view
    "stepwise.middleware.NotFoundPageMiddleware",  # a missing row: the app's 404, DEBUG or not
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out login into the lockout page
]

# Failed logins: after AXES_FAILURE_LIMIT failures one account from one address is locked out for
# the cool-off (django-axes; attempts are rows, so every web process agrees). Not the address
# alone: behind a proxy without a trusted forwarded address every user shares one, and a few bad
# guesses would lock out the whole site.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's ModelBackend, its session read compiled once (sessions signed in under Django's
    # own path before it was named here sign in again, once).
    "stepwise.sessions.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("STEPWISE_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("STEPWISE_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# The address: REMOTE_ADDR, or the proxy's X-Forwarded-For when STEPWISE_BEHIND_TLS_PROXY says a
# proxy is there (stepwise.middleware.client_address; django-ipware is not installed).
AXES_CLIENT_IP_CALLABLE = "stepwise.middleware.client_address"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False

ROOT_URLCONF = "stepwise.urls"
WSGI_APPLICATION = "stepwise.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "labeling.context_processors.roles",
            ],
        },
    },
]

# Database: PostgreSQL through psycopg 3 when DATABASE_URL is set, else an SQLite file.
if DATABASE_URL is None:  # EMBEDDED
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "stepwise.sqlite3",
            # Labelers write concurrently even in the demo; wait for the lock instead of failing.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                # Test-only speed: the test database is thrown away, no fsync per commit.
                **({"init_command": "PRAGMA synchronous=OFF"} if TESTING else {}),
            },
            # Tests use a file too: a shared in-memory database raises "table is locked" at once
            # where the user's file waits for the lock (a web request beside a worker thread).
            "TEST": {"NAME": str(VAR_DIR / "test-stepwise.sqlite3")},
        }
    }
else:
    # Health checks: a connection kept from before a database restart is replaced at the start of
    # the next request instead of failing it.
    DATABASES = {
        "default": dict(
            dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
        )
    }
    DATABASES["default"].setdefault("TEST", {})
    # PostgreSQL plans a statement sent with its values inlined (psycopg's client-side binding,
    # Django's default) afresh every time: for the rating's locked read, planning took 0.4 ms
    # and running it 0.1. Bound on the server, a statement the app sends again (the same SQL,
    # as the compiled reads are) is prepared once per connection and only executed after.
    # Off (STEPWISE_DB_PREPARED=0) behind a pooler that cannot keep prepared statements
    # (PgBouncer in transaction mode before 1.21, or without max_prepared_statements).
    if str(DATABASES["default"]["ENGINE"]).endswith("postgresql") and env_bool(
        "STEPWISE_DB_PREPARED", default=True
    ):
        cast(dict[str, Any], DATABASES["default"].setdefault("OPTIONS", {})).update(
            server_side_binding=True,
            prepare_threshold=5,  # psycopg's own default, which Django turns off
        )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "projects"  # one project: straight to its home
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(VAR_DIR / "media")))
WHITENOISE_USE_FINDERS = True  # serve straight from static/ without collectstatic in dev
if EMBEDDED:  # served from static/ by the finders: no collected STATIC_ROOT is expected here
    warnings.filterwarnings("ignore", message=re.escape(f"No directory at: {STATIC_ROOT}"))

# Celery. Embedded default: tasks run in-process, no broker needed.
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

# Cached counts and medians shared by every web and worker process: Redis beside PostgreSQL,
# this process's memory in the embedded default (one process).
CACHES: dict[str, dict[str, Any]]
if EMBEDDED:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    CACHES = {
        "default": {
            "BACKEND": "stepwise.caching.RedisCache",
            "LOCATION": env_str("STEPWISE_CACHE_URL", REDIS_URL),
            "KEY_PREFIX": env_str("STEPWISE_CACHE_PREFIX", "stepwise"),
            # A cache that is down costs a query, not the request. The test runner raises the
            # wait (a loaded CI box answers late; a late answer is not a cache that is down).
            "OPTIONS": {
                "socket_connect_timeout": env_float("STEPWISE_CACHE_TIMEOUT_S", 0.5),
                "socket_timeout": env_float("STEPWISE_CACHE_TIMEOUT_S", 0.5),
            },
        }
    }
    # Every request reads its session: from the cache, written through to the database (a
    # session outlives a cache restart).
    SESSION_ENGINE = "stepwise.sessions"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None  # progress and results go to rows that pages poll
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=EMBEDDED)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_DEFAULT_QUEUE = "default"
# Every task's queue, named one by one: a task added or renamed without its line here fails the
# suite (tests/test_settings.py) instead of landing on another queue unnoticed. `default`: light
# database work; `gpu`: training and scoring, on the gpu worker; `generate`: calls to the
# generator (candidate pools, candidate next steps for labelers), so a slow model never holds up
# light work, and the workers near the generator take them.
TASK_QUEUES = {
    "labeling.tasks.expire_leases": "default",
    "labeling.expire_leases": "default",  # expire_leases' old name, kept one release
    "labeling.tasks.run_snapshot": "default",
    "labeling.tasks.resend_snapshots": "default",
    "modeling.tasks.resend_runs": "default",
    "modeling.tasks.fail_stale_runs": "default",
    "modeling.tasks.generation_step": "default",
    "modeling.tasks.check_generation_progress": "default",
    "modeling.tasks.export_model": "default",  # a child process loads torch, not the worker
    "modeling.tasks.fail_stale_generations": "default",
    "modeling.tasks.gpu_train_run": "gpu",
    "modeling.tasks.gpu_gate_model": "gpu",
    "modeling.tasks.gpu_generation_step": "gpu",
    "modeling.tasks.gpu_score_for_review": "gpu",
    "modeling.tasks.gpu_compare_best_of_n": "gpu",
    "modeling.tasks.generate_pool_run": "generate",
    "modeling.tasks.generate_proposal": "generate",
    "modeling.tasks.prelabel_run": "generate",  # llm and mc judges: the generator
    "modeling.tasks.gpu_prelabel_run": "gpu",  # the prm judge: a model version
    "labeling.tasks.generate_proposal": "generate",  # generate_proposal's old name, one release
}
CELERY_TASK_ROUTES = {name: {"queue": queue} for name, queue in TASK_QUEUES.items()}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 6 * 3600)
# A worker told to stop with REMAP_SIGTERM=SIGQUIT in its environment (the gpu worker's, see
# docker/Dockerfile) gives its running task this long, then cancels it, puts its message back
# on the queue (acks_late) and exits: a long gate or scoring no longer holds up a restart, nor
# is its message left unacknowledged in Redis until the visibility timeout.
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = env_float("CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT", 30.0)
# A training run's hard limit (modeling.tasks.gpu_train_run), the longest of any task.
STEPWISE_TRAINING_TIME_LIMIT_S = env_int("STEPWISE_TRAINING_TIME_LIMIT_S", 24 * 3600)
# How often beat runs each sweeper below (the generation check has its own period).
STEPWISE_SWEEP_SECONDS = env_float("STEPWISE_SWEEP_SECONDS", 60.0)
# A queued row (snapshot, training run) whose task message no worker has taken after this long
# is sent again: a broker without persistence loses its messages when it restarts. A duplicate
# is harmless, the task claims its row with a conditional UPDATE.
STEPWISE_RESEND_AFTER_SECONDS = env_int("STEPWISE_RESEND_AFTER_SECONDS", 15 * 60)
# A running snapshot whose worker sent no heartbeat for this long is sent again and taken over.
STEPWISE_SNAPSHOT_STALE_SECONDS = env_int("STEPWISE_SNAPSHOT_STALE_SECONDS", 10 * 60)
CELERY_BEAT_SCHEDULE = {
    "expire-leases": {"task": "labeling.tasks.expire_leases", "schedule": STEPWISE_SWEEP_SECONDS},
    "fail-stale-training-runs": {
        "task": "modeling.tasks.fail_stale_runs",
        "schedule": STEPWISE_SWEEP_SECONDS,
    },
    # Rows whose task never reached the broker (Redis down), was lost in it (Redis restarted)
    # or died with its worker.
    "resend-snapshots": {
        "task": "labeling.tasks.resend_snapshots",
        "schedule": STEPWISE_SWEEP_SECONDS,
    },
    "resend-training-runs": {
        "task": "modeling.tasks.resend_runs",
        "schedule": STEPWISE_SWEEP_SECONDS,
    },
    "fail-stale-generations": {
        "task": "modeling.tasks.fail_stale_generations",
        "schedule": STEPWISE_SWEEP_SECONDS,
    },
    "check-generation-progress": {
        "task": "modeling.tasks.check_generation_progress",
        "schedule": env_int("STEPWISE_GENERATION_CHECK_SECONDS", 300),
    },
}
# Redis hands an unacknowledged task (acks_late) to another worker after the visibility timeout,
# so a shorter one than the longest task limit would start a still-running training run twice.
_longest_limit = max(CELERY_TASK_TIME_LIMIT, STEPWISE_TRAINING_TIME_LIMIT_S)
_visibility_timeout = env_int("CELERY_VISIBILITY_TIMEOUT", _longest_limit + 3600)
if _visibility_timeout <= _longest_limit:
    raise ImproperlyConfigured(
        f"CELERY_VISIBILITY_TIMEOUT={_visibility_timeout} must be longer than the longest "
        f"task time limit ({_longest_limit} s: STEPWISE_TRAINING_TIME_LIMIT_S, "
        "CELERY_TASK_TIME_LIMIT), or Redis redelivers a running task to a second worker"
    )
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": _visibility_timeout}

# API tokens (django-rest-knox): each user makes, names and revokes their own on the tokens page
# (`Authorization: Token <key>`); stored as a digest, with an optional expiry chosen there.
KNOX_TOKEN_MODEL = "labeling.ApiToken"
# knox's own migrations create its AuthToken table even when swapped out: an unused table that
# also breaks a flush (it references auth_user). Its model is swapped, so it needs no table.
MIGRATION_MODULES = {"knox": None}
REST_KNOX = {"TOKEN_TTL": None, "AUTH_HEADER_PREFIX": "Token"}
# How often a token's last use is written: not a write per request.
STEPWISE_TOKEN_LAST_USED_SECONDS = 60

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "labeling.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's defaults, with a JSON parser that bounds a body's nesting (stepwise/parsers.py).
    "DEFAULT_PARSER_CLASSES": [
        "stepwise.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Stepwise API",
    "DESCRIPTION": "Step-level labels of LLM math solutions, exports and PRM training.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs pages map every route: signed-in users only, unless opened on purpose.
    "SERVE_PERMISSIONS": [
        "rest_framework.permissions.AllowAny"
        if env_bool("STEPWISE_PUBLIC_API_DOCS", default=False)
        else "rest_framework.permissions.IsAuthenticated"
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "ExportFormatEnum": "labeling.models.Snapshot.Format",
        "SolutionFormatEnum": "labeling.models.Solution.Format",
        "SnapshotStatusEnum": "labeling.models.Snapshot.Status",
        "LabelingStatusEnum": "labeling.models.Labeling.Status",
        "IncludeExcludeOnlyEnum": "labeling.serializers.THREE_WAY",
        "RunStatusEnum": "modeling.models.RunStatus",  # TrainingRun's and GenerationRun's
        "PrelabelModeEnum": "labeling.models.Batch.PrelabelMode",
        "PrelabelKindEnum": "labeling.models.PreLabel.Kind",
        "RatingEnum": "labeling.models.Rating",  # a completion's rating, a suggestion's label
    },
}

# Labeling queue.
STEPWISE_LEASE_SECONDS_MIN = env_int("STEPWISE_LEASE_SECONDS_MIN", 10 * 60)
STEPWISE_LEASE_SECONDS_MAX = env_int("STEPWISE_LEASE_SECONDS_MAX", 2 * 3600)
STEPWISE_UNDO_WINDOW_SECONDS = env_int("STEPWISE_UNDO_WINDOW_SECONDS", 10 * 60)
STEPWISE_IMPORT_CHUNK = env_int("STEPWISE_IMPORT_CHUNK", 2000)
# Processes that parse a PRM800K import while this one writes (0: parse in this process). The
# default leaves a core to the writing process and the database server.
STEPWISE_IMPORT_WORKERS = env_int(
    "STEPWISE_IMPORT_WORKERS", max(1, min(4, (os.cpu_count() or 2) - 1))
)
STEPWISE_UPLOAD_MAX_BYTES = env_int("STEPWISE_UPLOAD_MAX_BYTES", 1024 * 1024 * 1024)
# A solution's size, refused at import past these (its pages show every step): PRM800K's
# longest solution has 107 steps and its longest step 1,093 characters.
STEPWISE_MAX_STEPS_PER_SOLUTION = env_int("STEPWISE_MAX_STEPS_PER_SOLUTION", 1000)
STEPWISE_MAX_STEP_CHARS = env_int("STEPWISE_MAX_STEP_CHARS", 10_000)
# A note on a rating or a lead's reply: a sentence or two ("why −1"), not an essay.
STEPWISE_NOTE_MAX_CHARS = env_int("STEPWISE_NOTE_MAX_CHARS", 1000)
# Notes one user writes on one step of a solution (or on the whole of it): a discussion, not a
# flood; every page that shows the step shows them all.
STEPWISE_NOTES_PER_STEP = env_int("STEPWISE_NOTES_PER_STEP", 20)

# Quality control (defaults follow PRM800K: a 30-solution screening, gold mixed into the queue).
STEPWISE_GOLD_RATE = env_float("STEPWISE_GOLD_RATE", 0.1)
STEPWISE_SCREENING_SIZE = env_int("STEPWISE_SCREENING_SIZE", 30)
STEPWISE_SCREENING_PASS = env_float("STEPWISE_SCREENING_PASS", 0.8)
STEPWISE_GOLD_WINDOW = env_int("STEPWISE_GOLD_WINDOW", 20)
STEPWISE_GOLD_MIN_RESULTS = env_int("STEPWISE_GOLD_MIN_RESULTS", 5)
STEPWISE_PAUSE_BELOW = env_float("STEPWISE_PAUSE_BELOW", 0.7)
# A solution (N >= 2) goes to adjudication when its labelers' first errors differ or their
# raw per-step agreement is under this.
STEPWISE_ADJUDICATE_BELOW = env_float("STEPWISE_ADJUDICATE_BELOW", 0.8)

# Active learning: start the next generation when the last one is labeled to this fraction
# (0 turns it off); checked by the periodic task below (run `celery beat`).
STEPWISE_AUTO_GENERATION_FRACTION = env_float("STEPWISE_AUTO_GENERATION_FRACTION", 0.0)
# TrainConfig fields (JSON) for a generation's retrain step when the run does not give its own.
# The embedded default (the demo, on a CPU) trains the head on 10 of the default backbone's
# layers, 30 epochs: about a minute, and it passes the evaluation gate on the demo's labels
# (the full backbone, 1 epoch, is slower and often does not).
DEMO_GENERATION_TRAIN_CONFIG = '{"backbone_layers": 10, "epochs": 30}'
STEPWISE_GENERATION_TRAIN_CONFIG = json.loads(
    env_str(
        "STEPWISE_GENERATION_TRAIN_CONFIG",
        DEMO_GENERATION_TRAIN_CONFIG if EMBEDDED and not TESTING else "{}",
    )
    or "{}"
)
# The "uncertainty" selection rule: heads in the ensemble fitted on the model's frozen features
# (head mode only; each head is a small linear fit, so a few cost seconds to minutes on a CPU).
STEPWISE_ENSEMBLE_HEADS = env_int("STEPWISE_ENSEMBLE_HEADS", 5)
# PRM training runs. A run's held-out problems (this share, by problem) measure its step AUROC;
# it becomes the active model only when that is at least the floor and does not regress more
# than the margin from the active model's. A RUNNING run whose worker sent no heartbeat for
# STEPWISE_RUN_STALE_SECONDS is marked failed (resumable) by a periodic task.
STEPWISE_PRM_HOLDOUT_FRACTION = env_float("STEPWISE_PRM_HOLDOUT_FRACTION", 0.2)
# Reference data a request may name by path (ProcessBench files for a run's evaluation) lives
# under this folder; the API refuses paths anywhere else on the server.
STEPWISE_DATA_ROOT = Path(env_str("STEPWISE_DATA_ROOT", str(VAR_DIR / "data")))
# Model folders a request may name as a run's backbone (besides the named offline backbones and
# models already in the local Hugging Face cache); folders elsewhere on the server are refused.
STEPWISE_MODELS_ROOT = Path(env_str("STEPWISE_MODELS_ROOT", str(VAR_DIR / "models")))
# Models trained elsewhere (import_prm, /api/models/import/) are sized before anything is
# allocated or written: parameters estimated from config.json's dimensions and counted from the
# weight files' headers. The largest PRMs in use (Qwen2.5-Math-PRM-7B, RLHFlow's Llama-3.1-8B
# PRM) have 7.6 and 8.0 B.
STEPWISE_MAX_IMPORT_PARAMETERS = env_int("STEPWISE_MAX_IMPORT_PARAMETERS", 10_000_000_000)
# An uploaded archive of a model folder: its size (16-bit weights barely compress: an 8 B model
# is a 16 GB archive), what it may unpack to (an 8 B model in float32: 32 GB), its entries (a
# sharded checkpoint has tens) and how much it may have been compressed (weights about 1.1x,
# tokenizer JSON under 10x, a zip bomb of zeros 1000x), checked before anything is written.
STEPWISE_MODEL_UPLOAD_MAX_BYTES = env_int("STEPWISE_MODEL_UPLOAD_MAX_BYTES", 20 * 2**30)
STEPWISE_MODEL_UNPACKED_MAX_BYTES = env_int("STEPWISE_MODEL_UNPACKED_MAX_BYTES", 32 * 2**30)
STEPWISE_MODEL_ARCHIVE_MAX_ENTRIES = env_int("STEPWISE_MODEL_ARCHIVE_MAX_ENTRIES", 1000)
STEPWISE_MODEL_ARCHIVE_MAX_RATIO = env_float("STEPWISE_MODEL_ARCHIVE_MAX_RATIO", 100.0)
STEPWISE_PRM_EVAL_MIN_AUROC = env_float("STEPWISE_PRM_EVAL_MIN_AUROC", 0.6)
STEPWISE_PRM_EVAL_MAX_REGRESSION = env_float("STEPWISE_PRM_EVAL_MAX_REGRESSION", 0.02)
# An outcome model (ORM) passes with solution-level AUROC of correctness at least this on the
# evaluation set's graded solutions (0 turns its gate off); it is never activated.
STEPWISE_ORM_EVAL_MIN_AUROC = env_float("STEPWISE_ORM_EVAL_MIN_AUROC", 0.6)
# The gate compares models only on a frozen evaluation set: with none current, a run (and
# setup_demo) first draws one of this many problems no run has used, when twice as many are
# there. 0: none is made by itself.
STEPWISE_EVAL_SET_PROBLEMS = env_int("STEPWISE_EVAL_SET_PROBLEMS", 5)
STEPWISE_RUN_STALE_SECONDS = env_int("STEPWISE_RUN_STALE_SECONDS", 15 * 60)
STEPWISE_RUN_PROGRESS_SECONDS = env_float("STEPWISE_RUN_PROGRESS_SECONDS", 1.0)
# Processes a run trains in on its worker's machine (one run per machine): 1 trains in the
# worker's process; N > 1 launches the training CLI under torchrun --nproc-per-node N, which the
# worker supervises; "auto" is the worker's GPU count (or 1), resolved where the run executes.
STEPWISE_TRAIN_PROCESSES = env_str("STEPWISE_TRAIN_PROCESSES", "1").strip().lower()
if STEPWISE_TRAIN_PROCESSES != "auto" and not (
    STEPWISE_TRAIN_PROCESSES.isdigit() and int(STEPWISE_TRAIN_PROCESSES) >= 1
):
    raise ImproperlyConfigured(
        f"STEPWISE_TRAIN_PROCESSES={STEPWISE_TRAIN_PROCESSES!r} is not a count >= 1 or 'auto'"
    )
# Embedded default only: background model work (training, gating and review scores,
# generations, sampling runs, candidate next steps) runs in a thread of the web process (there
# is no worker), so the request that starts it answers at once (stepwise.celery.start_on_commit).
# Tests run tasks eagerly instead. STEPWISE_TRAIN_IN_THREAD is its old name, read while the new
# one is unset; it goes in the next release.
STEPWISE_MODEL_TASKS_IN_THREAD = env_bool(
    "STEPWISE_MODEL_TASKS_IN_THREAD",
    default=env_bool("STEPWISE_TRAIN_IN_THREAD", default=EMBEDDED and not TESTING),
)

# The generator (modeling/generator.py): an OpenAI-compatible completion server, e.g.
# `vllm serve MODEL` at http://gpu-host:8000/v1. Unset, generation runs the offline SmolLM2-135M
# in the worker's process (the embedded default and the tests).
STEPWISE_GENERATOR_URL = env_str("STEPWISE_GENERATOR_URL", "")
STEPWISE_GENERATOR_MODEL = env_str("STEPWISE_GENERATOR_MODEL", "")  # empty: the server's model
STEPWISE_GENERATOR_API_KEY = env_str("STEPWISE_GENERATOR_API_KEY", "")
STEPWISE_GENERATOR_MAX_TOKENS = env_int("STEPWISE_GENERATOR_MAX_TOKENS", 512)
# Per candidate step. PRM800K's phase-1 steps (44,716 distinct, the parquet in the shared data),
# in SmolLM2 tokens with the blank line that ends a step: p50 25, p95 69, p97 82, p99 121, max
# 1,078. 80 keeps 97% of real steps whole while bounding the wait for a set on a CPU (a sample
# cut at the cap is dropped, and the page says so); a GPU server can afford 128 (p99).
STEPWISE_GENERATOR_STEP_MAX_TOKENS = env_int("STEPWISE_GENERATOR_STEP_MAX_TOKENS", 80)
# A fixed seed for the candidate steps of the alternatives protocol, for tests: the candidates a
# test meets are then the same every run. Unset (the default), every request draws anew.
STEPWISE_GENERATOR_SEED = (
    env_int("STEPWISE_GENERATOR_SEED", 0) if env_str("STEPWISE_GENERATOR_SEED") else None
)
STEPWISE_GENERATOR_TEMPERATURE = env_float("STEPWISE_GENERATOR_TEMPERATURE", 0.8)
STEPWISE_GENERATOR_TOP_P = env_float("STEPWISE_GENERATOR_TOP_P", 0.95)
STEPWISE_GENERATOR_TIMEOUT_S = env_float("STEPWISE_GENERATOR_TIMEOUT_S", 120.0)
STEPWISE_GENERATOR_RETRIES = env_int("STEPWISE_GENERATOR_RETRIES", 3)
STEPWISE_GENERATOR_CONCURRENCY = env_int("STEPWISE_GENERATOR_CONCURRENCY", 8)
# Candidate sets one labeler may have wanted at once in the alternatives protocol (and tasks out
# for them: queued, running, or a thread on the embedded default): the step they label, the next
# solution's first step and one +1's next step, asked ahead. One labeler never floods the
# generator; a request past it stops their oldest set, or waits for a task to end.
STEPWISE_CANDIDATE_SETS_PER_LABELER = env_int("STEPWISE_CANDIDATE_SETS_PER_LABELER", 3)
if STEPWISE_CANDIDATE_SETS_PER_LABELER < 1:
    raise ImproperlyConfigured(
        f"STEPWISE_CANDIDATE_SETS_PER_LABELER={STEPWISE_CANDIDATE_SETS_PER_LABELER} is below 1"
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "axes": {"level": "WARNING"},  # one INFO line per sign-in otherwise
    },
}

# --- HTTPS and what browsers may do -------------------------------------------------------------
# Production (DEBUG off) is served over HTTPS: by a TLS-terminating proxy in front
# (STEPWISE_BEHIND_TLS_PROXY=1 trusts its X-Forwarded-Proto; docker/compose.yaml has one) or
# directly. STEPWISE_HTTPS=0 is for plain HTTP on a trusted network or a benchmark on loopback;
# `manage.py check --deploy` then warns, as it should.
# The embedded default is served by runserver on loopback, over plain HTTP.
HTTPS = env_bool("STEPWISE_HTTPS", default=not (DEBUG or TESTING or EMBEDDED))
# Behind the proxy, X-Forwarded-Proto and X-Forwarded-For are its own (it sets them); without
# one, a client could send either, so neither is read.
BEHIND_TLS_PROXY = env_bool("STEPWISE_BEHIND_TLS_PROXY", default=False)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if HTTPS:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=True)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=HTTPS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", default=HTTPS)

# Content-Security-Policy (django-csp; Django 5.2 has none built in, 6.0 does: move to it with
# the Django upgrade). Every script and style is served from our own static files (KaTeX, htmx
# and Chart.js are vendored), so no other origin is allowed. Styles allow inline because KaTeX
# positions rendered math with style attributes and htmx adds its indicator style.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

# Test-only speed settings live here, in one place.
if TESTING:
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
