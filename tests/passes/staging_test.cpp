#include <gtest/gtest.h>

#include "passes/staging.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

// Runs the three stages in order, feeding each stage's outputs to the next by value name.
std::map<std::string, Tensor> run_staged(const passes::StagedGraph& s, const std::map<std::string, Tensor>& inputs) {
  std::map<std::string, Tensor> env = inputs;
  auto run_stage = [&](const Graph& g) {
    std::map<std::string, Tensor> args;
    for (const GraphInput& in : g.inputs()) args[g.value(in.value).name] = env.at(g.value(in.value).name);
    auto out = ref::run_graph(g, args);
    EXPECT_TRUE(out.ok()) << out.error().message;
    return out.ok() ? *out : std::map<std::string, Tensor>{};
  };
  for (auto& [name, t] : run_stage(s.load)) env[name] = t;
  for (auto& [name, t] : run_stage(s.per_step)) env[name] = t;
  return run_stage(s.per_call);
}

const char* kModel = R"(graph m {
    input %x: bf16[2,4] per_call
    input %t: bf16[4] per_step
    input %w: bf16[4] weight
    %one: bf16[] = full() {shape=[], value=1.0, dtype="bf16"}
    %w1: bf16[4] = add(%w, %one)
    %w2: bf16[4] = exp(%w1)
    %st: bf16[4] = silu(%t)
    %mod: bf16[4] = mul(%st, %w2)
    %h: bf16[2,4] = mul(%x, %mod)
    %y: bf16[2,4] = add(%h, %w1)
    output y = %y
    output mod = %mod
  })";

TEST(PassStaging, ClassifiesByMostVariableInput) {
  Graph g = testing::parse_or_die(kModel);
  const auto time = passes::classify_binding_times(g);
  auto at = [&](const char* name) { return time[*g.find_value(name)]; };
  EXPECT_EQ(at("one"), Binding::weight);
  EXPECT_EQ(at("w1"), Binding::weight);
  EXPECT_EQ(at("w2"), Binding::weight);
  EXPECT_EQ(at("st"), Binding::per_step);
  EXPECT_EQ(at("mod"), Binding::per_step);
  EXPECT_EQ(at("h"), Binding::per_call);
  EXPECT_EQ(at("y"), Binding::per_call);
}

TEST(PassStaging, StagesComputeTheSameBits) {
  Graph g = testing::parse_or_die(kModel);
  passes::StagedGraph s = passes::split_stages(g);
  for (const Graph* stage : {&s.load, &s.per_step, &s.per_call}) {
    EXPECT_TRUE(verify_graph(*stage).ok()) << stage->name;
  }
  EXPECT_EQ(s.load.nodes().size(), 3u);
  EXPECT_EQ(s.per_step.nodes().size(), 2u);
  EXPECT_EQ(s.per_call.nodes().size(), 2u);
  // The call stage reads the per-step modulation and the load-time w1 as inputs, not their producers.
  EXPECT_EQ(s.per_call.binding_of_input(*s.per_call.find_value("mod")), Binding::per_step);
  EXPECT_EQ(s.per_call.binding_of_input(*s.per_call.find_value("w1")), Binding::weight);
  EXPECT_FALSE(s.per_call.find_value("t").has_value());
  const auto inputs = testing::test_inputs(g, 3);
  auto whole = ref::run_graph(g, inputs);
  ASSERT_TRUE(whole.ok());
  auto staged = run_staged(s, inputs);
  ASSERT_EQ(staged.size(), whole->size());
  for (const auto& [name, t] : *whole) EXPECT_TRUE(t.bitwise_equal(staged.at(name))) << name;
}

}  // namespace
}  // namespace kiln
