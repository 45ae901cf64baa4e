# Ridgeline: `make run` serves the API; `make test` runs lint and every test.
# Needs only Python 3.11+ and make; everything else goes into $(VENV).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# The benchmark job's PyTorch. On the CI machines pip takes 2.13.0 from a local CPU wheel; elsewhere
# it downloads it. Override (e.g. TORCH=torch==2.5.1) to use another build.
TORCH ?= torch==2.13.0
# One pytest worker per core; the slow tests (marked `slow`) start first. `-m "not slow"` skips them.
PYTEST_ARGS ?= -n auto

export RIDGELINE_DATABASE_URL ?= sqlite:///./ridgeline.db

.PHONY: help run install install-dev test lint format typecheck openapi lock bench-api bench-estimates bench-simulator bench-plans bench-heavy bench-instructions validate clean

help:
	@echo "make run      set up, migrate, load the catalog and serve on http://$(HOST):$(PORT) (docs at /docs)"
	@echo "make test     set up, lint, type-check and run every test on SQLite and PostgreSQL"
	@echo "make openapi  regenerate openapi/openapi.json from the app"
	@echo "make validate compare against published runs; write the record the service ships"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Exact versions from the lock files (requirements/*.lock, made by `make lock`); pyproject.toml
# keeps the lower bounds.
# The package itself: setup.py compiles the simulator's event loop with mypyc (build.lock), and
# a change to that module compiles it again.
COMPILED := app/engine/ops.py app/engine/step_cost.py app/engine/profiles/grid.py app/engine/profiles/measured.py app/engine/profiles/timer.py app/engine/simulation/loop.py
INSTALL_PACKAGE := $(BIN)/pip install --quiet --no-deps --no-build-isolation -e .

$(VENV)/.installed: pyproject.toml setup.py requirements/service.lock requirements/build.lock $(COMPILED) | $(BIN)/python
	$(BIN)/pip install --quiet --requirement requirements/service.lock --requirement requirements/build.lock
	$(INSTALL_PACKAGE)
	@touch $@

$(VENV)/.installed-dev: pyproject.toml setup.py requirements/dev.lock requirements/bench.lock requirements/build.lock $(COMPILED) | $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet --requirement requirements/dev.lock --requirement requirements/bench.lock --requirement requirements/build.lock
	$(INSTALL_PACKAGE)
	@touch $@ $(VENV)/.installed

# Re-resolve the lock files from pyproject.toml (needs uv: pip install uv).
lock:
	uv pip compile pyproject.toml --python-version 3.11 -o requirements/service.lock
	uv pip compile pyproject.toml --python-version 3.11 --extra dev --extra profiles -o requirements/dev.lock
	uv pip compile requirements/bench.in --python-version 3.11 -o requirements/bench.lock

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# A development API key for writes, made once and kept out of git (.dev-api-key).
.dev-api-key: | $(BIN)/python
	@$(BIN)/python -c "import secrets; print(secrets.token_urlsafe(24))" > $@

run: $(VENV)/.installed .dev-api-key
	$(BIN)/ridgeline migrate
	$(BIN)/ridgeline load-catalog
	@echo "Serving on http://$(HOST):$(PORT) (Swagger UI: /docs). Writes accept the key in .dev-api-key."
	RIDGELINE_API_KEYS="$${RIDGELINE_API_KEYS:-$$(cat .dev-api-key)}" \
		$(BIN)/ridgeline serve --host $(HOST) --port $(PORT)

lint: $(VENV)/.installed-dev
	$(BIN)/python scripts/check_tree.py
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

openapi: $(VENV)/.installed
	$(BIN)/ridgeline openapi --out openapi/openapi.json

bench-api: $(VENV)/.installed-dev
	$(BIN)/python scripts/bench_api.py

bench-estimates: $(VENV)/.installed-dev
	$(BIN)/python scripts/bench_estimates.py

bench-simulator: $(VENV)/.installed-dev
	$(BIN)/python scripts/bench_simulator.py

bench-heavy: $(VENV)/.installed-dev
	$(BIN)/python scripts/bench_heavy.py

bench-instructions: $(VENV)/.installed-dev
	$(BIN)/python scripts/bench_instructions.py

bench-plans: $(VENV)/.installed-dev
	$(BIN)/python scripts/bench_plans.py

validate: $(VENV)/.installed-dev
	$(BIN)/python scripts/validate_published.py --record

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache ridgeline.db ridgeline.db-* build app/engine/compiled.sha256
	find app -name "*.so" -delete
