// Row fusion: groups memory-bound nodes that one kernel can compute — chains of elementwise ops, row
// reductions and row-preserving views over the same rows — so their intermediates never touch memory.
//
// One legality rule, written once (`can_fuse`), decides every merge:
//   * every member is fusible: its op declares independent leading axes (OpDef::independent_axes);
//   * rows line up: all members' outputs share a leading prefix P of L axes, no member reduces or moves data
//     across those axes (L <= each member's independent axes), and an edge inside the group never broadcasts
//     along P (row r reads only row r of its in-group producers);
//   * a row fits one thread block: every member's input and output rows hold <= max_row_elements elements;
//   * no cycles: no path leaves the group and comes back into it.
// Each node is in at most one group, so no work is duplicated; a member's value is written to memory only when
// something outside its group reads it. Bias adds, residual updates, gates, modulation, SwiGLU/GELU, q/k
// RMSNorm, RoPE and FP8 quantization fold into their neighbours by this rule alone.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

struct FuseOptions {
  int64_t max_row_elements = 65536;
};

PassResult fuse_row_groups(const Graph& graph, const FuseOptions& options = {});

// Fused groups of a graph (from Node::group): members in order, the values they read from outside, the values
// they write, and the bytes a kernel for the group moves (inputs read once, outputs written once).
struct FusedGroup {
  int32_t id;
  std::vector<NodeId> members;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  double bytes = 0;
};
std::vector<FusedGroup> collect_fused_groups(const Graph& graph);

// A group's pattern, derived from its members' traits (no list of known fusions): the ops that shape the
// kernel — reductions, transcendental ops, casts to FP8 — in member order, equal neighbours counted, then how
// many plain elementwise ops and views ride along, e.g.
//   "reduce_mean x2 -> rsqrt -> reduce_amax -> cast f8e4m3 (+16 elementwise, 5 views; writes 2)",
// where "writes" counts the values the group leaves in memory (a gated residual + norm writes the updated
// residual stream besides the normed rows).
std::string describe_group_pattern(const Graph& graph, const std::vector<NodeId>& members);

}  // namespace kiln::passes

namespace kiln::passes {

// Memory-bound kernels of a graph as a naive lowering would launch them (one per op that is not a library
// op, a source or a free reshape) against the fused graph (one per group plus the unfused rest, less the
// views that need no kernel: read through index maps by fused groups, or contiguous windows read by a GEMM),
// with the bytes each moves. Load-time work is not counted: it runs once.
struct KernelSummary {
  int kernels_before = 0;
  int kernels_after = 0;
  double bytes_before = 0;
  double bytes_after = 0;
  // Of kernels_after: views that still copy (no fused group loads through them, no library op reads them as
  // a contiguous window), and the bytes they move.
  int view_copies_after = 0;
  double view_copy_bytes_after = 0;
};
KernelSummary summarize_memory_bound_kernels(const Graph& original, const Graph& fused);

}  // namespace kiln::passes
