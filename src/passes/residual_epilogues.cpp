#include "passes/residual_epilogues.h"

#include <fmt/format.h>

#include <map>

#include "passes/graph_copier.h"
#include "passes/value_readers.h"

namespace kiln::passes {
namespace {

// One GEMM and the chain folded into it: (+ bias) (⊙ scale) (+ residual), at least one of the last two.
struct Chain {
  NodeId gemm = -1;
  ValueId bias = -1, scale = -1, residual = -1;
  std::vector<NodeId> nodes;  // the adds and the multiply, in order; the last is where the GEMM is emitted
};

// The other operand of a binary `node` that reads `v` once (or -1).
ValueId other_operand(const Node& node, ValueId v) {
  if (node.inputs.size() != 2 || node.inputs[0] == node.inputs[1]) return -1;
  return node.inputs[0] == v ? node.inputs[1] : node.inputs[1] == v ? node.inputs[0] : -1;
}

// The folded linear's attributes: the GEMM's, with the epilogue's inputs named.
Attrs folded_attrs(const Attrs& gemm, const Chain& chain) {
  Attrs attrs = gemm;
  if (chain.scale >= 0) attrs.set("scale", int64_t{1});
  if (chain.residual >= 0) attrs.set("residual", int64_t{1});
  return attrs;
}

}  // namespace

PassResult fold_residual_epilogues(const Graph& graph, const SupportsFn& supports) {
  PassReport report{"residual-epilogues", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  const ValueReaders readers(graph);

  std::map<NodeId, Chain> fold_at;  // keyed by the chain's last node
  std::vector<bool> skip(graph.nodes().size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& gemm = graph.node(id);
    if (gemm.op != Op::linear || gemm.inputs.size() != 2 || gemm.attrs.get_string("activation", "none") != "none") continue;
    const TensorType& y = graph.value(gemm.outputs[0]).type;
    const int64_t n = y.shape.back();
    Chain chain;
    chain.gemm = id;
    ValueId v = gemm.outputs[0];
    auto step = [&](Op op, auto&& accepts) -> ValueId {  // the operand the next node adds, or -1
      const NodeId next = readers.only_reader(v);
      if (next < 0 || graph.node(next).op != op) return -1;
      const ValueId operand = other_operand(graph.node(next), v);
      if (operand < 0 || !accepts(graph.value(operand).type)) return -1;
      chain.nodes.push_back(next);
      v = graph.node(next).outputs[0];
      return operand;
    };
    auto per_feature = [&](const TensorType& t) {
      return t.dtype == y.dtype && !t.shape.empty() && t.shape.back() == n && shape_numel(t.shape) == n;
    };
    chain.bias = step(Op::add, [&](const TensorType& t) { return t.dtype == y.dtype && t.shape == Shape{n}; });
    chain.scale = step(Op::mul, per_feature);
    chain.residual = step(Op::add, [&](const TensorType& t) { return t == y; });
    if (chain.scale < 0 && chain.residual < 0) continue;
    if (graph.value(v).type != y) continue;  // a broadcast widened the output: not the GEMM's shape
    if (supports) {
      // The folded GEMM's input types and attributes, as written below: the target must run that form.
      std::vector<TensorType> in = {graph.value(gemm.inputs[0]).type, graph.value(gemm.inputs[1]).type};
      if (chain.bias >= 0) in.push_back(TensorType{y.dtype, Shape{n}});
      if (chain.scale >= 0) in.push_back(TensorType{DType::f32, Shape{n}});
      if (chain.residual >= 0) in.push_back(y);
      const Status st = supports(Op::linear, in, folded_attrs(gemm.attrs, chain));
      if (!st.ok()) {
        ++report.found["left: the backend has no such epilogue"];
        report.notes.push_back(graph.node_label(id) + " keeps its update: " + st.error().message);
        continue;
      }
    }
    // Two chains meet where one's residual is the other's scaled product (x = a ⊙ A + b ⊙ B): the first folds.
    bool claimed = false;
    for (NodeId m : chain.nodes) claimed = claimed || skip[m];
    if (claimed) continue;
    for (NodeId m : chain.nodes) skip[m] = true;
    skip[id] = true;
    fold_at[chain.nodes.back()] = chain;
  }

  GraphCopier copier(graph);
  Graph& out = copier.target();
  auto add = [&](Op op, std::vector<ValueId> inputs, Attrs attrs, const std::string& name) {
    auto r = out.add_node(op, std::move(inputs), std::move(attrs), {name});
    KILN_CHECK(r.ok());
    return (*r)[0];
  };
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    auto it = fold_at.find(id);
    if (it == fold_at.end()) {
      if (!skip[id]) copier.copy_node(id);
      continue;
    }
    const Chain& c = it->second;
    const Node& gemm = graph.node(c.gemm);
    const ValueId last = graph.node(id).outputs[0];
    const std::string& name = graph.value(last).name;
    const int64_t n = graph.value(gemm.outputs[0]).type.shape.back();
    std::vector<ValueId> inputs = {copier.map(gemm.inputs[0]), copier.map(gemm.inputs[1])};
    ValueId gate = -1;
    if (c.scale >= 0) {
      gate = copier.map(c.scale);
      if (out.value(gate).type.shape != Shape{n}) {
        Attrs shape;
        shape.set("shape", std::vector<int64_t>{n});
        gate = add(Op::reshape, {gate}, std::move(shape), name + "/gate");
      }
    }
    if (c.bias >= 0) {
      // b' = gate ⊙ b: the library adds the bias after scaling the product.
      inputs.push_back(gate >= 0 ? add(Op::mul, {gate, copier.map(c.bias)}, {}, name + "/gated_bias") : copier.map(c.bias));
    }
    if (gate >= 0) {
      Attrs to;
      to.set("to", std::string("f32"));
      inputs.push_back(add(Op::cast, {gate}, std::move(to), name + "/scale"));
    }
    if (c.residual >= 0) inputs.push_back(copier.map(c.residual));
    copier.set_map(last, add(Op::linear, std::move(inputs), folded_attrs(gemm.attrs, c), name));
    report.changed = true;
    const std::string form = fmt::format("linear{}{}{}", c.bias >= 0 ? " + bias" : "", c.scale >= 0 ? " ⊙ gate" : "",
                                         c.residual >= 0 ? " + residual" : "");
    ++report.found[form + " epilogue"];
    report.notes.push_back(fmt::format("{} takes its {} as an epilogue", graph.node_label(c.gemm),
                                       c.scale >= 0 && c.residual >= 0 ? "gated residual update"
                                       : c.residual >= 0               ? "residual add"
                                                                       : "gate"));
  }
  Graph result = copier.finish();
  report.nodes_after = static_cast<int>(result.nodes().size());
  return {std::move(result), std::move(report)};
}

}  // namespace kiln::passes
