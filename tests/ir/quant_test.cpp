// FP8 quantize/dequantize on the reference executor: scale shapes for each granularity, scales that are
// exact for constructed groups, the round-trip error bound (half an FP8 ulp of the scaled value), each
// group's largest element landing on the FP8 maximum, NaN handling, agreement between equivalent
// granularities, and every inference error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "op_test_util.h"

namespace kiln {
namespace {

using test::f32;
using test::fails_with;
using test::infer;
using test::run;
using test::run1;
using test::tensor;
using test::type;

Attrs quant(const char* granularity, std::vector<int64_t> block = {}, const char* dtype = nullptr) {
  Attrs attrs{{"granularity", std::string(granularity)}};
  if (!block.empty()) attrs.set("block", std::move(block));
  if (dtype) attrs.set("dtype", std::string(dtype));
  return attrs;
}

Shape scale_shape(const TensorType& x, const Attrs& attrs) {
  auto r = infer(Op::quantize, {x}, attrs);
  EXPECT_TRUE(r.ok()) << r.error().message;
  if (!r.ok() || r->size() != 2) return {-1};
  EXPECT_EQ((*r)[0], type(DType::f8e4m3, x.shape));
  EXPECT_EQ((*r)[1].dtype, DType::f32);
  return (*r)[1].shape;
}

TEST(Quant, ScaleShapes) {
  const TensorType x = type(DType::bf16, {4, 300});
  EXPECT_EQ(scale_shape(x, quant("tensor")), Shape{});
  EXPECT_EQ(scale_shape(x, quant("token")), (Shape{4, 1}));
  EXPECT_EQ(scale_shape(x, {}), (Shape{4, 1}));  // token is the default
  EXPECT_EQ(scale_shape(type(DType::f32, {2, 3, 8}), quant("token")), (Shape{2, 3, 1}));
  EXPECT_EQ(scale_shape(x, quant("block")), (Shape{4, 3}));  // default block [1,128]: ceil(300/128) = 3
  EXPECT_EQ(scale_shape(type(DType::bf16, {256, 300}), quant("block", {128, 128})), (Shape{2, 3}));
  EXPECT_EQ(scale_shape(type(DType::bf16, {257, 128}), quant("block", {128, 128})), (Shape{3, 1}));
  EXPECT_EQ(scale_shape(type(DType::f32, {2, 3, 300}), quant("block")), (Shape{2, 3, 3}));
  EXPECT_EQ(scale_shape(type(DType::f32, {5}), quant("block", {2})), Shape{3});
  EXPECT_EQ(scale_shape(type(DType::f32, {}), quant("tensor")), Shape{});
  // k-major: the grid's last axis first, the activation layout a block-scaled GEMM reads.
  Attrs k_major = quant("block");
  k_major.set("scale_layout", std::string("k_major"));
  EXPECT_EQ(scale_shape(x, k_major), (Shape{3, 4}));
  EXPECT_EQ(scale_shape(type(DType::f32, {2, 3, 300}), k_major), (Shape{3, 2, 3}));
  auto e5 = infer(Op::quantize, {x}, quant("token", {}, "f8e5m2"));
  ASSERT_TRUE(e5.ok());
  EXPECT_EQ((*e5)[0], type(DType::f8e5m2, {4, 300}));
}

// Row 0 has amax 448 (scale exactly 1, so q = x), row 1 amax 896 (scale 2), row 2 is all zero (the 1e-12
// floor), row 3 amax 1 (scale = f32(1/448)).
TEST(Quant, TokenScalesAreExactForConstructedRows) {
  const Tensor x = f32({4, 4}, {448, -224, 1, 0.5, 896, -3, 0.25, 0, 0, 0, 0, 0, 1, -0.5, 0.125, 0.75});
  const std::vector<Tensor> out = run(Op::quantize, {x}, quant("token"));
  ASSERT_EQ(out.size(), 2u);
  const Tensor& q = out[0];
  const Tensor& scale = out[1];
  EXPECT_EQ(q.dtype(), DType::f8e4m3);
  EXPECT_EQ(scale.shape(), (Shape{4, 1}));
  EXPECT_EQ(scale.get(0), 1.0);
  EXPECT_EQ(scale.get(1), 2.0);
  EXPECT_EQ(scale.get(2), static_cast<double>(static_cast<float>(1e-12 / 448)));
  EXPECT_EQ(scale.get(3), static_cast<double>(1.0f / 448.0f));
  for (int j = 0; j < 4; ++j) EXPECT_EQ(q.get(j), x.get(j)) << "row 0 is representable at scale 1";
  EXPECT_EQ(q.get(4), 448.0);
  EXPECT_EQ(q.get(5), -1.5);
  EXPECT_EQ(q.get(6), 0.125);
  for (int j = 8; j < 12; ++j) EXPECT_EQ(q.get(j), 0.0);
  EXPECT_EQ(q.get(12), 448.0);
}

// q comes from x divided by the stored f32 scale, not by the exact amax / fmax. With amax = 448 + 2^-15 the
// exact quotient is 1 + 0.57 * 2^-23 and the stored scale 1 + 2^-23; x = 1.0625 + 2^-23 then lies just below
// the e4m3 tie 1.0625 under the stored scale (-> 1) but just above it under the exact one (-> 1.125).
TEST(Quant, QuantizeDividesByTheStoredF32Scale) {
  const double amax = 448 + std::ldexp(1.0, -15), x1 = 1.0625 + std::ldexp(1.0, -23);
  const std::vector<Tensor> out = run(Op::quantize, {f32({1, 2}, {amax, x1})}, quant("token"));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].get(0), 1 + std::ldexp(1.0, -23));
  EXPECT_LT(x1 / out[1].get(0), 1.0625);
  EXPECT_GT(x1 / (amax / 448), 1.0625);
  EXPECT_EQ(out[0].get(1), 1.0);
  EXPECT_EQ(out[0].get(0), 448.0);
}

