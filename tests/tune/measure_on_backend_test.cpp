// tune/measure_on_backend on the CPU backend: candidates of a real fused kernel are checked against the
// reference before they are timed; one that cannot be implemented is recorded, never timed.
#include "tune/measure_on_backend.h"

#include <gtest/gtest.h>

#include "../backend/backend_test_util.h"
#include "kernel/kernel_task.h"
#include "passes/pipeline.h"
#include "tune/search.h"

namespace kiln {
namespace {

// layernorm + modulate over [rows, cols] bf16, optimized: one fused group.
struct FusedKernel {
  Graph graph;
  kernel::Kernel kernel;
  harness::KernelTask task;
};

FusedKernel layernorm_modulate(int64_t rows, int64_t cols) {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {rows, cols}}, Binding::per_call);
  const ValueId scale = *g.add_input("scale", {DType::bf16, {1, cols}}, Binding::per_call);
  const ValueId n = (*g.add_node(Op::layernorm, {x}, {}, {"n"}))[0];
  const ValueId m = (*g.add_node(Op::mul, {n, scale}, {}, {"m"}))[0];
  const ValueId y = (*g.add_node(Op::add, {m, scale}, {}, {"y"}))[0];
  EXPECT_TRUE(g.add_output("y", y).ok());
  auto optimized = passes::run_pipeline(g, {});
  EXPECT_TRUE(optimized.ok());
  FusedKernel out{optimized->graph, {}, {}};
  std::vector<NodeId> members;
  for (NodeId id = 0; id < static_cast<NodeId>(out.graph.nodes().size()); ++id) {
    if (out.graph.node(id).group >= 0) members.push_back(id);
  }
  auto k = kernel::lower_nodes(out.graph, members, "lnmod");
  EXPECT_TRUE(k.ok()) << (k.ok() ? "" : k.error().message);
  out.kernel = *k;
  auto task = kernel::kernel_task(out.graph, out.kernel);
  EXPECT_TRUE(task.ok());
  out.task = *task;
  return out;
}

TEST(MeasureOnBackend, EveryCandidateIsCheckedThenTimed) {
  const FusedKernel f = layernorm_modulate(33, 200);
  backend::Backend& cpu = testing::cpu_backend();
  std::vector<kernel::Schedule> candidates = kernel::schedule_space(f.kernel, kernel::Target::cpu, 1);
  ASSERT_FALSE(candidates.empty());
  if (candidates.size() > 6) candidates.resize(6);
  kernel::Schedule impossible = candidates[0];
  impossible.threads_per_row = 32;  // CPU kernels take one thread per row
  candidates.push_back(impossible);
  auto measured = tune::measure_schedules_on_backend(cpu, f.kernel, f.task, candidates, {{1, 3}, 7});
  ASSERT_TRUE(measured.ok()) << measured.error().message;
  ASSERT_EQ(measured->size(), candidates.size());
  for (size_t i = 0; i + 1 < candidates.size(); ++i) {
    const tune::ScheduleMeasurement& m = (*measured)[i];
    EXPECT_TRUE(m.passed) << kernel::schedule_to_string(m.schedule) << ": " << m.failure;
    EXPECT_GT(m.median_seconds, 0);
    EXPECT_LE(m.min_seconds, m.median_seconds);
  }
  const tune::ScheduleMeasurement& bad = measured->back();
  EXPECT_FALSE(bad.passed);
  EXPECT_NE(bad.failure.find("cannot implement"), std::string::npos) << bad.failure;
  EXPECT_EQ(bad.median_seconds, 0);
}

// A schedule whose code is one already in the call (here: the same schedule again) is measured once: it gets
// that candidate's results and says which it is. One that emits the same source but launches differently (the
// CPU's pool threads are read at launch) is measured itself.
TEST(MeasureOnBackend, ASchedulesCodeIsMeasuredOnce) {
  const FusedKernel f = layernorm_modulate(33, 200);
  backend::Backend& cpu = testing::cpu_backend();
  std::vector<kernel::Schedule> candidates = kernel::schedule_space(f.kernel, kernel::Target::cpu, 1);
  ASSERT_GE(candidates.size(), 2u);
  candidates.resize(2);
  candidates.push_back(candidates[1]);
  kernel::Schedule more_threads = candidates[1];
  more_threads.threads = candidates[1].threads + 1;
  ASSERT_TRUE(kernel::can_implement(f.kernel, more_threads, kernel::Target::cpu).ok());
  candidates.push_back(more_threads);
  auto measured = tune::measure_schedules_on_backend(cpu, f.kernel, f.task, candidates, {{1, 3}, 7});
  ASSERT_TRUE(measured.ok()) << measured.error().message;
  ASSERT_EQ(measured->size(), 4u);
  EXPECT_EQ((*measured)[0].same_code_as, -1);
  EXPECT_EQ((*measured)[1].same_code_as, -1);
  EXPECT_EQ((*measured)[3].same_code_as, -1) << "a schedule with other pool threads is another launch";
  EXPECT_TRUE((*measured)[3].passed) << (*measured)[3].failure;
  const tune::ScheduleMeasurement& again = (*measured)[2];
  EXPECT_EQ(again.same_code_as, 1);
  EXPECT_TRUE(again.passed) << again.failure;
  EXPECT_EQ(again.median_seconds, (*measured)[1].median_seconds);
  EXPECT_EQ(again.min_seconds, (*measured)[1].min_seconds);
  EXPECT_TRUE(again.schedule == candidates[2]);
}

