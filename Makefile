# mspti-lens developer tasks. `make help` lists them.
VENV ?= .venv
PY := $(VENV)/bin/python
# Through the interpreter: a copied venv's bin/pip still names the interpreter it was made with.
PIP := $(PY) -m pip
# uv installs the venv's packages: it fetches and unpacks them in parallel, in a fraction of pip's time.
UV_PIP := $(VENV)/bin/uv pip install -q --python $(PY)
# Python writes the bytecode of what it imports, here: uv installs none (pip compiled it all at
# install), and with PYTHONDONTWRITEBYTECODE (set on this project's CI machines) every test process
# compiled polars, matplotlib and IPython again at import, three times the import time (pytest took
# about 470 s instead of 340 s). Writing it on first import costs less than uv's --compile-bytecode
# of every installed package (20 s more in `make dev`).
unexport PYTHONDONTWRITEBYTECODE
AARCH64 := aarch64-unknown-linux-gnu
HOST := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
# pyo3's build configuration uses the project's interpreter (lint and tests build the bindings too).
export PYO3_PYTHON := $(abspath $(PY))
# valgrind runs the native tests, the Python workload and DRD in about a minute on an idle machine;
# the bound leaves room for a loaded one without letting a hang block CI.
MEMCHECK_TIMEOUT ?= 900
# pytest's workers (pytest-xdist): every worker is its own process, so each has its own simulator,
# subscriber and shards; tests that start processes give them their own ports and directories.
# One more than the cores: the browser module mostly waits (on JupyterLab and Chromium), and a
# third worker runs the rest meanwhile (305 s instead of 336 s on 2 cores, measured when a CANN
# module also waited on a sample that slept 48 s).
PYTEST_WORKERS ?= $(shell echo $$(($$(nproc) + 1)))
# Each test module goes whole to whichever worker is free, modules with slow tests first
# (tests/conftest.py orders them; xdist's own reordering by test count is off).
PYTEST_DIST := --dist loadfile --no-loadscope-reorder
# How hard the stress tests push (tests/conftest.py `stress`): 1 is CI's size; 0.2 for a quick look.
STRESS ?= 1
export MSPTI_LENS_STRESS := $(STRESS)
# What `make test` runs, in this order, so a lint slip fails in seconds, not at the end; each step is
# timed (wall and CPU) and the times are printed in a table at the end (scripts/timed_steps.sh).
# Some steps run side by side (A+B; A+B,C: B then C beside A). B runs niced: it takes the cores A
# leaves idle without slowing A. On 2 cores the steps need about 1,000 CPU seconds, so side by side
# only gains where one step leaves a core idle:
# - the loom models beside make dev, whose package installs and links use one core, in their own
#   target directory (cargo locks one for a whole build);
# - the native Rust tests beside lint, whose ruff and mypy use one;
# - the aarch64 tests beside pytest, whose browser module waits on JupyterLab and Chromium;
#   they end about when pytest does (the quick benchmarks after them made that step 39 s longer
#   than pytest);
# - the aarch64 wheel, then valgrind, beside the sdist's install check and the host wheel, which
#   wait on pip, and the quick benchmarks, which use one core (that side took 81 s of the other's
#   120 s; valgrind alone on its own step was 18 s more of the total).
TEST_STEPS ?= system-deps dev+test-loom lint+test-rust-native test-python+test-rust-aarch64 \
	wheels-host,bench-quick+wheels-cross,memcheck
# The extension is rebuilt when a Rust source, a manifest or pyproject.toml changes (the Python
# sources are installed editable); every step that needs it depends on this stamp, not on a rebuild.
BUILT := $(VENV)/.built
RUST_SOURCES := $(wildcard $(shell git ls-files rust Cargo.toml Cargo.lock pyproject.toml .cargo 2>/dev/null))

.PHONY: help system-deps cross-deps dev demo lint test test-fast test-rust test-rust-native test-loom test-rust-aarch64 \
	test-python memcheck check-sdist check-installs wheels wheels-host wheels-cross bench bench-quick clean

help: ## list the tasks
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(VENV)/.deps: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install -q "uv>=0.5"
	$(UV_PIP) "maturin>=1.5,<2" pytest pytest-timeout pytest-xdist hypothesis nbclient nbformat ipykernel \
		ipython ipywidgets traitlets polars pyarrow numpy matplotlib jupyterlab playwright mypy "ruff==0.17.6" \
		opentelemetry-proto hdrhistogram prometheus-client  # the last three: the exports, read back by their own parsers
	$(UV_PIP) HolisticTraceAnalysis || echo "HTA did not install: the Perfetto trace's HTA check is skipped"
	$(UV_PIP) atheris || echo "atheris did not install: the fuzz smoke test (tests/test_reliability_input.py) is skipped"
	touch $@

