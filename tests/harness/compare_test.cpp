// The numerics policy of the verifier (harness/compare.h) on hand-made tensors.
#include "harness/compare.h"
#include "harness/task.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kiln::harness {
namespace {

Tensor make(DType dtype, const std::vector<double>& values) {
  return Tensor::from_f64(dtype, {static_cast<int64_t>(values.size())}, values);
}

TEST(HarnessCompare, HalfUlpFollowsTheDtype) {
  EXPECT_EQ(half_ulp(1.0, DType::f32), std::ldexp(1.0, -24));
  EXPECT_EQ(half_ulp(1.5, DType::f32), std::ldexp(1.0, -24));
  EXPECT_EQ(half_ulp(-2.0, DType::f32), std::ldexp(1.0, -23));
  EXPECT_EQ(half_ulp(1.0, DType::bf16), std::ldexp(1.0, -8));
  EXPECT_EQ(half_ulp(1.0, DType::f16), std::ldexp(1.0, -11));
  EXPECT_EQ(half_ulp(0.0, DType::f32), std::ldexp(1.0, -150));  // subnormal spacing
  EXPECT_EQ(half_ulp(3.0, DType::i32), 0.0);
  EXPECT_EQ(smallest_normal(DType::f16), std::ldexp(1.0, -14));
}

TEST(HarnessCompare, ErrorWithinTheMultipleOfTheBaselinePasses) {
  const Tensor ref = make(DType::f32, {1.0, -0.5, 0.25});
  const double ulp = 2 * half_ulp(1.0, DType::f32);
  const Comparison close = compare_output(ref, make(DType::f32, {1.0 + 3 * ulp, -0.5, 0.25}), {}, false);
  EXPECT_EQ(close.kind, Mismatch::none) << close.describe();
  EXPECT_EQ(close.stats.worst_element, 0);
  EXPECT_DOUBLE_EQ(close.stats.baseline_ratio(), 6.0);  // 3 ulp = 6 half-ulps
  EXPECT_DOUBLE_EQ(close.stats.max_ulp_error, 3.0);
  const Comparison far = compare_output(ref, make(DType::f32, {1.0 + 5 * ulp, -0.5, 0.25}), {}, false);
  EXPECT_EQ(far.kind, Mismatch::too_large) << far.describe();
  EXPECT_EQ(far.count, 1);
  TolerancePolicy loose;
  loose.baseline_multiple = 16;
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1.0 + 5 * ulp, -0.5, 0.25}), loose, false).kind, Mismatch::none);
}

// An f32 output that is the exact widening cast of a computed bf16 value carries bf16 precision: one bf16 ulp
// (a rounding tie computed on the other side) passes there, where at f32 precision it is 128 ulps off. A cast of a
// graph input (exact) and a value computed in f32 keep f32. Session 34's flaky KernelEmit test judged such an
// output at f32 and failed once in a few hundred random trials.
TEST(HarnessCompare, AWideningCastOfAComputedValueIsJudgedAtItsSourcePrecision) {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {4, 8}}, Binding::per_call);
  const ValueId y = (*g.add_node(Op::exp, {x}, {}, {"y"}))[0];
  const ValueId yf = (*g.add_node(Op::cast, {y}, {{"to", std::string("f32")}}, {"yf"}))[0];
  const ValueId q = (*g.add_node(Op::cast, {y}, {{"to", std::string("f8e4m3")}}, {"q"}))[0];
  const ValueId qb = (*g.add_node(Op::cast, {q}, {{"to", std::string("bf16")}}, {"qb"}))[0];
  const ValueId qf = (*g.add_node(Op::cast, {qb}, {{"to", std::string("f32")}}, {"qf"}))[0];
  const ValueId xf = (*g.add_node(Op::cast, {x}, {{"to", std::string("f32")}}, {"xf"}))[0];
  const ValueId z = (*g.add_node(Op::exp, {xf}, {}, {"z"}))[0];
  for (auto [name, v] : {std::pair{"y", y}, {"yf", yf}, {"qf", qf}, {"xf", xf}, {"z", z}}) ASSERT_TRUE(g.add_output(name, v).ok());
  auto task = make_graph_task(std::move(g));
  ASSERT_TRUE(task.ok()) << task.error().message;
  EXPECT_EQ(task_output_precisions(*task),
            (std::vector<DType>{DType::bf16, DType::bf16, DType::f8e4m3, DType::f32, DType::f32}));

  const Tensor ref = make(DType::f32, {0.71875, 1.0});
  const Tensor one_bf16_ulp_off = make(DType::f32, {0.71484375, 1.0});
  EXPECT_EQ(compare_output(ref, one_bf16_ulp_off, {}, false).kind, Mismatch::too_large);
  EXPECT_EQ(compare_output(ref, one_bf16_ulp_off, {}, false, 1, DType::bf16).kind, Mismatch::none);
  const Tensor far = make(DType::f32, {0.65625, 1.0});  // 16 bf16 ulps of 0.71875, past 8 half ulps of 1.0
  EXPECT_EQ(compare_output(ref, far, {}, false, 1, DType::bf16).kind, Mismatch::too_large);
}

