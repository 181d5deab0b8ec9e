#!/usr/bin/env bash
# One device call that uses whichever card comes (a call naming nvidia-h200 without needs_h200 may get an H100):
# on an H200, issue 7's run in SECONDS (tests, kiln optimize next to the peer, the plans' figures, ratios); on any
# other card, the GPU tests and the held schedule search of the FP8 block's kernels (kiln-gpu-bench
# --tune-plan), whose per-kernel winners say what the next kernel change should be. Binaries come prebuilt
# (bench/gpu/carry_libs.sh; carry build/release's kiln, kiln-gpu-bench, kiln-gpu-worker, kiln-worker and
# tests/kiln_cuda_tests, .gpulib and .peer).
#   bench/gpu/any_card.sh OUT_DIR BUILD_DIR [SECONDS] [BEFORE_BUILD]
# SECONDS: the whole call's budget, default 480. BEFORE_BUILD (a folder with an older kiln-gpu-bench): on a card
# other than the H200, after the tests, the FP8 and bf16 double blocks' plans from both builds one after the
# other (before, after, before again: the card's drift shows), ahead of the schedule search.
# On the H200: ANY_CARD_MODELS (default both FLUX.1-dev blocks) and ANY_CARD_LOOP (each loop's budget, default 60s;
# 50s stopped the double block's loop after two passes in session 41; what every pass takes is not yet measured).
set -uo pipefail
out="${1:?usage: bench/gpu/any_card.sh OUT_DIR BUILD_DIR [SECONDS]}"
build="${2:?usage: bench/gpu/any_card.sh OUT_DIR BUILD_DIR [SECONDS]}"
budget="${3:-480}"
before="${4:-}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
card="$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)"
[ -n "$card" ] || { echo "no GPU here (nvidia-smi gave no card)" >&2; exit 2; }
echo "card: $card"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$root/.gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# ANY_CARD_ISSUE7=1 takes issue 7's path on whichever card comes (its figures on an H100 are not the H200's).
if echo "$card" | grep -q H200 || [ "${ANY_CARD_ISSUE7:-0}" = 1 ]; then
  # Issue 7 in one call, most needed first: the GPU suite (and the tiny models against the reference), then
  # `kiln optimize --backend cuda` on both FLUX.1-dev blocks next to the peer (the ratios and the waterfalls),
  # then kiln-gpu-bench's plans (graph against its kernels, memory-bound kernels against a same-size copy, the
  # GEMM audit) in what time is left, then every figure read off what came back.
  bash "$root/bench/gpu/run.sh" "$out" --prebuilt "$build" --no-bench > "$out/run.log" 2>&1
  status=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|lacks" "$out/run.log" | head -20
  echo "== ${SECONDS} s: GPU suite done"
  left=$((budget - SECONDS - 20))
  # The peer's sustained-load timing (up to 4 minutes) only where it leaves room for both loops (about 110 s
  # each on the H100, session 33) and the plans' figures (about 2 minutes): not in a 540 s call, whose GPU suite
  # leaves about 380 s.
  regimes=1
  [ "$left" -lt 600 ] && regimes=0
  # Each block: the fp64 reference and the baseline's deployment (about 40 s on the H200), the loop's ANY_CARD_LOOP, then
  # three head-to-head rounds against one peer process (optimize.sh's peer server: one compile, then each round 2 s
  # idle and 35 calls; not yet timed on a GPU), inside 200 s; a kiln stopped by the timeout writes no report.
  read -r -a models <<< "${ANY_CARD_MODELS:-zoo:flux1-double-block zoo:flux1-single-block}"
  KILN_PEER_REGIMES=$regimes KILN_NO_KB=1 KILN_PEER_AFTER=0 KILN_OPTIMIZE_TIMEOUT="${KILN_OPTIMIZE_TIMEOUT:-200}" \
    timeout "$((left > 30 ? left : 30))" bash "$root/bench/gpu/optimize.sh" "$out/opt" "$build/kiln" \
    "${ANY_CARD_LOOP:-60s}" "${models[@]}" \
    > "$out/optimize_sh.log" 2>&1 || status=1
  grep -E "^==|next to|kept|no win|done:" "$out/optimize_sh.log" | cut -c1-160
  grep -h -m1 "deployed in" "$out"/opt/*-optimize.log 2> /dev/null | cut -c1-160  # each baseline's
  echo "== ${SECONDS} s: optimize loops done"
  left=$((budget - SECONDS - 15))
  if [ "$left" -gt 30 ]; then
    timeout "$left" "$build/kiln-gpu-bench" --out "$out/gpu_bench.json" --quick --fused-only --plan flux1-double-block \
      --plan flux1-single-block --plan flux1-double-block:dtype=fp8,fp8_scaling=tensor > "$out/gpu_bench.log" 2>&1
    echo "== ${SECONDS} s: kiln-gpu-bench done"
  fi
  python3 "$root/bench/gpu/ratios.py" "$out" "$out/opt" --json "$out/ratios.json"
  exit $status
fi
bash "$root/bench/gpu/run.sh" "$out" --prebuilt "$build" --no-bench > "$out/run.log" 2>&1
status=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|lacks" "$out/run.log" | head -20
if [ -n "$before" ]; then
  for spec in flux1-double-block:dtype=fp8,fp8_scaling=tensor flux1-double-block; do
    name="$(echo "$spec" | tr ':=,' '___')"
    for pass in before after before2; do
      bin="$build/kiln-gpu-bench"
      [ "$pass" = after ] || bin="$before/kiln-gpu-bench"
      left=$((budget - SECONDS - 30))
      [ "$left" -gt 30 ] || { echo "== $spec ($pass): skipped, the call's $budget s are spent"; continue; }
      timeout "$((left < 120 ? left : 120))" "$bin" --out "$out/ab_${name}_$pass.json" --quick --fused-only --plan "$spec" > "$out/ab_${name}_$pass.log" 2>&1
      echo "== $spec ($pass)"
      grep -E "^plan|memory-bound group" "$out/ab_${name}_$pass.log" |
        sed -E 's/\(([0-9]+) nodes, first node [^ ]* +/(\1) /; s/^plan .* fused +/plan /' | cut -c1-130 | head -12
    done
  done
fi
left=$((budget - SECONDS - 10))
if [ "$left" -gt 60 ]; then
  timeout "$left" "$build/kiln-gpu-bench" --out "$out/tune.json" --quick \
    --tune-plan flux1-double-block:dtype=fp8,fp8_scaling=tensor --max-candidates 20 > "$out/tune.log" 2>&1
  grep -E "^kernel|^plan" "$out/tune.log" | cut -c1-520
fi
exit $status
