// Attention layouts: attention reads q, k, v and writes its output either head-major [b, h, s, d] or
// token-major [b, s, h, d] (its q_layout / k_layout / v_layout / out_layout attributes, ir/ops/attention.cpp),
// because the attention library addresses each through strides. A transpose that swaps heads and tokens
// (perm [0, 2, 1, 3]) next to an attention is therefore a copy nobody needs, and this pass absorbs it into the
// layout attribute:
//   - an operand that is such a transpose of x: attention reads x, its layout flipped;
//   - an operand that is a concat along the sequence axis of such transposes (joint text + image attention):
//     the concat of their inputs along their sequence axis, read with the layout flipped (a contiguous concat
//     instead of a transposing one);
//   - an output whose every reader is such a transpose: written with out_layout flipped, and the readers read
//     it directly (so the reshape to [b, s, h*d] and the split into text and image tokens that follow become
//     views of one buffer).
// The one rule: the transpose's permutation is exactly the swap of the two axes the layouts differ in.
// Exact: the attention computes the same values from the same elements; only where they sit in memory changes.
// Runs after decompose and before fuse-rows, while the transposes are nodes of their own; DCE removes what
// this leaves unread.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult absorb_attention_layouts(const Graph& graph);

}  // namespace kiln::passes
