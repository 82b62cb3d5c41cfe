# The two commands a new user needs: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: run test bench install db lint format clean

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

# A private SECRET_KEY for this checkout, made once and never committed.
.env:
	python3 -c "import secrets; print('SECRET_KEY=' + secrets.token_urlsafe(50))" > .env

db: install .env
	$(PY) manage.py ensure_database
	$(PY) manage.py migrate --no-input
	$(PY) manage.py setup_site

run: db
	$(VENV)/bin/honcho start

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Benchmarks use a database and key prefix of their own; wrk drives the read benchmarks.
bench: install
	command -v wrk >/dev/null || (apt-get update -q && apt-get install -y -q wrk)
	$(PY) -m bench $(BENCH_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) staticfiles artifacts
