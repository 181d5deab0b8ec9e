#include "passes/pack_weight_scales.h"

#include <fmt/format.h>

#include <map>

#include "ir/ops/op_util.h"
#include "passes/graph_copier.h"
#include "passes/staging.h"
#include "util/format.h"

namespace kiln::passes {
namespace {

constexpr size_t kWeightScaleInput = 3;  // scaled_linear(xq, xs, wq, ws, [b])

// The pack_scales layout that turns `ws` (row-major checkpoint layout of weight `wq`) into the GEMM's, or ""
// when the two layouts are the same (per tensor; 128x128 block grids whose rows are already aligned).
std::string packing_for(const Shape& ws, const Shape& wq) {
  if (ws == Shape{wq[0], 1}) return "vector";
  if (ws == ops::weight_block_scale_shape(wq[0], wq[1]) && ws != ops::gemm_weight_block_scale_shape(wq[0], wq[1]))
    return "blocks";
  return "";
}

}  // namespace

PassResult pack_weight_scales(const Graph& graph) {
  PassReport report{"pack-scales", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  const std::vector<Binding> times = classify_binding_times(graph);
  GraphCopier copier(graph);
  std::map<ValueId, ValueId> packed;  // source scale -> its packed value in the target
  double packed_bytes = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    if (node.op != Op::scaled_linear || node.attrs.get_string("ws_layout", "row_major") != "row_major") {
      copier.copy_node(id);
      continue;
    }
    const ValueId ws = node.inputs[kWeightScaleInput];
    const std::string layout =
        packing_for(graph.value(ws).type.shape, graph.value(node.inputs[kWeightScaleInput - 1]).type.shape);
    if (layout.empty()) {
      ++report.found[graph.value(ws).type.shape.empty() ? "per-tensor scale (already the GEMM's layout)"
                                                         : "128x128 block grid (rows already aligned: the GEMM's layout)"];
      copier.copy_node(id);
      continue;
    }
    if (times[ws] != Binding::weight) {
      report.notes.push_back(fmt::format("not packed: {} reads weight scales %{} that are a {} value, not a "
                                         "load-time one (packing them would run on every {})",
                                         graph.node_label(id), graph.value(ws).name, binding_name(times[ws]),
                                         times[ws] == Binding::per_step ? "step" : "call"));
      copier.copy_node(id);
      continue;
    }
    auto it = packed.find(ws);
    if (it == packed.end()) {
      const std::string name = copier.target().unique_name(graph.value(ws).name + ".packed");
      auto out = copier.target().add_node(Op::pack_scales, {copier.map(ws)}, {{"layout", layout}}, {name});
      KILN_CHECK(out.ok());
      it = packed.emplace(ws, (*out)[0]).first;
      packed_bytes += static_cast<double>(type_bytes(copier.target().value((*out)[0]).type));
      ++report.found["pack_scales " + layout];
      report.notes.push_back(fmt::format("packed %{} {} -> %{} {} ({}) for {}", graph.value(ws).name,
                                         type_to_string(graph.value(ws).type), name,
                                         type_to_string(copier.target().value((*out)[0]).type), layout,
                                         graph.node_label(id)));
    }
    std::vector<ValueId> inputs = copier.mapped_inputs(id);
    inputs[kWeightScaleInput] = it->second;
    Attrs attrs = node.attrs;
    attrs.set("ws_layout", std::string("packed"));
    copier.copy_node_with(id, std::move(attrs), std::move(inputs));
    report.changed = true;
  }
  if (!packed.empty()) {
    report.notes.insert(report.notes.begin(),
                        fmt::format("{} weight-scale tensors packed into the GEMM layout at load time ({})",
                                    packed.size(), format_bytes(packed_bytes)));
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
