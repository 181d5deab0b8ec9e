#!/usr/bin/env bash
# On a GPU machine: the PyTorch peer (eager and torch.compile's default mode) and `kiln optimize --backend cuda`
# on the same FLUX.1-dev blocks in one call; the peer's figures go into kiln's report (--peer), so kiln's final
# time stands next to torch.compile's measured minutes apart on the same GPU.
#   bench/gpu/optimize.sh OUT_DIR [KILN_BINARY] [BUDGET] [MODEL ...]
# KILN_BINARY defaults to build/gpu/kiln (bench/gpu/run.sh builds it) or build/carry/kiln (built elsewhere with
# -DKILN_CUDA=ON and carried); BUDGET to 3m; MODEL to zoo:flux1-double-block. With several models the peer runs
# once and each model's loop writes OUT_DIR/<double|single>/. Needs .peer/torch_flux_block.py (a copy of
# ../shared/bench/torch_flux_block.py, carried). KILN_NO_KB=1 runs without the knowledge base (and so without the
# kernel tuner, which overran a 60 s budget by 2 minutes in session 18).
set -uo pipefail
out="${1:?usage: bench/gpu/optimize.sh OUT_DIR [KILN_BINARY] [BUDGET] [MODEL]}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
kiln="${2:-}"
if [ -z "$kiln" ]; then
  kiln="$root/build/gpu/kiln"
  [ -x "$kiln" ] || kiln="$root/build/carry/kiln"
