// Elementwise ops on the reference executor: numpy broadcasting, each function's value at hand-computed
// points, NaN propagation of max/min, gelu's two forms, swiglu, cast (to bf16, FP8, integers and bool),
// single rounding of outputs, and every inference error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "op_test_util.h"

namespace kiln {
namespace {

using test::f32;
using test::fails_with;
using test::infer;
using test::run1;
using test::tensor;
using test::type;

// A double rounded to f32, as the reference stores an f32 output.
double as_f32(double v) { return round_to_dtype(v, DType::f32); }

TEST(Elementwise, AddBroadcastsTrailingAxes) {
  const Tensor y = run1(Op::add, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {10, 20, 30})});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_f64(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
}

TEST(Elementwise, BroadcastsSizeOneAxesBothWays) {
  // [2,1] - [1,3] -> [2,3], y[i][j] = a[i] - b[j]
  const Tensor y = run1(Op::sub, {f32({2, 1}, {10, 20}), f32({1, 3}, {1, 2, 3})});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_f64(), (std::vector<double>{9, 8, 7, 19, 18, 17}));
  // A scalar on the left: order matters for div.
  const Tensor z = run1(Op::div, {f32({}, {1}), f32({2, 2}, {1, 2, 4, 8})});
  EXPECT_EQ(z.shape(), (Shape{2, 2}));
  EXPECT_EQ(z.to_f64(), (std::vector<double>{1, 0.5, 0.25, 0.125}));
}

TEST(Elementwise, BinaryValues) {
  const Tensor a = f32({4}, {2, -3, 0.5, 9});
  const Tensor b = f32({4}, {10, 2, -2, 0.5});
  EXPECT_EQ(run1(Op::mul, {a, b}).to_f64(), (std::vector<double>{20, -6, -1, 4.5}));
  EXPECT_EQ(run1(Op::max, {a, b}).to_f64(), (std::vector<double>{10, 2, 0.5, 9}));
  EXPECT_EQ(run1(Op::min, {a, b}).to_f64(), (std::vector<double>{2, -3, -2, 0.5}));
  EXPECT_EQ(run1(Op::pow, {a, b}).to_f64(), (std::vector<double>{1024, 9, 4, 3}));
}

TEST(Elementwise, MaxAndMinPropagateNaN) {
  const Tensor a = f32({3}, {NAN, 1, NAN});
  const Tensor b = f32({3}, {1, NAN, NAN});
  for (Op op : {Op::max, Op::min}) {
    const Tensor y = run1(op, {a, b});
    ASSERT_EQ(y.numel(), 3);
    for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(y.get(i))) << op_name(op) << " element " << i;
  }
}

TEST(Elementwise, UnaryValues) {
  struct Case {
    Op op;
    double x;
    double expected;
  };
  const Case cases[] = {
      {Op::neg, 2.5, -2.5},
      {Op::abs, -3.25, 3.25},
      {Op::exp, 1.0, std::numbers::e},
      {Op::log, 0.5, -std::numbers::ln2},
      {Op::sqrt, 2.0, std::numbers::sqrt2},
      {Op::rsqrt, 4.0, 0.5},
      {Op::reciprocal, 8.0, 0.125},
      {Op::tanh, 0.5, 0.46211715726000974},
      {Op::sigmoid, 2.0, 0.8807970779778823},
      {Op::sigmoid, 0.0, 0.5},
      {Op::silu, 1.0, 0.7310585786300049},
      {Op::silu, 2.0, 1.7615941559557646},
      {Op::cos, 0.0, 1.0},
      {Op::cos, 1.0, 0.5403023058681398},
      {Op::sin, 1.0, 0.8414709848078965},
  };
  for (const Case& c : cases) {
    const Tensor y = run1(c.op, {f32({1}, {c.x})});
    ASSERT_EQ(y.numel(), 1);
    EXPECT_EQ(y.get(0), as_f32(c.expected)) << op_name(c.op) << "(" << c.x << ")";
  }
  EXPECT_TRUE(std::isnan(run1(Op::sqrt, {f32({1}, {-1})}).get(0)));
  EXPECT_EQ(run1(Op::log, {f32({1}, {0})}).get(0), -std::numeric_limits<double>::infinity());
}

TEST(Elementwise, NegAndAbsAcceptIntegers) {
  const Tensor x = tensor(DType::i32, {3}, {-4, 0, 7});
  const Tensor y = run1(Op::abs, {x});
  EXPECT_EQ(y.dtype(), DType::i32);
  EXPECT_EQ(y.to_f64(), (std::vector<double>{4, 0, 7}));
  EXPECT_EQ(run1(Op::neg, {x}).to_f64(), (std::vector<double>{4, 0, -7}));
}

