# On a fresh machine: `make demo` and `make test` are all you need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint typecheck bench clean browser

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

test: $(STAMP) browser
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || { test "$$(id -u)" = 0 && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || echo "chromium unavailable: the HTML render check will be skipped"
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) .contextfold build *.egg-info
