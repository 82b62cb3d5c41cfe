# The two commands a new user needs: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Each stamp is newer than the pinned files it installed: editing one reinstalls.
BASE := $(VENV)/.installed-base
DEV := $(VENV)/.installed-dev
RUNNER := $(VENV)/.installed-run
# pytest's workers: one more than the cores, because much of the suite waits on PostgreSQL and
# on real processes (on 2 cores: 3 workers 2 min 50 s, 2 workers 3 min 5 s).
JOBS ?= $(shell python3 -c "import os; print((os.cpu_count() or 1) + 1)")

.PHONY: run test test-first test-cluster test-fast soak bench install install-dev db lint format clean browser \
	prometheus oscar oscar-test

# Python keeps the bytecode it compiles (in __pycache__ folders, which git ignores) even where the
# environment asks it not to (PYTHONDONTWRITEBYTECODE): the tests start hundreds of Python processes
# (pytest workers, gunicorn, Celery workers and beats, commands), each of which would otherwise
# compile every module it imports again, 2 s of CPU or more, before it does anything.
unexport PYTHONDONTWRITEBYTECODE

# uv installs the pinned lists in a few seconds where pip takes half a minute (a fresh clone's
# `make test` waits on it); pip only installs uv itself.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
INSTALL := $(UV) pip install --quiet --python $(PY)

$(PY):
	python3 -m venv $(VENV)

$(UV): | $(PY)
	$(PIP) install --quiet uv==$(UV_VERSION)

# What production needs.
$(BASE): requirements/base.txt | $(UV)
	$(INSTALL) -r requirements/base.txt
	touch $@

# Production's packages and honcho, which runs the Procfile (`make run`).
$(RUNNER): requirements/base.txt requirements/run.txt | $(UV)
	$(INSTALL) -r requirements/run.txt
	touch $@ $(BASE)

# Production's packages plus the tests', the linter's and the benchmarks'.
$(DEV): requirements/base.txt requirements/dev.txt | $(UV)
	$(INSTALL) -r requirements/dev.txt
	touch $@ $(BASE)

install: $(BASE)

install-dev: $(DEV)

# A private SECRET_KEY for this checkout, made once and never committed.
.env:
	python3 -c "import secrets; print('SECRET_KEY=' + secrets.token_urlsafe(50))" > .env

db: $(RUNNER) .env
	$(PY) manage.py ensure_database
	$(PY) manage.py migrate --no-input
	$(PY) manage.py setup_site

run: db
	$(VENV)/bin/honcho start

# The example Oscar shop (examples/oscar_shop) beside salesrank: salesrank as `make run` does on
# :8000, the shop on :8001 with its Celery worker and beat, which send its orders (and its demo
# catalogue) to salesrank. The shop's token for salesrank is made once, into examples/oscar_shop/.env.
SHOP := examples/oscar_shop
oscar: db install-dev
	$(PY) $(SHOP)/manage.py shop_setup
	test -s $(SHOP)/.env || $(PY) manage.py ingest_token oscar-shop --permission add_sale \
		--permission catalogue.change_product --permission catalogue.change_category \
		| sed -n 's/^token /SALESRANK_TOKEN=/p' > $(SHOP)/.env
	cat Procfile $(SHOP)/Procfile > $(SHOP)/.procfile
	$(VENV)/bin/honcho -f $(SHOP)/.procfile -d . start

# The whole suite in three runs, two at a time (RUNS_AT_ONCE=1: one after the other), each part's
# output shown whole when it ends; make test fails if any part fails.
# - test-first, beside `make lint`: the whole suite, fault and browser tests included, spread over
#   $(JOBS) workers test by test, the longest first (tests/longest_first.py); a worker that runs out
#   takes waiting tests from the others, so a long test does not end the run on one worker.
# - then test-cluster beside oscar-test: the boards on a Redis Cluster of each worker's own (three
#   primaries, three replicas): the engine, crash, backfill and cluster tests, the split boards'
#   reads (a cluster reads the parts node by node, a split board's rank in two round trips) and
#   20 random histories (the engine's code is the same on either; what a cluster changes is the
#   store's, which the cluster tests take in turn). The failover test, which kills a cluster node,
#   starts a cluster of its own in the first run.
# What the repeated tests draw in make test (each run draws anew; `make soak` draws more):
# - tests/test_engine_properties.py: 24 random histories of 25 steps (sales, returns, resends,
#   engagement, clock moves, prunes, alerts, ticks of every batch size), 4 parts whole and 2 split,
#   plus 2 under alerts and 4 with tree edits; on the Redis Cluster, 20;
# - tests/faults/test_out_of_order_commits.py: 200 seeded interleavings of two sessions' commits
#   and ticks (about 130 orders of the steps, each with sales and clock moves of its seed's).
RUNS_AT_ONCE ?= 2
CLUSTER_TESTS := tests/test_cluster.py tests/test_lost_writes.py tests/test_engine.py \
	tests/test_engine_crashes.py tests/test_backfill.py tests/test_engine_properties.py \
	tests/test_split_reads.py tests/test_split_depth.py tests/test_names.py
