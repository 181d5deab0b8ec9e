// View canonicalization: reshapes, transposes, broadcasts, slices and splits move data without arithmetic,
// so a kernel can read through any of them with an index map instead of a copy. This pass puts views in the
// form that makes that possible and records where it applies:
//   1. compose chains: a split becomes one slice per piece (so each piece goes where its own readers are);
//      reshape∘reshape, transpose∘transpose, broadcast∘broadcast and slice∘slice along one axis become one
//      view; a transpose that keeps the order of the non-unit axes is a reshape;
//   2. remove identity views (same shape and order: a reshape to its own shape, an identity permutation, a
//      full unit-step slice, a one-piece split or concat);
//   3. push views into fused groups: a view all of whose readers sit in fused groups of its own stage joins
//      them as the group's load index map (Node::group, as fuse_rows marks members); a view read by several
//      groups is cloned, one per group, since an index map costs nothing to repeat. A view that stays (a
//      concat feeding attention) runs as its group's copy kernel, which loads through the views before it.
// A view that still has a reader outside any group (a library op, an unfused op, a graph output) stays a
// view; the kernel summary counts it as a copy unless a library op reads it as a contiguous window.
//
// Exact: views copy stored bits, so composing, removing or cloning them is bit-identical on the reference
// executor. Run after fuse-rows (groups must exist for step 3). Idempotent.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult canonicalize_views(const Graph& graph);

}  // namespace kiln::passes
