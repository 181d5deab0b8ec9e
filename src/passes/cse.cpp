#include "passes/cse.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "passes/graph_copier.h"

namespace kiln::passes {

PassResult eliminate_common_subexpressions(const Graph& graph) {
  using Key = std::tuple<Op, std::vector<ValueId>, Attrs>;
  std::map<Key, NodeId> seen;  // key over *target* input ids -> first source node with that key
  PassReport report{"cse", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    std::vector<ValueId> inputs = copier.mapped_inputs(id);
    // a + b and b + a are one value.
    if (op_has_trait(node.op, kTraitCommutative)) std::sort(inputs.begin(), inputs.end());
    Key key{node.op, inputs, node.attrs};
    auto it = seen.find(key);
    if (it == seen.end()) {
      seen.emplace(std::move(key), id);
      copier.copy_node(id);
      continue;
    }
    const Node& first = graph.node(it->second);
    for (size_t i = 0; i < node.outputs.size(); ++i) copier.set_map(node.outputs[i], copier.map(first.outputs[i]));
    report.changed = true;
    report.notes.push_back(graph.node_label(id) + " is " + graph.node_label(it->second));
    ++report.found["repeated " + std::string(op_name(node.op))];
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
