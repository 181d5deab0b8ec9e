#!/usr/bin/env bash
# kiln's emitted layernorm + modulate (the FLUX.1 double block's image stream, 4096 rows of 3072) in
# bench/gpu/probe_layernorm.cu beside hand-written forms and a same-size copy, with copies of it each changed in
# one way, to find what the 6% between it and the hand-written block of the same shape is (docs/performance.md,
# session 42):
#   k_vec    the scalar path for unaligned pointers removed (kiln_vec_ok taken as true)
#   k_rsqrt  1 / sqrtf(var + eps) as rsqrtf
#   k_add    1 + scale as a plain f32 add, not rounded to bf16 (the graph's bf16 add; numerically not kiln's)
#   k_guard  the stores without the kiln_active guard (every block holds a row here)
#   k_all    all four
#   bench/gpu/probe_emitted_ln.sh OUT_DIR [KILN_BINARY]    (needs nvcc; on the GPU machine, then run OUT_DIR/probe_ln)
set -euo pipefail
out="${1:?usage: bench/gpu/probe_emitted_ln.sh OUT_DIR [KILN_BINARY]}"
kiln="${2:-build/release/kiln}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
"$kiln" emit zoo:flux1-double-block --min-mb 40 -o "$out/emitted.cu"
# The entry whose header line says 4096 rows of 50.3 MB: the image layernorm + modulate.
entry="$(grep -E '^//   k[0-9]+: .* 4096 rows, 50\.3 MB' "$out/emitted.cu" | head -1 | sed -E 's|^//   (k[0-9]+):.*|\1|')"
[ -n "$entry" ] || { echo "no 4096-row 50.3 MB kernel in $out/emitted.cu" >&2; exit 1; }
python3 - "$out/emitted.cu" "$entry" "$out/variants.cu" <<'PY'
import re, sys
path, entry, dest = sys.argv[1:4]
src = open(path).read()
start = src.index(f'extern "C" __global__ void __launch_bounds__(128) {entry}(')
depth, end = 0, src.index("{", start)
while True:  # the entry's closing brace (the emitter also writes braces at the start of a line inside it)
    depth += {"{": 1, "}": -1}.get(src[end], 0)
    end += 1
    if depth == 0:
        break
body = src[start:end]
edits = {
    "vec": [("const bool kiln_vec_ok = (", "const bool kiln_vec_ok = true || (")],
    "rsqrt": [("1.0f / sqrtf(", "rsqrtf(")],
    "add": [(re.compile(r"kiln_bf16_add\((t\d+), (t\d+)\)"), r"(\1 + \2)")],
    "guard": [("if (kiln_active) {", "{")],
}
edits["all"] = [e for name in ("vec", "rsqrt", "add", "guard") for e in edits[name]]
out = []
for name, changes in edits.items():
    text = body.replace(f" {entry}(", f" k_{name}(", 1)
    for old, new in changes:
        changed = old.sub(new, text) if hasattr(old, "sub") else text.replace(old, new)
        if changed == text:
            sys.exit(f"{entry}: the edit '{name}' found nothing to change (the emitter changed; update this script)")
        text = changed
    out.append(text)
open(dest, "w").write(src + "\n" + "\n".join(out))
PY
# --fmad=false as kiln compiles its kernels (src/cuda/nvrtc.cpp), the hand-written forms too.
entries="X($entry) X(k_vec) X(k_rsqrt) X(k_add) X(k_guard) X(k_all)"
nvcc -O3 -std=c++20 -arch=sm_90 --fmad=false -DKILN_EMITTED="\"$out/variants.cu\"" -DKILN_LN_ROWS=4096 "-DKILN_LN_ENTRIES(X)=$entries" \
  "$root/bench/gpu/probe_layernorm.cu" -o "$out/probe_ln" 2> "$out/nvcc.log" || { tail -20 "$out/nvcc.log"; exit 1; }
echo "built $out/probe_ln: kiln's $entry and 5 edited copies; run: $out/probe_ln 4096"
