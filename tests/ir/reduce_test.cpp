// Reductions on the reference executor: hand-computed sums, means and maxima over one and several axes,
// keepdims, NaN propagation, accumulation in double with one final rounding, empty groups, and every
// inference error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace kiln {
namespace {

using test::f32;
using test::fails_with;
using test::infer;
using test::run1;
using test::tensor;
using test::type;

Attrs axes(std::vector<int64_t> list, int64_t keepdims = 0) {
  return Attrs{{"axes", std::move(list)}, {"keepdims", keepdims}};
}

// x [2,3] = [[1,2,3],[4,5,6]]
Tensor small() { return f32({2, 3}, {1, 2, 3, 4, 5, 6}); }

TEST(Reduce, SumOverEachAxis) {
  EXPECT_EQ(run1(Op::reduce_sum, {small()}, axes({1})).to_f64(), (std::vector<double>{6, 15}));
  EXPECT_EQ(run1(Op::reduce_sum, {small()}, axes({0})).to_f64(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(run1(Op::reduce_sum, {small()}, axes({-1})).to_f64(), (std::vector<double>{6, 15}));
  const Tensor all = run1(Op::reduce_sum, {small()}, axes({1, 0}));
  EXPECT_EQ(all.shape(), Shape{});
  EXPECT_EQ(all.to_f64(), std::vector<double>{21});
}

TEST(Reduce, KeepdimsKeepsSizeOneAxes) {
  const Tensor kept = run1(Op::reduce_sum, {small()}, axes({1}, 1));
  EXPECT_EQ(kept.shape(), (Shape{2, 1}));
  EXPECT_EQ(kept.to_f64(), (std::vector<double>{6, 15}));
  EXPECT_EQ(run1(Op::reduce_sum, {small()}, axes({0})).shape(), Shape{3});
  EXPECT_EQ(run1(Op::reduce_mean, {small()}, axes({0, 1}, 1)).shape(), (Shape{1, 1}));
}

TEST(Reduce, MeanMaxAmax) {
  EXPECT_EQ(run1(Op::reduce_mean, {small()}, axes({1})).to_f64(), (std::vector<double>{2, 5}));
  EXPECT_EQ(run1(Op::reduce_mean, {small()}, axes({0})).to_f64(), (std::vector<double>{2.5, 3.5, 4.5}));
  const Tensor signed_x = f32({2, 3}, {-7, 2, 3, -1, -5, -2});
  EXPECT_EQ(run1(Op::reduce_max, {signed_x}, axes({1})).to_f64(), (std::vector<double>{3, -1}));
  EXPECT_EQ(run1(Op::reduce_amax, {signed_x}, axes({1})).to_f64(), (std::vector<double>{7, 5}));
  EXPECT_EQ(run1(Op::reduce_max, {signed_x}, axes({0})).to_f64(), (std::vector<double>{-1, 2, 3}));
  const Tensor neg_inf = f32({2}, {-INFINITY, -INFINITY});
  EXPECT_EQ(run1(Op::reduce_max, {neg_inf}, axes({0})).get(0), -std::numeric_limits<double>::infinity());
}

// Reducing the middle and outer axes of [2,3,4] against a direct triple loop.
TEST(Reduce, NonAdjacentAxesMatchALoop) {
  std::vector<double> values(24);
  for (int i = 0; i < 24; ++i) values[i] = (i * 7 % 11) - 5.5;  // mixed signs, no pattern aligned to axes
  const Tensor x = f32({2, 3, 4}, values);
  const Tensor sum = run1(Op::reduce_sum, {x}, axes({0, 2}));
  const Tensor max = run1(Op::reduce_max, {x}, axes({2, 0}, 1));
  EXPECT_EQ(sum.shape(), Shape{3});
  EXPECT_EQ(max.shape(), (Shape{1, 3, 1}));
  ASSERT_EQ(sum.numel(), 3);
  ASSERT_EQ(max.numel(), 3);
  for (int j = 0; j < 3; ++j) {
    double s = 0, m = -INFINITY;
    for (int i = 0; i < 2; ++i) {
      for (int k = 0; k < 4; ++k) {
        s += values[i * 12 + j * 4 + k];
        m = std::max(m, values[i * 12 + j * 4 + k]);
      }
    }
    EXPECT_EQ(sum.get(j), s) << "column " << j;
    EXPECT_EQ(max.get(j), m) << "column " << j;
  }
}

TEST(Reduce, MaxAndAmaxPropagateNaN) {
  const Tensor x = f32({2, 3}, {NAN, 1, 2, 3, 4, NAN});
  for (Op op : {Op::reduce_max, Op::reduce_amax}) {
    const Tensor y = run1(op, {x}, axes({1}));
    ASSERT_EQ(y.numel(), 2);
    EXPECT_TRUE(std::isnan(y.get(0))) << op_name(op) << ": NaN first";
    EXPECT_TRUE(std::isnan(y.get(1))) << op_name(op) << ": NaN last";
  }
  EXPECT_TRUE(std::isnan(run1(Op::reduce_sum, {x}, axes({1})).get(0)));
}

// Sums accumulate in double and round once: 1 + 2^-8 + 2^-8 = 1 + 2^-7 is a bf16 value, though each partial
// sum 1 + 2^-8 would round back to 1 in bf16.
TEST(Reduce, Bf16AccumulatesInDoubleAndRoundsOnce) {
  const double t = std::ldexp(1.0, -8);
  const Tensor x = tensor(DType::bf16, {2, 3}, {1, t, t, 1, t, 0});
  const Tensor y = run1(Op::reduce_sum, {x}, axes({1}));
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.to_f64(), (std::vector<double>{1 + 2 * t, 1}));  // the second, 1 + 2^-8, ties to even 1
  const Tensor mean = run1(Op::reduce_mean, {tensor(DType::bf16, {3}, {1, 1, 2})}, axes({0}));
  EXPECT_EQ(mean.get(0), round_to_dtype(4.0 / 3.0, DType::bf16));
}

TEST(Reduce, IntegerInputsKeepTheirDtype) {
  const Tensor x = tensor(DType::i32, {2, 2}, {1, -2, 30, 4});
  const Tensor sum = run1(Op::reduce_sum, {x}, axes({1}));
  EXPECT_EQ(sum.dtype(), DType::i32);
  EXPECT_EQ(sum.to_f64(), (std::vector<double>{-1, 34}));
  EXPECT_EQ(run1(Op::reduce_amax, {x}, axes({0, 1})).get_int(0), 30);
}

TEST(Reduce, EmptyGroups) {
  const Tensor x(DType::f32, {0, 3});
  EXPECT_EQ(run1(Op::reduce_sum, {x}, axes({0})).to_f64(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(run1(Op::reduce_amax, {x}, axes({0})).to_f64(), (std::vector<double>{0, 0, 0}));
  const Tensor mean = run1(Op::reduce_mean, {x}, axes({0}));
  ASSERT_EQ(mean.numel(), 3);
  EXPECT_TRUE(std::isnan(mean.get(0)));  // 0 / 0, as torch.mean of an empty axis
  // Reducing the other axis leaves an empty output: nothing to compute, max included.
  EXPECT_EQ(run1(Op::reduce_max, {x}, axes({1})).shape(), Shape{0});
}

TEST(Reduce, InferErrors) {
  const TensorType x = type(DType::f32, {2, 3});
  EXPECT_TRUE(fails_with(infer(Op::reduce_sum, {x}), ErrorCode::invalid_argument,
                         "missing required attribute 'axes' of reduce_sum"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_sum, {x}, axes({})), ErrorCode::invalid_argument,
                         "attribute 'axes' of reduce_sum must name at least one axis"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_mean, {x}, axes({2})), ErrorCode::invalid_argument,
                         "axis 2 of reduce_mean is out of range for f32[2,3] (rank 2)"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_max, {x}, axes({-3})), ErrorCode::invalid_argument,
                         "axis -3 of reduce_max is out of range for f32[2,3] (rank 2)"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_amax, {x}, axes({1, -1})), ErrorCode::invalid_argument,
                         "attribute 'axes' of reduce_amax names axis 1 twice ([1,-1])"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_sum, {x}, axes({0}, 2)), ErrorCode::invalid_argument,
                         "attribute 'keepdims' of reduce_sum must be 0 or 1, got 2"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_sum, {type(DType::f32, {})}, axes({0})), ErrorCode::invalid_argument,
                         "axis 0 of reduce_sum is out of range for f32[] (rank 0)"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_mean, {type(DType::i32, {4})}, axes({0})), ErrorCode::shape_error,
                         "reduce_mean needs a floating input, got i32[4] (cast it first)"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_max, {type(DType::f32, {3, 0})}, axes({1})), ErrorCode::shape_error,
                         "reduce_max over the empty axis 1 of f32[3,0] has no defined result"));
  EXPECT_TRUE(fails_with(infer(Op::reduce_sum, {x}, {{"axes", int64_t{1}}}), ErrorCode::invalid_argument,
                         "attribute 'axes' of reduce_sum must be int list, got int"));
}

TEST(Reduce, TraitsAndCost) {
  for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_amax}) {
    EXPECT_TRUE(op_has_trait(op, kTraitReduction)) << op_name(op);
    EXPECT_FALSE(op_has_trait(op, kTraitElementwise)) << op_name(op);
  }
  const std::vector<TensorType> in = {type(DType::f32, {4, 8})};
  const std::vector<TensorType> out = {type(DType::f32, {4})};
  const Attrs a = axes({1});
  const OpCost sum = op_def(Op::reduce_sum).cost(OpCall{in, a}, out);
  EXPECT_EQ(sum.flops, 32);  // one add per input element
  EXPECT_EQ(sum.bytes, 128 + 16);
  EXPECT_EQ(op_def(Op::reduce_mean).cost(OpCall{in, a}, out).flops, 32 + 4);
  EXPECT_EQ(op_def(Op::reduce_amax).cost(OpCall{in, a}, out).flops, 64);
}

}  // namespace
}  // namespace kiln
