# Two commands set everything up on a fresh machine:
#   make run   - the gateway with a ready demo (SQLite, built-in upstream simulator)
#   make test  - the whole test suite (set DATABASE_URL / REDIS_URL for PostgreSQL + Redis)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint format bench agents docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py run_demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The documentation (docs/, mkdocs.yml) into site/; strict: a broken link or anchor fails
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python bench/overhead.py

# The coding agents the end-to-end tests drive (Codex CLI, Claude Code), pinned, into .agents/
agents:
	tests/e2e/agents/install.sh
