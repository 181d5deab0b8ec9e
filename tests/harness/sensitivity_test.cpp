// The quantization sensitivity of the reference (harness/sensitivity.h): zero without a quantize; downstream of
// one, large enough that an implementation whose quantize input moved one ulp passes, and no larger.
#include "harness/sensitivity.h"

#include <gtest/gtest.h>

#include "../backend/backend_test_util.h"
#include "../passes/pass_test_util.h"
#include "harness/compare.h"
#include "passes/decompose.h"

namespace kiln {
namespace {

constexpr const char* kQuantizedLinear = R"(graph g {
    input %x: bf16[8,256] per_call
    input %w: f8e4m3[64,256] weight
    input %ws: f32[] weight
    %n: bf16[8,256] = rmsnorm(%x)
    %xq: f8e4m3[8,256], %xs: f32[] = quantize(%n) {granularity="tensor"}
    %y: f32[8,64] = scaled_linear(%xq, %xs, %w, %ws) {out_dtype="f32"}
    output y = %y
    output n = %n
  })";

TEST(Sensitivity, ZeroWithoutAQuantize) {
  const Graph g = testing::parse_or_die(R"(graph g {
      input %x: bf16[8,256] per_call
      %n: bf16[8,256] = rmsnorm(%x)
      output n = %n
    })");
  EXPECT_FALSE(harness::has_discontinuous_steps(g));
  const auto inputs = testing::draw_graph_inputs(g, harness::Distribution::normal, 3);
  auto want = ref::run_graph(g, inputs);
  ASSERT_TRUE(want.ok());
  auto s = harness::quantize_sensitivity(g, inputs, *want);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->at("n"), 0.0);
}

// The reference with the quantize's input nudged is a sound implementation: the plain policy rejects it (a
// flipped FP8 step is far above f32 rounding), the policy with the sensitivity accepts it; an error well
// beyond the sensitivity is still rejected. Outputs upstream of the quantize are not affected.
TEST(Sensitivity, CoversAFlippedQuantizationStepAndNoMore) {
  const Graph g = testing::parse_or_die(kQuantizedLinear);
  EXPECT_TRUE(harness::has_discontinuous_steps(g));
  const auto inputs = testing::draw_graph_inputs(g, harness::Distribution::normal, 5);
  auto want = ref::run_graph(g, inputs);
  ASSERT_TRUE(want.ok());
  auto s = harness::quantize_sensitivity(g, inputs, *want);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->at("n"), 0.0);
  EXPECT_GT(s->at("y"), 0.0);

  // A candidate whose quantize saw inputs one ulp away (another draw of the signs than the sensitivity's).
  auto candidate = harness::nudged_reference(g, inputs, 99);
  ASSERT_TRUE(candidate.ok());
  const Tensor& y = want->at("y");
  const Tensor& off_by_flips = candidate->at("y");
  EXPECT_EQ(harness::compare_output(y, off_by_flips, {}, false, 256).kind, harness::Mismatch::too_large);
  harness::TolerancePolicy with_sensitivity;
  with_sensitivity.sensitivity = s->at("y");
  EXPECT_EQ(harness::compare_output(y, off_by_flips, with_sensitivity, false, 256).kind, harness::Mismatch::none)
      << harness::compare_output(y, off_by_flips, with_sensitivity, false, 256).describe();
  Tensor far_off = y;
  far_off.set(0, y.get(0) + 4 * s->at("y"));
  EXPECT_EQ(harness::compare_output(y, far_off, with_sensitivity, false, 256).kind, harness::Mismatch::too_large);
}

// Once decomposed, a quantize is a widening cast of its bf16 input, f32 arithmetic and a cast to fp8. A sound
// implementation computes that bf16 input one bf16 ulp away (another summation order in the norm); the
// sensitivity must cover the flips that causes, as it does for the composite quantize. Moving only the f32 the
// fp8 cast reads, one f32 ulp, flips almost nothing and leaves such a candidate rejected.
TEST(Sensitivity, CoversTheDecomposedQuantizeFromItsBf16Input) {
  const Graph composite = testing::parse_or_die(kQuantizedLinear);
  const Graph g = passes::decompose_composites(composite).graph;
  for (const Node& n : g.nodes()) ASSERT_NE(n.op, Op::quantize) << "the quantize should be decomposed";
  EXPECT_TRUE(harness::has_discontinuous_steps(g));
  const auto inputs = testing::draw_graph_inputs(g, harness::Distribution::normal, 5);
  auto want = ref::run_graph(g, inputs);
  ASSERT_TRUE(want.ok());
  auto s = harness::quantize_sensitivity(g, inputs, *want);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->at("n"), 0.0);  // the norm's output is upstream of every nudge, and x (a graph input) is not moved

  // The candidate: the composite graph's reference with its quantize's bf16 input one ulp away.
  auto candidate = harness::nudged_reference(composite, inputs, 99);
  ASSERT_TRUE(candidate.ok());
  const Tensor& y = want->at("y");
  ASSERT_EQ(harness::compare_output(y, candidate->at("y"), {}, false, 256).kind, harness::Mismatch::too_large);
  harness::TolerancePolicy with_sensitivity;
  with_sensitivity.sensitivity = s->at("y");
  EXPECT_EQ(harness::compare_output(y, candidate->at("y"), with_sensitivity, false, 256).kind, harness::Mismatch::none)
      << harness::compare_output(y, candidate->at("y"), with_sensitivity, false, 256).describe();
}

}  // namespace
}  // namespace kiln
