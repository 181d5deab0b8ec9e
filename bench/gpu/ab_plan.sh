#!/usr/bin/env bash
# On a GPU machine: the GPU tests of one build, then kiln-gpu-bench on the same plans from two builds, one
# after the other in the same call (a before/after on one card). Writes OUT_DIR/gpu_tests.{log,json} and
# OUT_DIR/<name>_<build>.{json,log}.
#   bench/gpu/ab_plan.sh OUT_DIR BEFORE_BUILD AFTER_BUILD PLAN_SPEC...
# Builds are folders with kiln-gpu-bench and tests/kiln_cuda_tests (e.g. build/base and build/release, carried
# with .gpulib from bench/gpu/carry_libs.sh). The bench runs with --quick (2 of its GEMM shapes, 10 timed plan
# replays), so both builds fit one call beside the tests.
set -uo pipefail
out="${1:?usage: bench/gpu/ab_plan.sh OUT_DIR BEFORE_BUILD AFTER_BUILD PLAN_SPEC...}"
before="${2:?before build}" after="${3:?after build}"
shift 3
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$root/.gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
CUBLASLT_LOG_LEVEL=1 "$after/tests/kiln_cuda_tests" --gtest_output="json:$out/gpu_tests.json" > "$out/gpu_tests.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|worst error|the GPU gave" "$out/gpu_tests.log" | cut -c1-170 | head -60
for spec in "$@"; do
  name="$(echo "$spec" | tr ':=,' '___')"
  for build in "$before" "$after"; do
    tag="$(basename "$build")"
    "$build/kiln-gpu-bench" --out "$out/${name}_$tag.json" --quick --fused-only --plan "$spec" 2>&1 | grep -v "^  kiln_k" > "$out/${name}_$tag.log" || status=1
    echo "== $spec ($tag)"
    grep -E "CUDA graph|of the copy|from an idle|replayed alone|^  GEMM" "$out/${name}_$tag.log" | cut -c1-170 | head -60
  done
done
exit $status
