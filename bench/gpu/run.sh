#!/usr/bin/env bash
# On a GPU machine: build kiln with the CUDA backend, run the GPU tests, run the GPU benchmarks and the PyTorch
# peer on the same shapes, and write everything (JSON + logs) into the folder given.
#   bench/gpu/run.sh OUT_DIR [--quick] [--sanitize] [--peer | --peer-quick] [--no-tests] [--no-bench]
#                    [--prebuilt BUILD_DIR] [--optimize BUDGET]
# --peer-quick stops the peer after torch.compile's default mode (eager + compile in ~2 minutes);
# --prebuilt uses binaries built elsewhere with -DKILN_CUDA=ON (e.g. build/release, carried with .gpulib from
# bench/gpu/carry_libs.sh) instead of building here; --optimize runs bench/gpu/optimize.sh on both FLUX.1-dev
# blocks (the peer, then kiln optimize --backend cuda with the peer's figures) into OUT_DIR/opt. Last,
# bench/gpu/ratios.py prints issue 7's figures from everything the call wrote.
# --no-tests skips the GPU test suite (a benchmark-only call); --no-bench skips kiln's benchmarks and the peer
# (a test-only call; bench/gpu/optimize.sh is the optimize loop's call).
# The device tool's call: `bench/gpu/run.sh $OUT`, carrying build/deps (cuDNN frontend headers, .debs).
set -uo pipefail
out="${1:?usage: bench/gpu/run.sh OUT_DIR [--quick] [--sanitize] [--peer | --peer-quick] [--no-tests] [--no-bench]}"
shift
quick="" sanitize="" peer="" tests=1 bench=1 prebuilt="" optimize=""
while [ $# -gt 0 ]; do
  arg="$1"; shift
  case "$arg" in
    --prebuilt) prebuilt="${1:?--prebuilt needs a build folder}"; shift ;;
    --optimize) optimize="${1:?--optimize needs a budget, e.g. 90s}"; shift ;;
    --quick) quick="--quick" ;;
    --sanitize) sanitize=1 ;;
    --peer) peer=1 ;;
    --peer-quick) peer=quick ;;
    --no-tests) tests="" ;;
    --no-bench) bench="" ;;
    *) echo "unknown option $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build/gpu"
