#!/usr/bin/env bash
# On a GPU machine: one pass's before/after in one build. The fused plan of each model is timed with and without
# PASS (kiln-gpu-bench --disable-pass), ROUNDS times in turn (without, with, without, with, ...), so the card's
# drift shows in both. Prints each run's CUDA-graph time; writes OUT_DIR/<model>_<with|without>_<round>.json.
#   bench/gpu/pass_ab.sh OUT_DIR PASS LANES ROUNDS PLAN_SPEC...
# Carry build/release/kiln-gpu-bench and .gpulib (bench/gpu/carry_libs.sh).
set -uo pipefail
out="${1:?usage: bench/gpu/pass_ab.sh OUT_DIR PASS LANES ROUNDS PLAN_SPEC...}"
pass="${2:?pass}" lanes="${3:?lanes}" rounds="${4:?rounds}"
shift 4
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$root/.gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench="$root/build/release/kiln-gpu-bench"
status=0
for spec in "$@"; do
  name="$(echo "$spec" | tr ':=,' '___')"
  for r in $(seq 1 "$rounds"); do
    for form in without with; do
      flags=(--out "$out/${name}_${form}_$r.json" --no-library --quick --fused-only --lanes "$lanes")
      [ "$form" = with ] || flags+=(--disable-pass "$pass")
      line="$("$bench" "${flags[@]}" --plan "$spec" 2>&1 | grep -E "CUDA graph|error" | head -3)" || status=1
      echo "$spec round $r $form $pass: $line"
    done
  done
done
exit $status
