#include "passes/sink_concat.h"

#include <gtest/gtest.h>

#include "models/weights.h"
#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/dce.h"
#include "passes/staging.h"

namespace kiln {
namespace {

TEST(PassSinkConcat, RopeMovesAboveTheJointConcatWithItsTablesSliced) {
  testing::expect_golden(
      [](const Graph& g) { return passes::eliminate_dead_code(passes::sink_concats(g).graph); }, R"(graph g {
      input %txt: f32[1,2,3,4] per_call
      input %img: f32[1,2,5,4] per_call
      input %cos: f32[8,2] per_call
      input %sin: f32[8,2] per_call
      %q: f32[1,2,8,4] = concat(%txt, %img) {axis=2}
      %r: f32[1,2,8,4] = rope(%q, %cos, %sin)
      output r = %r
    })", R"(graph g {
      input %txt: f32[1,2,3,4] per_call
      input %img: f32[1,2,5,4] per_call
      input %cos: f32[8,2] per_call
      input %sin: f32[8,2] per_call
      %r/piece0/slice: f32[3,2] = slice(%cos) {axis=0, end=3, start=0}
      %r/piece0/slice.1: f32[3,2] = slice(%sin) {axis=0, end=3, start=0}
      %r/piece0: f32[1,2,3,4] = rope(%txt, %r/piece0/slice, %r/piece0/slice.1)
      %r/piece1/slice: f32[5,2] = slice(%cos) {axis=0, end=8, start=3}
      %r/piece1/slice.1: f32[5,2] = slice(%sin) {axis=0, end=8, start=3}
      %r/piece1: f32[1,2,5,4] = rope(%img, %r/piece1/slice, %r/piece1/slice.1)
      %r: f32[1,2,8,4] = concat(%r/piece0, %r/piece1) {axis=2}
      output r = %r
    })");
}

TEST(PassSinkConcat, LeavesConcatsAlongARowAxisOrWithOtherReaders) {
  const std::string along_row = R"(graph g {
      input %a: f32[2,3] per_call
      input %b: f32[2,5] per_call
      %c: f32[2,8] = concat(%a, %b) {axis=1}
      %s: f32[2,8] = softmax(%c)
      output s = %s
    })";
  EXPECT_FALSE(passes::sink_concats(testing::parse_or_die(along_row)).report.changed);
  const std::string shared = R"(graph g {
      input %a: f32[3,2] per_call
      input %b: f32[5,2] per_call
      %c: f32[8,2] = concat(%a, %b) {axis=0}
      %e: f32[8,2] = exp(%c)
      output e = %e
      output c = %c
    })";
  EXPECT_FALSE(passes::sink_concats(testing::parse_or_die(shared)).report.changed);
}

TEST(PassSinkConcat, ZooModelsStayBitIdentical) {
  for (const char* spec : {"flux1-dev:tiny", "qwen-image:tiny", "flux2-dev:tiny"}) {
    SCOPED_TRACE(spec);
    auto g = models::build_zoo_model(spec);
    ASSERT_TRUE(g.ok());
    auto sunk = passes::sink_concats(*g);
    EXPECT_TRUE(sunk.report.changed);
    EXPECT_TRUE(verify_graph(sunk.graph).ok());
    const auto inputs = models::random_inputs(*g, 2);
    auto a = ref::run_graph(*g, inputs);
    auto b = ref::run_graph(sunk.graph, inputs);
    ASSERT_TRUE(a.ok() && b.ok());
    for (const auto& [name, t] : *a) EXPECT_TRUE(t.bitwise_equal(b->at(name))) << name;
  }
}

// Qwen-Image with real CFG: the modulation of both guidance passes depends only on the timestep, so staging
// computes it once per step for the batch of two calls.
TEST(PassStagingZoo, QwenImageModulationIsPerStep) {
  auto g = models::build_zoo_model("qwen-image:tiny,cfg=2");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const auto time = passes::classify_binding_times(*g);
  int per_step_gemms = 0, per_call_gemms = 0;
  for (const Node& n : g->nodes()) {
    if (!op_has_trait(n.op, kTraitMatmul)) continue;
    (time[n.outputs[0]] == Binding::per_step ? per_step_gemms : per_call_gemms) += 1;
  }
  // timestep MLP (2) + img_mod and txt_mod per block + the final adaLN head.
  EXPECT_GE(per_step_gemms, 5);
  EXPECT_GT(per_call_gemms, 0);
  passes::StagedGraph staged = passes::split_stages(*g);
  EXPECT_GT(staged.per_step.nodes().size(), 0u);
}

}  // namespace
}  // namespace kiln
