// Source ops (full, arange) on the reference executor: values, rounding to the output dtype, empty and scalar
// shapes, and every inference error.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.h"

namespace kiln {
namespace {

using test::fails_with;
using test::infer;
using test::run1;
using test::type;

Attrs full_attrs(Shape shape, double value, const char* dtype = nullptr) {
  Attrs attrs{{"shape", shape}, {"value", value}};
  if (dtype) attrs.set("dtype", std::string(dtype));
  return attrs;
}

TEST(Source, FullFillsEveryElement) {
  const Tensor y = run1(Op::full, {}, full_attrs({2, 3}, 1.5));
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_f64(), std::vector<double>(6, 1.5));
}

TEST(Source, FullRoundsTheValueToItsDtype) {
  const Tensor bf = run1(Op::full, {}, full_attrs({3}, 0.1, "bf16"));
  EXPECT_EQ(bf.dtype(), DType::bf16);
  EXPECT_EQ(bf.to_f64(), std::vector<double>(3, 0.10009765625));  // nearest bf16 to 0.1
  const Tensor e4 = run1(Op::full, {}, full_attrs({1}, -1000.0, "f8e4m3"));
  ASSERT_EQ(e4.numel(), 1);
  EXPECT_TRUE(std::isnan(e4.get(0)));  // beyond 448: e4m3 has no infinity
  const Tensor i = run1(Op::full, {}, full_attrs({2}, -2.7, "i32"));
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.get_int(0), -2);
  const Tensor b = run1(Op::full, {}, full_attrs({2}, 0.5, "bool"));
  EXPECT_EQ(b.get_int(1), 1);
}

TEST(Source, FullScalarAndEmptyShapes) {
  const Tensor scalar = run1(Op::full, {}, full_attrs({}, 7.0));
  EXPECT_EQ(scalar.shape(), Shape{});
  ASSERT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.get(0), 7.0);
  const Tensor empty = run1(Op::full, {}, full_attrs({0, 4}, 7.0));
  EXPECT_EQ(empty.shape(), (Shape{0, 4}));
  EXPECT_EQ(empty.numel(), 0);
}

TEST(Source, FullInferErrors) {
  EXPECT_TRUE(fails_with(infer(Op::full, {}, {{"value", 1.0}}), ErrorCode::invalid_argument,
                         "missing required attribute 'shape' of full"));
  EXPECT_TRUE(fails_with(infer(Op::full, {}, {{"shape", Shape{2}}}), ErrorCode::invalid_argument,
                         "missing required attribute 'value' of full"));
  EXPECT_TRUE(fails_with(infer(Op::full, {}, full_attrs({2, -1}, 1.0)), ErrorCode::invalid_argument,
                         "attribute 'shape' of full must have no negative dimension, got [2,-1]"));
  EXPECT_TRUE(fails_with(infer(Op::full, {}, full_attrs({2}, 1.0, "float32")), ErrorCode::invalid_argument,
                         "attribute 'dtype' names an unknown dtype 'float32'"));
  EXPECT_TRUE(fails_with(infer(Op::full, {}, {{"shape", Shape{2}}, {"value", std::string("one")}}),
                         ErrorCode::invalid_argument, "attribute 'value' of full must be float, got string"));
  EXPECT_TRUE(fails_with(infer(Op::full, {type(DType::f32, {2})}, full_attrs({2}, 1.0)), ErrorCode::shape_error,
                         "full takes 0 inputs, got 1"));
}

Attrs arange_attrs(int64_t size, double start = 0, double step = 1, const char* dtype = nullptr) {
  Attrs attrs{{"size", size}, {"start", start}, {"step", step}};
  if (dtype) attrs.set("dtype", std::string(dtype));
  return attrs;
}

TEST(Source, ArangeValues) {
  const Tensor y = run1(Op::arange, {}, {{"size", int64_t{5}}});
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.shape(), Shape{5});
  EXPECT_EQ(y.to_f64(), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(run1(Op::arange, {}, arange_attrs(4, 1, 0.5)).to_f64(), (std::vector<double>{1, 1.5, 2, 2.5}));
  EXPECT_EQ(run1(Op::arange, {}, arange_attrs(3, 2, -1.5)).to_f64(), (std::vector<double>{2, 0.5, -1}));
  EXPECT_EQ(run1(Op::arange, {}, arange_attrs(0)).numel(), 0);
}

// Each element is start + i * step, computed in double: no drift from accumulating in the output dtype.
TEST(Source, ArangeDoesNotAccumulate) {
  const Tensor y = run1(Op::arange, {}, arange_attrs(100000, 0, 0.1));
  ASSERT_EQ(y.numel(), 100000);
  EXPECT_EQ(y.get(99999), round_to_dtype(99999 * 0.1, DType::f32));
  EXPECT_EQ(y.get(12345), round_to_dtype(12345 * 0.1, DType::f32));
}

TEST(Source, ArangeRoundsToItsDtype) {
  const Tensor bf = run1(Op::arange, {}, arange_attrs(4, 256, 1, "bf16"));
  // bf16 has 8 significant bits: 257 ties to 256, 259 ties to 260.
  EXPECT_EQ(bf.to_f64(), (std::vector<double>{256, 256, 258, 260}));
  const Tensor i = run1(Op::arange, {}, arange_attrs(3, -1, 0.75, "i64"));
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_f64(), (std::vector<double>{-1, 0, 0}));  // -1, -0.25, 0.5 truncate toward zero
}

TEST(Source, ArangeInferErrors) {
  EXPECT_TRUE(fails_with(infer(Op::arange, {}, {}), ErrorCode::invalid_argument,
                         "missing required attribute 'size' of arange"));
  EXPECT_TRUE(fails_with(infer(Op::arange, {}, arange_attrs(-1)), ErrorCode::invalid_argument,
                         "attribute 'size' of arange must be >= 0, got -1"));
  EXPECT_TRUE(fails_with(infer(Op::arange, {}, {{"size", 2.0}}), ErrorCode::invalid_argument,
                         "attribute 'size' of arange must be int, got float"));
  EXPECT_TRUE(fails_with(infer(Op::arange, {}, arange_attrs(2, 0, 1, "f128")), ErrorCode::invalid_argument,
                         "unknown dtype 'f128'"));
  EXPECT_TRUE(fails_with(infer(Op::arange, {}, {{"size", int64_t{2}}, {"stop", 1.0}}), ErrorCode::invalid_argument,
                         "unknown attribute 'stop' for arange (known: size, start, step, dtype)"));
}

TEST(Source, TraitsAndCost) {
  EXPECT_TRUE(op_has_trait(Op::full, kTraitSource));
  EXPECT_TRUE(op_has_trait(Op::arange, kTraitSource));
  EXPECT_EQ(op_def(Op::full).min_inputs, 0);
  EXPECT_EQ(op_def(Op::arange).max_inputs, 0);
  const std::vector<TensorType> none;
  const std::vector<TensorType> filled = {type(DType::bf16, {4, 4})};
  const OpCost fill = op_def(Op::full).cost(OpCall{none, Attrs{}}, filled);
  EXPECT_EQ(fill.flops, 0);
  EXPECT_EQ(fill.bytes, 32);
  const std::vector<TensorType> range = {type(DType::f32, {8})};
  const OpCost ramp = op_def(Op::arange).cost(OpCall{none, Attrs{}}, range);
  EXPECT_EQ(ramp.flops, 16);
  EXPECT_EQ(ramp.bytes, 32);
}

}  // namespace
}  // namespace kiln
