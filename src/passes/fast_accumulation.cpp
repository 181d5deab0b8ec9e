#include "passes/fast_accumulation.h"

#include <fmt/format.h>

#include "passes/graph_copier.h"

namespace kiln::passes {

PassResult mark_fast_accumulation(const Graph& graph, const SupportsFn& supports) {
  PassReport report{"fast-accumulation", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    if (node.op != Op::scaled_linear || node.attrs.has("accumulation")) {
      copier.copy_node(id);
      continue;
    }
    Attrs attrs = node.attrs;
    attrs.set("accumulation", std::string("fast"));
    if (supports) {
      std::vector<TensorType> types;
      for (ValueId v : node.inputs) types.push_back(graph.value(v).type);
      if (Status s = supports(node.op, types, attrs); !s.ok()) {
        ++report.found["not supported by the backend"];
        report.notes.push_back(fmt::format("kept exact: {}: {}", graph.node_label(id), s.error().message));
        copier.copy_node(id);
        continue;
      }
    }
    copier.copy_node_with(id, std::move(attrs), copier.mapped_inputs(id));
    ++report.found["scaled_linear"];
    report.notes.push_back(fmt::format("fast FP8 accumulation allowed: {}", graph.node_label(id)));
    report.changed = true;
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