TEST(Elementwise, GeluErfAndTanhForms) {
  const Tensor x = f32({2}, {1.0, -1.0});
  const Tensor exact = run1(Op::gelu, {x});
  const Tensor approx = run1(Op::gelu, {x}, {{"approximate", std::string("tanh")}});
  const Tensor named_exact = run1(Op::gelu, {x}, {{"approximate", std::string("none")}});
  ASSERT_EQ(exact.numel(), 2);
  ASSERT_EQ(approx.numel(), 2);
  EXPECT_EQ(exact.get(0), as_f32(0.8413447460685429));
  EXPECT_EQ(exact.get(1), as_f32(-0.15865525393145707));
  EXPECT_EQ(approx.get(0), as_f32(0.8411919906082768));
  EXPECT_EQ(approx.get(1), as_f32(-0.15880800939172324));
  EXPECT_TRUE(named_exact.bitwise_equal(exact));
  EXPECT_NE(exact.get(0), approx.get(0));  // the forms differ by ~1.5e-4 at 1: large enough to tell apart
}

TEST(Elementwise, SwigluGatesTheFirstHalf) {
  // x [2,4]: gate = x[:, :2], up = x[:, 2:]
  const Tensor x = f32({2, 4}, {1, 2, 3, 4, 0, -1, 5, 6});
  const Tensor y = run1(Op::swiglu, {x});
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  ASSERT_EQ(y.numel(), 4);
  EXPECT_EQ(y.get(0), as_f32(0.7310585786300049 * 3));
  EXPECT_EQ(y.get(1), as_f32(1.7615941559557646 * 4));
  EXPECT_EQ(y.get(2), 0.0);
  EXPECT_EQ(y.get(3), as_f32(-0.2689414213699951 * 6));
}

// The reference rounds once, from the exact double result, to the output dtype.
TEST(Elementwise, Bf16OutputsRoundOnceToNearestEven) {
  const double t = std::ldexp(1.0, -8);
  const Tensor a = tensor(DType::bf16, {3}, {1.0, 1.0 + 2 * t, 1.0});
  const Tensor b = tensor(DType::bf16, {3}, {t, t, t + std::ldexp(1.0, -15)});
  const Tensor y = run1(Op::add, {a, b});
  EXPECT_EQ(y.dtype(), DType::bf16);
  // 1 + 2^-8 ties to 1; 1 + 3*2^-8 ties to 1 + 2^-6; just above the tie rounds up.
  EXPECT_EQ(y.to_f64(), (std::vector<double>{1.0, 1.0 + 4 * t, 1.0 + 2 * t}));
}

TEST(Elementwise, IntegerArithmeticSaturates) {
  const Tensor a = tensor(DType::i32, {2}, {2e9, -7});
  const Tensor b = tensor(DType::i32, {2}, {2e9, 2});
  const Tensor sum = run1(Op::add, {a, b});
  EXPECT_EQ(sum.dtype(), DType::i32);
  EXPECT_EQ(sum.get_int(0), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(run1(Op::div, {a, b}).get_int(1), -3);  // truncates toward zero
}

TEST(Elementwise, CastToBf16AndFp8) {
  const Tensor x = f32({6}, {0.3, 464, 500, -1e-4, 1.0 + std::ldexp(1.0, -8), -0.0});
  const Tensor bf = run1(Op::cast, {x}, {{"to", std::string("bf16")}});
  EXPECT_EQ(bf.dtype(), DType::bf16);
  EXPECT_EQ(bf.get(0), bf16_bits_to_double(bf16_bits_from_double(static_cast<float>(0.3))));
  EXPECT_EQ(bf.get(4), 1.0);

  const Tensor e4 = run1(Op::cast, {x}, {{"to", std::string("f8e4m3")}});
  ASSERT_EQ(e4.numel(), 6);
  EXPECT_EQ(e4.dtype(), DType::f8e4m3);
  EXPECT_EQ(e4.get(0), 0.3125);  // 0.3 lies above the midpoint 0.296875 of 0.28125 and 0.3125
  EXPECT_EQ(e4.get(1), 448.0);
  EXPECT_TRUE(std::isnan(e4.get(2)));
  EXPECT_EQ(e4.get(3), 0.0);  // below half the smallest subnormal (2^-10)
  EXPECT_TRUE(std::signbit(e4.get(3)));
  EXPECT_TRUE(std::signbit(e4.get(5)));

  const Tensor e5 = run1(Op::cast, {f32({3}, {0.3, 1e5, -60000})}, {{"to", std::string("f8e5m2")}});
  ASSERT_EQ(e5.numel(), 3);
  EXPECT_EQ(e5.get(0), 0.3125);
  EXPECT_EQ(e5.get(1), std::numeric_limits<double>::infinity());
  EXPECT_EQ(e5.get(2), -57344.0);
}

TEST(Elementwise, CastToIntegersAndBool) {
  const Tensor x = f32({5}, {2.7, -2.7, 3e9, NAN, 0});
  const Tensor i = run1(Op::cast, {x}, {{"to", std::string("i32")}});
  EXPECT_EQ(i.dtype(), DType::i32);
  ASSERT_EQ(i.numel(), 5);
  EXPECT_EQ(i.get_int(0), 2);
  EXPECT_EQ(i.get_int(1), -2);
  EXPECT_EQ(i.get_int(2), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(i.get_int(3), 0);
  const Tensor b = run1(Op::cast, {x}, {{"to", std::string("bool")}});
  EXPECT_EQ(b.to_f64(), (std::vector<double>{1, 1, 1, 1, 0}));
  const Tensor back = run1(Op::cast, {b}, {{"to", std::string("f32")}});
  EXPECT_EQ(back.to_f64(), (std::vector<double>{1, 1, 1, 1, 0}));
}

// Integer to integer casts go through int64, not double, so values above 2^53 survive.
TEST(Elementwise, CastBetweenIntegersIsExact) {
  Tensor x(DType::i64, {2});
  x.set_int(0, (int64_t{1} << 53) + 1);
  x.set_int(1, -5);
  const Tensor y = run1(Op::cast, {x}, {{"to", std::string("i64")}});
  EXPECT_TRUE(y.bitwise_equal(x));
  const Tensor z = run1(Op::cast, {x}, {{"to", std::string("i32")}});
  EXPECT_EQ(z.get_int(1), -5);
}

TEST(Elementwise, InferredTypes) {
  auto r = infer(Op::mul, {type(DType::bf16, {4, 1, 8}), type(DType::bf16, {3, 1})});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)[0], type(DType::bf16, {4, 3, 8}));
  auto c = infer(Op::cast, {type(DType::f32, {2, 3})}, {{"to", std::string("f8e5m2")}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[0], type(DType::f8e5m2, {2, 3}));
  auto s = infer(Op::swiglu, {type(DType::f16, {5, 6})});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0], type(DType::f16, {5, 3}));
}

