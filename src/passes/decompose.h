// Decompose: rewrites composite memory-bound ops (layernorm, rmsnorm, softmax, rope, swiglu, quantize) and
// biased linears into primitives — elementwise ops, row reductions and views — so that fusion sees one kind
// of building block and codegen needs no per-composite kernels. Intermediates are computed in f32 and the
// result cast back once, as fused kernels do; the rewrite is reassociating (judged against fp64 under the
// numerics policy, not bit-identical). Elementwise composites (gelu, silu) are already primitives: codegen
// inlines their formula. A composite whose decomposition does not apply to its shape (a quantize block that
// does not divide the tensor) is kept as it is and reported.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult decompose_composites(const Graph& graph);

}  // namespace kiln::passes