TEST(Quant, E5m2ScaleUsesItsMaximum) {
  const std::vector<Tensor> out = run(Op::quantize, {f32({1, 2}, {57344, -1024})}, quant("token", {}, "f8e5m2"));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dtype(), DType::f8e5m2);
  EXPECT_EQ(out[1].get(0), 1.0);
  EXPECT_EQ(out[0].get(0), 57344.0);
  EXPECT_EQ(out[0].get(1), -1024.0);
}

// x [4,6] in 2x3 blocks: each block gets its own scale from its own elements.
TEST(Quant, BlockScalesComeFromTheirOwnTiles) {
  std::vector<double> v(24, 0.5);
  v[0 * 6 + 1] = -448;  // block (0,0)
  v[1 * 6 + 4] = 896;   // block (0,1)
  v[2 * 6 + 2] = 224;   // block (1,0)
  v[3 * 6 + 5] = 1792;  // block (1,1)
  const std::vector<Tensor> out = run(Op::quantize, {f32({4, 6}, v)}, quant("block", {2, 3}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].shape(), (Shape{2, 2}));
  EXPECT_EQ(out[1].to_f64(), (std::vector<double>{1, 2, 0.5, 4}));
  EXPECT_EQ(out[0].get(0), 0.5);      // scale 1
  EXPECT_EQ(out[0].get(3), 0.25);     // block (0,1), scale 2
  EXPECT_EQ(out[0].get(2 * 6), 1.0);  // block (1,0), scale 0.5
  EXPECT_EQ(out[0].get(3 * 6 + 5), 448.0);
}

// scale_layout "k_major" stores the same scales as the default grid, transposed ([K/128, M] for x [M, K]), and
// dequantize with the same attributes reads them back: the round trip equals the row-major one bit for bit.
TEST(Quant, KMajorScalesAreTheGridTransposed) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> v(5 * 300);
  for (double& e : v) e = normal(rng);
  const Tensor x = f32({5, 300}, v);
  Attrs k_major = quant("block");
  k_major.set("scale_layout", std::string("k_major"));
  const std::vector<Tensor> grid = run(Op::quantize, {x}, quant("block"));
  const std::vector<Tensor> kq = run(Op::quantize, {x}, k_major);
  ASSERT_EQ(kq[1].shape(), (Shape{3, 5}));
  EXPECT_TRUE(kq[0].bitwise_equal(grid[0]));
  for (int64_t m = 0; m < 5; ++m) {
    for (int64_t kb = 0; kb < 3; ++kb) EXPECT_EQ(kq[1].get(kb * 5 + m), grid[1].get(m * 3 + kb)) << m << "," << kb;
  }
  EXPECT_NE(kq[1].get(1), grid[1].get(1));  // distinct scales: the test would see a missing transpose
  const Tensor y_grid = run1(Op::dequantize, {grid[0], grid[1]}, quant("block"));
  const Tensor y_k = run1(Op::dequantize, {kq[0], kq[1]}, k_major);
  EXPECT_TRUE(y_grid.bitwise_equal(y_k));
  // The layouts are not interchangeable.
  EXPECT_TRUE(fails_with(infer(Op::dequantize, {type(DType::f8e4m3, {5, 300}), type(DType::f32, {5, 3})}, k_major),
                         ErrorCode::shape_error, "must be [3,5]"));
}