TEST(Elementwise, InferErrors) {
  const TensorType x = type(DType::f32, {2, 3});
  EXPECT_TRUE(fails_with(infer(Op::add, {x, type(DType::f32, {4})}), ErrorCode::shape_error,
                         "shapes [2,3] and [4] do not broadcast"));
  EXPECT_TRUE(fails_with(infer(Op::add, {x, type(DType::bf16, {3})}), ErrorCode::shape_error,
                         "input 0 is f32, input 1 is bf16"));
  EXPECT_TRUE(fails_with(infer(Op::add, {x}), ErrorCode::shape_error, "add takes 2 inputs, got 1"));
  EXPECT_TRUE(fails_with(infer(Op::exp, {type(DType::i32, {2})}), ErrorCode::shape_error,
                         "needs a floating input, got i32[2]"));
  EXPECT_TRUE(fails_with(infer(Op::add, {x, x}, {{"alpha", 1.0}}), ErrorCode::invalid_argument,
                         "unknown attribute 'alpha' for add (it takes none)"));
  EXPECT_TRUE(fails_with(infer(Op::gelu, {x}, {{"approximate", std::string("fast")}}), ErrorCode::invalid_argument,
                         "must be \"none\" or \"tanh\", got \"fast\""));
  EXPECT_TRUE(fails_with(infer(Op::gelu, {x}, {{"approximate", int64_t{1}}}), ErrorCode::invalid_argument,
                         "attribute 'approximate' of gelu must be string, got int"));
  EXPECT_TRUE(fails_with(infer(Op::swiglu, {type(DType::f32, {2, 5})}), ErrorCode::shape_error,
                         "swiglu needs an even last dimension, got f32[2,5]"));
  EXPECT_TRUE(fails_with(infer(Op::swiglu, {type(DType::f32, {})}), ErrorCode::shape_error,
                         "swiglu needs an even last dimension, got f32[]"));
  EXPECT_TRUE(fails_with(infer(Op::swiglu, {type(DType::i32, {2, 4})}), ErrorCode::shape_error,
                         "swiglu needs a floating input, got i32[2,4]"));
  EXPECT_TRUE(fails_with(infer(Op::cast, {x}), ErrorCode::invalid_argument, "missing required attribute 'to' of cast"));
  EXPECT_TRUE(fails_with(infer(Op::cast, {x}, {{"to", std::string("f64")}}), ErrorCode::invalid_argument,
                         "attribute 'to' names an unknown dtype 'f64'"));
  EXPECT_TRUE(fails_with(infer(Op::neg, {type(DType::f32, {2, -1})}), ErrorCode::shape_error, "negative dimension"));
}

TEST(Elementwise, TraitsAndCost) {
  EXPECT_TRUE(op_has_trait(Op::add, kTraitCommutative));
  EXPECT_FALSE(op_has_trait(Op::sub, kTraitCommutative));
  EXPECT_TRUE(op_has_trait(Op::exp, kTraitTranscendental));
  EXPECT_TRUE(op_has_trait(Op::cast, kTraitElementwise));
  const TensorType a = type(DType::f32, {2, 3}), b = type(DType::f32, {3});
  const std::vector<TensorType> inputs = {a, b};
  const std::vector<TensorType> outputs = {a};
  const OpCost cost = op_def(Op::add).cost(OpCall{inputs, Attrs{}}, outputs);
  EXPECT_EQ(cost.flops, 6);
  EXPECT_EQ(cost.bytes, 24 + 12 + 24);
}

}  // namespace
}  // namespace kiln
