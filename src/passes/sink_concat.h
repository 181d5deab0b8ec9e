// Concat sinking: an op that treats the concatenated axis as independent computes the same values when applied
// to each piece before the concat, so `op(concat(a, b))` becomes `concat(op(a), op(b))`, with the op's other
// inputs sliced along that axis (or kept where they broadcast along it). Joint attention concatenates the text
// and image q/k before RoPE; sunk below RoPE, each stream's q/k RMSNorm and RoPE become neighbours and fuse,
// and the concat is left where it feeds attention. Exact: every element is computed by the same arithmetic.
// It applies to elementwise, row-wise and reduction ops whose output keeps the input's rank, when the concat
// has no other reader.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult sink_concats(const Graph& graph);

}  // namespace kiln::passes
