#include "passes/sink_concat.h"

#include <fmt/format.h>

#include "passes/graph_copier.h"

namespace kiln::passes {
namespace {

// How the other inputs of a sunk node are cut for one piece: kept whole (broadcast along the axis) or sliced
// along their own axis.
struct InputCut {
  bool slice = false;
  int64_t axis = 0;  // in the input's own axes
};

// Whether node `id` reading a concat at input `which` can be sunk; fills the cuts for its other inputs.
bool can_sink(const Graph& g, NodeId id, size_t which, const std::vector<int>& readers, std::vector<InputCut>& cuts) {
  const Node& n = g.node(id);
  if (n.outputs.size() != 1) return false;
  if (!op_has_trait(n.op, kTraitElementwise) && !op_has_trait(n.op, kTraitRowwise) &&
      !op_has_trait(n.op, kTraitReduction)) {
    return false;
  }
  const ValueId c = n.inputs[which];
  const NodeId concat_id = g.value(c).producer;
  if (concat_id < 0 || g.node(concat_id).op != Op::concat || readers[c] != 1) return false;
  const Node& concat = g.node(concat_id);
  const Shape& cshape = g.value(c).type.shape;
  const Shape& out = g.value(n.outputs[0]).type.shape;
  if (out.size() != cshape.size()) return false;
  const auto rank = static_cast<int64_t>(cshape.size());
  const int64_t axis = concat.attrs.get_int("axis", 0) < 0 ? concat.attrs.get_int("axis", 0) + rank
                                                           : concat.attrs.get_int("axis", 0);
  if (axis >= node_independent_axes(g, id) || out[axis] != cshape[axis]) return false;
  cuts.assign(n.inputs.size(), {});
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (i == which) continue;
    const Shape& s = g.value(n.inputs[i]).type.shape;
    const int64_t aligned = axis - (rank - static_cast<int64_t>(s.size()));  // right-aligned broadcasting
    if (aligned < 0 || s[aligned] == 1) continue;                          // broadcast along the axis
    if (s[aligned] != cshape[axis]) return false;
    cuts[i] = {true, aligned};
  }
  return true;
}

}  // namespace

namespace {

PassResult sink_once(const Graph& graph) {
  PassReport report{"sink-concat", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  std::vector<int> readers(graph.values().size(), 0);
  for (const Node& n : graph.nodes()) {
    for (ValueId v : n.inputs) ++readers[v];
  }
  for (const GraphOutput& o : graph.outputs()) ++readers[o.value];

  GraphCopier copier(graph);
  Graph& out = copier.target();
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& n = graph.node(id);
    std::vector<InputCut> cuts;
    size_t which = 0;
    bool sink = false;
    for (; which < n.inputs.size() && !sink; ++which) sink = can_sink(graph, id, which, readers, cuts);
    if (!sink) {
      copier.copy_node(id);
      continue;
    }
    --which;
    const Node& concat = graph.node(graph.value(n.inputs[which]).producer);
    const Shape& cshape = graph.value(n.inputs[which]).type.shape;
    const int64_t rank = static_cast<int64_t>(cshape.size());
    const int64_t raw_axis = concat.attrs.get_int("axis", 0);
    const int64_t axis = raw_axis < 0 ? raw_axis + rank : raw_axis;
    const std::string& name = graph.value(n.outputs[0]).name;
    // The concat node was copied already (it precedes n); its pieces are mapped values in the target graph.
    std::vector<ValueId> pieces;
    int64_t offset = 0;
    for (size_t p = 0; p < concat.inputs.size(); ++p) {
      const int64_t extent = graph.value(concat.inputs[p]).type.shape[axis];
      std::vector<ValueId> in;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (i == which) {
          in.push_back(copier.map(concat.inputs[p]));
        } else if (cuts[i].slice) {
          auto s = out.add_node(Op::slice, {copier.map(n.inputs[i])},
                                {{"axis", cuts[i].axis}, {"start", offset}, {"end", offset + extent}},
                                {out.unique_name(name + "/piece" + std::to_string(p) + "/slice")});
          KILN_CHECK(s.ok());
          in.push_back((*s)[0]);
        } else {
          in.push_back(copier.map(n.inputs[i]));
        }
      }
      auto piece = out.add_node(n.op, std::move(in), n.attrs, {out.unique_name(name + "/piece" + std::to_string(p))});
      KILN_CHECK(piece.ok());
      pieces.push_back((*piece)[0]);
      offset += extent;
    }
    auto joined = out.add_node(Op::concat, pieces, {{"axis", axis}}, {name});
    KILN_CHECK(joined.ok());
    copier.set_map(n.outputs[0], (*joined)[0]);
    report.changed = true;
    report.notes.push_back(fmt::format("sank the concat of {} below {}", graph.value(n.inputs[which]).name,
                                       graph.node_label(id)));
    ++report.found[fmt::format("concat sunk below {}", op_name(n.op))];
  }
  Graph result = copier.finish();
  report.nodes_after = static_cast<int>(result.nodes().size());
  return {std::move(result), std::move(report)};
}

}  // namespace

// A sunk concat may meet another op it can sink below: repeat until nothing moves (bounded: each round moves
// every concat one op down, and a chain of row ops is short).
PassResult sink_concats(const Graph& graph) {
  PassResult result = sink_once(graph);
  for (int round = 0; round < 16; ++round) {
    if (!result.report.changed) break;
    PassResult next = sink_once(result.graph);
    if (!next.report.changed) break;
    result.graph = std::move(next.graph);
    result.report.notes.insert(result.report.notes.end(), next.report.notes.begin(), next.report.notes.end());
    for (const auto& [pattern, n] : next.report.found) result.report.found[pattern] += n;
  }
  result.report.nodes_before = static_cast<int>(graph.nodes().size());
  result.report.nodes_after = static_cast<int>(result.graph.nodes().size());
  return result;
}

}  // namespace kiln::passes
