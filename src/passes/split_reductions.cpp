#include "passes/split_reductions.h"

#include <fmt/format.h>

#include "ir/ops/op_util.h"
#include "passes/graph_copier.h"

namespace kiln::passes {

PassResult split_reductions(const Graph& graph) {
  PassReport report{"split-reductions", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    if (node.op != Op::reduce_max && node.op != Op::reduce_amax) {
      copier.copy_node(id);
      continue;
    }
    const Shape& x = graph.value(node.inputs[0]).type.shape;
    const int64_t rank = static_cast<int64_t>(x.size());
    std::vector<bool> reduced(x.size(), false);
    for (int64_t axis : node.attrs.get_ints("axes")) reduced[static_cast<size_t>(*ops::normalize_axis(axis, rank))] = true;
    int64_t rows = 1;  // elements of the reduced axes other than the last
    for (int64_t a = 0; a + 1 < rank; ++a)
      if (reduced[static_cast<size_t>(a)]) rows *= x[static_cast<size_t>(a)];
    if (rank < 2 || !reduced.back() || rows < kSplitReductionMinRows ||
        rows * x.back() < kSplitReductionMinElements) {
      copier.copy_node(id);
      continue;
    }
    // Level 1: over the last axis, keeping it (size 1), so level 2 reduces the same axes of its result.
    const std::string name = graph.value(node.outputs[0]).name;
    const ValueId per_row = copier.add("split-reductions", node.op, {copier.map(node.inputs[0])},
                                       {{"axes", std::vector<int64_t>{rank - 1}}, {"keepdims", int64_t{1}}},
                                       {copier.fresh_name(name + ".rows")})[0];
    const ValueId whole = copier.add("split-reductions", node.op, {per_row}, node.attrs, {name})[0];
    copier.set_map(node.outputs[0], whole);
    ++report.found[std::string(op_name(node.op))];
    report.notes.push_back(fmt::format("{} over {} elements: per row of {} ({} rows), then over the rows",
                                       graph.node_label(id), rows * x.back(), x.back(), rows));
    report.changed = true;
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
