# The two set-up commands for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned (pyproject) to the CPU wheel on this project's machines.
	$(BIN)/pip install -q -e '.[dev,postgres,train,ray]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/podfleet up --default-cluster pod-0

lint: $(STAMP)
	$(BIN)/ruff check podfleet tests bench

# Strict on the models and the engine, default mode elsewhere (pyproject [tool.mypy]).
typecheck: $(STAMP)
	$(BIN)/mypy podfleet

test: $(STAMP)
	$(BIN)/ruff check podfleet tests bench
	# Types: strict on the models, engine, scheduler and control plane; checked everywhere (pyproject).
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) .pytest_cache
