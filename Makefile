# kcoord developer commands. `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kcoord-installed
# make chaos: seconds of faults (make test runs 80 s; the long run is DURATION=1800)
DURATION ?= 160
SEEDS ?= 1000
JOBS ?= 0

.PHONY: demo test unit sim chaos stream-kill bench clean-venv

# The tested set of every dependency: constraints.txt (pyproject.toml has the ranges).
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[spark,data,bench,test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kcoord demo

test: $(STAMP)
	$(BIN)/python -m pytest

# Fast iteration: the unit tests and a sample of 100 simulation seeds.
unit: $(STAMP)
	KCOORD_SIM_SEEDS=100 $(BIN)/python -m pytest tests/unit tests/sim

# The cluster simulation over SEEDS seeds (a count, a range 5000-5999, or a list 17,42) on
# JOBS processes (0: every core); a failing seed prints the command that replays it.
sim: $(STAMP)
	$(BIN)/python -m tests.sim.run --seeds $(SEEDS) --jobs $(if $(filter 0,$(JOBS)),$$(nproc),$(JOBS))

chaos: $(STAMP)
	KCOORD_CHAOS_SECONDS=$(DURATION) $(BIN)/python -m pytest -m chaos tests/chaos -s

# Streaming queries' drivers (restarted in new processes), Ray Data write workers and Spark
# executors SIGKILLed mid-batch, and leaders and a transaction coordinator killed under a Spark
# query (minutes; not in make test), after the Ray Data query's leader and coordinator kills of make test.
stream-kill: $(STAMP)
	KCOORD_STREAM_KILL=1 $(BIN)/python -m pytest tests/integration/test_stream_faults_ray.py tests/spark/test_stream_kill.py -q

bench: $(STAMP)
	$(BIN)/kcoord bench --out bench-results

clean-venv:
	rm -rf $(VENV)
