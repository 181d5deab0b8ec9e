#include "ref/executor.h"

namespace kiln::ref {
namespace {

Result<std::vector<Tensor>> run_node(Op op, std::span<const Tensor* const> inputs, const Attrs& attrs) {
  std::vector<TensorType> types;
  for (const Tensor* t : inputs) types.push_back(TensorType{t->dtype(), t->shape()});
  KILN_ASSIGN_OR_RETURN(std::vector<TensorType> out_types, infer_node(op, types, attrs));
  std::vector<Tensor> outputs;
  for (TensorType& t : out_types) outputs.emplace_back(t.dtype, std::move(t.shape));
  KILN_TRY(op_def(op).reference(RefCall{inputs, attrs, outputs}));
  return outputs;
}

}  // namespace

Result<std::vector<Tensor>> run_op(Op op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  std::vector<const Tensor*> pointers;
  for (const Tensor& t : inputs) pointers.push_back(&t);
  return run_node(op, pointers, attrs);
}

Result<std::map<std::string, Tensor>> run_graph(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                                const RunOptions& options) {
  const size_t value_count = graph.values().size();
  std::vector<Tensor> slots(value_count);
  std::vector<const Tensor*> location(value_count, nullptr);

  for (const GraphInput& in : graph.inputs()) {
    const Value& v = graph.value(in.value);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) {
      return make_error(ErrorCode::invalid_argument, "missing graph input %" + v.name + " (" +
                                                         type_to_string(v.type) + ", " + binding_name(in.binding) + ")");
    }
    if (it->second.dtype() != v.type.dtype || it->second.shape() != v.type.shape) {
      return make_error(ErrorCode::shape_error, "graph input %" + v.name + " expects " + type_to_string(v.type) +
                                                    ", got " + std::string(dtype_name(it->second.dtype())) +
                                                    shape_to_string(it->second.shape()));
    }
    location[in.value] = &it->second;  // read in place, never copied
  }
  for (const auto& [name, tensor] : inputs) {
    auto id = graph.find_value(name);
    if (!id || !graph.is_graph_input(*id)) {
      return make_error(ErrorCode::invalid_argument, "'" + name + "' is not an input of graph " + graph.name);
    }
  }

  // Free each intermediate after its last use; graph outputs are kept.
  std::vector<NodeId> last_use(value_count, -1);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    for (ValueId v : graph.node(id).inputs) last_use[v] = id;
  }
  std::vector<bool> is_output(value_count, false);
  for (const GraphOutput& o : graph.outputs()) is_output[o.value] = true;

  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    std::vector<const Tensor*> args;
    for (ValueId v : node.inputs) {
      KILN_CHECK(location[v] != nullptr);
      args.push_back(location[v]);
    }
    std::vector<Tensor> replaced;
    if (options.replace_inputs && options.replace_inputs(id, args, replaced)) {
      KILN_CHECK(replaced.size() == args.size());
      for (size_t i = 0; i < args.size(); ++i) {
        KILN_CHECK(replaced[i].dtype() == args[i]->dtype() && replaced[i].shape() == args[i]->shape());
        args[i] = &replaced[i];
      }
    }
    auto outputs = run_node(node.op, args, node.attrs);
    if (!outputs.ok()) return with_context(outputs.error(), graph.node_label(id));
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueId v = node.outputs[i];
      slots[v] = std::move((*outputs)[i]);
      location[v] = &slots[v];
    }
    for (ValueId v : node.inputs) {
      if (last_use[v] == id && !is_output[v] && !graph.is_graph_input(v)) {
        slots[v] = Tensor();
        location[v] = nullptr;
      }
    }
    if (options.on_node) options.on_node(id);
  }

  std::map<std::string, Tensor> results;
  for (const GraphOutput& o : graph.outputs()) {
    KILN_CHECK(location[o.value] != nullptr);
    results[o.name] = *location[o.value];
  }
  return results;
}

}  // namespace kiln::ref