TEST(Quant, ScaleLayoutErrors) {
  Attrs token = quant("token");
  token.set("scale_layout", std::string("k_major"));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {type(DType::f32, {4, 8})}, token), ErrorCode::invalid_argument,
                         "applies only to granularity \"block\""));
  Attrs bad = quant("block");
  bad.set("scale_layout", std::string("column_major"));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {type(DType::f32, {4, 8})}, bad), ErrorCode::invalid_argument,
                         "must be \"row_major\" or \"k_major\""));
}

// Partial tiles at the edges: x [3,5] with block [2,2] has scale [2,3]; the last column's tiles hold 2 and 1
// elements.
TEST(Quant, PartialEdgeBlocks) {
  std::vector<double> v(15, 1.0);
  v[0 * 5 + 4] = 448 * 8;   // tile (0,2): x[0..1, 4]
  v[2 * 5 + 4] = 448 * 16;  // tile (1,2): x[2, 4] alone
  v[2 * 5 + 0] = 448 * 4;   // tile (1,0): x[2, 0..1]
  const std::vector<Tensor> out = run(Op::quantize, {f32({3, 5}, v)}, quant("block", {2, 2}));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].shape(), (Shape{2, 3}));
  const double small = round_to_dtype(1.0 / 448, DType::f32);
  EXPECT_EQ(out[1].to_f64(), (std::vector<double>{small, small, 8, 4, small, 16}));
  const Tensor y = run1(Op::dequantize, {out[0], out[1]}, quant("block", {2, 2}));
  ASSERT_EQ(y.numel(), 15);
  EXPECT_EQ(y.get(2 * 5 + 4), 448 * 16);
  EXPECT_EQ(out[0].get(1 * 5 + 4), 0.125);  // 1.0 at scale 8
  EXPECT_EQ(y.get(1 * 5 + 4), 1.0);
}

// Half an FP8 ulp of |s|, where s = x / scale is the value the rounding saw.
double half_ulp(double s, DType dtype) {
  const int mantissa_bits = dtype == DType::f8e4m3 ? 3 : 2;
  const int min_exponent = dtype == DType::f8e4m3 ? -6 : -14;
  const int exponent =
      s == 0 ? min_exponent : std::max(static_cast<int>(std::floor(std::log2(std::fabs(s)))), min_exponent);
  return std::ldexp(0.5, exponent - mantissa_bits);
}

struct RoundTripCase {
  const char* name;
  Attrs attrs;
  DType dtype;
};

