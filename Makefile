# Top-level entry points. `make demo` and `make test` do everything on a
# fresh Debian machine (as root they install the packages they need).
BUILD     ?= build
JOBS      ?= $(shell nproc)
CMAKE_OPTS ?=

.PHONY: all build deps test test-asan test-tsan valgrind demo demo-llm bench example-python bench-python fuzz soak clean install deb check-install test-vllm

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_OPTS) >/dev/null

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# The whole suite: unit tests, the transport conformance suite for every
# transport, integration tests, the Python tests.
test: deps
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

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
	  CTEST_ARGS="-R 'conformance\.(loop|tcp|shm)\.|unit\.test_(engine|foundation|io)|soak|io\.' $(CTEST_ARGS)"

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

bench: build
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

# Per-request Python overhead of the TokenSpeed adapter against the seed's.
bench-python: build
	$(PYENV) /usr/bin/python3 bench/python_overhead.py

# Install the library (with its soname), the headers, layercake.pc, the CMake
# package (find_package(layercake)), the CLI and the Python package under
# PREFIX (DESTDIR honoured). docs/python.md, "Installing".
PREFIX ?= /usr/local
# The build is configured for PREFIX first: the library and Python folders
# follow it (/usr: lib/<multiarch> and lib/python3/dist-packages).
install: $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX="$(PREFIX)" >/dev/null
	cmake --build $(BUILD) -j$(JOBS) --target layercake layercake_cli
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD)

# The same as a Debian package, for /usr: build-deb/layercake_<version>_<arch>.deb.
deb: deps
	$(MAKE) build BUILD=build-deb CMAKE_OPTS="-DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=Release"
	cd build-deb && cpack -G DEB

# Install into a temporary prefix and build/run the examples against it
# (also ctest install.check).
check-install: build
	scripts/check-install.sh $(BUILD) .

clean:
	rm -rf build build-asan build-tsan build-vg build-fuzz build-deb
