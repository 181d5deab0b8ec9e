#!/usr/bin/env bash
# On a GPU machine, with binaries built elsewhere (-DKILN_CUDA=ON) and carried: the building-block figures and the
# fused FLUX.1-dev plans' details in one call, then every kernel of one run of each plan under ncu.
#   bench/gpu/plan_profile.sh OUT_DIR [BUILD_DIR]      (BUILD_DIR defaults to build/release)
# Writes OUT_DIR/gpu_bench.json and gpu_bench.log (copy bandwidth; every cuBLASLt algorithm of the blocks' GEMMs
# in bf16 and FP8; cuDNN attention; each plan's steps alone with memory-bound kernels beside a copy of as many
# bytes, its GEMM choices audited, its CUDA-graph time) and OUT_DIR/ncu_<block>.csv (each kernel of one plan run
# as it runs in the plan: duration, DRAM throughput, registers, achieved occupancy; caches and clocks left as
# they are).
set -uo pipefail
out="${1:?usage: bench/gpu/plan_profile.sh OUT_DIR [BUILD_DIR]}"
build="${2:-build/release}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$PWD/.gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$build/kiln-gpu-bench" --out "$out/gpu_bench.json" --fused-only --plan flux1-double-block --plan flux1-single-block \
  2>&1 | tee "$out/gpu_bench.log"
ncu_bin="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size
for block in double single; do
  timeout 240 "$ncu_bin" --profile-from-start off --cache-control none --clock-control none --metrics "$metrics" --csv \
    "$build/kiln-gpu-bench" --quick --out "$out/ncu_bench_$block.json" --fused-only --profile-window \
    --plan "flux1-$block-block" > "$out/ncu_$block.csv" 2> "$out/ncu_$block.err" || echo "ncu $block failed: $(tail -3 "$out/ncu_$block.err")"
done