// The search on the backend: round 0 is the current schedule and a spread over the space (not its first
// corner), each later round neighbours of the fastest so far; never more than max_candidates, no schedule
// twice, and `best` is the fastest that passed.
TEST(MeasureOnBackend, SearchSpreadsThenRefinesAroundTheFastest) {
  const FusedKernel f = layernorm_modulate(64, 512);
  backend::Backend& cpu = testing::cpu_backend();
  const std::vector<kernel::Schedule> space = kernel::schedule_space(f.kernel, kernel::Target::cpu, cpu.device().compute_units);
  ASSERT_GE(space.size(), 8u);
  const kernel::Schedule current = kernel::default_schedule(f.kernel, kernel::Target::cpu, cpu.device().compute_units);
  tune::BackendSearchOptions options;
  options.max_candidates = 9;
  options.first_round = 4;
  options.measure = {{1, 3}, 5};
  auto search = tune::search_schedules_on_backend(cpu, f.kernel, f.task, current, options);
  ASSERT_TRUE(search.ok()) << search.error().message;
  const std::vector<tune::ScheduleMeasurement>& m = search->measured;
  ASSERT_GE(m.size(), 2u);
  EXPECT_LE(m.size(), options.max_candidates);
  EXPECT_TRUE(m[0].schedule == current);
  EXPECT_GE(search->rounds, 1);
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_TRUE(m[i].passed) << kernel::schedule_to_string(m[i].schedule) << ": " << m[i].failure;
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(m[i].schedule == m[j].schedule) << i << " repeats " << j;
  }
  // Round 0 reaches the far end of the space.
  bool reached_last = false;
  for (size_t i = 0; i < std::min<size_t>(m.size(), options.first_round); ++i) reached_last |= m[i].schedule == space.back();
  EXPECT_TRUE(reached_last);
  ASSERT_GE(search->best, 0);
  for (const tune::ScheduleMeasurement& x : m) EXPECT_LE(m[static_cast<size_t>(search->best)].median_seconds, x.median_seconds);
  // Every schedule after round 0 is one field away from a schedule measured before it.
  for (size_t i = options.first_round; i < m.size(); ++i) {
    bool neighbour = false;
    for (size_t j = 0; j < i; ++j) neighbour |= tune::schedule_distance(m[i].schedule, m[j].schedule) == 1;
    EXPECT_TRUE(neighbour) << kernel::schedule_to_string(m[i].schedule);
  }
}

TEST(MeasureOnBackend, AKernelThatComputesSomethingElseFailsTheCheck) {
  // The kernel of one graph judged by the task of another (layernorm + modulate with a different shift):
  // every candidate must be caught by the reference comparison.
  const FusedKernel f = layernorm_modulate(8, 64);
  Graph other;
  const ValueId x = *other.add_input("x", {DType::bf16, {8, 64}}, Binding::per_call);
  const ValueId scale = *other.add_input("scale", {DType::bf16, {1, 64}}, Binding::per_call);
  const ValueId n = (*other.add_node(Op::layernorm, {x}, {}, {"n"}))[0];
  const ValueId y = (*other.add_node(Op::mul, {n, scale}, {}, {"y"}))[0];
  ASSERT_TRUE(other.add_output("y", y).ok());
  auto wrong_task = harness::make_graph_task(other);
  ASSERT_TRUE(wrong_task.ok());
  const kernel::Schedule s = kernel::default_schedule(f.kernel, kernel::Target::cpu, 1);
  auto measured = tune::measure_schedules_on_backend(testing::cpu_backend(), f.kernel, *wrong_task,
                                                     std::vector<kernel::Schedule>{s});
  ASSERT_TRUE(measured.ok()) << measured.error().message;
  EXPECT_FALSE((*measured)[0].passed);
  EXPECT_NE((*measured)[0].failure.find("mismatches the reference"), std::string::npos) << (*measured)[0].failure;
}

}  // namespace
}  // namespace kiln
