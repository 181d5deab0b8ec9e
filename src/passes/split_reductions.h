// Split reductions: a max-like reduction (reduce_max, reduce_amax) over several axes that include the last
// becomes two: one over the last axis (a row reduction, keepdims), then one over the other axes of its result.
// The per-tensor amax of an FP8 quantize (decomposed: reduce_amax over every axis of the activation) is the
// case that matters: as one reduction it is a single "row" of millions of elements, which a generated kernel
// runs in one thread block (H200, session 19: 1.5 ms for a 4096 x 3072 activation, 7 ms for the MLP's); split,
// the first level is a row reduction that fuses with its producer and spreads over the machine, the second
// reads one value per row.
//
// Exact: max and max-of-|x| are associative and commutative and round nothing (NaN propagates through either
// level), so the result is bit-identical. Sums and means are left alone (a different summation order). Only
// where the other reduced axes hold at least kMinRows rows and the whole reduction at least kMinElements
// elements: a small reduction is one block either way.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

inline constexpr int64_t kSplitReductionMinRows = 2;
inline constexpr int64_t kSplitReductionMinElements = 16384;

PassResult split_reductions(const Graph& graph);

}  // namespace kiln::passes
