# Top-level entry points. `make demo` and `make test` do everything on a
# fresh Debian machine (as root they install the packages they need).
BUILD     ?= build
JOBS      ?= $(shell nproc)
CMAKE_OPTS ?=


.PHONY: bench-peers bench-ucx bench-vllm
.PHONY: all build deps test test-wheel wheel test-bare-host bench-wheel test-asan test-tsan coverage valgrind demo demo-llm bench example-python bench-python fuzz soak clean install deb check-install test-vllm

all: build

deps:
	@scripts/deps.sh

# Configured once: the build system file, not CMakeCache.txt, says so (a
# configure that failed, a missing package say, leaves a cache behind and no
# Makefile; the next run configures again once the package is there).
CONFIGURE = [ -f $(BUILD)/Makefile ] || [ -f $(BUILD)/build.ninja ] || cmake -S . -B $(BUILD) $(CMAKE_OPTS) >/dev/null
build:
	@$(CONFIGURE)
	cmake --build $(BUILD) -j$(JOBS)

# The library and, where Python's headers are, the Python package's C module
# (python/speedups): what `import layercake` and the vLLM connector load from
# build/, without the tests and tools of `make build` (a minute instead of
# four on two cores; README.md's vLLM quick start).
.PHONY: lib
lib:
	@$(CONFIGURE)
	cmake --build $(BUILD) -j$(JOBS) --target layercake
	@if grep -qs 'lc_speedups' $(BUILD)/python/speedups/Makefile $(BUILD)/build.ninja; then \
	  cmake --build $(BUILD) -j$(JOBS) --target lc_speedups; fi

# The whole suite: unit tests, the transport conformance suite for every
# transport, integration tests, the Python tests.
test: deps
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

# The pip-installable package alone (also ctest python.wheel, in make test):
# in a fresh venv `pip wheel .`, install, `import layercake` from /tmp,
# `python -m layercake info`, `pip install .`. docs/python.md, "Installing".
test-wheel:
	scripts/test-wheel.sh . $(BUILD)/wheel-test

# dist/layercake-<version>-cp39-abi3-manylinux_2_28_x86_64.whl: the library,
# the C module and the libraries they link inside, nothing needed from the
# host but glibc 2.28 (scripts/build-wheel.sh; docs/python.md, "The
# manylinux wheel"). The first run installs the pinned toolchain (zig,
# auditwheel) and builds ZeroMQ, libmicrohttpd, libcurl and json-c from
# Debian's sources, cached outside the checkout (~/.cache/layercake); later
# runs are offline and take about a minute.
wheel:
	scripts/build-wheel.sh dist

# The wheel on a bare Debian root (debootstrap, cached): pip install, info,
# P and D over tcp and shm with every byte checked (scripts/test-bare-host.sh).
# Root only. WHEEL= another wheel (default: make wheel's).
WHEEL ?=
test-bare-host:
	@w="$(WHEEL)"; [ -n "$$w" ] || { $(MAKE) wheel && w=$$(ls dist/layercake-*manylinux*.whl | head -1); }; \
	  scripts/test-bare-host.sh "$$w"

# make wheel's wheel against the build tree, side by side: P/D throughput and
# round trip over tcp and shm (bench/wheel_compare.py), the wheel installed
# in a venv over Debian's python3 (numpy from Debian). BENCH_PAIRS pairs.
BENCH_PAIRS ?= 5
bench-wheel: build wheel
	@set -e; v=$(BUILD)/bench-wheel-venv; rm -rf $$v; /usr/bin/python3 -m venv --system-site-packages $$v; \
	  $$v/bin/python -m pip install -q --no-index --no-deps $$(ls dist/layercake-*manylinux*.whl | head -1); \
	  /usr/bin/python3 bench/wheel_compare.py --build-py /usr/bin/python3 --build-lib $(BUILD)/liblayercake.so \
	    --wheel-py $$v/bin/python --pairs $(BENCH_PAIRS)

# vLLM's connector (layercake.vllm) against vLLM's CPU build, in a pinned venv
# cached outside the checkout (scripts/vllm-venv.sh; docs/vllm.md). Not part
# of `make test`: the first run downloads about 4 GB.
test-vllm: build
	V=$$(scripts/vllm-venv.sh) && PYTHONPATH=$(CURDIR)/python LAYERCAKE_LIB=$(CURDIR)/$(BUILD)/liblayercake.so \
	  $$V/bin/python -m pytest -q -p no:cacheprovider tests/vllm $(PYTEST_ARGS)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
# UCX's memory hooks (libucm patches mmap/madvise) crash the sanitizers'
# own interceptors; sanitizer runs turn them off.
SAN_ENV = UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no

