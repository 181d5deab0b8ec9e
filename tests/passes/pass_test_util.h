// Golden and equivalence helpers for pass tests: parse the input text, run the pass, compare the printed result
// with the expected text, and check on the reference executor that outputs are bit-identical (exact passes).
#pragma once

#include <gtest/gtest.h>

#include <random>

#include "ir/text.h"
#include "passes/pass.h"
#include "passes/pipeline.h"
#include "ref/executor.h"

namespace kiln::testing {

// The default pipeline with the named passes left out.
inline passes::PipelineOptions pipeline_without(std::initializer_list<std::string> passes) {
  passes::PipelineOptions options;
  options.disabled.insert(passes.begin(), passes.end());
  return options;
}

inline Graph parse_or_die(const std::string& text) {
  auto g = parse_graph_text(text, "<test>");
  if (!g.ok()) ADD_FAILURE() << g.error().message;
  return g.ok() ? std::move(g).value() : Graph{};
}

// Deterministic inputs for every graph input: normal values rounded to each input's dtype.
inline std::map<std::string, Tensor> test_inputs(const Graph& graph, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::map<std::string, Tensor> inputs;
  for (const GraphInput& in : graph.inputs()) {
    const Value& v = graph.value(in.value);
    Tensor t(v.type.dtype, v.type.shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(rng));
    inputs[v.name] = std::move(t);
  }
  return inputs;
}

inline void expect_bit_identical(const Graph& before, const Graph& after, uint32_t seed = 1) {
  const auto inputs = test_inputs(before, seed);
  auto a = ref::run_graph(before, inputs);
  auto b = ref::run_graph(after, inputs);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(a->size(), b->size());
  for (const auto& [name, tensor] : *a) {
    ASSERT_TRUE(b->count(name)) << name;
    EXPECT_TRUE(tensor.bitwise_equal(b->at(name))) << "output " << name << " differs";
  }
}

// Runs `pass` on `input`, expects the printed result to equal `expected` (parsed and re-printed, so spacing in
// the test does not matter) and the outputs to stay bit-identical.
template <class PassFn>
passes::PassReport expect_golden(PassFn pass, const std::string& input, const std::string& expected) {
  Graph in = parse_or_die(input);
  passes::PassResult result = pass(in);
  EXPECT_TRUE(verify_graph(result.graph).ok());
  EXPECT_EQ(print_graph_text(result.graph), print_graph_text(parse_or_die(expected)));
  expect_bit_identical(in, result.graph);
  return result.report;
}

}  // namespace kiln::testing
