// The operands of a GEMM that run along its output features (N), and load-time slices of them: what a pass that
// cuts a GEMM into GEMMs over column ranges (split-gemms, defer-columns) gives each piece.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/graph.h"
#include "passes/graph_copier.h"

namespace kiln::passes {

// Where a linear or scaled_linear keeps its weight [N, K], its FP8 weight scale (scaled_linear only) and its
// bias (when present).
struct GemmOperands {
  size_t weight = 0;
  std::optional<size_t> scale, bias;
  bool along_n(size_t input) const { return input == weight || input == scale || input == bias; }
};
GemmOperands gemm_operands(const Node& gemm);

// A linear or scaled_linear with no activation epilogue yet: the GEMMs whose columns these passes cut.
inline bool is_plain_gemm(const Node& n) {
  return (n.op == Op::linear || n.op == Op::scaled_linear) && n.attrs.get_string("activation", "none") == "none";
}

// Why the weight scale of `gemm` cannot be cut along N into row ranges, if it cannot: packed scales, or 128x128
// block scales where `cut` (a column where one range ends and another begins) is not a multiple of 128. Pass
// each cut in turn; scalars and per-channel [N, 1] scales cut anywhere.
std::optional<std::string> scale_cut_blocker(const Graph& graph, const Node& gemm, int64_t cut);

// Rows [n0, n1) of a GEMM's along-N operand `v` (a target value of `copier`): a weight, a bias, a per-channel
// [N, 1] scale, or a 128x128 block-scale grid (by whole blocks); a per-tensor scale as it is. `n` is the GEMM's
// N when `v` is its weight scale (so that [N, 1] reads per channel), else 0. A slice of a weight is load-time
// work (staging.h), so the cut costs nothing per call.
ValueId gemm_rows(GraphCopier& copier, const char* pass, ValueId v, int64_t n0, int64_t n1, int64_t n = 0);

}  // namespace kiln::passes