test-asan: deps
	$(SAN_ENV) $(MAKE) test BUILD=build-asan CMAKE_OPTS="-DLC_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug" \
	  CTEST_ARGS="$(CTEST_ARGS)"

# ThreadSanitizer over the conformance suite of our own transports, the engine
# tests and the short soak (UCX's libraries are not instrumented).
test-tsan: deps
	$(SAN_ENV) TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/soak/tsan.supp" $(MAKE) test BUILD=build-tsan CMAKE_OPTS="-DLC_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug" \
	  CTEST_ARGS="-R 'conformance\.(loop|tcp|shm)\.|unit\.test_(engine|foundation|io|notify)|control\.wait_|soak|io\.' $(CTEST_ARGS)"

# Line and branch coverage of src/ over the whole suite (gcovr, Debian's
# package; scripts/deps.sh installs it). build-cov/ is instrumented with
# --coverage at -O0; stale counters are removed before the run. Branches
# GCC adds for exception unwinding or proves unreachable are not counted.
# CTEST_ARGS narrows the run (then the totals are of that subset). Never
# -o /dev/null: gcovr replaces its output file, and as root that turned
# /dev/null into a regular file.
COV_BUILD = build-cov
GCOVR = gcovr --root $(CURDIR) --filter '$(CURDIR)/src/'
coverage: deps
	$(MAKE) build BUILD=$(COV_BUILD) CMAKE_OPTS="-DLC_COVERAGE=ON -DCMAKE_BUILD_TYPE=Debug"
	find $(COV_BUILD) -name '*.gcda' -delete
	cd $(COV_BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS); echo $$? > ctest.rc
	$(GCOVR) --object-directory $(COV_BUILD) --exclude-unreachable-branches --exclude-throw-branches \
	  --json $(COV_BUILD)/coverage.json
	$(GCOVR) -a $(COV_BUILD)/coverage.json --sort-uncovered
	$(GCOVR) -a $(COV_BUILD)/coverage.json --sort-uncovered --branches
	@$(GCOVR) -a $(COV_BUILD)/coverage.json --print-summary -o $(COV_BUILD)/coverage.txt
	@test "$$(cat $(COV_BUILD)/ctest.rc)" = 0 || { echo "coverage: some tests failed (above)" >&2; exit 1; }

# valgrind memcheck over the conformance suite of loop, tcp and shm.
valgrind: deps
	$(MAKE) build BUILD=build-vg CMAKE_OPTS="-DCMAKE_BUILD_TYPE=Debug"
	cd build-vg && $(SAN_ENV) ctest --output-on-failure -R 'conformance\.(loop|tcp|shm)\.' -j$(JOBS) -T memcheck \
	  --overwrite MemoryCheckCommand=$$(command -v valgrind) \
	  --overwrite MemoryCheckCommandOptions="--error-exitcode=1 --leak-check=full"

# Every libFuzzer target (clang, ASan+UBSan) for FUZZ_SECONDS each.
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

# 10,000 rooms over tcp, every page checksummed; then 2,000 under ASan+UBSan.
soak: deps
	BUILD=$(BUILD) JOBS=$(JOBS) scripts/soak.sh

demo: deps
	$(MAKE) build
	$(BUILD)/layercake demo

bench: deps
	$(MAKE) build
	$(BUILD)/layercake bench

# P and D in two Python processes, moving a request's KV layer by layer.
PYENV = LAYERCAKE_LIB=$(BUILD)/liblayercake.so PYTHONPATH=python
example-python: build
	$(PYENV) /usr/bin/python3 examples/python_prefill_decode.py

# A real torch transformer prefilled on P and decoded on D (examples/llm/):
# per request, tokens matched against one instance, KV pages equal, TTFT
# layer-wise vs whole-request, CPU time. LLM_ARGS: see pd.py --help.
LLM_ARGS ?=
demo-llm: deps
	$(MAKE) build
	$(PYENV) /usr/bin/python3 examples/llm/pd.py $(LLM_ARGS)

# layercake against NIXL and Mooncake TE from their PyPI wheels, pinned in
# bench/peers/requirements*.txt, in a venv cached outside the checkout
# (scripts/peers-venv.sh): every case over tcp and shared memory, 3 pairs,
# build/bench-peers-<ts>.json and build/bench-peers.json (docs/bench.md).
# Not part of `make test`: it downloads wheels and takes minutes.
# PEERS_ARGS: see bench/peers/run.py --help (--pairs, --quick, --idle-s).
# Once the venv exists, `build/layercake bench peers [PEERS_ARGS]` runs the same.
PEERS_ARGS ?=
bench-peers: deps
	$(MAKE) build
	@V=$$(scripts/peers-venv.sh) || { echo "bench-peers: FAILED: the peers' wheels could not be installed" \
	  "(no network to PyPI, or a pin is gone; scripts/peers-venv.sh said why above)" >&2; exit 1; }; \
	$(PYENV) $$V/bin/python bench/peers/run.py --out-dir $(BUILD) $(PEERS_ARGS)

