#include "passes/join_concat_pieces.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "kernel/kernel_ir.h"
#include "passes/fuse_rows.h"
#include "passes/staging.h"

namespace kiln::passes {

PassResult join_concat_pieces(const Graph& graph) {
  PassReport report{"join-concat-pieces", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  Graph out = graph;
  std::map<int32_t, std::vector<NodeId>> members;
  std::map<int32_t, std::vector<ValueId>> writes;  // what each group writes for readers outside it
  for (const FusedGroup& g : collect_fused_groups(graph)) {
    members[g.id] = g.members;
    writes[g.id] = g.outputs;
  }
  std::vector<int> readers(graph.values().size(), 0);
  for (const Node& n : graph.nodes()) {
    for (ValueId v : n.inputs) ++readers[v];
  }
  std::set<ValueId> outputs;
  for (const GraphOutput& o : graph.outputs()) outputs.insert(o.value);
  const std::vector<Binding> time = classify_binding_times(graph);  // pieces join only within their stage
  for (NodeId c = 0; c < static_cast<NodeId>(graph.nodes().size()); ++c) {
    const Node& concat = graph.node(c);
    if (concat.op != Op::concat || concat.group < 0 || concat.inputs.size() < 2) continue;
    std::vector<NodeId> joined = members[concat.group];
    std::vector<int32_t> pieces;
    bool ok = true;
    for (ValueId in : concat.inputs) {
      const NodeId p = graph.value(in).producer;
      const int32_t g = p >= 0 ? graph.node(p).group : -1;
      ok = ok && g >= 0 && g != concat.group && readers[in] == 1 && !outputs.count(in) &&
           time[in] == time[concat.outputs[0]] && writes[g] == std::vector<ValueId>{in};
      if (!ok) break;
      pieces.push_back(g);
      joined.insert(joined.end(), members[g].begin(), members[g].end());
    }
    if (!ok) continue;
    // Joined only as one kernel over the concat's rows (not some other split of the union's rows).
    auto alone = kernel::lower_nodes(graph, members[concat.group], "concat");
    auto together = kernel::lower_nodes(graph, joined, "joined");
    if (!alone.ok() || !together.ok() || together->row_shape != alone->row_shape) continue;
    for (int32_t g : pieces) {
      for (NodeId m : members[g]) out.set_node_group(m, concat.group);
      members[concat.group].insert(members[concat.group].end(), members[g].begin(), members[g].end());
      members[g].clear();
    }
    ++report.found[fmt::format("concat of {} pieces joined into one kernel", pieces.size())];
    report.notes.push_back(fmt::format("{}: {} pieces joined", graph.node_label(c), pieces.size()));
    report.changed = true;
  }
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
