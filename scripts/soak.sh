#!/usr/bin/env bash
# Soak (issue 8): `make soak`.
#   1. 10,000 rooms over tcp:// (random sizes, chunking, layer gaps; 2 P
#      ranks with layerwise_interval 1 and 3; 4 D sessions), every page
#      checksummed at D: 0 mismatches, 0 rooms lost, memory bounded.
#   2. The same under AddressSanitizer + UBSan with fewer rooms.
#
#   SOAK_ROOMS=10000 SOAK_ASAN_ROOMS=2000 SOAK_SEED=1 scripts/soak.sh
#   BUILD=build ASAN_BUILD=build-asan   (the Makefile's build folders)
# Results: <build>/soak.json and <asan build>/soak.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
ROOMS=${SOAK_ROOMS:-10000}
ASAN_ROOMS=${SOAK_ASAN_ROOMS:-2000}
SEED=${SOAK_SEED:-1}
JOBS=${JOBS:-$(nproc)}

[ -f "$BUILD/Makefile" ] || [ -f "$BUILD/build.ninja" ] || cmake -S . -B "$BUILD" >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target lc_soak
echo "soak: $ROOMS rooms ($BUILD)"
"$BUILD/tests/soak/lc_soak" --rooms "$ROOMS" --seed "$SEED" --json "$BUILD/soak.json"

[ -f "$ASAN_BUILD/Makefile" ] || [ -f "$ASAN_BUILD/build.ninja" ] ||
  cmake -S . -B "$ASAN_BUILD" -DLC_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$ASAN_BUILD" -j"$JOBS" --target lc_soak
echo "soak: $ASAN_ROOMS rooms under ASan+UBSan ($ASAN_BUILD)"
# UCX's memory hooks break the sanitizers' interceptors.
UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no \
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$ASAN_BUILD/tests/soak/lc_soak" --rooms "$ASAN_ROOMS" --seed $((SEED + 1)) \
  --json "$ASAN_BUILD/soak.json"
