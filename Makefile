# mspti-lens developer tasks. `make help` lists them.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SIM_SO := python/mspti_lens/sim/libmspti_sim.so

.PHONY: help system-deps dev sim demo test test-rust test-loom test-python bench bench-quick lint clean

help: ## list the tasks
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.deps: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "maturin>=1.5,<2" pytest pytest-timeout hypothesis nbclient nbformat ipykernel \
		ipython ipywidgets traitlets polars pyarrow numpy matplotlib jupyterlab playwright mypy
	$(PIP) install -q atheris || echo "atheris did not install: the fuzz smoke test (tests/test_reliability_input.py) is skipped"
	touch $@

system-deps: ## Debian packages the tests need (headless Chromium for the browser test, fonts)
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v valgrind >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core valgrind >/dev/null; \
		else echo "install chromium and valgrind (apt-get install chromium valgrind) for the browser and memcheck tests"; fi; \
	fi

sim: ## build the simulator (a stand-in libmspti.so) into the package
	cargo build --release -p mspti-sim
	mkdir -p $(dir $(SIM_SO))
	@# Copy then rename: processes that have the old file mapped keep it intact.
	cp target/release/libmspti_sim.so $(SIM_SO).tmp && mv -f $(SIM_SO).tmp $(SIM_SO)

dev: $(VENV)/.deps sim ## venv + Python deps + release build of the extension, installed editable
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q

demo: dev ## the main job: a simulated training workload, summary table and plots
	$(PY) -m mspti_lens demo --out demo-out

test-rust: ## Rust unit and integration tests, then the loom model tests
	cargo test --workspace --release
	$(MAKE) test-loom

test-loom: ## loom model tests of the window protocol (rust/lens/src/core/seqlock.rs)
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p mspti-lens --release --lib loom_tests

test-python: dev ## pytest suite (notebooks and simulator included)
	$(PY) -m pytest

test: system-deps test-rust test-python bench-quick ## everything CI runs: Rust tests, pytest, quick benchmarks

bench: dev ## all benchmarks, writes BENCHMARKS.md
	$(PY) bench/run.py --out BENCHMARKS.md

bench-quick: dev ## benchmarks in quick mode (proves they run; CI)
	$(PY) bench/run.py --quick --out bench-out/BENCHMARKS.quick.md

clean: ## remove build outputs
	cargo clean
	rm -rf $(VENV) $(SIM_SO) demo-out bench-out
