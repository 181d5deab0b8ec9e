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
    std::vector<ValueId> inputs;
    for (ValueId v : node.inputs) inputs.push_back(copier.map(v));
    std::vector<std::string> names;
    for (ValueId v : node.outputs) names.push_back(graph.value(v).name);
    auto out = copier.target().add_node(node.op, std::move(inputs), std::move(attrs), std::move(names));
    KILN_CHECK(out.ok());
    copier.target().set_node_group(static_cast<NodeId>(copier.target().nodes().size()) - 1, node.group);
    for (size_t i = 0; i < node.outputs.size(); ++i) copier.set_map(node.outputs[i], (*out)[i]);
    ++report.found["scaled_linear"];
    report.notes.push_back(fmt::format("fast FP8 accumulation allowed: {}", graph.node_label(id)));
    report.changed = true;
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