// For random rows of very different magnitudes: every q is within half an ulp of x / scale, each group's
// largest |x| lands on the FP8 maximum, and dequantize returns exactly f32(q * scale).
TEST(Quant, RoundTripErrorIsAtMostHalfAnUlp) {
  const int rows = 8, k = 300;
  std::mt19937 rng(11);
  std::vector<double> v(rows * k);
  for (int r = 0; r < rows; ++r) {
    const double magnitude = std::ldexp(1.0, 6 * r - 20);
    for (int j = 0; j < k; ++j) v[r * k + j] = magnitude * (static_cast<double>(rng()) / 2147483648.0 - 1.0);
  }
  const Tensor x = f32({rows, k}, v);
  const RoundTripCase cases[] = {
      {"tensor", quant("tensor"), DType::f8e4m3},
      {"token", quant("token"), DType::f8e4m3},
      {"token e5m2", quant("token", {}, "f8e5m2"), DType::f8e5m2},
      {"block 1x128", quant("block"), DType::f8e4m3},
      {"block 4x64 e5m2", quant("block", {4, 64}, "f8e5m2"), DType::f8e5m2},
  };
  for (const RoundTripCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<Tensor> out = run(Op::quantize, {x}, c.attrs);
    ASSERT_EQ(out.size(), 2u);
    const Tensor& q = out[0];
    const Tensor& scale = out[1];
    Attrs dequant_attrs = c.attrs;
    dequant_attrs.erase("dtype");
    const Tensor y = run1(Op::dequantize, {q, scale}, dequant_attrs);
    ASSERT_EQ(y.numel(), x.numel());
    // Which scale each element used: recover it from dequantize of a q of ones.
    const Tensor ones = tensor(q.dtype(), x.shape(), std::vector<double>(x.numel(), 1.0));
    const Tensor element_scale = run1(Op::dequantize, {ones, scale}, dequant_attrs);
    ASSERT_EQ(element_scale.numel(), x.numel());
    const double fmax = dtype_max_finite(c.dtype);
    std::map<double, double> max_q_by_scale;  // groups told apart by their scale
    int failures = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double s = x.get(i) / element_scale.get(i);
      if (std::fabs(q.get(i) - s) > half_ulp(s, c.dtype) && failures++ < 5) {
        ADD_FAILURE() << "element " << i << ": x / scale = " << s << ", q = " << q.get(i);
      }
      if (y.get(i) != round_to_dtype(q.get(i) * element_scale.get(i), DType::f32) && failures++ < 5) {
        ADD_FAILURE() << "element " << i << ": dequantize is not q * scale";
      }
      double& max_q = max_q_by_scale[element_scale.get(i)];
      max_q = std::max(max_q, std::fabs(q.get(i)));
    }
    EXPECT_EQ(failures, 0);
    // The largest element of every group is the one that set the scale: it maps to +-fmax, never beyond.
    EXPECT_FALSE(max_q_by_scale.empty());
    for (const auto& [group_scale, max_q] : max_q_by_scale) EXPECT_EQ(max_q, fmax) << "scale " << group_scale;
  }
}

// Per token and per block [1, K] cut the tensor the same way, as do per tensor and one block over everything.
TEST(Quant, EquivalentGranularitiesAgree) {
  std::mt19937 rng(12);
  std::vector<double> v(3 * 40);
  for (double& e : v) e = static_cast<double>(rng()) / 1e7 - 200;
  const Tensor x = tensor(DType::bf16, {3, 40}, v);
  const std::vector<Tensor> token = run(Op::quantize, {x}, quant("token"));
  const std::vector<Tensor> rows = run(Op::quantize, {x}, quant("block", {1, 40}));
  const std::vector<Tensor> whole = run(Op::quantize, {x}, quant("tensor"));
  const std::vector<Tensor> one_block = run(Op::quantize, {x}, quant("block", {64, 64}));
  ASSERT_EQ(token.size(), 2u);
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(whole.size(), 2u);
  ASSERT_EQ(one_block.size(), 2u);
  EXPECT_TRUE(token[0].bitwise_equal(rows[0]));
  EXPECT_TRUE(token[1].bitwise_equal(rows[1]));
  EXPECT_TRUE(whole[0].bitwise_equal(one_block[0]));
  EXPECT_EQ(one_block[1].shape(), (Shape{1, 1}));
  EXPECT_EQ(whole[1].get(0), one_block[1].get(0));
}

// A NaN poisons its group's amax, so the whole group becomes NaN (as amax-based scaling in torch does);
// other groups are untouched.
TEST(Quant, NaNPoisonsOnlyItsGroup) {
  const Tensor x = f32({2, 3}, {1, NAN, 2, 448, 1, 2});
  const std::vector<Tensor> out = run(Op::quantize, {x}, quant("token"));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(std::isnan(out[1].get(0)));
  for (int j = 0; j < 3; ++j) EXPECT_TRUE(std::isnan(out[0].get(j))) << j;
  EXPECT_EQ(out[1].get(1), 1.0);
  EXPECT_EQ(out[0].to_f64()[3], 448.0);
}

