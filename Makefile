# kcoord developer commands. `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kcoord-installed
DURATION ?= 60

.PHONY: demo test unit chaos bench clean-venv

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kcoord demo

test: $(STAMP)
	$(BIN)/python -m pytest

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/sim

chaos: $(STAMP)
	KCOORD_CHAOS_SECONDS=$(DURATION) $(BIN)/python -m pytest -m chaos tests/chaos -s

bench: $(STAMP)
	$(BIN)/kcoord bench --out bench-results

clean-venv:
	rm -rf $(VENV)
