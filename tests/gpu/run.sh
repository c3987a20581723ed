#!/bin/sh
# The device check of issue 14 (docs/gpu.md), for one GPU machine that has
# CUDA, PyTorch and nvcc but none of this project's Debian packages: it
# uses the pack tests/gpu/pack.sh made on a CPU machine (devpack/, carried
# along) and the python/ folder of the checkout. Under 8 minutes: each
# step's timeout is cut to what is left of BUDGET (470 s), and a step with
# less than 10 s left is skipped.
#
# Steps, each under its own timeout; every figure is one JSON line on
# stdout and in $OUT/gpu.jsonl (or /tmp/lc-gpu/gpu.jsonl):
#   1. layercake info: CUDA found, the devices.
#   2. GPU-written step latency: gpu_steplat (cuStreamWriteValue64 -> word
#      seen, -> writes posted; p50/p99; pages verified byte for byte).
#   3. CUDA IPC against cuMemcpyDtoD in one process: gpu_ipc (two
#      processes on the one GPU, distinct allocations, every byte checked).
#   4. Python: Engine.record_cache_on_stream on torch's current stream,
#      after a kernel that writes the KV page.
#   5. bench transport --mem cuda: device->device staged over tcp against
#      host->host tcp in the same run (ratio; target >= 0.8), copy-only
#      and wire-only seconds per GiB, every byte the receivers got checked
#      (mismatched_bytes 0); skipped if the CLI has no --mem cuda.
#   6. conformance with device memory over tcp staging, shm's CUDA IPC
#      mode and shm staging (`conformance <tp> <case> --mem cuda-both`), when the conformance
#      binary's --help names --mem cuda; else skipped.
# Exit status: 0 when every step that ran passed, 1 otherwise.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=${LC_DEVPACK:-$root/devpack}
out=${OUT:-/tmp/lc-gpu}
mkdir -p "$out"
log=$out/gpu.jsonl
: >"$log"
fails=0
t_start=$(date +%s)
budget=${BUDGET:-470}

if [ ! -x "$pack/bin/layercake" ]; then
	echo "run.sh: no pack at $pack: run tests/gpu/pack.sh on the build machine first" >&2
	exit 1
fi
# What device-pack.sh's env.sh sets, in POSIX sh.
export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$pack/bin:$PATH" UCX_MODULE_DIR="$pack/lib/ucx"
export LAYERCAKE_LIB="$pack/lib/liblayercake.so" PYTHONPATH="$root/python"
export PYTHONUNBUFFERED=1

say() { echo "$1" | tee -a "$log"; }
step() { echo "== $1 ($(($(date +%s) - t_start)) s)" >&2; }
# run NAME SECONDS CMD...: its JSON lines go to the log; status recorded.
run() {
	name=$1 secs=$2
	shift 2
	left=$((budget - ($(date +%s) - t_start)))
	if [ "$left" -lt 10 ]; then
		skip "$name" "out of time ($budget s for the whole script)"
		return 0
	fi
	[ "$secs" -gt "$left" ] && secs=$left
	timeout "$secs" "$@" >"$out/$name.out" 2>"$out/$name.err"
	rc=$?
	grep '^{' "$out/$name.out" | tee -a "$log"
	if [ $rc -ne 0 ]; then
		fails=$((fails + 1))
		say "{\"step\":\"$name\",\"status\":\"failed\",\"rc\":$rc}"
		tail -n 20 "$out/$name.err" >&2
	else
		say "{\"step\":\"$name\",\"status\":\"passed\"}"
	fi
}
skip() { say "{\"step\":\"$1\",\"status\":\"skipped\",\"why\":\"$2\"}"; }
# has CMD... PATTERN: whether CMD's help (stdout or stderr) matches.
has() {
	pat=$1
	shift
	timeout 10 "$@" --help 2>&1 | grep -q -- "$pat"
}

step "1. layercake info"
nvidia-smi -L >&2 || true
layercake info --json >"$out/info.json" 2>"$out/info.err"
head -c 600 "$out/info.json" >&2
echo >&2
if grep -q '"cuda":{"found":true' "$out/info.json"; then
	say '{"step":"info","status":"passed"}'
else
	say '{"step":"info","status":"failed","why":"CUDA not found by the library"}'
	exit 1
fi

step "2. GPU-written step latency"
run steplat 60 gpu_steplat 2000

step "3. CUDA IPC vs cuMemcpyDtoD"
run ipc 90 gpu_ipc 1024 20

step "4. Python record_cache_on_stream with torch"
cat >"$out/stream_record.py" <<'PY'
import ctypes, json, time
import torch
import layercake as lc
ctx = lc.Context("gpu-py")
mem = lc.Memory(1 << 20)
ctx.register(mem)
L = 8
layout = lc.Layout.mla(L, 8, 4096, bases=[mem.address + i * 8 * 4096 for i in range(L)])
e = lc.Engine(ctx, layout)
s = torch.cuda.current_stream()
x = torch.randn(4096, 4096, device="cuda")
lat = []
for _ in range(200):
    t0 = time.perf_counter_ns()
    before = e.steps.value()
    y = x @ x  # the layer's work, then the record after it on the stream
    e.record_cache_on_stream(s.cuda_stream)
    while e.steps.value() == before:
        pass
    lat.append((time.perf_counter_ns() - t0) / 1000)
torch.cuda.synchronize()
lat.sort()
ok = e.steps.value() == 200
print(json.dumps({"bench": "py_stream_record", "records": 200, "counter_ok": ok,
                  "matmul_plus_record_p50_us": lat[100], "p99_us": lat[197]}))
e.close()
ctx.close()
raise SystemExit(0 if ok else 1)
PY
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
	run python_stream 80 python3 "$out/stream_record.py"
else
	skip python_stream "torch with CUDA not importable"
fi

step "5. bench transport --mem cuda"
if has 'cuda-src' layercake bench transport; then
	run bench_cuda 100 layercake bench transport --transport tcp --mem cuda --region-mib 1024 \
		--total-mib 4096 --json
else
	skip bench_cuda "this layercake has no 'bench transport --mem cuda'"
fi

step "6. conformance with device memory: tcp staging, shm CUDA IPC and shm staging"
# P and D share the process in most cases (D then uses P's address, as a
# handle cannot be opened where it was exported); peer_closes_mid_batch
# forks D before the parent touches CUDA, so that one imports for real.
if command -v conformance >/dev/null 2>&1 && has 'cuda-' conformance; then
	for c in single_write batch_10000 checksum_all revoked_grant cancel_room strided_write; do
		run "conf_tcp_$c" 60 conformance tcp "$c" --mem cuda-both
		run "conf_shm_ipc_$c" 60 conformance shm "$c" --mem cuda-both
		run "conf_shm_staged_$c" 60 conformance shm "$c" --mem cuda-both --no-ipc
	done
	run conf_shm_ipc_fork 60 conformance shm peer_closes_mid_batch --mem cuda-both
else
	skip conformance_cuda "this conformance binary has no '--mem cuda-*'"
fi

say "{\"run\":\"gpu\",\"seconds\":$(($(date +%s) - t_start)),\"failed_steps\":$fails}"
[ "$fails" -eq 0 ]
