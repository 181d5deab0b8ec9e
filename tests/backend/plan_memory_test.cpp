// The memory planner: the allocator on hand-made live ranges (no two buffers live at one step share a byte),
// and whole plans with shared per-call memory computing bit for bit what plans with one buffer per value do.
#include <gtest/gtest.h>

#include "backend/memory_plan.h"
#include "plan_test_util.h"

namespace kiln {
namespace {

using backend::MemoryPlan;
using backend::MemoryRequest;

// "" when no two requests live at the same step overlap in memory and all fit the arena.
std::string check_no_overlap(const std::vector<MemoryRequest>& r, const MemoryPlan& plan, int64_t alignment) {
  if (plan.offsets.size() != r.size()) return "one offset per request expected";
  for (size_t i = 0; i < r.size(); ++i) {
    if (plan.offsets[i] % alignment != 0) return "request " + std::to_string(i) + " is not aligned";
    if (plan.offsets[i] < 0 || plan.offsets[i] + r[i].bytes > plan.arena_bytes) {
      return "request " + std::to_string(i) + " leaves the arena";
    }
    for (size_t j = i + 1; j < r.size(); ++j) {
      if (!backend::memory_lives_overlap(r[i], r[j])) continue;
      const bool disjoint = plan.offsets[i] + r[i].bytes <= plan.offsets[j] || plan.offsets[j] + r[j].bytes <= plan.offsets[i];
      if (!disjoint) return "requests " + std::to_string(i) + " and " + std::to_string(j) + " overlap while both live";
    }
  }
  return "";
}

TEST(PlanMemory, AChainReusesTwoBuffers) {
  // a -> b -> c -> d, each read only by the next step: two buffers suffice.
  const std::vector<MemoryRequest> r = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  const MemoryPlan plan = backend::plan_memory(r, 256);
  EXPECT_EQ(check_no_overlap(r, plan, 256), "");
  EXPECT_EQ(plan.unshared_bytes, 4 * 1024);
  EXPECT_EQ(plan.arena_bytes, 2 * 1024);
  EXPECT_EQ(plan.lower_bound_bytes, 2 * 1024);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
}

TEST(PlanMemory, ALongLivedBufferKeepsItsBytes) {
  // A residual read at the end (0..5) beside short-lived temporaries of different sizes.
  const std::vector<MemoryRequest> r = {{512, 0, 5}, {4096, 1, 2}, {256, 2, 3}, {4096, 3, 4}, {0, 4, 4}, {100, 5, 5}};
  const MemoryPlan plan = backend::plan_memory(r, 64);
  EXPECT_EQ(check_no_overlap(r, plan, 64), "");
  EXPECT_LT(plan.arena_bytes, plan.unshared_bytes);
  EXPECT_GE(plan.arena_bytes, plan.lower_bound_bytes);
}

TEST(PlanMemory, RandomLiveRangesNeverShareLiveBytes) {
  uint64_t state = 42;
  auto next = [&](int n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % static_cast<uint64_t>(n));
  };
  for (int round = 0; round < 200; ++round) {
    std::vector<MemoryRequest> r;
    const int count = 1 + next(40);
    for (int i = 0; i < count; ++i) {
      const int first = next(30);
      r.push_back({static_cast<int64_t>(next(5000)), first, first + next(8)});
    }
    const MemoryPlan plan = backend::plan_memory(r, 128);
    ASSERT_EQ(check_no_overlap(r, plan, 128), "") << "round " << round;
    EXPECT_GE(plan.arena_bytes, plan.lower_bound_bytes);
    EXPECT_LE(plan.arena_bytes, plan.unshared_bytes);
  }
}

// Shared memory changes no bit: same kernels, same inputs, one buffer per value vs the planned arena.
TEST(PlanMemory, ZooPlansWithSharedMemoryMatchPlansWithoutBitForBit) {
  for (const std::string spec : {"flux1-double-block:tiny", "flux1-single-block:tiny,dtype=fp8", "qwen-image:tiny",
                                 "llama3-8b:tiny", "flux2-dev:tiny"}) {
    const Graph g = testing::optimized_zoo_model(spec);
    backend::PlanOptions unshared;
    unshared.reuse_memory = false;
    auto with_reuse = backend::Plan::build(testing::plan_test_backend(), g);
    auto without = backend::Plan::build(testing::plan_test_backend(), g, unshared);
    ASSERT_TRUE(with_reuse.ok() && without.ok()) << spec;
    const backend::PlanSummary& s = (*with_reuse)->summary();
    EXPECT_EQ((*without)->summary().arena_bytes, 0) << spec;
    EXPECT_EQ((*without)->summary().memory_bytes, s.memory_bytes_without_reuse) << spec;
    EXPECT_LT(s.arena_bytes, s.intermediate_bytes) << spec;
    EXPECT_LT(s.memory_bytes, s.memory_bytes_without_reuse) << spec;
    for (uint64_t seed : {1, 2}) {
      const auto inputs = models::random_inputs(g, seed);
      auto a = (*with_reuse)->run(inputs);
      auto b = (*without)->run(inputs);
      ASSERT_TRUE(a.ok() && b.ok()) << spec;
      EXPECT_EQ(testing::bitwise_equal(*a, *b), "") << spec << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace kiln
