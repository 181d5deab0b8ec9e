#include "passes/attention_layouts.h"

#include <fmt/format.h>

#include <set>

#include "passes/graph_copier.h"
#include "util/format.h"

namespace kiln::passes {
namespace {

constexpr const char* kLayoutAttr[4] = {"q_layout", "k_layout", "v_layout", "out_layout"};

// The transpose the two layouts differ by: heads and tokens swapped.
bool swaps_heads_and_tokens(const Graph& g, NodeId id) {
  if (id < 0) return false;
  const Node& n = g.node(id);
  return n.op == Op::transpose && n.attrs.get_ints("perm") == std::vector<int64_t>{0, 2, 1, 3};
}

// A concat whose every input is such a transpose: the transpose of the concat of their inputs, along the
// permuted axis (the joint attention's concat along tokens, axis 2 of [b, h, s, d], is axis 1 of [b, s, h, d]).
bool concat_of_swaps(const Graph& g, NodeId id) {
  if (id < 0) return false;
  const Node& n = g.node(id);
  if (n.op != Op::concat || n.inputs.empty()) return false;
  for (ValueId v : n.inputs) {
    if (!swaps_heads_and_tokens(g, g.value(v).producer)) return false;
  }
  return true;
}

int64_t swapped_axis(int64_t axis) {
  constexpr int64_t kSwap[4] = {0, 2, 1, 3};
  return kSwap[axis < 0 ? axis + 4 : axis];
}

std::string flipped(const Attrs& attrs, const char* name) {
  return attrs.get_string(name, "bhsd") == "bshd" ? "bhsd" : "bshd";
}

}  // namespace

PassResult absorb_attention_layouts(const Graph& graph) {
  PassReport report{"attention-layouts", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  std::vector<std::vector<NodeId>> readers(graph.values().size());
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    for (ValueId v : graph.node(id).inputs) readers[v].push_back(id);
  }
  std::set<ValueId> graph_outputs;
  for (const GraphOutput& o : graph.outputs()) graph_outputs.insert(o.value);

  GraphCopier copier(graph);
  std::set<NodeId> absorbed;  // output transposes whose readers now read the attention directly
  double bytes_not_copied = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    if (absorbed.count(id)) continue;
    if (node.op != Op::attention) {
      copier.copy_node(id);
      continue;
    }
    Attrs attrs = node.attrs;
    std::vector<ValueId> inputs = copier.mapped_inputs(id);
    for (int i = 0; i < 3; ++i) {
      const ValueId operand = node.inputs[static_cast<size_t>(i)];
      const NodeId p = graph.value(operand).producer;
      if (swaps_heads_and_tokens(graph, p)) {
        inputs[static_cast<size_t>(i)] = copier.map(graph.node(p).inputs[0]);
        ++report.found["transpose into " + std::string(kLayoutAttr[i])];
      } else if (concat_of_swaps(graph, p)) {
        std::vector<ValueId> pieces;
        for (ValueId t : graph.node(p).inputs) pieces.push_back(copier.map(graph.node(graph.value(t).producer).inputs[0]));
        const std::string name = copier.target().unique_name(graph.value(operand).name + ".token_major");
        const int64_t axis = swapped_axis(graph.node(p).attrs.get_int("axis", 0));
        auto joined = copier.target().add_node(Op::concat, std::move(pieces), {{"axis", axis}}, {name});
        KILN_CHECK(joined.ok());
        inputs[static_cast<size_t>(i)] = (*joined)[0];
        ++report.found["concat of transposes into " + std::string(kLayoutAttr[i])];
      } else {
        continue;
      }
      attrs.set(kLayoutAttr[i], flipped(node.attrs, kLayoutAttr[i]));
      // A transpose is a copy saved; a concat still copies, contiguously now.
      if (swaps_heads_and_tokens(graph, p)) bytes_not_copied += 2.0 * static_cast<double>(type_bytes(graph.value(operand).type));
      report.notes.push_back(fmt::format("{} reads %{} through {}=\"{}\"", graph.node_label(id),
                                         graph.value(operand).name, kLayoutAttr[i], attrs.get_string(kLayoutAttr[i], "")));
    }
    const ValueId out = node.outputs[0];
    const std::vector<NodeId>& out_readers = readers[out];
    bool all_swaps = !out_readers.empty() && !graph_outputs.count(out);
    for (NodeId r : out_readers) all_swaps = all_swaps && swaps_heads_and_tokens(graph, r);
    if (all_swaps) {
      attrs.set(kLayoutAttr[3], flipped(node.attrs, kLayoutAttr[3]));
      ++report.found["transpose into out_layout"];
      bytes_not_copied += 2.0 * static_cast<double>(type_bytes(graph.value(out).type));
      report.notes.push_back(fmt::format("{} writes %{} with out_layout=\"{}\" for its {} transposing reader(s)",
                                         graph.node_label(id), graph.value(out).name,
                                         attrs.get_string(kLayoutAttr[3], ""), out_readers.size()));
    }
    if (attrs == node.attrs) {
      copier.copy_node(id);
      continue;
    }
    auto made = copier.target().add_node(Op::attention, std::move(inputs), std::move(attrs), {graph.value(out).name});
    KILN_CHECK(made.ok());
    copier.set_map(out, (*made)[0]);
    if (all_swaps) {
      for (NodeId r : out_readers) {
        absorbed.insert(r);
        copier.set_map(graph.node(r).outputs[0], (*made)[0]);
      }
    }
    report.changed = true;
  }
  if (report.changed) {
    report.notes.insert(report.notes.begin(),
                        fmt::format("transposes absorbed into attention layouts: {} of transposing copies per call "
                                    "gone (an operand that is a strided window is still gathered once)",
                                    format_bytes(bytes_not_copied)));
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