system-deps: cross-deps ## Debian packages the tests need (headless Chromium, fonts, valgrind, cmake)
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v valgrind >/dev/null 2>&1 || ! command -v cmake >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core valgrind cmake >/dev/null; \
		else echo "install chromium, valgrind and cmake (apt-get install chromium valgrind cmake) for the browser, memcheck and CANN sample tests"; exit 1; fi; \
	fi
	@# a real Prometheus server for tests/export/test_export_prometheus_server.py, and Alertmanager
	@# beside it for tests/watch/test_watch_prometheus_alertmanager.py
	@if ! command -v prometheus >/dev/null 2>&1 || ! command -v prometheus-alertmanager >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager >/dev/null; \
		else echo "install prometheus and prometheus-alertmanager (apt-get install prometheus prometheus-alertmanager) for the Prometheus tests"; fi; \
	fi

cross-deps: ## aarch64 cross-building: rustup's target, Debian's cross gcc and libc, qemu-user
	@if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx $(AARCH64); then \
		rustup target add $(AARCH64); fi
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1 \
			|| [ ! -e /usr/aarch64-linux-gnu/lib/libc.so.6 ]; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null; \
		else echo "install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user (apt-get) to build and test for aarch64"; exit 1; fi; \
	fi

# The extension's build script (rust/lens/build.rs) builds the simulator and puts it in the package.
# The feature test-hooks adds the functions only tests and benchmarks call (wheels leave them out).
dev: $(BUILT) ## venv + Python deps + release build of the extension and the simulator, installed editable

$(BUILT): $(VENV)/.deps $(RUST_SOURCES)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q --features test-hooks
	touch $@

demo: dev ## the main job: a simulated training workload, summary table and plots
	$(PY) -m mspti_lens demo --out demo-out

# The stubs are checked against the module by mypy's stubtest in the pytest suite (tests/test_stubs.py).
lint: dev ## cargo fmt --check, clippy -D warnings, ruff check + format --check, mypy
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --release --features mspti-lens/test-hooks -- -D warnings
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy python/mspti_lens

test-rust: test-rust-native test-loom ## Rust unit and integration tests, then the loom model tests

# The behaviour tests dlopen the simulator cdylib rust/lens/build.rs builds (MSPTI_SIM_LIBRARY).
test-rust-native: ## the Rust unit and integration tests, for this machine's architecture
	cargo test --workspace --profile test-release

test-loom: ## loom model tests: windows, slowest calls, buffer pool; the simulator's multi-rank barrier
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p mspti-lens -p mspti-sim --profile loom --lib loom_tests

test-rust-aarch64: cross-deps ## the Rust tests cross-built for aarch64, run under qemu-user
	cargo test --workspace --profile test-release --target $(AARCH64)

test-python: dev ## pytest suite (notebooks and simulator included), on PYTEST_WORKERS workers
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_DIST) --durations=15

test-fast: dev ## the inner loop: pytest without slow and browser tests
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_DIST) -m "not slow and not browser"

memcheck: dev ## valgrind memcheck and DRD over the native code (scripts/memcheck.sh), bounded in time
	timeout --kill-after=30 $(MEMCHECK_TIMEOUT) scripts/memcheck.sh target/memcheck

check-sdist: $(VENV)/.deps ## sdist of a clean clone of HEAD, pip-installed in a fresh venv, runs the demo
	scripts/check_install.sh sdist

check-installs: wheels ## every install path: sdist, pip install DIR, git+file://, the x86-64 wheel
	scripts/check_install.sh sdist
	scripts/check_install.sh dir
	scripts/check_install.sh git
	scripts/check_install.sh wheel $$(ls dist/mspti_lens-*x86_64.whl)

wheels: $(VENV)/.deps cross-deps ## sdist of HEAD pip-installed in a fresh venv (demo), then x86-64 and aarch64 wheels from it
	scripts/build_wheels.sh dist

wheels-host: $(VENV)/.deps ## `make wheels` for this machine's architecture only (the sdist checked first)
	WHEEL_TARGETS=$(HOST) scripts/build_wheels.sh dist

wheels-cross: $(VENV)/.deps cross-deps ## `make wheels` for aarch64 only, without the sdist's install check
	WHEEL_TARGETS=$(AARCH64) CHECK_SDIST=0 scripts/build_wheels.sh dist

test: ## everything CI runs (.ci/run), each step timed: TEST_STEPS, a table of times at the end
	@scripts/timed_steps.sh $(TEST_STEPS)

bench: dev ## all benchmarks, writes BENCHMARKS.md
	$(PY) bench/run.py --out BENCHMARKS.md

bench-quick: dev ## benchmarks in quick mode (proves they run; CI)
	$(PY) bench/run.py --quick --out bench-out/BENCHMARKS.quick.md

clean: ## remove build outputs
	cargo clean
	rm -rf $(VENV) python/mspti_lens/sim/libmspti_sim.so python/mspti_lens/_native*.so demo-out bench-out dist