test: install-dev browser prometheus
	$(MAKE) --no-print-directory --output-sync=target -j$(RUNS_AT_ONCE) lint test-first
	$(MAKE) --no-print-directory --output-sync=target -j$(RUNS_AT_ONCE) test-cluster oscar-test

test-first: install-dev browser prometheus
	$(PY) -m pytest -q -n $(JOBS) --dist worksteal $(PYTEST_ARGS)

test-cluster: install-dev
	PROPERTY_HISTORIES=20 $(PY) -m pytest -q -n 2 --dist worksteal --redis-cluster $(CLUSTER_TESTS)

# The Oscar app's own tests (salesrank_oscar/tests): the example shop's settings on a database of the
# run's own, against a real salesrank (web, worker, beat) the session starts in the background.
oscar-test: install-dev browser
	$(PY) -m pytest -q -c salesrank_oscar/pyproject.toml salesrank_oscar/tests

# The inner loop, under a minute on 2 cores: no processes, fault, browser, cluster or slow tests
# (reshards and switch-overs, over and over), 4 random histories instead of 60, and without the
# slowest files and tests (the schema's generated requests, a million categories in the admin,
# memory and growth bounds at size, the year of history, the partitions' and migrations' own tests,
# the split boards' pages against one sorted set at every depth, the statements of pushes of 5,000
# products and categories: each seconds of CPU), which make test still runs.
FAST_SKIPPED := test_schema.py test_admin_scale.py test_read_memory.py test_growth.py \
	test_history_reads.py test_partitions.py test_migrations.py test_demo.py test_split_depth.py
FAST_DESELECTED := test_catalogue_api.py::test_a_push_of_5000_products_costs_the_statements_of_a_push_of_10 \
	test_catalogue_api.py::test_a_push_of_5000_categories_costs_the_statements_of_a_push_of_10
test-fast: install-dev
	PROPERTY_HISTORIES=4 $(PY) -m pytest -q -n $(JOBS) --dist worksteal \
		-m "not processes and not faults and not browser and not cluster and not slow" \
		--ignore=tests/faults $(addprefix --ignore=tests/,$(FAST_SKIPPED)) \
		$(addprefix --deselect=tests/,$(FAST_DESELECTED)) $(PYTEST_ARGS)

# What make test draws, ten times over and more: 600 random histories (and 100 on a Redis Cluster:
# five times), 2,000 seeded interleavings of out-of-order commits (ten times); worth a run before a
# release or after a change to the engine.
soak: install-dev
	PROPERTY_HISTORIES=600 $(PY) -m pytest -q -n $(JOBS) --dist worksteal tests/test_engine_properties.py
	PROPERTY_HISTORIES=100 $(PY) -m pytest -q -n 2 --dist worksteal --redis-cluster tests/test_engine_properties.py
	INTERLEAVINGS=2000 $(PY) -m pytest -q -n $(JOBS) --dist worksteal tests/faults/test_out_of_order_commits.py

# The browser tests drive Debian's Chromium (Playwright's own browser download does not work here).
browser:
	command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)

# The alert rules' tests (promtool) and the scrape by a real Prometheus use Debian's prometheus.
prometheus:
	command -v promtool >/dev/null && command -v prometheus >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus)

# Benchmarks use a database, a Redis database and a key prefix of their own; wrk drives the read benchmarks.
bench: install-dev
	command -v wrk >/dev/null || (apt-get update -q && apt-get install -y -q wrk)
	$(PY) -m bench $(BENCH_ARGS)

# Style, the layers of the imports (pyproject.toml's contracts), then the types (mypy.ini; the Oscar
# app's with the example shop's settings, salesrank_oscar/mypy.ini).
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --config-file salesrank_oscar/mypy.ini

format: install-dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) staticfiles artifacts
