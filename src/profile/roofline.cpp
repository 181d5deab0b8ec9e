#include "profile/roofline.h"

#include <algorithm>

namespace kiln::profile {

std::string_view bound_name(Bound bound) { return bound == Bound::memory ? "memory" : "compute"; }

RooflinePoint roofline_point(double flops, double bytes, const backend::DeviceInfo& device) {
  KILN_CHECK(device.bandwidth_bytes_per_second > 0 && device.flops_per_second > 0,
             "device %s has no measured bandwidth or FLOP rate", device.name.c_str());
  RooflinePoint p;
  p.flops = flops;
  p.bytes = bytes;
  p.memory_seconds = bytes / device.bandwidth_bytes_per_second;
  p.compute_seconds = flops / device.flops_per_second;
  p.floor_seconds = std::max(p.memory_seconds, p.compute_seconds);
  p.bound = p.compute_seconds > p.memory_seconds ? Bound::compute : Bound::memory;
  return p;
}

OpCost step_cost(const Graph& graph, const backend::Plan::Step& step) {
  OpCost cost;
  for (NodeId id : step.nodes) {
    const OpCost c = node_cost(graph, id);
    cost.flops += c.flops;
    if (step.kind != backend::Plan::Step::Kind::kernel) cost.bytes += c.bytes;
  }
  if (step.kind == backend::Plan::Step::Kind::kernel) {
    for (ValueId v : step.inputs) cost.bytes += static_cast<double>(type_bytes(graph.value(v).type));
    for (ValueId v : step.outputs) cost.bytes += static_cast<double>(type_bytes(graph.value(v).type));
  }
  return cost;
}

OpClass step_op_class(const Graph& graph, const backend::Plan::Step& step) {
  KILN_CHECK(!step.nodes.empty(), "plan step %s has no nodes", step.label.c_str());
  OpClass best = op_class(graph.node(step.nodes[0]).op);
  for (NodeId id : step.nodes) best = std::min(best, op_class(graph.node(id).op));
  return best;
}

}  // namespace kiln::profile
