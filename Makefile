# One-liners. `make run` sets up and runs everything on the embedded default; `make test` tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint cli-alone clean bytecode

$(STAMP): pyproject.toml cli/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@# Then the CLI: reinstalling the server would take an older install's bin/iris with it.
	$(BIN)/python -m pip install --quiet -e ./cli
	@# The server's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set, every process
	@# would otherwise compile it again (a third of `manage.py simulate`'s imports).
	$(BIN)/python -m compileall -q scheduler iris_web
	touch $(STAMP)

bytecode: $(STAMP)
	$(BIN)/python -m compileall -q scheduler iris_web

setup: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py reconcile_budgets

# The console on http://127.0.0.1:8000, the scheduler (Celery worker with beat) and a demo
# cluster of local worker agents: two CPU hosts and the four hosts of a "v5p-8" slice.
# `make run DEMO_LOAD=1` also runs the load generator. Budget tiers: config/cluster.demo.toml.
# With no IRIS_REDIS_URL the Celery broker is the embedded Redis (the Procfile's `broker`).
DEMO_PROCESSES := $(if $(IRIS_REDIS_URL)$(IRIS_BROKER_URL),,broker) web scheduler cpu-1 cpu-2 slice-a-0 slice-a-1 slice-a-2 slice-a-3 $(if $(DEMO_LOAD),load)
run: export IRIS_CLUSTER_CONFIG ?= $(CURDIR)/config/cluster.demo.toml
run: setup
	$(BIN)/python manage.py seed_demo
	@# Prometheus' multiprocess files belong to the processes of one run: start each run empty.
	rm -rf "$${PROMETHEUS_MULTIPROC_DIR:-$${IRIS_DATA_DIR:-var}/metrics}"
	@# Started as root, the demo agents run each attempt as a uid of its own: those uids may
	@# reach their working directories and nothing else of the data dir (its database included).
	chmod -R go-rwx "$${IRIS_DATA_DIR:-var}" && mkdir -p "$${IRIS_DATA_DIR:-var}/work" && chmod 711 "$${IRIS_DATA_DIR:-var}" "$${IRIS_DATA_DIR:-var}/work"
	@# Not root: said here once for all the demo agents, which then do not each say it again.
	@if [ "$$(id -u)" != 0 ]; then echo "make run: not started as root, so the demo agents run every task as $$(id -un): tasks are not isolated from each other (sudo make run isolates them; see docs/operations.md, \"Agent modes\")"; fi
	umask 077 && if [ "$$(id -u)" != 0 ]; then export IRIS_AGENT_SHARED_NOTICE_GIVEN=1; fi && \
	  PATH="$(abspath $(BIN)):$$PATH" $(BIN)/honcho start -f Procfile $(DEMO_PROCESSES)

test: $(STAMP) lint cli-alone
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The layers (import-linter), ruff's checks and its formatting (`ruff format .` applies it).
lint: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The iris CLI installs alone, as a researcher installs it on a laptop: a fresh virtualenv gets
# ./cli and nothing of the server (import django must fail there).
CLI_ALONE := $(or $(IRIS_DATA_DIR),var)/cli-alone
cli-alone: $(STAMP)
	rm -rf "$(CLI_ALONE)"
	$(PYTHON) -m venv "$(CLI_ALONE)"
	@# From a copy: two passes at once (.ci/run) must not build in the same source folder.
	cp -r cli "$(CLI_ALONE)/src"
	"$(CLI_ALONE)/bin/python" -m pip install --quiet "$(CLI_ALONE)/src"
	"$(CLI_ALONE)/bin/iris" --help > /dev/null
	"$(CLI_ALONE)/bin/iris" job run --help > /dev/null
	@# Shown failing: "ModuleNotFoundError: No module named 'django'".
	"$(CLI_ALONE)/bin/python" -I -c "import django" 2>&1 | tail -n 1 | grep -x "ModuleNotFoundError: No module named 'django'" || { echo "cli-alone: django is importable beside the CLI alone"; exit 1; }
	"$(CLI_ALONE)/bin/python" -I -c "import importlib.util as u; assert not u.find_spec('scheduler'), 'the server came along'"
	@echo "cli-alone: iris installs and runs alone, without Django or the server"

clean:
	rm -rf $(VENV) var
