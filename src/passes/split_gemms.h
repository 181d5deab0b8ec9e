// GEMM split by epilogue: a GEMM whose output is only split along its feature axis, where some pieces feed an
// activation the GEMM can apply itself (GELU, tanh form) and others do not, becomes one GEMM per run of
// pieces that want the same epilogue. FLUX's single-stream block computes q, k, v and the MLP's up projection
// in one GEMM (linear1, N = 9216 + 12288) and applies GELU to the MLP columns only: merged, that GELU (and the
// bias add of all 21504 columns) is a pass of its own over 396 MB; split, the MLP GEMM takes bias and GELU
// as its epilogue (fold-epilogues) and the q/k/v GEMM its bias.
//
// The inverse of merge-gemms where the members' epilogues differ; merge-gemms runs first and merges by
// shared input, this pass splits where the readers disagree. Weights, biases and FP8 weight scales are sliced
// along N as load-time views (per-tensor scales are kept; per-channel [N, 1] scales slice; 128x128 block
// scales slice only where every cut is a multiple of 128).
//
// When it applies: linear(x, w[N, K], [b]) or scaled_linear(xq, xs, wq, ws, [b]) with no activation yet,
// whose output's one reader is a `split` along the last axis; a piece is an epilogue piece when its one
// reader is gelu {approximate="tanh"}; the pieces form at least two runs (consecutive pieces of one kind).
// No size rule: the unsplit form already runs an elementwise kernel over the epilogue pieces, so the split
// adds no launch where the epilogue then folds, and removes that pass.
//
// Numerics: every output element is the same dot product over the same operands, so the reference executor's
// results are bit-identical (a GPU library may tile the narrower GEMMs differently: reassociating by the
// policy). Idempotent: a split GEMM's output is no longer read by a split with mixed pieces.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult split_gemms_by_epilogue(const Graph& graph);

}  // namespace kiln::passes
