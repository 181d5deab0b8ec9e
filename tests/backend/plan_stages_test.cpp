// The Plan's three stages on the CPU backend: weight-only work runs once per weight load, per-step work once
// per distinct per-step value (shared by the calls of a step, as Qwen-Image's two CFG calls share their
// modulation), per-call work on every execute; outputs match the reference every time.
#include <gtest/gtest.h>

#include "backend/plan.h"
#include "plan_test_util.h"

namespace kiln {
namespace {

using testing::bitwise_equal;
using testing::matches_reference;

std::map<std::string, Tensor> with(std::map<std::string, Tensor> inputs, const std::string& name, Tensor t) {
  inputs[name] = std::move(t);
  return inputs;
}

Tensor scaled(const Tensor& t, double factor) {
  std::vector<double> v = t.to_f64();
  for (double& x : v) x *= factor;
  return Tensor::from_f64(t.dtype(), t.shape(), v);
}

// PlanStats::library_seconds adds up the host time of every library call (the first run's algorithm choices on
// a GPU): nothing before a run, some after it, more after the next.
TEST(PlanStages, LibrarySecondsAddUpOverRuns) {
  const Graph g = testing::optimized_zoo_model("qwen-image:tiny");
  auto plan = backend::Plan::build(testing::plan_test_backend(), g);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  backend::Plan& p = **plan;
  ASSERT_GT(p.summary().library_calls, 0);
  EXPECT_EQ(p.stats().library_seconds, 0.0);
  ASSERT_TRUE(p.run(models::random_inputs(g, 1)).ok());
  const double first = p.stats().library_seconds;
  EXPECT_GT(first, 0.0);
  ASSERT_TRUE(p.execute().ok());
  EXPECT_GT(p.stats().library_seconds, first);
}

TEST(PlanStages, QwenImageSharesThePerStepStageBetweenCallsOfOneTimestep) {
  const Graph g = testing::optimized_zoo_model("qwen-image:tiny");
  auto plan = backend::Plan::build(testing::plan_test_backend(), g);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  backend::Plan& p = **plan;
  EXPECT_GT(p.summary().per_step_steps, 0);
  EXPECT_GT(p.summary().per_call_steps, 0);

  const auto first = models::random_inputs(g, 1);
  // Call 1 (cond): computes the per-step stage.
  auto out1 = p.run(first);
  ASSERT_TRUE(out1.ok()) << out1.error().message;
  EXPECT_EQ(matches_reference(g, first, *out1), "");
  EXPECT_EQ(p.stats().per_step_misses, 1);
  EXPECT_EQ(p.stats().per_step_hits, 0);

  // Call 2 (uncond): other text, same timestep: the per-step results are reused.
  const auto second = with(first, "txt", scaled(first.at("txt"), -0.5));
  ASSERT_TRUE(p.set_inputs({{"txt", second.at("txt")}, {"timesteps", second.at("timesteps")}}).ok());
  ASSERT_TRUE(p.execute().ok());
  auto out2 = p.outputs();
  ASSERT_TRUE(out2.ok());
  EXPECT_EQ(matches_reference(g, second, *out2), "");
  EXPECT_EQ(p.stats().per_step_misses, 1);
  EXPECT_EQ(p.stats().per_step_hits, 1);
  EXPECT_NE(bitwise_equal(*out1, *out2), "");  // the call really ran on the new text

  // Next timestep: recomputed.
  const auto third = with(second, "timesteps", scaled(second.at("timesteps"), 0.5));
  auto out3 = p.run(third);
  ASSERT_TRUE(out3.ok());
  EXPECT_EQ(matches_reference(g, third, *out3), "");
  EXPECT_EQ(p.stats().per_step_misses, 2);
  EXPECT_EQ(p.stats().per_step_hits, 1);

  // Back to the first timestep: served from the cache, bit for bit what the computation gave.
  auto out4 = p.run(second);
  ASSERT_TRUE(out4.ok());
  EXPECT_EQ(p.stats().per_step_misses, 2);
  EXPECT_EQ(p.stats().per_step_hits, 2);
  EXPECT_EQ(bitwise_equal(*out2, *out4), "");

  // run() gave the same weights three times: they were loaded once.
  EXPECT_EQ(p.stats().executes, 4);
  EXPECT_EQ(p.stats().load_runs, 1);
}

TEST(PlanStages, CacheSizeBoundsWhatIsKept) {
  const Graph g = testing::optimized_zoo_model("qwen-image:tiny");
  const auto a = models::random_inputs(g, 1);
  const auto b = with(a, "timesteps", scaled(a.at("timesteps"), 0.25));
  for (int entries : {0, 1, 2}) {
    backend::PlanOptions options;
    options.per_step_cache_entries = entries;
    auto plan = backend::Plan::build(testing::plan_test_backend(), g, options);
    ASSERT_TRUE(plan.ok());
    backend::Plan& p = **plan;
    std::map<std::string, Tensor> last;
    for (const auto* inputs : {&a, &a, &b, &a}) {
      auto out = p.run(*inputs);
      ASSERT_TRUE(out.ok());
      last = *out;
    }
    EXPECT_EQ(matches_reference(g, a, last), "") << entries << " entries";
    // a a b a: no cache misses all four; one entry misses on every change; two keep a while b runs.
    const int64_t misses = entries == 0 ? 4 : entries == 1 ? 3 : 2;
    EXPECT_EQ(p.stats().per_step_misses, misses) << entries << " entries";
    EXPECT_EQ(p.stats().per_step_hits, 4 - misses) << entries << " entries";
  }
}

TEST(PlanStages, LoadStageRunsOncePerWeightLoad) {
  // Merged GEMM weights are concatenated at load time.
  const Graph g = testing::optimized_zoo_model("flux1-double-block:tiny");
  auto plan = backend::Plan::build(testing::plan_test_backend(), g);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  backend::Plan& p = **plan;
  ASSERT_GT(p.summary().load_steps, 0);
  const auto inputs = models::random_inputs(g, 3);
  ASSERT_TRUE(p.set_inputs(inputs).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p.execute().ok());
  EXPECT_EQ(p.stats().load_runs, 1);
  auto out = p.outputs();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(matches_reference(g, inputs, *out), "");
  // New weights: the load stage reruns and the outputs follow them.
  std::map<std::string, Tensor> reloaded = inputs;
  for (const GraphInput& in : g.inputs()) {
    const std::string& name = g.value(in.value).name;
    if (in.binding == Binding::weight && name.find("scale") == std::string::npos) {
      reloaded[name] = scaled(inputs.at(name), 0.5);
    }
  }
  auto out2 = p.run(reloaded);
  ASSERT_TRUE(out2.ok());
  EXPECT_EQ(p.stats().load_runs, 2);
  EXPECT_EQ(matches_reference(g, reloaded, *out2), "");
}

TEST(PlanStages, FirstCallMustGiveEveryInput) {
  const Graph g = testing::optimized_zoo_model("qwen-image:tiny");
  auto plan = backend::Plan::build(testing::plan_test_backend(), g);
  ASSERT_TRUE(plan.ok());
  auto inputs = models::random_inputs(g, 1);
  inputs.erase("timesteps");
  const Status st = (*plan)->set_inputs(inputs);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("%timesteps"), std::string::npos) << st.error().message;
}

TEST(PlanStages, NegativeCacheSizeIsAnError) {
  backend::PlanOptions options;
  options.per_step_cache_entries = -1;
  auto plan = backend::Plan::build(testing::plan_test_backend(), testing::optimized_zoo_model("qwen-image:tiny"), options);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("per_step_cache_entries"), std::string::npos);
}

}  // namespace
}  // namespace kiln
