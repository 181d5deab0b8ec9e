#include "harness/task.h"

#include <algorithm>

#include "ref/executor.h"

namespace kiln::harness {

Result<KernelTask> make_op_task(Op op, std::vector<TensorType> inputs, Attrs attrs, bool exact) {
  Graph graph;
  graph.name = std::string(op_name(op));
  std::vector<ValueId> ids;
  std::string signature;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(ValueId id, graph.add_input("in" + std::to_string(i), inputs[i], Binding::per_call));
    ids.push_back(id);
    signature += (i ? ", " : "") + type_to_string(inputs[i]);
  }
  KILN_ASSIGN_OR_RETURN(std::vector<ValueId> outs, graph.add_node(op, ids, std::move(attrs)));
  for (size_t i = 0; i < outs.size(); ++i) KILN_TRY(graph.add_output("out" + std::to_string(i), outs[i]));
  return KernelTask{std::string(op_name(op)) + " " + signature, std::move(graph), exact};
}

Result<KernelTask> make_graph_task(Graph graph, bool exact) {
  KILN_TRY(verify_graph(graph));
  if (graph.outputs().empty()) return make_error(ErrorCode::invalid_argument, "kernel task: graph has no outputs");
  std::string name = graph.name;
  return KernelTask{std::move(name), std::move(graph), exact};
}

std::vector<TensorType> task_input_types(const KernelTask& task) {
  std::vector<TensorType> types;
  for (const GraphInput& in : task.graph.inputs()) types.push_back(task.graph.value(in.value).type);
  return types;
}

std::vector<TensorType> task_output_types(const KernelTask& task) {
  std::vector<TensorType> types;
  for (const GraphOutput& out : task.graph.outputs()) types.push_back(task.graph.value(out.value).type);
  return types;
}

double task_min_bytes(const KernelTask& task) {
  double bytes = 0;
  for (const TensorType& t : task_input_types(task)) bytes += static_cast<double>(type_bytes(t));
  for (const TensorType& t : task_output_types(task)) bytes += static_cast<double>(type_bytes(t));
  return bytes;
}

int64_t task_reduction_length(const KernelTask& task) {
  const Graph& g = task.graph;
  int64_t longest = 1;
  for (const Node& node : g.nodes()) {
    const uint32_t traits = op_def(node.op).traits;
    if (node.inputs.empty()) continue;
    const Shape& first = g.value(node.inputs[0]).type.shape;
    int64_t k = 1;
    if (traits & kTraitAttention) {
      const Shape& keys = g.value(node.inputs.at(1)).type.shape;  // [batch, heads, seq, head_dim]
      if (keys.size() >= 2) k = std::max(keys[keys.size() - 1], keys[keys.size() - 2]);
    } else if (traits & kTraitReduction) {
      const int64_t out = shape_numel(g.value(node.outputs[0]).type.shape);
      k = out > 0 ? shape_numel(first) / out : 1;
    } else if ((traits & (kTraitRowwise | kTraitMatmul)) && !first.empty()) {
      k = first.back();
    }
    longest = std::max(longest, k);
  }
  return longest;
}

std::vector<DType> task_output_precisions(const KernelTask& task) {
  const Graph& g = task.graph;
  std::vector<DType> out;
  for (const GraphOutput& o : g.outputs()) {
    DType precision = g.value(o.value).type.dtype;
    ValueId v = o.value;
    // Down a chain of widening casts to the value they started from, unless that is a graph input (exact).
    while (!g.is_graph_input(v)) {
      const Node& n = g.node(g.value(v).producer);
      const DType from = g.value(n.inputs[0]).type.dtype, to = g.value(v).type.dtype;
      if (n.op != Op::cast || !dtype_is_float(from) || !dtype_is_float(to) || dtype_size(from) >= dtype_size(to)) break;
      v = n.inputs[0];
      if (!g.is_graph_input(v)) precision = from;
    }
    out.push_back(precision);
  }
  return out;
}

Result<std::vector<Tensor>> run_task_reference(const KernelTask& task, const std::vector<Tensor>& inputs) {
  const Graph& g = task.graph;
  if (inputs.size() != g.inputs().size()) {
    return make_error(ErrorCode::invalid_argument,
                      "kernel task " + task.name + ": expected " + std::to_string(g.inputs().size()) + " inputs");
  }
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < inputs.size(); ++i) named.emplace(g.value(g.inputs()[i].value).name, inputs[i]);
  KILN_ASSIGN_OR_RETURN(auto results, ref::run_graph(g, named));
  std::vector<Tensor> outputs;
  for (const GraphOutput& out : g.outputs()) outputs.push_back(std::move(results.at(out.name)));
  return outputs;
}

}  // namespace kiln::harness
