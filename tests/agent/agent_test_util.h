// Shared by the profile, agent and report tests: a block of cheap memory-bound row ops (layernorm, products,
// residual) feeding a small GEMM with bias, which fusion clearly speeds up on the CPU; the CPU backend, and planted rewrites that regress a Plan.
#pragma once

#include <fmt/format.h>

#include <memory>

#include "agent/opportunities.h"
#include "backend/cpu/cpu_backend.h"
#include "ir/text.h"
#include "models/weights.h"
#include "passes/graph_copier.h"

namespace kiln::testing {

// One thread: on a machine shared with other work, a parallel launch waits for its slowest thread, and the
// A/B gate then sees that noise rather than the plans.
inline backend::Backend& agent_cpu_backend() {
  static std::unique_ptr<backend::Backend> b = [] {
    backend::CpuBackendOptions options;
    options.threads = 1;
    return backend::make_cpu_backend(options);
  }();
  return *b;
}

// `rows` tokens: the same structure at every row count (a near plan's test changes only this).
inline Graph mlp_block_graph(int rows = 512) {
  auto g = parse_graph_text(fmt::format(R"(graph mlp_block {{
    input %x: f32[{0},1024] per_call
    input %w: f32[64,1024] weight
    input %b: f32[64] weight
    %n: f32[{0},1024] = layernorm(%x) {{eps=1e-06}}
    %a: f32[{0},1024] = mul(%n, %n)
    %m: f32[{0},1024] = mul(%a, %x)
    %r: f32[{0},1024] = add(%x, %m)
    %h: f32[{0},64] = linear(%r, %w, %b)
    output out = %h
    output residual = %r
  }})", rows));
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

// Negates every graph output: applied twice, the graph computes what it did; once, its numerics are wrong.
inline Result<Graph> negate_outputs(const Graph& graph) {
  passes::GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) copier.copy_node(id);
  for (const GraphOutput& o : graph.outputs()) {
    KILN_ASSIGN_OR_RETURN(auto negated, copier.target().add_node(Op::neg, {copier.map(o.value)}, {}));
    copier.set_map(o.value, negated[0]);
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

// Drops every node no graph output depends on (the dead GEMMs repeat_gemms adds).
inline Result<Graph> drop_dead_nodes(const Graph& graph) {
  std::vector<bool> live_value(graph.values().size(), false);
  for (const GraphOutput& o : graph.outputs()) live_value[static_cast<size_t>(o.value)] = true;
  std::vector<bool> live_node(graph.nodes().size(), false);
  for (NodeId id = static_cast<NodeId>(graph.nodes().size()) - 1; id >= 0; --id) {
    const Node& n = graph.node(id);
    bool live = false;
    for (ValueId v : n.outputs) live = live || live_value[static_cast<size_t>(v)];
    live_node[static_cast<size_t>(id)] = live;
    if (!live) continue;
    for (ValueId v : n.inputs) live_value[static_cast<size_t>(v)] = true;
  }
  passes::GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    if (live_node[static_cast<size_t>(id)]) copier.copy_node(id);
  }
  return copier.finish();
}

// A baseline made slow on purpose (every GEMM repeated 6 times, dead), and the opportunity that undoes it:
// a win far beyond the noise of a shared machine, for tests that need something kept.
inline agent::PlanConfig slowed_baseline() {
  agent::PlanConfig c = agent::baseline_config();
  c.rewrites.push_back({"repeat-gemms", [](const Graph& g) { return repeat_gemms(g, 6); }});
  return c;
}
inline agent::Opportunity drop_planted_rewrites() {
  agent::Opportunity o;
  o.name = "drop-repeats";
  o.level = agent::OpportunityLevel::model;
  o.description = "removes the planted repeated GEMMs";
  o.time_share = 0.5;
  o.predicted_gain = 0.5;
  o.apply = [](const agent::PlanConfig& current) -> Result<agent::PlanConfig> {
    agent::PlanConfig c = current;
    c.rewrites.clear();
    return c;
  };
  return o;
}

}  // namespace kiln::testing