fi
budget="${3:-3m}"
models=("${@:4}")
[ ${#models[@]} -gt 0 ] || models=(zoo:flux1-double-block)
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "== PyTorch peer (eager, torch.compile default)"
[ -f "$root/.peer/torch_flux_block.py" ] || { echo "no .peer/torch_flux_block.py: carry .peer"; exit 1; }
# The script prints its figures as one JSON line after each compile mode (and inductor prints other JSON lines
# while it autotunes): the peer is stopped once the line with the default mode's figures is there.
python3 "$root/.peer/torch_flux_block.py" > "$out/torch_flux_block.log" 2>&1 &
peer_pid=$!
peer_json=""
for _ in $(seq 300); do
  peer_json="$(grep '"compile\[default\]_wall_s"' "$out/torch_flux_block.log" | tail -1)"
  [ -n "$peer_json" ] && break
  kill -0 "$peer_pid" 2> /dev/null || break
  sleep 1
done
kill "$peer_pid" 2> /dev/null
wait "$peer_pid" 2> /dev/null
[ -n "$peer_json" ] || { echo "the peer printed no default-mode figures:"; tail -20 "$out/torch_flux_block.log"; exit 1; }
echo "$peer_json" > "$out/torch_flux_block.json"
# The same blocks under sustained load (bench/gpu/peer_regimes.py): kiln's sustained time sits next to it.
# KILN_PEER_REGIMES=0 leaves it out (a call short of device time).
if [ "${KILN_PEER_REGIMES:-1}" != 0 ]; then
  echo "== PyTorch peer under sustained load (torch.compile default)"
  timeout 240 python3 "$root/bench/gpu/peer_regimes.py" "$out/peer_regimes.json" > "$out/peer_regimes.log" 2>&1 \
    || { echo "peer_regimes.py failed (the sustained comparison is left out):"; tail -5 "$out/peer_regimes.log"; }
fi
status=0
server_pid=""
# A peer server still up when this script ends (a timeout, an interrupt) must not stay behind holding the GPU.
trap '[ -n "$server_pid" ] && kill "$server_pid" 2> /dev/null' EXIT
trap 'exit 143' TERM INT
for model in "${models[@]}"; do
  block="double"
  case "$model" in *single*) block="single" ;; esac
  dir="$out"
  [ ${#models[@]} -gt 1 ] && dir="$out/$block" && mkdir -p "$dir"
  peers=($(python3 - "$block" <<PY
import json, sys
r = json.loads('''$peer_json''')
b = sys.argv[1]
print(f"--peer=torch.compile={r[b + '_compile[default]_ms']}", f"--peer=eager={r[b + '_eager_ms']}")
# The peer compiles each of its two blocks with the GPU idle before timing it: kiln's final Plan idles as long.
wall = r.get("compile[default]_wall_s")
if wall:
    print(f"--settle={max(2.0, wall / 2):.1f}")
try:
    s = json.load(open("$out/peer_regimes.json"))[b]
    print(f"--peer-sustained=torch.compile={s['sustained_ms']}")
except (OSError, KeyError, ValueError):
    pass
PY
  ))
  echo "${peers[@]}"
  echo "== kiln optimize $model --backend cuda --budget $budget"
  # Head to head: the peer (peer_regimes.py, from idle) and kiln's final Plan timed in turn, KILN_PEER_ROUNDS
  # rounds (3; 0 leaves them out): each round's ratio compares one power and clock state of the GPU.
  # The rounds ask one peer process that compiled the block once (peer_regimes.py --serve, started and ready
  # before kiln starts, so it never runs beside kiln's loop); where it does not come up within 300 s, each round
  # runs the script afresh (about 50 s a round on the H200: torch's import and the block's compile).
  h2h=()
  rounds="${KILN_PEER_ROUNDS:-3}"
  if [ "$rounds" != 0 ]; then
    serve_dir="$dir/peer_server"
    rm -rf "$serve_dir"
    python3 "$root/bench/gpu/peer_regimes.py" "$dir/peer_server.json" --blocks "$block" --serve "$serve_dir" \
      > "$dir/peer_server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 300); do
      [ -f "$serve_dir/port" ] && break
      kill -0 "$server_pid" 2> /dev/null || break
      sleep 1
    done
    if [ -f "$serve_dir/port" ]; then
      echo "peer server ready ($(grep -o '"compile_wall_s": [0-9.]*' "$dir/peer_server.log" | head -1))"
      h2h=(--peer-rounds "$rounds" --peer-command
        "python3 '$root/bench/gpu/peer_regimes.py' --ask '$serve_dir' --figures torch.compile")
    else
      echo "the peer server did not come up (each round runs peer_regimes.py afresh):"; tail -5 "$dir/peer_server.log"
      kill "$server_pid" 2> /dev/null
      server_pid=""
      h2h=(--peer-rounds "$rounds" --peer-command
        "python3 '$root/bench/gpu/peer_regimes.py' '$dir/peer_round.json' --blocks $block --sustain 0 --figures torch.compile")
    fi
  fi
  kb=(--kb "$out/kiln-kb.sqlite")
  [ -n "${KILN_NO_KB:-}" ] && kb=(--no-kb)  # no knowledge base and no kernel tuner: a shorter call
  timeout "${KILN_OPTIMIZE_TIMEOUT:-340}" "$kiln" optimize "$model" --backend cuda --budget "$budget" -o "$dir/optimize" \
    "${kb[@]}" "${peers[@]}" "${h2h[@]}" > "$dir/optimize.log" 2>&1 || status=1
  if [ -n "$server_pid" ]; then
    python3 "$root/bench/gpu/peer_regimes.py" --ask "$serve_dir" --quit --ask-timeout 10 2> /dev/null || kill "$server_pid" 2> /dev/null
    wait "$server_pid" 2> /dev/null
    server_pid=""
  fi
  tail -14 "$dir/optimize.log"
  # The device tool brings back only shallow folders: the report and log also at the top, by block.
  cp "$dir/optimize/report.json" "$out/$block-report.json" 2> /dev/null
  cp "$dir/optimize.log" "$out/$block-optimize.log"
done
# The peer again, now that the GPU has run kiln's loops for minutes (warmer, as kiln's final timing was): the
# from-idle ratio against the peer timed before and after brackets what the order of the two costs.
# KILN_PEER_AFTER=0 leaves it out (a call short of device time).
[ "${KILN_PEER_AFTER:-1}" = 0 ] && exit $status
echo "== PyTorch peer again, after kiln (torch.compile default)"
timeout 240 python3 "$root/bench/gpu/peer_regimes.py" "$out/peer_regimes_after.json" > "$out/peer_regimes_after.log" 2>&1 \
  || { echo "peer_regimes.py failed after kiln:"; tail -5 "$out/peer_regimes_after.log"; }
exit $status
