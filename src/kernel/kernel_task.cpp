#include "kernel/kernel_task.h"

#include <map>

namespace kiln::kernel {

Result<harness::KernelTask> kernel_task(const Graph& graph, const Kernel& kernel) {
  Graph g;
  g.name = kernel.name;
  std::map<ValueId, ValueId> map;
  for (const KernelParam& p : kernel.inputs) {
    KILN_ASSIGN_OR_RETURN(ValueId id, g.add_input(p.name, p.type, Binding::per_call));
    map[p.value] = id;
  }
  for (NodeId m : kernel.members) {
    const Node& n = graph.node(m);
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) {
      auto it = map.find(v);
      if (it == map.end()) {
        // A constant the kernel folded in: copy its source node.
        const NodeId p = graph.value(v).producer;
        if (p < 0) return make_error(ErrorCode::invalid_argument, "kernel_task: %" + graph.value(v).name + " is not a kernel input");
        KILN_ASSIGN_OR_RETURN(std::vector<ValueId> outs, g.add_node(graph.node(p).op, {}, graph.node(p).attrs,
                                                                    {graph.value(v).name}));
        it = map.emplace(v, outs[0]).first;
      }
      in.push_back(it->second);
    }
    std::vector<std::string> names;
    for (ValueId v : n.outputs) names.push_back(graph.value(v).name);
    KILN_ASSIGN_OR_RETURN(std::vector<ValueId> outs, g.add_node(n.op, in, n.attrs, names));
    for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = outs[i];
  }
  for (const KernelParam& p : kernel.outputs) KILN_TRY(g.add_output(p.name, map.at(p.value)));
  return harness::make_graph_task(std::move(g));
}

}  // namespace kiln::kernel