TEST(HarnessCompare, TheBoundIsNormwise) {
  // An error of 1 ulp of the largest value passes even where it is large relative to a small value.
  const Tensor ref = make(DType::f32, {1024.0, 1e-3});
  const double big_ulp = 2 * half_ulp(1024.0, DType::f32);
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1024.0, 1e-3 + big_ulp}), {}, false).kind, Mismatch::none);
}

TEST(HarnessCompare, LongReductionsEarnAnAccumulationAllowance) {
  const Tensor ref = make(DType::f32, {1.0, 2.0});
  const double ulp = 2 * half_ulp(1.0, DType::f32);
  const Tensor off = make(DType::f32, {1.0 + 12 * ulp, 2.0});  // 12 half-ulps of 2.0, the largest value
  EXPECT_EQ(compare_output(ref, off, {}, false, 1).kind, Mismatch::too_large);
  // K = 4096: baseline 1 + 0.25 * 64 = 17 half-ulps (at 2.0), threshold 136 half-ulps of 2.0.
  const Comparison reduced = compare_output(ref, off, {}, false, 4096);
  EXPECT_EQ(reduced.kind, Mismatch::none) << reduced.describe();
  // ... but a bias fp32 accumulation cannot explain still fails.
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1.0 + 1e-3, 2.0}), {}, false, 4096).kind, Mismatch::too_large);
  // bf16 outputs: the allowance is in f32 ulps, negligible next to a bf16 ulp.
  const Tensor bref = make(DType::bf16, {1.0});
  const double bulp = 2 * half_ulp(1.0, DType::bf16);
  EXPECT_EQ(compare_output(bref, make(DType::bf16, {1.0 + 5 * bulp}), {}, false, 4096).kind, Mismatch::too_large);
}

TEST(HarnessCompare, NanAndInfMustSitWhereTheReferenceHasThem) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor ref = make(DType::f32, {1.0, nan, inf, -inf});
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1.0, nan, inf, -inf}), {}, false).kind, Mismatch::none);
  const Comparison extra_nan = compare_output(ref, make(DType::f32, {nan, nan, inf, -inf}), {}, false);
  EXPECT_EQ(extra_nan.kind, Mismatch::non_finite);
  EXPECT_EQ(extra_nan.first_element, 0);
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1.0, 0.0, inf, -inf}), {}, false).kind, Mismatch::non_finite);
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1.0, nan, -inf, -inf}), {}, false).kind, Mismatch::non_finite);
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1.0, nan, inf, inf}), {}, false).kind, Mismatch::non_finite);
}

TEST(HarnessCompare, ExactTasksAndIntegersMatchBitForBit) {
  const Tensor ref = make(DType::f32, {1.0, 2.0});
  const double ulp = 2 * half_ulp(1.0, DType::f32);
  const Comparison c = compare_output(ref, make(DType::f32, {1.0 + ulp, 2.0}), {}, true);
  EXPECT_EQ(c.kind, Mismatch::not_exact);
  EXPECT_EQ(c.first_element, 0);
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1.0, 2.0}), {}, true).kind, Mismatch::none);
  // -0 and +0 differ in bits.
  EXPECT_EQ(compare_output(make(DType::f32, {0.0}), make(DType::f32, {-0.0}), {}, true).kind, Mismatch::not_exact);
  EXPECT_EQ(compare_output(make(DType::i32, {3, 4}), make(DType::i32, {3, 5}), {}, false).kind, Mismatch::not_exact);
}

TEST(HarnessCompare, AllZeroReferenceUsesTheAbsoluteSlack) {
  const Tensor ref = make(DType::f32, {0.0, 0.0});
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1e-39, 0.0}), {}, false).kind, Mismatch::none);  // < FLT_MIN
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1e-30, 0.0}), {}, false).kind, Mismatch::too_large);
  TolerancePolicy slack;
  slack.absolute_slack = 1e-6;
  EXPECT_EQ(compare_output(ref, make(DType::f32, {1e-7, 0.0}), slack, false).kind, Mismatch::none);
}

TEST(HarnessCompare, StatsMergeKeepsTheTrialClosestToFailing) {
  ErrorStats a, b;
  a.elements = 2;
  a.max_abs_error = 1;
  a.threshold = 4;
  a.mean_abs_error = 1;
  a.worst_element = 0;
  a.max_ulp_error = 9;
  b.elements = 2;
  b.max_abs_error = 3;  // larger, but far from its own threshold
  b.threshold = 100;
  b.mean_abs_error = 3;
  b.worst_element = 1;
  merge_error_stats(a, b);
  EXPECT_EQ(a.elements, 4);
  EXPECT_EQ(a.max_abs_error, 1);
  EXPECT_EQ(a.worst_element, 0);
  EXPECT_EQ(a.mean_abs_error, 2);
  EXPECT_EQ(a.max_ulp_error, 9);
  ErrorStats c = b;
  c.max_abs_error = 90;
  merge_error_stats(a, c);
  EXPECT_EQ(a.max_abs_error, 90);
  EXPECT_EQ(a.threshold, 100);
}

}  // namespace
}  // namespace kiln::harness
