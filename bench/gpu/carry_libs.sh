#!/usr/bin/env bash
# Before a device call that carries binaries built here (build/release/kiln, ...) instead of building on the
# GPU machine: copies the shared libraries they link that the GPU machine lacks (Debian's ONNX and protobuf;
# ../shared/DEVICE.md lists what it has) into .gpulib, which the call carries and puts on LD_LIBRARY_PATH:
#   bench/gpu/carry_libs.sh [BINARY ...]     (default build/release/kiln)
#   run: carry [".gpulib", "build/release/kiln", ...], command starts with
#        export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.gpulib;
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- build/release/kiln
mkdir -p .gpulib
grep -qx '/.gpulib/' .git/info/exclude 2> /dev/null || echo /.gpulib/ >> .git/info/exclude
for bin in "$@"; do
  [ -x "$bin" ] || { echo "no executable $bin: build it first" >&2; exit 1; }
  ldd "$bin" | awk '/onnx|protobuf/ {print $3}' | while read -r lib; do cp -L "$lib" .gpulib/; done
done
ls .gpulib
