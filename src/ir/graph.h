// ir::Graph: an SSA dataflow graph of typed, shaped values. Nodes are kept in topological order; every value is
// either a graph input (with a binding time) or the output of exactly one node. Outputs are named.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/ops.h"

namespace kiln {

using ValueId = int32_t;
using NodeId = int32_t;

// How often a graph input changes: weights once per load, per-step inputs (timestep, guidance) once per
// denoising step, per-call inputs (activations) on every call.
enum class Binding : uint8_t { weight, per_step, per_call };
const char* binding_name(Binding binding);  // "weight", "per_step", "per_call"
std::optional<Binding> parse_binding(std::string_view name);

struct Value {
  std::string name;  // unique in the graph; [A-Za-z0-9_.:/-]+
  TensorType type;
  NodeId producer = -1;  // -1 for a graph input
};

struct Node {
  Op op;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  Attrs attrs;
  // Fused group this node belongs to (passes/fuse_rows.h): nodes sharing a group become one kernel. -1: none.
  int32_t group = -1;
};

struct GraphInput {
  ValueId value;
  Binding binding;
};

struct GraphOutput {
  std::string name;
  ValueId value;
};

class Graph {
 public:
  std::string name = "graph";

  // Adds a graph input. Fails when the name is taken or invalid.
  Result<ValueId> add_input(const std::string& value_name, TensorType type, Binding binding);
  // Adds a node after all existing ones; its output types are inferred. `output_names` may be empty (names
  // are generated) or give one name per output. Errors name the node and its op.
  Result<std::vector<ValueId>> add_node(Op op, std::vector<ValueId> inputs, Attrs attrs,
                                        std::vector<std::string> output_names = {});
  // Like add_node, but the output types are given (as a parser reads them) and must equal the inferred ones.
  Result<std::vector<ValueId>> add_node_typed(Op op, std::vector<ValueId> inputs, Attrs attrs,
                                              std::vector<std::string> output_names,
                                              std::vector<TensorType> output_types);
  Status add_output(const std::string& output_name, ValueId value);
  // Annotations that do not change what the graph computes.
  void set_node_group(NodeId id, int32_t group) { nodes_.at(static_cast<size_t>(id)).group = group; }

  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<GraphInput>& inputs() const { return inputs_; }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  std::optional<ValueId> find_value(const std::string& value_name) const;
  bool is_graph_input(ValueId id) const { return value(id).producer < 0; }
  Binding binding_of_input(ValueId id) const;  // KILN_CHECKs that `id` is a graph input

  // "node %q (linear)": how errors refer to a node.
  std::string node_label(NodeId id) const;
  // A fresh value name with the given stem ("stem", "stem.1", ...).
  std::string unique_name(const std::string& stem) const;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<GraphInput> inputs_;
  std::vector<GraphOutput> outputs_;
  std::unordered_map<std::string, ValueId> by_name_;
};

bool is_valid_value_name(std::string_view name);

// Checks every IR invariant: names unique and valid, topological order, each value defined once, attributes
// and types consistent with the registry, outputs named once. The first violation is returned, naming the
// node or value at fault.
Status verify_graph(const Graph& graph);

// Totals over all nodes, for `kiln show` and the roofline.
struct GraphCost {
  double flops = 0;
  double bytes = 0;
};
OpCost node_cost(const Graph& graph, NodeId id);
// How many leading axes of node `id` are independent (OpDef::independent_axes); -1 for an op never fused.
int node_independent_axes(const Graph& graph, NodeId id);
GraphCost graph_cost(const Graph& graph);
// Elements in all weight inputs.
int64_t parameter_count(const Graph& graph);

}  // namespace kiln
