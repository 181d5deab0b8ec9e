// Shared by the backend tests: run a graph's plan on the CPU backend and compare every output with the
// reference executor on the same inputs, under the numerics policy (harness/compare.h).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/plan.h"
#include "harness/compare.h"
#include "harness/inputs.h"
#include "harness/sensitivity.h"
#include "harness/task.h"
#include "passes/fuse_rows.h"
#include "ref/executor.h"

namespace kiln::testing {

inline backend::Backend& cpu_backend() {
  static std::unique_ptr<backend::Backend> b = backend::make_cpu_backend();
  return *b;
}

inline std::map<std::string, Tensor> draw_graph_inputs(const Graph& g, harness::Distribution d, uint64_t seed) {
  std::map<std::string, Tensor> inputs;
  uint64_t i = 0;
  for (const GraphInput& in : g.inputs()) {
    inputs[g.value(in.value).name] = harness::draw_input(g.value(in.value).type, d, harness::derive_seed(seed, i++, 7));
  }
  return inputs;
}

// Runs `graph` (already optimized: groups annotated) as a plan on `on` and compares with the reference of
// `oracle` (same inputs and outputs). Returns a failure message, or "" when every output passes.
inline std::string check_plan_on(backend::Backend& on, const Graph& graph, const Graph& oracle, bool exact,
                                 int64_t reduction_length, const backend::PlanOptions& options = {},
                                 int* fallbacks = nullptr) {
  auto plan = backend::Plan::build(on, graph, options);
  if (!plan.ok()) return "plan build failed: " + plan.error().message;
  if (fallbacks) *fallbacks = (*plan)->summary().fallbacks;
  for (harness::Distribution d : {harness::Distribution::normal, harness::Distribution::wide}) {
    const auto inputs = draw_graph_inputs(oracle, d, 1234);
    auto want = ref::run_graph(oracle, inputs);
    if (!want.ok()) return "reference failed: " + want.error().message;
    auto got = (*plan)->run(inputs);
    if (!got.ok()) return "plan run failed: " + got.error().message;
    // Downstream of an FP8 quantize, one ulp upstream can move a value a whole quantization step: the
    // reference's own spread under such nudges is part of the bound (harness/sensitivity.h).
    std::map<std::string, double> sensitivity;
    if (harness::has_discontinuous_steps(oracle)) {
      auto s = harness::quantize_sensitivity(oracle, inputs, *want);
      if (!s.ok()) return "sensitivity run failed: " + s.error().message;
      sensitivity = std::move(*s);
    }
    for (const auto& [name, ref] : *want) {
      // An output that widens a bf16/f16 value (cast to f32) carries that value's rounding: a row statistic
      // off by one f32 ulp can move it by one bf16 ulp. Judge it in the dtype it was rounded to.
      DType judged = ref.dtype();
      for (const GraphOutput& o : oracle.outputs()) {
        const NodeId p = oracle.value(o.value).producer;
        if (o.name == name && p >= 0 && oracle.node(p).op == Op::cast) {
          const DType from = oracle.value(oracle.node(p).inputs[0]).type.dtype;
          if (dtype_is_float(from) && dtype_size(from) < dtype_size(judged)) judged = from;
        }
      }
      const Tensor r = judged == ref.dtype() ? ref : Tensor::from_f64(judged, ref.shape(), ref.to_f64());
      const Tensor g = judged == ref.dtype() ? got->at(name) : Tensor::from_f64(judged, ref.shape(), got->at(name).to_f64());
      harness::TolerancePolicy policy;
      if (sensitivity.count(name)) policy.sensitivity = sensitivity.at(name);
      const harness::Comparison c = harness::compare_output(r, g, policy, exact, reduction_length);
      if (c.kind != harness::Mismatch::none) {
        return std::string("output ") + name + " (" + harness::distribution_name(d) + " inputs): " + c.describe();
      }
    }
  }
  return "";
}

inline std::string check_plan(const Graph& graph, const Graph& oracle, bool exact, int64_t reduction_length,
                              const backend::PlanOptions& options = {}, int* fallbacks = nullptr) {
  return check_plan_on(cpu_backend(), graph, oracle, exact, reduction_length, options, fallbacks);
}

// A standalone graph of one group: its outside inputs become graph inputs, its outputs graph outputs.
inline Graph group_graph(const Graph& g, const passes::FusedGroup& group) {
  Graph out;
  out.name = "group";
  std::map<ValueId, ValueId> map;
  for (ValueId v : group.inputs) {
    auto id = out.add_input(g.value(v).name, g.value(v).type, Binding::per_call);
    KILN_CHECK(id.ok());
    map[v] = *id;
  }
  for (NodeId m : group.members) {
    const Node& n = g.node(m);
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) in.push_back(map.at(v));
    std::vector<std::string> names;
    for (ValueId v : n.outputs) names.push_back(g.value(v).name);
    auto outs = out.add_node(n.op, in, n.attrs, names);
    KILN_CHECK(outs.ok());
    out.set_node_group(static_cast<NodeId>(out.nodes().size()) - 1, 0);
    for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = (*outs)[i];
  }
  for (ValueId v : group.outputs) KILN_CHECK(out.add_output(g.value(v).name, map.at(v)).ok());
  return out;
}

inline int64_t row_length(const Graph& g) {
  int64_t k = 1;
  for (const Node& n : g.nodes()) {
    for (ValueId v : n.inputs) {
      if (!g.value(v).type.shape.empty()) k = std::max(k, g.value(v).type.shape.back());
    }
  }
  return k;
}

}  // namespace kiln::testing