TEST(Quant, DequantizeValuesAndOutputDtype) {
  const Tensor q = tensor(DType::f8e4m3, {2, 2}, {3, -0.5, 448, 1});
  const Tensor scale = f32({2, 1}, {1.0 / 3, 0.25});
  const Tensor y = run1(Op::dequantize, {q, scale}, {{"dtype", std::string("bf16")}});
  EXPECT_EQ(y.dtype(), DType::bf16);
  ASSERT_EQ(y.numel(), 4);
  EXPECT_EQ(y.get(0), 1.0);  // 3 * f32(1/3) = 1 + 3e-8, rounded once to bf16
  EXPECT_EQ(y.get(1), round_to_dtype(-0.5 * static_cast<double>(1.0f / 3), DType::bf16));
  EXPECT_EQ(y.get(2), 112.0);
  EXPECT_EQ(y.get(3), 0.25);
  const Tensor t = run1(Op::dequantize, {q, f32({}, {2})}, quant("tensor"));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.to_f64(), (std::vector<double>{6, -1, 896, 2}));
}

TEST(Quant, EmptyTensors) {
  const std::vector<Tensor> token = run(Op::quantize, {Tensor(DType::f32, {0, 4})}, quant("token"));
  ASSERT_EQ(token.size(), 2u);
  EXPECT_EQ(token[1].shape(), (Shape{0, 1}));
  const std::vector<Tensor> whole = run(Op::quantize, {Tensor(DType::f32, {0, 4})}, quant("tensor"));
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[1].get(0), static_cast<double>(static_cast<float>(1e-12 / 448)));
}

TEST(Quant, QuantizeInferErrors) {
  const TensorType x = type(DType::bf16, {4, 256});
  EXPECT_TRUE(fails_with(infer(Op::quantize, {x}, {{"dtype", std::string("bf16")}}), ErrorCode::invalid_argument,
                         "attribute 'dtype' of quantize must be \"f8e4m3\" or \"f8e5m2\", got \"bf16\""));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {x}, {{"dtype", std::string("fp8")}}), ErrorCode::invalid_argument,
                         "attribute 'dtype' names an unknown dtype 'fp8'"));
  EXPECT_TRUE(
      fails_with(infer(Op::quantize, {x}, quant("channel")), ErrorCode::invalid_argument,
                 "attribute 'granularity' of quantize must be \"tensor\", \"token\" or \"block\", got \"channel\""));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {x}, quant("token", {1, 128})), ErrorCode::invalid_argument,
                         "attribute 'block' of quantize applies only to granularity \"block\", got \"token\""));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {x}, {{"granularity", std::string("block")}, {"block", Shape{}}}),
                         ErrorCode::invalid_argument, "attribute 'block' of quantize must not be empty"));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {x}, quant("block", {0, 128})), ErrorCode::invalid_argument,
                         "attribute 'block' of quantize must be positive sizes, got [0,128]"));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {type(DType::f32, {300})}, quant("block")), ErrorCode::shape_error,
                         "quantize with block [1,128] needs rank >= 2, got f32[300]"));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {type(DType::f32, {})}, quant("token")), ErrorCode::shape_error,
                         "quantize per token needs rank >= 1, got f32[]"));
  EXPECT_TRUE(fails_with(infer(Op::quantize, {type(DType::i32, {4, 8})}), ErrorCode::shape_error,
                         "quantize needs a floating input, got i32[4,8]"));
}

TEST(Quant, DequantizeInferErrors) {
  const TensorType q = type(DType::f8e4m3, {2, 4});
  EXPECT_TRUE(fails_with(infer(Op::dequantize, {q, type(DType::f32, {2})}), ErrorCode::shape_error,
                         "dequantize scale must be [2,1] for granularity \"token\" of q f8e4m3[2,4], got f32[2]"));
  EXPECT_TRUE(fails_with(infer(Op::dequantize, {q, type(DType::f32, {1})}, quant("tensor")), ErrorCode::shape_error,
                         "dequantize scale must be [] for granularity \"tensor\" of q f8e4m3[2,4], got f32[1]"));
  EXPECT_TRUE(
      fails_with(infer(Op::dequantize, {type(DType::f8e5m2, {3, 5}), type(DType::f32, {2, 2})}, quant("block", {2, 2})),
                 ErrorCode::shape_error,
                 "dequantize scale must be [2,3] for granularity \"block\" of q f8e5m2[3,5], got f32[2,2]"));
  EXPECT_TRUE(fails_with(infer(Op::dequantize, {q, type(DType::bf16, {2, 1})}), ErrorCode::shape_error,
                         "dequantize scale must be f32, got bf16[2,1]"));
  EXPECT_TRUE(fails_with(infer(Op::dequantize, {type(DType::f32, {2, 4}), type(DType::f32, {2, 1})}),
                         ErrorCode::shape_error, "dequantize needs an f8e4m3 or f8e5m2 q, got f32[2,4]"));
  EXPECT_TRUE(fails_with(infer(Op::dequantize, {q, type(DType::f32, {2, 1})}, {{"dtype", std::string("i32")}}),
                         ErrorCode::invalid_argument,
                         "attribute 'dtype' of dequantize must be a floating dtype, got \"i32\""));
  EXPECT_TRUE(fails_with(infer(Op::dequantize, {q}), ErrorCode::shape_error, "dequantize takes 2 inputs, got 1"));
}