[ -n "$prebuilt" ] && build="$(cd "$prebuilt" && pwd)"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$root/.gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
step() { echo "== $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv

log="$(mktemp)"
if [ -n "$prebuilt" ]; then
  # A binary left out of the call's carry list fails minutes later as "kiln-worker not found" (session 30):
  # name it now, before any device time goes.
  needed=(kiln kiln-gpu-bench kiln-gpu-worker kiln-worker)
  [ -n "$tests" ] && needed+=(tests/kiln_cuda_tests)
  missing=()
  for b in "${needed[@]}"; do [ -x "$build/$b" ] || missing+=("$build/$b"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "--prebuilt $prebuilt lacks ${missing[*]}: build them (ninja kiln_cli kiln_gpu_bench kiln_gpu_worker" \
         "kiln_worker kiln_cuda_tests) and carry them" >&2
    exit 2
  fi
fi
if [ -z "$prebuilt" ]; then
step "build (CUDA on)"
# The GPU machine has SQLite's runtime library but not its header: the call carries Debian's libsqlite3-dev
# .deb (build/deps/debs, from `apt-get download libsqlite3-dev`), unpacked into a local prefix, never into /.
sqlite_flags=()
if [ ! -f /usr/include/sqlite3.h ]; then
  deb="$(ls "$root"/build/deps/debs/libsqlite3-dev_*.deb 2> /dev/null | head -1)"
  [ -n "$deb" ] || { echo "no sqlite3.h and no libsqlite3-dev .deb under build/deps/debs: carry build/deps"; exit 1; }
  dpkg -x "$deb" "$root/build/deps/sqlite"
  runtime="$(ls /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 2> /dev/null)"
  sqlite_flags=(-DSQLite3_INCLUDE_DIR="$root/build/deps/sqlite/usr/include" -DSQLite3_LIBRARY="${runtime:?no libsqlite3.so.0}")
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON "${sqlite_flags[@]}" > "$log" 2>&1 \
  || { tail -30 "$log"; exit 1; }
grep "kiln:" "$log"
targets=(kiln_gpu_bench kiln_gpu_worker kiln_worker kiln_cli)
[ -n "$tests" ] && targets+=(kiln_cuda_tests)
cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" > "$log" 2>&1 \
  || { grep -E "error|FAILED" "$log" | head -40; exit 1; }
fi

if [ -n "$tests" ]; then
step "GPU tests"
CUBLASLT_LOG_LEVEL=1 "$build/tests/kiln_cuda_tests" --gtest_output="json:$out/gpu_tests.json" > "$out/gpu_tests.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |block scales|Failure|error|cublasLt\]|^  [a-z_]+\.cu " "$out/gpu_tests.log" | head -60
if [ -n "$sanitize" ] && command -v compute-sanitizer > /dev/null; then
  # kiln's own device code must be memcheck-clean: the driver tests and whole tiny plans (generated kernels,
  # cuBLASLt, copies). Memcheck runs ~10x slower, so the long suites stay out of it.
  step "GPU tests under compute-sanitizer (memcheck)"
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 "$build/tests/kiln_cuda_tests" \
    --gtest_filter='GpuDriver.*:GpuPlan.QwenImagePerStepCacheOnTheGpu:GpuPlan.ArtifactRoundTrip' \
    > "$log" 2>&1 || status=1
  tail -5 "$log"
fi
fi

if [ -n "$bench" ]; then
step "kiln GPU benchmarks"
# KILN_TUNE_CANDIDATES=0 leaves out the per-kernel schedule search (minutes of device time).
tune=(--tune-plan flux1-double-block --tune-plan flux1-single-block --max-candidates "${KILN_TUNE_CANDIDATES:-24}")
[ "${KILN_TUNE_CANDIDATES:-24}" = 0 ] && tune=()
"$build/kiln-gpu-bench" --out "$out/gpu_bench.json" $quick --fused-only --plan flux1-double-block --plan flux1-single-block \
  --plan flux1-double-block:dtype=fp8,fp8_scaling=tensor "${tune[@]}" 2>&1 | grep -v "^  kiln_k" | tee "$out/gpu_bench.log" || status=1

# The team's peer script for whole FLUX blocks (eager and torch.compile), when the call carries it: the device
# tool sends only this checkout, so copy ../shared/bench/torch_flux_block.py to .peer/ and carry ".peer".
# It runs torch.compile twice (default and max-autotune: ~4 minutes of device time), so only with --peer.
if [ -n "$peer" ] && [ -f "$root/.peer/torch_flux_block.py" ]; then
  step "PyTorch peer: FLUX blocks"
  if [ "$peer" = quick ]; then
    # The script prints its JSON after each compile mode; 240 s covers eager + the default mode.
    timeout 240 python3 "$root/.peer/torch_flux_block.py" > "$out/torch_flux_block.log" 2>&1
    grep '^{' "$out/torch_flux_block.log" | tail -1
  else
    python3 "$root/.peer/torch_flux_block.py" > "$out/torch_flux_block.log" 2>&1 || status=1
  fi
  grep RESULT "$out/torch_flux_block.log" | tail -3
fi

fi

if [ -n "$tests" ] && command -v nvcc > /dev/null; then
  # What one cuBLASLt GEMM with the residual epilogue (per-feature alpha, beta = 1, bias) costs next to the plain
  # bias GEMM at FLUX's shapes, and which bias semantics the library has (bench/gpu/probe_gated_epilogue.cu).
  step "cuBLASLt probe: gated residual epilogue"
  nvcc -O2 -std=c++17 -arch=sm_90 "$root/bench/gpu/probe_gated_epilogue.cu" -lcublasLt -o "$build/probe_gated_epilogue" > "$log" 2>&1 \
    && "$build/probe_gated_epilogue" > "$out/probe_gated_epilogue.txt" 2>&1
  cat "$out/probe_gated_epilogue.txt" 2> /dev/null || tail -5 "$log"
fi

step "kiln run --backend cuda (tiny models against the reference)"
for model in zoo:flux1-double-block:tiny zoo:flux1-single-block:tiny zoo:flux2-dev:tiny zoo:llama3-8b:tiny; do
  "$build/kiln" run "$model" --backend cuda 2>&1 | tail -4 || status=1
done

if [ -n "$bench" ]; then
step "PyTorch peer on the same GEMMs"
python3 "$root/bench/gpu/torch_gemm.py" --out "$out/torch_gemm.json" $quick || status=1
fi

if [ -n "$optimize" ]; then
step "kiln optimize next to the peer (both FLUX.1-dev blocks)"
KILN_NO_KB="${KILN_NO_KB-1}" bash "$root/bench/gpu/optimize.sh" "$out/opt" "$build/kiln" "$optimize" \
  zoo:flux1-double-block zoo:flux1-single-block || status=1
fi

step "issue 7 figures"
python3 "$root/bench/gpu/ratios.py" "$out" "$out/opt" --json "$out/ratios.json"
exit $status