# layercake's vLLM connector against vLLM's own NIXL and Mooncake connectors
# and one engine alone, in real `vllm serve` CPU engines, measured by vLLM's
# serving benchmark (bench/vllm/): the pinned vLLM venv plus the peers' pinned
# wheels in a venv layered over it (scripts/vllm-peers-venv.sh). Writes
# build/bench-vllm-<ts>.json and .svg, prints the table (docs/bench.md).
# Not part of `make test`: it takes many minutes. VLLM_BENCH_ARGS: see
# bench/vllm/run.py --help (--quick, --inputs, --rate, --prompts, --connectors).
VLLM_BENCH_ARGS ?=
bench-vllm: deps
	$(MAKE) build
	@V=$$(scripts/vllm-peers-venv.sh) || { echo "bench-vllm: FAILED: the vLLM venv or the peers' wheels" \
	  "could not be installed (scripts/vllm-peers-venv.sh said why above)" >&2; exit 1; }; \
	$$V/bin/python bench/vllm/run.py --out-dir $(BUILD) --lib $(BUILD)/liblayercake.so $(VLLM_BENCH_ARGS)

# ucx against ucx_perftest (bench/ucx_compare.sh), on three UCX builds in
# turn: Debian's (1.13), RAPIDS' libucx-cu12 1.22 and the 1.23 the nixl
# wheel bundles (both from the peers' venv). UCX_RUNS rounds each (3).
# Not part of `make test`: it takes minutes and wants a quiet machine.
UCX_RUNS ?= 3
bench-ucx: deps
	$(MAKE) build
	@V=$$(scripts/peers-venv.sh) || { echo "bench-ucx: FAILED: the peers' venv could not be made" >&2; exit 1; }; \
	for u in debian wheel nixl; do PEERS_VENV=$$V UCX=$$u sh bench/ucx_compare.sh $(BUILD) $(UCX_RUNS) || exit 1; done

# Per-request Python overhead of the TokenSpeed adapter against the seed's.
bench-python: build
	$(PYENV) /usr/bin/python3 bench/python_overhead.py

# Install the library (with its soname), the headers, layercake.pc, the CMake
# package (find_package(layercake)), the CLI and the Python package under
# PREFIX (DESTDIR honoured). docs/python.md, "Installing".
PREFIX ?= /usr/local
# The library and Python folders follow the configured prefix (/usr:
# lib/<multiarch> and lib/python3/dist-packages; the .pc's rpath outside
# /usr). So: from $(BUILD) as it is when it is configured for PREFIX (nothing
# reconfigured, nothing rebuilt but a stale library or CLI); for any other
# PREFIX from a build folder of its own, $(BUILD)-install, so that $(BUILD)
# keeps its configuration and its objects.
install:
	@set -e; b="$(BUILD)"; \
	[ -f "$$b/Makefile" ] || [ -f "$$b/build.ninja" ] || cmake -S . -B "$$b" $(CMAKE_OPTS) -DCMAKE_INSTALL_PREFIX="$(PREFIX)" >/dev/null; \
	if [ "$$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$$b/CMakeCache.txt")" != "$(PREFIX)" ]; then \
	  b="$(BUILD)-install"; echo "$(BUILD) is configured for another prefix: building $$b for $(PREFIX)"; \
	  cmake -S . -B "$$b" $(CMAKE_OPTS) -DCMAKE_INSTALL_PREFIX="$(PREFIX)" >/dev/null; \
	fi; \
	cmake --build "$$b" -j$(JOBS) --target layercake layercake_cli; \
	DESTDIR="$(DESTDIR)" cmake --install "$$b"

# The same as a Debian package, for /usr: build-deb/layercake_<version>_<arch>.deb.
deb: deps
	$(MAKE) build BUILD=build-deb CMAKE_OPTS="-DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=Release"
	cd build-deb && cpack -G DEB

# Install into a temporary prefix and build/run the examples against it
# (also ctest install.check).
check-install: build
	scripts/check-install.sh $(BUILD) .

clean:
	rm -rf build build-install build-asan build-tsan build-cov build-vg build-fuzz build-deb build-wheel dist
