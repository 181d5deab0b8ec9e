#include "passes/dce.h"

#include "passes/graph_copier.h"

namespace kiln::passes {

PassResult eliminate_dead_code(const Graph& graph) {
  // Walk backwards from the outputs: a node is live when any output is live.
  std::vector<bool> live_value(graph.values().size(), false);
  for (const GraphOutput& o : graph.outputs()) live_value[o.value] = true;
  std::vector<bool> live_node(graph.nodes().size(), false);
  for (NodeId id = static_cast<NodeId>(graph.nodes().size()) - 1; id >= 0; --id) {
    const Node& node = graph.node(id);
    for (ValueId v : node.outputs) live_node[id] = live_node[id] || live_value[v];
    if (!live_node[id]) continue;
    for (ValueId v : node.inputs) live_value[v] = true;
  }
  PassReport report{"dce", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    if (live_node[id]) {
      copier.copy_node(id);
    } else {
      report.changed = true;
      report.notes.push_back("removed " + graph.node_label(id));
      ++report.found["dead " + std::string(op_name(graph.node(id).op))];
    }
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
