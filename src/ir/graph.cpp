#include "ir/graph.h"

#include <set>

namespace kiln {

const char* binding_name(Binding binding) {
  switch (binding) {
    case Binding::weight: return "weight";
    case Binding::per_step: return "per_step";
    case Binding::per_call: return "per_call";
  }
  return "?";
}

std::optional<Binding> parse_binding(std::string_view name) {
  for (Binding b : {Binding::weight, Binding::per_step, Binding::per_call}) {
    if (name == binding_name(b)) return b;
  }
  return std::nullopt;
}

bool is_valid_value_name(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == ':' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::optional<ValueId> Graph::find_value(const std::string& value_name) const {
  auto it = by_name_.find(value_name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

Binding Graph::binding_of_input(ValueId id) const {
  for (const GraphInput& in : inputs_) {
    if (in.value == id) return in.binding;
  }
  KILN_CHECK(false);
  return Binding::per_call;
}

std::string Graph::node_label(NodeId id) const {
  const Node& n = node(id);
  const std::string first = n.outputs.empty() ? "#" + std::to_string(id) : "%" + value(n.outputs[0]).name;
  return "node " + first + " (" + std::string(op_name(n.op)) + ")";
}

std::string Graph::unique_name(const std::string& stem) const {
  if (!by_name_.count(stem)) return stem;
  for (int i = 1;; ++i) {
    std::string candidate = stem + "." + std::to_string(i);
    if (!by_name_.count(candidate)) return candidate;
  }
}

Result<ValueId> Graph::add_input(const std::string& value_name, TensorType type, Binding binding) {
  if (!is_valid_value_name(value_name)) {
    return make_error(ErrorCode::invalid_argument, "invalid value name '" + value_name + "'");
  }
  if (by_name_.count(value_name)) {
    return make_error(ErrorCode::invalid_argument, "value name '%" + value_name + "' is defined twice");
  }
  for (int64_t d : type.shape) {
    if (d < 0) {
      return make_error(ErrorCode::shape_error, "input %" + value_name + " has a negative dimension");
    }
  }
  const auto id = static_cast<ValueId>(values_.size());
  values_.push_back(Value{value_name, std::move(type), -1});
  by_name_[value_name] = id;
  inputs_.push_back(GraphInput{id, binding});
  return id;
}

Result<std::vector<ValueId>> Graph::add_node(Op op, std::vector<ValueId> inputs, Attrs attrs,
                                             std::vector<std::string> output_names) {
  return add_node_typed(op, std::move(inputs), std::move(attrs), std::move(output_names), {});
}

Result<std::vector<ValueId>> Graph::add_node_typed(Op op, std::vector<ValueId> inputs, Attrs attrs,
                                                   std::vector<std::string> output_names,
                                                   std::vector<TensorType> output_types) {
  const std::string label_stem =
      output_names.empty() ? std::string(op_name(op)) : output_names[0];
  const std::string label = "node %" + label_stem + " (" + std::string(op_name(op)) + ")";
  std::vector<TensorType> input_types;
  for (ValueId v : inputs) {
    if (v < 0 || static_cast<size_t>(v) >= values_.size()) {
      return make_error(ErrorCode::verify_error, label + ": input refers to an undefined value");
    }
    input_types.push_back(values_[v].type);
  }
  auto inferred = infer_node(op, input_types, attrs);
  if (!inferred.ok()) return with_context(inferred.error(), label);
  std::vector<TensorType> types = std::move(inferred).value();
  if (!output_types.empty()) {
    if (output_types.size() != types.size()) {
      return make_error(ErrorCode::shape_error, label + ": declares " + std::to_string(output_types.size()) +
                                                    " outputs, the op produces " + std::to_string(types.size()));
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (!(output_types[i] == types[i])) {
        return make_error(ErrorCode::shape_error, label + ": output " + std::to_string(i) + " is declared " +
                                                      type_to_string(output_types[i]) + " but the op gives " +
                                                      type_to_string(types[i]));
      }
    }
  }
  if (!output_names.empty() && output_names.size() != types.size()) {
    return make_error(ErrorCode::shape_error, label + ": names " + std::to_string(output_names.size()) +
                                                  " outputs, the op produces " + std::to_string(types.size()));
  }
  std::set<std::string> fresh;
  for (size_t i = 0; i < output_names.size(); ++i) {
    const std::string& n = output_names[i];
    if (!is_valid_value_name(n)) return make_error(ErrorCode::invalid_argument, label + ": invalid value name '" + n + "'");
    if (by_name_.count(n) || !fresh.insert(n).second) {
      return make_error(ErrorCode::invalid_argument, label + ": value name '%" + n + "' is defined twice");
    }
  }
  const auto node_id = static_cast<NodeId>(nodes_.size());
  Node node{op, std::move(inputs), {}, std::move(attrs)};
  for (size_t i = 0; i < types.size(); ++i) {
    std::string n = output_names.empty() ? unique_name(std::string(op_name(op))) : output_names[i];
    const auto id = static_cast<ValueId>(values_.size());
    values_.push_back(Value{n, std::move(types[i]), node_id});
    by_name_[n] = id;
    node.outputs.push_back(id);
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

Status Graph::add_output(const std::string& output_name, ValueId value) {
  if (!is_valid_value_name(output_name)) {
    return make_error(ErrorCode::invalid_argument, "invalid output name '" + output_name + "'");
  }
  for (const GraphOutput& o : outputs_) {
    if (o.name == output_name) {
      return make_error(ErrorCode::invalid_argument, "output '" + output_name + "' is declared twice");
    }
  }
  if (value < 0 || static_cast<size_t>(value) >= values_.size()) {
    return make_error(ErrorCode::verify_error, "output '" + output_name + "' refers to an undefined value");
  }
  outputs_.push_back(GraphOutput{output_name, value});
  return ok_status();
}

namespace {

// A node's input and output types, as its OpDef's functions take them.
struct NodeTypes {
  std::vector<TensorType> in, out;
};

NodeTypes node_types(const Graph& graph, const Node& n) {
  NodeTypes t;
  for (ValueId v : n.inputs) t.in.push_back(graph.value(v).type);
  for (ValueId v : n.outputs) t.out.push_back(graph.value(v).type);
  return t;
}

}  // namespace

OpCost node_cost(const Graph& graph, NodeId id) {
  const Node& n = graph.node(id);
  const NodeTypes t = node_types(graph, n);
  return op_def(n.op).cost(OpCall{t.in, n.attrs}, t.out);
}

int node_independent_axes(const Graph& graph, NodeId id) {
  const Node& n = graph.node(id);
  const OpDef& def = op_def(n.op);
  if (!def.independent_axes) return -1;
  const NodeTypes t = node_types(graph, n);
  return def.independent_axes(OpCall{t.in, n.attrs}, t.out);
}

GraphCost graph_cost(const Graph& graph) {
  GraphCost total;
  for (NodeId i = 0; i < static_cast<NodeId>(graph.nodes().size()); ++i) {
    const OpCost c = node_cost(graph, i);
    total.flops += c.flops;
    total.bytes += c.bytes;
  }
  return total;
}

int64_t parameter_count(const Graph& graph) {
  int64_t n = 0;
  for (const GraphInput& in : graph.inputs()) {
    if (in.binding == Binding::weight) n += shape_numel(graph.value(in.value).type.shape);
  }
  return n;
}

}  // namespace kiln
