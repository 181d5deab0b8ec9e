// FP8 fast accumulation: marks every scaled_linear `accumulation="fast"`, which lets the GEMM library use
// Hopper's fast FP8 accumulation (cuBLASLt CUBLASLT_MATMUL_DESC_FAST_ACCUM: the tensor cores' partial sums are
// not promoted to full f32 at intervals along K). On the H200 it makes FLUX's FP8 GEMMs 1.00-1.12x faster than
// exact accumulation at their best algorithms (docs/performance.md, session 19), which is what takes them past
// 1.6x of bf16.
//
// The attribute is a permission, not a formula: the reference executor and the CPU backend still accumulate
// exactly, and a backend without the mode ignores it. So the pass is reassociating: what the faster sums cost
// in accuracy is judged on the backend that uses them, by the numerics gate against the reference, like any
// other reordering of a sum. Only where `supports` accepts the marked node (the CUDA backend: any scaled_linear
// it runs); a GEMM already marked either way is left as it is (idempotent).
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult mark_fast_accumulation(const Graph& graph, const SupportsFn& supports);

}  // namespace kiln::passes
