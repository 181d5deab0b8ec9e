// Residual epilogues: the gated residual update that follows a GEMM becomes the GEMM's own epilogue. FLUX's
// `x + gate ⊙ (linear(a, w) + b)` (and a plain `x + (linear(a, w) + b)`, or a gate without the residual)
// becomes `linear(a, w, gate ⊙ b, f32(gate), x) {scale=1, residual=1}`: y = scale ⊙ (a · wᵀ) + b' + residual,
// cuBLASLt's D = α·AB + β·C + bias with a per-feature α, β = 1 and C = x, and one rounding. The update then
// costs no kernel and no pass over memory of its own: the GEMM reads x as it writes its output, and the norm
// that follows reads the updated stream instead of x, the GEMM's output and the gate.
//
// Runs before fuse-rows, on the decomposed graph (bias adds split off). Each step of the chain must be the only
// reader of the value before it; the gate must be one value per output feature (numel N: batch 1), the
// residual of the output's type. The gate's f32 copy and gate ⊙ b are new [N] elementwise nodes, computed
// once per call. Reassociating (one rounding instead of three), like the library's epilogue. Only forms the
// target `supports` are written (cuBLASLt on sm_90 has no per-feature alpha for bf16: there the gated update
// stays a row kernel and only plain residual adds fold).
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult fold_residual_epilogues(const Graph& graph, const SupportsFn& supports = {});

}  // namespace kiln::passes
