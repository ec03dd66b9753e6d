# On a fresh machine: `make demo` and `make test` are all you need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo agents browser test test-all lint typecheck bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,all]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/contextfold demo

# Chromium for the inspector's browser tests (Debian's package; apt only as root, only if missing)
browser:
	@command -v chromium >/dev/null 2>&1 || { test "$$(id -u)" = 0 && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || echo "chromium unavailable: the browser tests will be skipped (a failure with CONTEXTFOLD_REQUIRE_ALL=1)"

# the real agent programs the tests drive through the gateway, installed once into
# $${CONTEXTFOLD_AGENT_CACHE:-~/.cache/contextfold/agents} (outside the checkout)
agents:
	$(PY) scripts/install_agents.py

# test processes side by side (pytest-xdist); TEST_JOBS=0 runs them in this one process
TEST_JOBS ?= 2

# the short version of every test (a short session per agent program)
test: $(STAMP) agents browser
	$(BIN)/python -m pytest -m "not long" -n $(TEST_JOBS)

# everything, the agents' long sessions too
test-all: $(STAMP) agents browser
	$(BIN)/python -m pytest -n $(TEST_JOBS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples scripts
	$(BIN)/ruff format --check src tests benchmarks examples scripts
	$(PY) scripts/architecture_diagram.py --check
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || { test "$$(id -u)" = 0 && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || echo "chromium unavailable: the HTML render check will be skipped"
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) .contextfold build *.egg-info
