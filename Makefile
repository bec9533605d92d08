# Two entry points on a fresh machine: `make demo` (a real generation) and `make test` (the CPU suite).
# Both create .venv and install what they need (scripts/setup.sh).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-all lint
setup:
	@bash scripts/setup.sh $(VENV)

demo: setup
	$(VENV)/bin/updraft generate --chat "Explain speculative decoding in two sentences." --max-tokens 96 \
		--speculative-algorithm EAGLE3 --speculative-draft-model-path builtin:smollm2 --compare-plain

# Test workers (pytest-xdist): CI's machine has 2 cores; PYTEST_JOBS=0 runs in this process.
PYTEST_JOBS ?= 2

test: setup
	$(PY) -m pytest -m "not gpu and not slow" -q -n $(PYTEST_JOBS)

lint: setup
	$(VENV)/bin/ruff check updraft tests