TEST(Quant, TraitsAndCost) {
  EXPECT_TRUE(op_has_trait(Op::quantize, kTraitQuantize));
  EXPECT_TRUE(op_has_trait(Op::quantize, kTraitComposite));
  EXPECT_TRUE(op_has_trait(Op::dequantize, kTraitQuantize));
  const std::vector<TensorType> in = {type(DType::bf16, {4, 128})};
  const std::vector<TensorType> out = {type(DType::f8e4m3, {4, 128}), type(DType::f32, {4, 1})};
  const OpCost cost = op_def(Op::quantize).cost(OpCall{in, Attrs{}}, out);
  EXPECT_EQ(cost.bytes, 1024 + 512 + 16);
  EXPECT_EQ(cost.flops, 4 * 512);
}

// ---- pack_scales: checkpoint layout -> the layout the GEMM reads ----

TEST(PackScales, Shapes) {
  auto shape_of = [](TensorType in, const char* layout) {
    auto r = infer(Op::pack_scales, {in}, {{"layout", std::string(layout)}});
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? (*r)[0] : TensorType{};
  };
  EXPECT_EQ(shape_of(type(DType::f32, {6, 1}), "vector"), type(DType::f32, {6}));
  EXPECT_EQ(shape_of(type(DType::bf16, {6}), "vector"), type(DType::f32, {6}));
  EXPECT_TRUE(fails_with(infer(Op::pack_scales, {type(DType::f32, {6, 2})}, {{"layout", std::string("vector")}}),
                         ErrorCode::shape_error, "needs per-channel scales [N, 1] or [N]"));
  // Block grids: rows padded to 4 scales, the layout cuBLASLt's block-scaled GEMM reads.
  EXPECT_EQ(shape_of(type(DType::f32, {3, 2}), "blocks"), type(DType::f32, {3, 4}));
  EXPECT_EQ(shape_of(type(DType::f32, {3, 8}), "blocks"), type(DType::f32, {3, 8}));
  EXPECT_TRUE(fails_with(infer(Op::pack_scales, {type(DType::f32, {6})}, {{"layout", std::string("blocks")}}),
                         ErrorCode::shape_error, "needs a block grid [N/128, K/128]"));
  EXPECT_TRUE(fails_with(infer(Op::pack_scales, {type(DType::f32, {3, 2})}, {{"layout", std::string("mn_major")}}),
                         ErrorCode::invalid_argument, "must be \"vector\" or \"blocks\""));
  EXPECT_TRUE(fails_with(infer(Op::pack_scales, {type(DType::i32, {6, 1})}, {{"layout", std::string("vector")}}),
                         ErrorCode::shape_error, "needs floating scales"));
  EXPECT_FALSE(infer(Op::pack_scales, {type(DType::f32, {6, 1})}, {}).ok());  // layout is required
}

TEST(PackScales, BlocksPadRowsWithZeros) {
  const Tensor g = run1(Op::pack_scales, {f32({2, 2}, {1, 2, 3, 4})}, {{"layout", std::string("blocks")}});
  ASSERT_EQ(g.shape(), (Shape{2, 4}));
  const std::vector<double> want = {1, 2, 0, 0, 3, 4, 0, 0};
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(g.get(i), want[static_cast<size_t>(i)]) << i;
}

