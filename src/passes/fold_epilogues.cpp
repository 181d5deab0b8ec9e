#include "passes/fold_epilogues.h"

#include <fmt/format.h>

#include <map>

#include "passes/graph_copier.h"
#include "passes/value_readers.h"

namespace kiln::passes {
namespace {

struct Fold {
  NodeId gemm = -1;
  NodeId add = -1;
  NodeId gelu = -1;  // -1: bias only
  ValueId bias = -1;
  Attrs attrs;       // the folded GEMM's: the GEMM's own, with activation="gelu_tanh" when gelu >= 0
};

}  // namespace

PassResult fold_gemm_epilogues(const Graph& graph, const SupportsFn& supports) {
  PassReport report{"fold-epilogues", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  const ValueReaders readers(graph);
  // Members of each group, to see whether a bias add is alone in its group.
  // Views in the group do no arithmetic; they stay behind as index maps.
  std::map<int32_t, int> group_size;
  for (const Node& n : graph.nodes()) {
    if (n.group >= 0 && !op_has_trait(n.op, kTraitView)) ++group_size[n.group];
  }

  std::map<NodeId, Fold> fold_at;   // keyed by the node where the folded GEMM is emitted
  std::vector<bool> skip(graph.nodes().size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& gemm = graph.node(id);
    const bool has_bias_slot = (gemm.op == Op::linear && gemm.inputs.size() == 2) ||
                               (gemm.op == Op::scaled_linear && gemm.inputs.size() == 4);
    if (!has_bias_slot || gemm.attrs.get_string("activation", "none") != "none") continue;
    const ValueId y = gemm.outputs[0];
    const NodeId add_id = readers.only_reader(y);
    if (add_id < 0 || graph.node(add_id).op != Op::add) continue;
    const Node& add = graph.node(add_id);
    const ValueId bias = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
    const int64_t n_out = graph.value(y).type.shape.back();
    if (add.inputs[0] == add.inputs[1] || graph.value(bias).type.shape != Shape{n_out} ||
        graph.value(bias).type.dtype != graph.value(y).type.dtype) {
      continue;
    }
    Fold fold{id, add_id, -1, bias, {}};
    int absorbed = 1;
    const NodeId next = readers.only_reader(add.outputs[0]);
    if (next >= 0 && graph.node(next).op == Op::gelu && graph.node(next).attrs.get_string("approximate", "none") == "tanh" &&
        (add.group < 0 || graph.node(next).group == add.group)) {
      fold.gelu = next;
      ++absorbed;
    }
    // A fold pays when it takes work off a kernel: a GELU (a transcendental per element, which leaves a
    // fused group instruction-bound: the FP8 MLP's GELU + amax and GELU + quantize groups, H100 session 28, at
    // 49-53% of a copy) wherever it is, or an add that fusion left alone (its kernel goes). A bias add inside
    // a larger group costs that group one add per element: it stays.
    if (fold.gelu < 0 && add.group >= 0 && group_size[add.group] > absorbed) continue;
    fold.attrs = gemm.attrs;
    if (fold.gelu >= 0) fold.attrs.set("activation", std::string("gelu_tanh"));
    if (supports) {
      std::vector<TensorType> types;
      for (ValueId v : gemm.inputs) types.push_back(graph.value(v).type);
      types.push_back(graph.value(bias).type);
      if (Status st = supports(gemm.op, types, fold.attrs); !st.ok()) {
        ++report.found["not offered by the backend"];
        report.notes.push_back(fmt::format("kept: {}: {}", graph.node_label(id), st.error().message));
        continue;
      }
    }
    skip[id] = skip[add_id] = true;
    if (fold.gelu >= 0) skip[fold.gelu] = true;
    fold_at[fold.gelu >= 0 ? fold.gelu : add_id] = fold;
  }

  GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    auto it = fold_at.find(id);
    if (it != fold_at.end()) {
      const Fold& f = it->second;
      const Node& gemm = graph.node(f.gemm);
      std::vector<ValueId> inputs;
      for (ValueId v : gemm.inputs) inputs.push_back(copier.map(v));
      inputs.push_back(copier.map(f.bias));
      const ValueId last = graph.node(id).outputs[0];
      auto out = copier.target().add_node(gemm.op, std::move(inputs), f.attrs, {graph.value(last).name});
      KILN_CHECK(out.ok());
      copier.set_map(last, (*out)[0]);
      report.changed = true;
      ++report.found[fmt::format("{} + bias{} epilogue", op_name(gemm.op), f.gelu >= 0 ? " + GELU" : "")];
      report.notes.push_back(fmt::format("{} takes its bias{} as an epilogue", graph.node_label(f.gemm),
                                         f.gelu >= 0 ? " and GELU" : ""));
      continue;
    }
    if (!skip[id]) copier.copy_node(id);
  }
  Graph result = copier.finish();  // the copier keeps every other node's group
  report.nodes_after = static_cast<int>(result.nodes().size());
  return {std::move(result), std::move(report)};
}

}  // namespace kiln::passes
