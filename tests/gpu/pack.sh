#!/bin/sh
# Build and pack what tests/gpu/run.sh needs, on a CPU machine (docs/gpu.md,
# "What has been verified on a real GPU"): a Release build, then
# ../shared/tools/device-pack.sh, which copies the library, the CLI, the
# device programs and every shared library ldd names (not libcuda) into
# devpack/ (ignored by git). Take devpack/ along to the GPU machine (the
# device tool: carry ["devpack"]) and run `sh tests/gpu/run.sh` there.
# Usage: tests/gpu/pack.sh [BUILD_DIR]   (default build-devpack)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-devpack}
packer=${LC_DEVICE_PACK:-$root/../shared/tools/device-pack.sh}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target layercake layercake_cli gpu_steplat gpu_ipc conformance
bash "$packer" "$build" "$root/devpack" "$build/tests/gpu/gpu_steplat" "$build/tests/gpu/gpu_ipc" \
	"$build/tests/conformance/conformance"
