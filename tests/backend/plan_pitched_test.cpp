// Pitched windows (backend.h): column windows that library calls read in place, and concats whose pieces
// their library producers write in place. Plans with them compute bit for bit what plans with copy kernels
// do, with those kernels gone; the strides and the view analysis behind them are checked on their own.
#include <gtest/gtest.h>

#include "ir/text.h"
#include "kernel/kernel_ir.h"
#include "plan_test_util.h"

namespace kiln {
namespace {

TEST(PlanPitched, StridesScaleOnlyWholeRows) {
  // [2, 4, 3, 2] in rows of 6 (one [3, 2] block) placed 10 apart.
  EXPECT_EQ(backend::pitched_strides({2, 4, 3, 2}, 6, 10), (std::vector<int64_t>{40, 10, 2, 1}));
  // Rows of 24 = [4, 3, 2]: only the first axis steps by the pitch.
  EXPECT_EQ(backend::pitched_strides({2, 4, 3, 2}, 24, 30), (std::vector<int64_t>{30, 6, 2, 1}));
  EXPECT_TRUE(backend::pitched_strides({2, 4, 3, 2}, 4, 10).empty());  // a row of 4 would cut the [3, 2] axes
  EXPECT_TRUE(backend::pitched_strides({2, 4, 3, 2}, 6, 5).empty());   // rows may not overlap
}

Graph parse(const std::string& text) {
  auto g = parse_graph_text(text, "<test>");
  KILN_CHECK(g.ok());
  return std::move(g).value();
}

kernel::Kernel lower_all(const Graph& g) {
  std::vector<NodeId> members;
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) members.push_back(id);
  auto k = kernel::lower_nodes(g, members, "k");
  KILN_CHECK(k.ok());
  return std::move(k).value();
}

TEST(PlanPitched, AColumnSliceIsAWindow) {
  const kernel::Kernel cols = lower_all(parse(R"(graph g {
      input %x: bf16[4,6,12] per_call
      %s: bf16[4,6,4] = slice(%x) {axis=2, start=8, end=12}
      %r: bf16[4,6,2,2] = reshape(%s) {shape=[4,6,2,2]}
      output r = %r
    })"));
  auto w = kernel::pitched_window(cols);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->offset, 8);
  EXPECT_EQ(w->row, 4);
  EXPECT_EQ(w->pitch, 12);
  // A transpose reorders elements: no window. A contiguous slice is alias_offsets' case, not a window.
  EXPECT_FALSE(kernel::pitched_window(lower_all(parse(R"(graph g {
      input %x: bf16[4,6] per_call
      %t: bf16[6,4] = transpose(%x) {perm=[1,0]}
      output t = %t
    })"))).has_value());
  EXPECT_FALSE(kernel::pitched_window(lower_all(parse(R"(graph g {
      input %x: bf16[4,6] per_call
      %s: bf16[2,6] = slice(%x) {axis=0, start=2, end=4}
      output s = %s
    })"))).has_value());
}

std::unique_ptr<backend::Plan> build(const Graph& g, bool pitched) {
  backend::PlanOptions options;
  options.pitched_windows = pitched;
  auto plan = backend::Plan::build(testing::plan_test_backend(), g, options);
  KILN_CHECK(plan.ok());
  return std::move(plan).value();
}

void expect_same_outputs(const Graph& g, backend::Plan& a, backend::Plan& b) {
  for (uint64_t seed : {1, 2}) {
    const auto inputs = models::random_inputs(g, seed);
    auto x = a.run(inputs);
    auto y = b.run(inputs);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(testing::bitwise_equal(*x, *y), "") << "seed " << seed;
    EXPECT_EQ(testing::matches_reference(g, inputs, *x), "") << "seed " << seed;
  }
}

// Two GEMMs write their outputs into the concat the third one reads; the v-like column window of the first
// GEMM's output goes to the last GEMM in place too.
TEST(PlanPitched, GemmsWriteTheirConcatInPlaceAndReadAWindow) {
  const Graph g = parse(R"(graph g {
      input %x: f32[2,8,16] per_call
      input %wa: f32[24,16] weight
      input %wb: f32[8,16] weight
      input %wc: f32[4,32] weight
      input %wd: f32[4,8] weight
      %a: f32[2,8,24] = linear(%x, %wa)
      %b: f32[2,8,8] = linear(%x, %wb)
      %c: f32[2,8,32] = concat(%a, %b) {axis=-1} @g0
      %y: f32[2,8,4] = linear(%c, %wc)
      %v: f32[2,8,8] = slice(%c) {axis=2, start=24, end=32} @g1
      %z: f32[2,8,4] = linear(%v, %wd)
      output y = %y
      output z = %z
    })");
  auto pitched = build(g, true);
  auto copied = build(g, false);
  EXPECT_EQ(pitched->summary().in_place_concats, 1);
  EXPECT_EQ(pitched->summary().windows, 1);
  EXPECT_EQ(pitched->summary().kernels, 0);
  EXPECT_EQ(copied->summary().kernels, 2);
  expect_same_outputs(g, *pitched, *copied);
}

// A piece another step also reads stays dense: the concat is a copy kernel again.
TEST(PlanPitched, APieceWithAnotherReaderIsCopied) {
  const Graph g = parse(R"(graph g {
      input %x: f32[8,16] per_call
      input %wa: f32[8,16] weight
      input %wb: f32[8,16] weight
      %a: f32[8,8] = linear(%x, %wa)
      %b: f32[8,8] = linear(%x, %wb)
      %c: f32[8,16] = concat(%a, %b) {axis=-1} @g0
      %e: f32[8,8] = exp(%a) @g1
      output c = %c
      output e = %e
    })");
  auto plan = build(g, true);
  EXPECT_EQ(plan->summary().in_place_concats, 0);
  EXPECT_EQ(plan->summary().kernels, 2);
  auto copied = build(g, false);
  expect_same_outputs(g, *plan, *copied);
}

// The GPU suite's graph (GpuPlan.PitchedWindowsMatchTheReference) on the CPU: FLUX's double block joins the
// text and image v columns along tokens; with both GEMM outputs one after another in one buffer, that concat is
// a column window of it. Here q, k and v all are, and attention and a GEMM write the last GEMM's input in place.
TEST(PlanPitched, WindowsAndInPlaceConcatOfTheGpuTest) {
  const Graph g = parse(testing::pitched_windows_graph());
  auto pitched = build(g, true);
  auto copied = build(g, false);
  EXPECT_EQ(pitched->summary().windows, 3);
  EXPECT_EQ(pitched->summary().in_place_concats, 1);
  EXPECT_EQ(pitched->summary().kernels, copied->summary().kernels - 4);
  expect_same_outputs(g, *pitched, *copied);
}

// A piece computed at load time (its GEMM reads only weights) cannot live in a per-call buffer: no window.
TEST(PlanPitched, APieceOfAnotherStageIsCopied) {
  const Graph g = parse(R"(graph g {
      input %xa: bf16[1,8,64] weight
      input %xb: bf16[1,24,64] per_call
      input %wa: bf16[128,64] weight
      input %wb: bf16[128,64] weight
      %a: bf16[1,8,128] = linear(%xa, %wa)
      %b: bf16[1,24,128] = linear(%xb, %wb)
      %va: bf16[1,8,64] = slice(%a) {axis=2, start=64, end=128} @g0
      %vb: bf16[1,24,64] = slice(%b) {axis=2, start=64, end=128} @g0
      %ra: bf16[1,8,1,64] = reshape(%va) {shape=[1,8,1,64]} @g0
      %rb: bf16[1,24,1,64] = reshape(%vb) {shape=[1,24,1,64]} @g0
      %v: bf16[1,32,1,64] = concat(%ra, %rb) {axis=1} @g0
      %o: bf16[1,32,1,64] = attention(%v, %v, %v) {q_layout="bshd", k_layout="bshd", v_layout="bshd", out_layout="bshd"}
      output o = %o
    })");
  auto plan = build(g, true);
  EXPECT_EQ(plan->summary().windows, 0);
  EXPECT_EQ(plan->summary().kernels, 1);
  auto copied = build(g, false);
  expect_same_outputs(g, *plan, *copied);
}

// FLUX's single-stream block: attention and the MLP GEMM (bias + GELU epilogue) write linear2's input in
// place, and attention reads v as a column window of the q/k/v GEMM's output.
TEST(PlanPitched, FluxSingleBlockWritesLinear2sInputInPlace) {
  const Graph g = testing::optimized_zoo_model("flux1-single-block:tiny", &testing::plan_test_backend());
  auto pitched = build(g, true);
  auto copied = build(g, false);
  EXPECT_EQ(pitched->summary().in_place_concats, 1);
  EXPECT_EQ(pitched->summary().windows, 1);
  EXPECT_EQ(pitched->summary().kernels, copied->summary().kernels - 2);
  expect_same_outputs(g, *pitched, *copied);
}

}  // namespace
}  // namespace kiln
