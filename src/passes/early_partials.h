// Early partial products: a GEMM over a concat along K whose pieces are ready at different times computes the
// early pieces' share of the product first, in a GEMM of its own. FLUX's single-stream block runs linear2 over
// concat(attention, gelu(MLP)) [M, 3072 + 12288]: the MLP piece waits only for the MLP GEMM, which a second lane
// runs beside q/k/v and attention; the attention piece waits for both of those. Cut along K, the MLP piece's
// partial product p = gelu(MLP) · W[:, 3072:]ᵀ (80% of linear2's FLOPs) runs on the second lane beside
// attention, and the first lane ends with y = attn · W[:, :3072]ᵀ + b + p, p read as that GEMM's residual
// (cuBLASLt's β = 1). Uncut, all of linear2 waits for attention and then runs alone on the GPU.
//
// When it applies: linear(concat(x_1 .. x_n along the last axis), w, [b]) with no activation or other epilogue,
// the concat read by nothing else and w a weight (bound at load time, so its K slices are load-time work). A
// piece's exclusive work is the FLOPs of the heavy ops (matmuls, attention) among its ancestors that are not
// ancestors of every piece. The pieces with the most are late, the others early; there must be early ones. The
// early pieces (concatenated again when there are several) get one GEMM over their columns of w, the late ones
// another with the bias and the early GEMM's output as its residual (β = 1), which makes their sum the GEMM's
// output; where the target (`supports`) has no such epilogue, a separate add sums them.
//
// Runs only when the plan has two lanes or more (PipelineOptions::lanes): on one lane the cut is a second launch
// and a pass over the partial product for nothing. Numerics: reassociating: the early partial product is rounded
// to the output's type before the late one is added (one rounding more, as a split-K GEMM with a workspace of
// the output's type). Idempotent: the new GEMMs read no concat. FP8 GEMMs (scaled_linear) are left alone: their
// input's one quantization scale spans every piece.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult split_early_partials(const Graph& graph, const SupportsFn& supports = {});

}  // namespace kiln::passes
