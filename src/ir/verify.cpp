// verify_graph: the IR invariants, checked between passes and after every parse.
#include <set>

#include "ir/graph.h"

namespace kiln {

Status verify_graph(const Graph& graph) {
  const auto& values = graph.values();
  std::set<std::string> names;
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    if (!is_valid_value_name(v.name)) return make_error(ErrorCode::verify_error, "invalid value name '" + v.name + "'");
    if (!names.insert(v.name).second) {
      return make_error(ErrorCode::verify_error, "value %" + v.name + " is defined twice");
    }
    for (int64_t d : v.type.shape) {
      if (d < 0) return make_error(ErrorCode::verify_error, "value %" + v.name + " has a negative dimension");
    }
  }
  // Graph inputs: producer -1, listed once.
  std::vector<bool> defined(values.size(), false);
  for (const GraphInput& in : graph.inputs()) {
    if (in.value < 0 || static_cast<size_t>(in.value) >= values.size()) {
      return make_error(ErrorCode::verify_error, "a graph input refers to an undefined value");
    }
    if (values[in.value].producer != -1 || defined[in.value]) {
      return make_error(ErrorCode::verify_error, "graph input %" + values[in.value].name + " is also defined elsewhere");
    }
    defined[in.value] = true;
  }
  // Nodes in topological order; each output defined exactly once, by this node.
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& n = graph.node(id);
    std::vector<TensorType> in_types;
    for (ValueId v : n.inputs) {
      if (v < 0 || static_cast<size_t>(v) >= values.size() || !defined[v]) {
        return make_error(ErrorCode::verify_error, graph.node_label(id) + ": uses a value before it is defined");
      }
      in_types.push_back(values[v].type);
    }
    auto inferred = infer_node(n.op, in_types, n.attrs);
    if (!inferred.ok()) return with_context(inferred.error(), graph.node_label(id));
    if (inferred->size() != n.outputs.size()) {
      return make_error(ErrorCode::verify_error, graph.node_label(id) + ": has " + std::to_string(n.outputs.size()) +
                                                     " outputs, the op produces " + std::to_string(inferred->size()));
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const ValueId v = n.outputs[i];
      if (v < 0 || static_cast<size_t>(v) >= values.size() || defined[v] || values[v].producer != id) {
        return make_error(ErrorCode::verify_error, graph.node_label(id) + ": output " + std::to_string(i) +
                                                       " is not a value it alone defines");
      }
      if (!(values[v].type == (*inferred)[i])) {
        return make_error(ErrorCode::verify_error, graph.node_label(id) + ": output %" + values[v].name + " is " +
                                                       type_to_string(values[v].type) + " but the op gives " +
                                                       type_to_string((*inferred)[i]));
      }
      defined[v] = true;
    }
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!defined[i]) return make_error(ErrorCode::verify_error, "value %" + values[i].name + " is never defined");
  }
  std::set<std::string> output_names;
  for (const GraphOutput& o : graph.outputs()) {
    if (!is_valid_value_name(o.name)) return make_error(ErrorCode::verify_error, "invalid output name '" + o.name + "'");
    if (!output_names.insert(o.name).second) {
      return make_error(ErrorCode::verify_error, "output '" + o.name + "' is declared twice");
    }
    if (o.value < 0 || static_cast<size_t>(o.value) >= values.size()) {
      return make_error(ErrorCode::verify_error, "output '" + o.name + "' refers to an undefined value");
    }
  }
  return ok_status();
}

}  // namespace kiln
