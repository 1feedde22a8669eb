# One command to run, one to test. Both create .venv on first use.
# torch is pinned: on the CPU-only machines this project is developed on, that pin
# resolves to a local CPU wheel, whereas an unpinned torch pulls several GB of CUDA packages.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
DEMO    := scenarios/demo_synthetic.toml

.PHONY: run test test-fast bench docs-tables clean

$(BIN)/simfl-installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev,sweep,drfl,tff]"
	touch $@

# The first result: the demo scenario with Δ-FL and with FedAvg (same seed), each run's
# figures, and the two overlaid (90th-percentile test error vs bytes).
run: $(BIN)/simfl-installed
	$(BIN)/python -m simfl $(DEMO) --overwrite --quiet
	$(BIN)/python -m simfl $(DEMO) --set aggregator.name=fedavg \
		--out results/demo_synthetic_fedavg --overwrite --quiet
	$(BIN)/python -m simfl plot results/demo_synthetic results/demo_synthetic_fedavg \
		--compare results/demo_synthetic_vs_fedavg.png --overwrite --all

# Tests run in one process per core (pytest-xdist; TEST_WORKERS=0: in this one), a test
# file's tests in the same process (its module fixtures are built once), the files handed
# out in tests/conftest.py's order (the longest first), one torch thread each.
TEST_WORKERS ?= auto
PYTEST  := OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope \
	--no-loadscope-reorder

test: $(BIN)/simfl-installed
	$(BIN)/ruff check simfl tests bench
	$(BIN)/mypy simfl bench
	$(PYTEST)

# The inner loop: ruff and every test not marked slow (whole runs, sweeps, subprocesses,
# the docs' commands); `make test`, as CI runs it, includes them.
test-fast: $(BIN)/simfl-installed
	$(BIN)/ruff check simfl tests bench
	$(PYTEST) -m "not slow"

bench: $(BIN)/simfl-installed
	$(BIN)/python bench/train_cohort.py

# Every table the docs' study commands print (python -m simfl.study.<tool> ...), made again
# from the runs kept in docs/runs, one file per command in DOCS_TABLES with index.md naming
# each command (simfl/study/docs_tables.py; SIMFL_DATA_DIR set for the one that needs data).
DOCS_TABLES ?= build/docs-tables
docs-tables: $(BIN)/simfl-installed
	OMP_NUM_THREADS=1 $(BIN)/python -m simfl.study.docs_tables --out $(DOCS_TABLES)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
