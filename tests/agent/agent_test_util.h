// Shared by the profile, agent and report tests: a small MLP block (layernorm, GEMM + bias, GELU, GEMM,
// residual) that fusion speeds up on the CPU, the CPU backend, and planted rewrites that regress a Plan.
#pragma once

#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "ir/text.h"
#include "models/weights.h"
#include "passes/graph_copier.h"

namespace kiln::testing {

inline backend::Backend& agent_cpu_backend() {
  static std::unique_ptr<backend::Backend> b = backend::make_cpu_backend();
  return *b;
}

inline Graph mlp_block_graph() {
  auto g = parse_graph_text(R"(graph mlp_block {
    input %x: f32[96,128] per_call
    input %w1: f32[256,128] weight
    input %b1: f32[256] weight
    input %w2: f32[128,256] weight
    input %b2: f32[128] weight
    %n: f32[96,128] = layernorm(%x) {eps=1e-06}
    %h: f32[96,256] = linear(%n, %w1, %b1)
    %g: f32[96,256] = gelu(%h) {approximate="tanh"}
    %o: f32[96,128] = linear(%g, %w2, %b2)
    %s: f32[96,128] = sigmoid(%o)
    %m: f32[96,128] = mul(%o, %s)
    %r: f32[96,128] = add(%x, %m)
    output out = %r
  })");
  KILN_CHECK(g.ok());
  return std::move(g).value();
}

inline std::map<std::string, Tensor> mlp_block_inputs(const Graph& g) { return models::random_inputs(g, 7); }

// Squares every graph output: a rewrite whose numerics are wrong.
inline Result<Graph> square_outputs(const Graph& graph) {
  passes::GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) copier.copy_node(id);
  for (const GraphOutput& o : graph.outputs()) {
    const ValueId v = copier.map(o.value);
    KILN_ASSIGN_OR_RETURN(auto squared, copier.target().add_node(Op::mul, {v, v}, {}));
    copier.set_map(o.value, squared[0]);
  }
  return copier.finish();
}

// Adds `copies` dead repetitions of every GEMM: a rewrite that computes the same outputs, slower.
inline Result<Graph> repeat_gemms(const Graph& graph, int copies) {
  passes::GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    copier.copy_node(id);
    const Node& n = graph.node(id);
    if (!op_has_trait(n.op, kTraitMatmul)) continue;
    std::vector<ValueId> inputs;
    for (ValueId v : n.inputs) inputs.push_back(copier.map(v));
    for (int c = 0; c < copies; ++c) KILN_TRY(copier.target().add_node(n.op, inputs, n.attrs));
  }
  return copier.finish();
}

}  // namespace kiln::testing
