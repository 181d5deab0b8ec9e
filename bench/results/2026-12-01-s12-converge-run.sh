#!/bin/bash
# The convergence sequence of docs/performance.md ("CPU: kiln optimize with the knowledge base"):
#   (i) cold, (ii) the same again, (iii) another token count after both, all in one fresh directory and TMPDIR;
#   (iv) the other token count with an empty KB and a fresh TMPDIR (compile caches cold).
# usage: 2026-12-01-s12-converge-run.sh OUT_DIR KILN_BINARY [KILN_TESTS_WITH_AB_DRIVER]
# The third argument, a kiln_tests built with 2026-12-01-s12-converge-ab.cpp, adds the head-to-head A/B of
# the final plans of (iii) and (iv) (OUT_DIR/ab-iii-vs-iv.txt).
set -u
out=$(realpath "$1"); kiln=$(realpath "$2")
mkdir -p "$out"
work=$(mktemp -d /tmp/kiln-converge.XXXXXX)
chmod 755 "$work"  # the harness worker runs as nobody and must read the compile caches under it
cd "$work"
TIMEFORMAT='wall %R s (user %U s, sys %S s)'
step() {
  local name=$1; shift
  echo "== $name: $* | TMPDIR=$TMPDIR | load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/$name.log"
  { time "$@" > "$out/$name.stdout" 2> "$out/$name.stderr"; } 2>> "$out/$name.log"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/$name.log"
  tail -2 "$out/$name.log"
}
export TMPDIR=$work/tmp-a && mkdir -p "$TMPDIR"
step i "$kiln" optimize
cp kiln-out/report.json "$out/i.report.json"
step ii "$kiln" optimize
cp kiln-out/report.json "$out/ii.report.json"
step iii "$kiln" optimize zoo:flux1-dev:tiny=1,img_tokens=32 -o kiln-out-32
cp kiln-out-32/report.json "$out/iii.report.json"
export TMPDIR=$work/tmp-b && mkdir -p "$TMPDIR"
step iv "$kiln" optimize zoo:flux1-dev:tiny=1,img_tokens=32 -o kiln-out-32-cold --kb cold32.sqlite
cp kiln-out-32-cold/report.json "$out/iv.report.json"
"$kiln" kb stats --kb kiln-kb.sqlite > "$out/kb-stats.txt" 2>&1
"$kiln" kb stats --kb cold32.sqlite > "$out/kb-stats-cold32.txt" 2>&1
if [ $# -ge 3 ]; then
  echo "load $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/ab-iii-vs-iv.txt"
  KILN_AB_A=$work/kiln-out-32/plan.json KILN_AB_B=$work/kiln-out-32-cold/plan.json "$(realpath "$3")" \
    --gtest_filter='ZZAB.*' 2>&1 | grep "A=" | sed "s|$work/||g" >> "$out/ab-iii-vs-iv.txt"
fi
echo "work dir: $work"
