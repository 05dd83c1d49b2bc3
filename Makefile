# The two set-up commands for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck venv clean console console-types

# The web console (console/): npm packages pinned by its lockfile, built into the Python
# package (podfleet/console/dist, gitignored), which `podfleet up` serves at /.
CONSOLE_STAMP := console/node_modules/.installed
CONSOLE_DIST := podfleet/console/dist/index.html
CONSOLE_SRC := $(wildcard console/src/*.ts console/src/*/*.ts console/src/*.css) console/index.html console/vite.config.ts console/tsconfig.json

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned (pyproject) to the CPU wheel on this project's machines.
	$(BIN)/pip install -q -e '.[dev,postgres,train,ray]'
	touch $(STAMP)

venv: $(STAMP)

$(CONSOLE_STAMP): console/package.json console/package-lock.json
	cd console && npm ci --no-audit --no-fund
	touch $(CONSOLE_STAMP)

$(CONSOLE_DIST): $(CONSOLE_STAMP) $(CONSOLE_SRC)
	cd console && npm run build

console: $(CONSOLE_DIST)

# The console's API types, generated from the app's OpenAPI document: both files are
# committed (a fresh clone builds the console without Python), and
# tests/api/test_openapi_dump.py fails when they no longer match the app. Run after a
# schema change.
console-types: $(STAMP) $(CONSOLE_STAMP)
	$(BIN)/python -m podfleet.api.openapi_dump --output console/src/generated/openapi.json
	cd console && npm run gen:api

# A pod that moves: a running job, a queued one, a chip failure a minute in (README).
run: $(STAMP) $(CONSOLE_DIST)
	$(BIN)/podfleet up --demo

lint: $(STAMP)
	$(BIN)/ruff check podfleet tests bench

# Strict on the models and the engine, default mode elsewhere (pyproject [tool.mypy]).
typecheck: $(STAMP)
	$(BIN)/mypy podfleet

test: $(STAMP) $(CONSOLE_DIST)
	$(BIN)/ruff check podfleet tests bench
	# Types: strict on the models, engine, scheduler and control plane; checked everywhere (pyproject).
	$(BIN)/mypy
	# Alerting rules and scrape config of monitoring/ (promtool: Debian's prometheus package).
	promtool check rules monitoring/prometheus/alerts.yml
	promtool check config monitoring/prometheus/prometheus.yml
	# The slowest tests, listed at the end: the suite must stay well inside CI's time.
	# PYTEST_ARGS="-n 2 --dist loadgroup" runs two worker processes (tests/conftest.py groups
	# the files; 19:39 on CI's 2 cores, but Ray tests timed out beside the other worker).
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache console/node_modules podfleet/console/dist
