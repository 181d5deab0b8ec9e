// agent::in_process_tuner on the CPU backend (the same code path the CUDA backend takes): every distinct
// kernel of a real plan is searched once, every candidate is measured or recorded as failed, and what comes
// back is a schedule the kernel can implement that differs from the plan's current one.
#include "agent/in_process_tuner.h"

#include <gtest/gtest.h>

#include <set>

#include "../backend/backend_test_util.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

Graph two_norm_blocks() {
  // Two independent streams of the same layernorm + modulate: two kernels with one structure.
  Graph g;
  const ValueId s = *g.add_input("scale", {DType::bf16, {1, 256}}, Binding::per_call);
  for (int i = 0; i < 2; ++i) {
    const std::string p = "b" + std::to_string(i);
    const ValueId x = *g.add_input(p + ".x", {DType::bf16, {48, 256}}, Binding::per_call);
    const ValueId n = (*g.add_node(Op::layernorm, {x}, {}, {p + ".n"}))[0];
    const ValueId m = (*g.add_node(Op::mul, {n, s}, {}, {p + ".m"}))[0];
    const ValueId y = (*g.add_node(Op::add, {m, s}, {}, {p + ".y"}))[0];
    EXPECT_TRUE(g.add_output(p + ".y", y).ok());
  }
  return g;
}

TEST(InProcessTuner, SearchesEachDistinctKernelOnceAndReturnsOnlyBetterValidSchedules) {
  auto optimized = passes::run_pipeline(two_norm_blocks(), {});
  ASSERT_TRUE(optimized.ok()) << optimized.error().message;
  backend::Backend& cpu = testing::cpu_backend();
  auto plan = backend::Plan::build(cpu, optimized->graph);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  std::vector<size_t> kernel_steps;
  std::set<std::string> distinct;
  for (size_t i = 0; i < (*plan)->steps().size(); ++i) {
    const backend::Plan::Step& step = (*plan)->steps()[i];
    if (step.kind != backend::Plan::Step::Kind::kernel) continue;
    kernel_steps.push_back(i);
    distinct.insert((*plan)->kernels().at(static_cast<size_t>(step.kernel_index)).hash);
  }
  ASSERT_GE(kernel_steps.size(), 2u);
  ASSERT_LT(distinct.size(), kernel_steps.size());  // the two blocks share their kernel

  agent::InProcessTunerOptions options;
  options.max_candidates = 5;
  options.timing = {1, 3};
  agent::InProcessTunerStats stats;
  const std::map<std::string, kernel::Schedule> current;
  auto winners = agent::in_process_tuner(options, &stats)({**plan, cpu, kernel_steps, current});
  ASSERT_TRUE(winners.ok()) << winners.error().message;
  EXPECT_EQ(stats.kernels_searched, static_cast<int>(distinct.size()));
  EXPECT_GT(stats.candidates_measured, stats.kernels_searched);  // more than the current schedule alone
  EXPECT_EQ(stats.candidates_failed, 0);
  EXPECT_EQ(stats.kernels_improved, static_cast<int>(winners->size()));
  for (const auto& [hash, schedule] : *winners) {
    ASSERT_TRUE(distinct.count(hash)) << hash;
    for (const backend::Plan::PlanKernel& pk : (*plan)->kernels()) {
      if (pk.hash != hash) continue;
      EXPECT_TRUE(kernel::can_implement(pk.kernel, schedule, kernel::Target::cpu).ok());
      EXPECT_FALSE(schedule == pk.schedule);
    }
  }
  // The tuned plan still matches the reference.
  backend::PlanOptions tuned;
  tuned.schedules = *winners;
  EXPECT_EQ(testing::check_plan_on(cpu, optimized->graph, two_norm_blocks(), false, 256, tuned), "");
}

// How many kernels the tuner searches on the two-block plan with its own share `own_seconds` and the loop's
// remaining `loop_seconds`; what it returns must then be empty when it searched nothing.
int kernels_searched(double own_seconds, double loop_seconds) {
  auto optimized = passes::run_pipeline(two_norm_blocks(), {});
  EXPECT_TRUE(optimized.ok());
  backend::Backend& cpu = testing::cpu_backend();
  auto plan = backend::Plan::build(cpu, optimized->graph);
  EXPECT_TRUE(plan.ok());
  std::vector<size_t> steps;
  for (size_t i = 0; i < (*plan)->steps().size(); ++i) steps.push_back(i);
  agent::InProcessTunerOptions options;
  options.budget_seconds = own_seconds;
  agent::InProcessTunerStats stats;
  const std::map<std::string, kernel::Schedule> current;
  auto winners = agent::in_process_tuner(options, &stats)({**plan, cpu, steps, current, loop_seconds});
  EXPECT_TRUE(winners.ok());
  if (stats.kernels_searched == 0) {
    EXPECT_TRUE(winners->empty());
  }
  return stats.kernels_searched;
}

TEST(InProcessTuner, ASpentBudgetSearchesNothing) { EXPECT_EQ(kernels_searched(0, 1e300), 0); }

// The loop's remaining budget bounds the tuner too, whatever its own share: nothing starts once it is spent.
TEST(InProcessTuner, TheLoopsRemainingBudgetBoundsIt) { EXPECT_EQ(kernels_searched(60, 0), 0); }

}  // namespace
}  // namespace kiln
