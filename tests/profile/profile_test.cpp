// The per-step profiler, the roofline classification and the trace-event export, on the CPU backend.
#include "profile/profile.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../agent/agent_test_util.h"
#include "agent/plan_config.h"
#include "profile/trace.h"

namespace kiln {
namespace {

backend::DeviceInfo fake_device() {
  backend::DeviceInfo d;
  d.kind = "cpu";
  d.name = "test device";
  d.bandwidth_bytes_per_second = 1e10;  // 10 GB/s
  d.flops_per_second = 1e11;            // 100 GFLOP/s: the ridge is at 10 FLOPs per byte
  return d;
}

TEST(ProfileRoofline, BoundFollowsTheRidge) {
  const backend::DeviceInfo d = fake_device();
  const profile::RooflinePoint memory = profile::roofline_point(1e6, 1e6, d);  // 1 FLOP/byte
  EXPECT_EQ(memory.bound, profile::Bound::memory);
  EXPECT_DOUBLE_EQ(memory.floor_seconds, 1e-4);
  const profile::RooflinePoint compute = profile::roofline_point(1e8, 1e6, d);  // 100 FLOPs/byte
  EXPECT_EQ(compute.bound, profile::Bound::compute);
  EXPECT_DOUBLE_EQ(compute.floor_seconds, 1e-3);
  EXPECT_DOUBLE_EQ(compute.intensity(), 100);
}

TEST(ProfilePlan, StepsCoverThePlanAndAddUp) {
  backend::Backend& cpu = testing::agent_cpu_backend();
  const Graph model = testing::mlp_block_graph();
  auto graph = agent::build_graph(model, agent::baseline_config());
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  auto plan = backend::Plan::build(cpu, *graph);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_TRUE((*plan)->set_inputs(testing::mlp_block_inputs(model)).ok());
  auto p = profile::profile_plan(**plan, cpu, {1, 3});
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->steps.size(), (*plan)->steps().size());
  double shares = 0, classes = 0;
  int matmuls = 0, copied = 0;
  for (const profile::StepProfile& s : p->steps) {
    EXPECT_GT(s.seconds, 0) << s.label;
    EXPECT_GT(s.roofline.bytes, 0) << s.label;
    // Each step's own time, replayed without a synchronization per launch, and the headroom it gives.
    EXPECT_GT(s.kernel_seconds, 0) << s.label;
    EXPECT_DOUBLE_EQ(s.headroom, s.kernel_seconds / s.roofline.floor_seconds) << s.label;
    // Memory-bound generated kernels are set beside a copy of as many bytes; nothing else is.
    if (s.kind == "kernel" && s.roofline.bound == profile::Bound::memory) {
      ++copied;
      EXPECT_GT(s.copy_seconds, 0) << s.label;
    } else {
      EXPECT_EQ(s.copy_seconds, 0) << s.label;
    }
    shares += s.share;
    if (s.op_class == OpClass::matmul) {
      ++matmuls;
      EXPECT_EQ(s.kind, "library");
      EXPECT_DOUBLE_EQ(s.roofline.flops, 2.0 * 512 * 1024 * 64) << s.label;  // no bias in the baseline's GEMM
    }
  }
  EXPECT_EQ(matmuls, 1);
  EXPECT_GT(copied, 0);
  for (double c : p->class_seconds) classes += c;
  EXPECT_NEAR(shares, 1.0, 1e-9);
  EXPECT_NEAR(classes, p->steps_seconds, 1e-12);
  EXPECT_FALSE((*plan)->execute_step(p->steps.size()).ok());
  profile::ProfileOptions host_only{1, 3};
  host_only.kernel_times = false;
  auto q = profile::profile_plan(**plan, cpu, host_only);
  ASSERT_TRUE(q.ok()) << q.error().message;
  for (const profile::StepProfile& s : q->steps) EXPECT_EQ(s.kernel_seconds + s.copy_seconds, 0) << s.label;
}

TEST(ProfileTrace, OneCompleteEventPerStepOnItsTrack) {
  profile::PlanProfile a, b;
  a.device = b.device = fake_device();
  for (int i = 0; i < 3; ++i) {
    profile::StepProfile s;
    s.index = i;
    s.label = "step " + std::to_string(i);
    s.seconds = 1e-3 * (i + 1);
    s.start_seconds = i == 0 ? 0 : a.steps.back().start_seconds + a.steps.back().seconds;
    a.steps.push_back(s);
  }
  b.steps = {a.steps[0]};
  const auto trace = nlohmann::json::parse(profile::trace_event_json({{"baseline", &a}, {"final", &b}}));
  int complete = 0, metadata = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") ++metadata;
    if (e["ph"] != "X") continue;
    ++complete;
    if (e["pid"] == 1 && e["name"] == "step 2") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 3000);  // 1 ms + 2 ms, in microseconds
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 3000);
    }
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(metadata, 2);
}

}  // namespace
}  // namespace kiln
