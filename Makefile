# One-liners. `make run` sets up and runs everything on the embedded default; `make test` tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py reconcile_budgets

# The console on http://127.0.0.1:8000 and the scheduler (Celery worker with beat).
run: setup
	$(BIN)/python manage.py seed_demo
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/honcho start -f Procfile

test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) var