TEST(PackScales, VectorKeepsValues) {
  const Tensor v = run1(Op::pack_scales, {f32({3, 1}, {0.5, -0.25, 3})}, {{"layout", std::string("vector")}});
  ASSERT_EQ(v.shape(), Shape{3});
  EXPECT_EQ(v.get(0), 0.5);
  EXPECT_EQ(v.get(1), -0.25);
  EXPECT_EQ(v.get(2), 3.0);
}

// A GEMM reading packed per-channel scales (ws_layout "packed") computes the same bits as one reading the
// checkpoint layout; so does one reading a padded block grid (N = 300: 3 ragged N-blocks; K = 260: 3 K-blocks).
TEST(PackScales, PackedGemmMatchesRowMajorGemm) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random = [&](DType dtype, Shape shape, double scale_floor = 0.0) {
    Tensor t(dtype, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, scale_floor > 0 ? scale_floor + std::fabs(normal(rng)) : normal(rng));
    return t;
  };
  const int64_t m = 3, n = 300, k = 260;
  const Tensor xq = random(DType::f8e4m3, {m, k});
  const Tensor wq = random(DType::f8e4m3, {n, k});
  const Tensor xs = random(DType::f32, {m, 1}, 0.01);
  const Tensor ws = random(DType::f32, {n, 1}, 0.01);
  const Tensor reference = run1(Op::scaled_linear, {xq, xs, wq, ws}, {{"out_dtype", std::string("f32")}});
  const Tensor packed = run1(Op::pack_scales, {ws}, {{"layout", std::string("vector")}});
  const Tensor y = run1(Op::scaled_linear, {xq, xs, wq, packed},
                        {{"out_dtype", std::string("f32")}, {"ws_layout", std::string("packed")}});
  EXPECT_TRUE(reference.bitwise_equal(y));
  // The checkpoint layout is not accepted as packed, nor the packed one as row-major.
  EXPECT_FALSE(infer(Op::scaled_linear, {type(DType::f8e4m3, {m, k}), type(DType::f32, {m, 1}),
                                         type(DType::f8e4m3, {n, k}), type(DType::f32, {n, 1})},
                     {{"ws_layout", std::string("packed")}})
                   .ok());
  EXPECT_FALSE(infer(Op::scaled_linear, {type(DType::f8e4m3, {m, k}), type(DType::f32, {m, 1}),
                                         type(DType::f8e4m3, {n, k}), type(DType::f32, {n})})
                   .ok());
  // Block grids: the checkpoint's dense [3, 3] grid and the padded [3, 4] one pack_scales "blocks" writes give
  // the same bits; each layout only where it belongs.
  const Tensor xb = random(DType::f32, {3, m}, 0.01);  // 1x128 activation blocks, [K/128, M]
  const Tensor wb = random(DType::f32, {3, 3}, 0.01);
  const Tensor row_major = run1(Op::scaled_linear, {xq, xb, wq, wb}, {{"out_dtype", std::string("f32")}});
  const Tensor padded = run1(Op::pack_scales, {wb}, {{"layout", std::string("blocks")}});
  const Tensor as_packed = run1(Op::scaled_linear, {xq, xb, wq, padded},
                                {{"out_dtype", std::string("f32")}, {"ws_layout", std::string("packed")}});
  EXPECT_TRUE(row_major.bitwise_equal(as_packed));
  EXPECT_FALSE(infer(Op::scaled_linear, {type(DType::f8e4m3, {m, k}), type(DType::f32, {3, m}),
                                         type(DType::f8e4m3, {n, k}), type(DType::f32, {3, 3})},
                     {{"ws_layout", std::string("packed")}})
                   .ok());
  EXPECT_FALSE(infer(Op::scaled_linear, {type(DType::f8e4m3, {m, k}), type(DType::f32, {3, m}),
                                         type(DType::f8e4m3, {n, k}), type(DType::f32, {3, 4})})
                   .ok());
  EXPECT_TRUE(fails_with(infer(Op::scaled_linear, {type(DType::f8e4m3, {m, k}), type(DType::f32, {m, 1}),
                                                   type(DType::f8e4m3, {n, k}), type(DType::f32, {n, 1})},
                               {{"ws_layout", std::string("blocked")}}),
                         ErrorCode::invalid_argument, "ws_layout"));
}

}  // namespace
}  // namespace kiln
