#!/usr/bin/env bash
# Builds the fuzz targets of the "asan" preset (clang, libFuzzer, ASan/UBSan) and runs each parser fuzz target
# (text, JSON, and ONNX where libonnx-dev is installed) for a bounded time.
#
#   scripts/fuzz.sh [SECONDS]     # SECONDS per target, default 30
#
# Seeds come from tests/fuzz/corpus/<target>/ (read only); inputs the fuzzer finds go to
# build/asan/fuzz/corpus/<target>/ and crash reproducers to build/asan/fuzz/artifacts/. Exits non-zero when
# any target crashes, leaks, hangs or runs out of memory.
set -euo pipefail

seconds="${1:-30}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: $0 [SECONDS]  (a positive whole number of seconds per target)" >&2
  exit 2
fi

cd "$(dirname "$0")/.."
cmake --preset asan >/dev/null
targets=(text json)
if [ -f build/asan/CMakeCache.txt ] && grep -q "^KILN_ONNX_ENABLED:INTERNAL=ON" build/asan/CMakeCache.txt; then
  targets+=(onnx)  # the importer, where libonnx-dev is installed
fi
cmake --build --preset asan --target "${targets[@]/#/fuzz_}"

mkdir -p build/asan/fuzz/artifacts
status=0
for name in "${targets[@]}"; do
  target="build/asan/tests/fuzz/fuzz_${name}"
  work="build/asan/fuzz/corpus/${name}"
  mkdir -p "$work"
  dict=()
  if [ -f "tests/fuzz/${name}.dict" ]; then dict=(-dict="tests/fuzz/${name}.dict"); fi
  max_len=8192
  if [ "$name" = onnx ]; then max_len=16384; fi  # room for the GPT-2 block seed (its weights are external)
  echo "== fuzz_${name}: ${seconds}s"
  if ! "$target" "$work" "tests/fuzz/corpus/${name}" "${dict[@]}" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
      -artifact_prefix="build/asan/fuzz/artifacts/${name}-" -print_final_stats=1; then
    echo "fuzz_${name}: FAILED (reproducer in build/asan/fuzz/artifacts/)" >&2
    status=1
  fi
done
exit "$status"
