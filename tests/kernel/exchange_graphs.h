// Graphs whose row reductions exchange partial results between a row's warps on CUDA (emit.cpp's kiln_red),
// shared by the emitter's tests (tests/kernel) and the GPU's (tests/cuda).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "util/check.h"

namespace kiln::testing {

// x f32 [16, 4, 256]: d = x - mean over the last axis (a mean per part, in a loop over the row's 4 parts),
// top = max of d over the whole [4, 256] row; outputs d and top. One group (every node in group 0): a kernel of
// 16 rows whose first reduction runs once per part.
inline Graph mean_per_part_then_max_graph() {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::f32, {16, 4, 256}}, Binding::per_call);
  const ValueId mean = (*g.add_node(Op::reduce_mean, {x}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}}, {"mean"}))[0];
  const ValueId d = (*g.add_node(Op::sub, {x, mean}, {}, {"d"}))[0];
  const ValueId top = (*g.add_node(Op::reduce_max, {d}, {{"axes", std::vector<int64_t>{1, 2}}, {"keepdims", int64_t{1}}}, {"top"}))[0];
  KILN_CHECK(g.add_output("d", d).ok());
  KILN_CHECK(g.add_output("top", top).ok());
  for (NodeId n = 0; n < 3; ++n) g.set_node_group(n, 0);
  return g;
}

// A modulated bf16 layernorm x [rows, cols] * scale + shift and its row amax (three reductions, as the FP8
// blocks' before their GEMMs); outputs y and amax.
inline Graph layernorm_modulate_amax_graph(int64_t rows, int64_t cols) {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {rows, cols}}, Binding::per_call);
  const ValueId scale = *g.add_input("scale", {DType::bf16, {1, cols}}, Binding::per_call);
  const ValueId shift = *g.add_input("shift", {DType::bf16, {1, cols}}, Binding::per_call);
  const ValueId n = (*g.add_node(Op::layernorm, {x}, {}, {"n"}))[0];
  const ValueId y = (*g.add_node(Op::add, {(*g.add_node(Op::mul, {n, scale}, {}, {"m"}))[0], shift}, {}, {"y"}))[0];
  KILN_CHECK(g.add_output("y", y).ok());
  const Attrs last = {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}};
  KILN_CHECK(g.add_output("amax", (*g.add_node(Op::reduce_amax, {y}, last, {"amax"}))[0]).ok());
  return g;
}

// A bf16 rmsnorm of x [rows, cols] with its weight [cols] (one reduction); output y.
inline Graph rmsnorm_graph(int64_t rows, int64_t cols) {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {rows, cols}}, Binding::per_call);
  const ValueId w = *g.add_input("w", {DType::bf16, {cols}}, Binding::per_call);
  KILN_CHECK(g.add_output("y", (*g.add_node(Op::rmsnorm, {x, w}, {}, {"y"}))[0]).ok());
  return g;
}

}  // namespace kiln::testing
