#!/usr/bin/env bash
# Run every libFuzzer target for a set time (issue 8): `make fuzz`.
#
#   scripts/fuzz.sh [target...]       default: every fuzz/fuzz_*.c
#   FUZZ_SECONDS=600 scripts/fuzz.sh  per target (default 60)
#   FUZZ_BUILD=build-fuzz             build folder (clang, ASan+UBSan)
#   FUZZ_JOBS=2                       targets run in parallel (default 1)
#
# Each target starts from its seed corpus (fuzz/corpus/<t>, read only) plus
# what earlier runs found (<build>/fuzz/corpus_<t>, where new inputs go).
# A crash, leak, timeout or out-of-memory fails the run; the reproducer is
# left in <build>/fuzz/artifacts/<t>/ and the log in <build>/fuzz/<t>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${FUZZ_JOBS:-1}
command -v clang >/dev/null || { echo "fuzz: clang is needed (scripts/deps.sh installs it)" >&2; exit 1; }

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.c; do t=${f#fuzz/fuzz_}; targets+=("${t%.c}"); done
fi
# configured once cmake wrote its build system (a failed configure leaves
# only a cache behind)
if [ ! -f "$BUILD/Makefile" ] && [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang cmake -S . -B "$BUILD" -DLC_FUZZ=ON -DLC_SANITIZE=address >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

# UCX's memory hooks break the sanitizers' interceptors.
export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no

run_one() {
  local t=$1 dir="$BUILD/fuzz"
  mkdir -p "$dir/corpus_$t" "$dir/artifacts/$t"
  local start=$SECONDS rc=0
  "$dir/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t/" \
    "$dir/corpus_$t" "fuzz/corpus/$t" >"$dir/$t.log" 2>&1 || rc=$?
  local runs cov
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/$t.log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -o 'cov: [0-9]*' "$dir/$t.log" | tail -1 | grep -o '[0-9]*' || echo '?')
  if [ $rc -eq 0 ]; then
    printf 'fuzz %-10s ok    %4ss  %10s runs  cov %s  corpus %s\n' "$t" $((SECONDS - start)) \
      "$runs" "$cov" "$(ls "$dir/corpus_$t" | wc -l)"
  else
    printf 'fuzz %-10s FAIL  (exit %s) see %s, reproducer in %s\n' "$t" $rc "$dir/$t.log" \
      "$dir/artifacts/$t/"
    grep -m3 -E 'ERROR|SUMMARY|abort|deadly' "$dir/$t.log" >&2 || true
  fi
  return $rc
}

fail=0
if [ "$JOBS" -le 1 ]; then
  for t in "${targets[@]}"; do run_one "$t" || fail=1; done
else
  pids=()
  for t in "${targets[@]}"; do
    run_one "$t" & pids+=($!)
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  done
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
fi
exit $fail
