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

}  // namespace kiln::testing
