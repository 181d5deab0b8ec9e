// How far the reference itself moves when its discontinuous steps see inputs one ulp away. An FP8 quantize
// rounds to a grid 16 bf16 ulps wide: an implementation that computes its input one ulp differently (another
// summation order, a fused multiply-add) lands on the neighbouring grid point for the few elements near a
// rounding boundary, and a GEMM downstream spreads each such step over a whole output row. That error is
// sound, yet far above the correctly-rounded baseline of compare.h. The sensitivity run measures it: the
// reference of the same graph on the same inputs, with the inputs of its discontinuous steps moved one ulp up
// or down (a seeded random sign per element). The discontinuous steps are quantize nodes and, once a quantize
// is decomposed, the casts of its scaled values to fp8. Moved are the floating inputs of those steps (one ulp
// of their dtype) and the computed values read by widening casts on the way to them (one ulp of the narrow
// dtype): a decomposed quantize of a bf16 value starts with its exact cast to f32, and one f32 ulp there flips
// nothing, where one bf16 ulp is what another summation order upstream gives. Graph inputs are never moved.
// The largest difference per output is the error such a flip can cause; compare_output accepts a candidate
// within `sensitivity_multiple` of it (TolerancePolicy::sensitivity).
//
// A graph without discontinuous steps has sensitivity 0 everywhere, so the policy is unchanged for it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ir/graph.h"

namespace kiln::harness {

// True when `graph` has a node whose output rounds to a coarse grid (a quantize, or a cast to fp8).
bool has_discontinuous_steps(const Graph& graph);

// The reference of `graph` with the inputs of its discontinuous steps moved one ulp up or down, as above (the
// sign drawn per element from `seed`): what a sound implementation that rounds differently upstream may produce.
Result<std::map<std::string, Tensor>> nudged_reference(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                                       uint64_t seed);

// Per output name: max |reference - nudged reference| over its finite elements (0 for integer outputs).
// `reference` is the plain reference of `graph` on `inputs`.
Result<std::map<std::string, double>> quantize_sensitivity(const Graph& graph,
                                                           const std::map<std::string, Tensor>& inputs,
                                                           const std::map<std::string, Tensor>& reference,
                                                           uint64_t seed = 7);

}  // namespace kiln::harness
