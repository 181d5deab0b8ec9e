#!/usr/bin/env bash
# On a GPU machine: Nsight Compute's view of some of a plan's generated kernels, where they stall and how far
# they are from the memory roofline, as kiln-gpu-bench runs the plan (--quick --fused-only). ENTRY names are the
# plan's kernel entries as kiln-gpu-bench lists them (e.g. kiln_k4); each is profiled once, clocks unlocked.
# Writes OUT_DIR/ncu.txt.
#   bench/gpu/ncu_plan_kernels.sh OUT_DIR BUILD_DIR PLAN_SPEC ENTRY...
set -uo pipefail
out="${1:?usage: bench/gpu/ncu_plan_kernels.sh OUT_DIR BUILD_DIR PLAN_SPEC ENTRY...}"
build="${2:?build dir}" spec="${3:?plan spec}"
shift 3
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$root/.gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
[ -x "$ncu" ] || { echo "no ncu on this machine" >&2; exit 2; }
entries="$(IFS='|'; echo "$*")"
"$ncu" --clock-control none -k "regex:^(${entries})\$" -c "$#" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section WarpStateStats --section SchedulerStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
  "$build/kiln-gpu-bench" --out "$out/ncu_run.json" --quick --fused-only --plan "$spec" > "$out/ncu.txt" 2>&1
status=$?
grep -E "^  (${entries}) .*rows|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Eligible Warps|Issued Warp|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|issue_stalled" "$out/ncu.txt" | cut -c1-150 | head -120
exit $status
