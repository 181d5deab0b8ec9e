// matmul, linear and scaled_linear against hand-computed values, identities and naive double loops; every
// inference error; costs; FP8 scale layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "ir/ops.h"
#include "ir/ops/op_util.h"
#include "ref/executor.h"

namespace kiln {
namespace {

Tensor make(DType dtype, Shape shape, std::vector<double> values) { return Tensor::from_f64(dtype, shape, values); }

Tensor random_tensor(DType dtype, Shape shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (double& v : values) v = dist(rng);
  return Tensor::from_f64(dtype, shape, values);
}

Tensor run1(Op op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  auto result = ref::run_op(op, inputs, attrs);
  EXPECT_TRUE(result.ok()) << result.error().message;
  if (!result.ok()) return Tensor();
  EXPECT_EQ(result->size(), 1u);
  return std::move((*result)[0]);
}

// The error message of inferring `op` on these types; empty when inference succeeds.
std::string infer_error(Op op, std::vector<TensorType> inputs, const Attrs& attrs = {}) {
  auto result = infer_node(op, inputs, attrs);
  return result.ok() ? std::string() : result.error().message;
}

// f32 results of a double computation may differ from the naive loop by the rounding of a different
// summation order: allow a few f32 ulps.
void expect_close(double got, double want) { EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::fabs(want))); }

// ---- matmul ----

TEST(Matmul, HandComputed) {
  const Tensor a = make(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = make(DType::f32, {3, 2}, {7, 8, 9, 10, 11, 12});
  const Tensor c = run1(Op::matmul, {a, b});
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(c.to_f64(), (std::vector<double>{58, 64, 139, 154}));
}

TEST(Matmul, IdentityLeavesOperandUnchanged) {
  const Tensor a = random_tensor(DType::f32, {3, 4, 5}, 1);
  std::vector<double> eye(25, 0.0);
  for (int i = 0; i < 5; ++i) eye[i * 5 + i] = 1.0;
  const Tensor c = run1(Op::matmul, {a, make(DType::f32, {5, 5}, eye)});
  EXPECT_TRUE(c.bitwise_equal(a));
}

TEST(Matmul, BroadcastBatchMatchesNaiveLoop) {
  // a [2,1,3,4] @ b [3,4,5] -> [2,3,3,5]: a's batch dim 1 repeats over b's 3, b's batch repeats over a's 2.
  const Tensor a = random_tensor(DType::f32, {2, 1, 3, 4}, 2);
  const Tensor b = random_tensor(DType::f32, {3, 4, 5}, 3);
  const Tensor c = run1(Op::matmul, {a, b});
  ASSERT_EQ(c.shape(), (Shape{2, 3, 3, 5}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t m = 0; m < 3; ++m) {
        for (int64_t n = 0; n < 5; ++n) {
          double sum = 0;
          for (int64_t k = 0; k < 4; ++k) sum += a.get(i * 12 + m * 4 + k) * b.get(j * 20 + k * 5 + n);
          expect_close(c.get(((i * 3 + j) * 3 + m) * 5 + n), sum);
        }
      }
    }
  }
}

TEST(Matmul, Bf16OutputIsRoundedOnce) {
  // 1 + 3 * 2^-9 rounds to 1 + 2^-7 in bf16; rounding after each addition would stay at 1.
  const double tiny = std::ldexp(1.0, -9);
  const Tensor a = make(DType::bf16, {1, 4}, {1, 1, 1, 1});
  const Tensor b = make(DType::bf16, {4, 1}, {1, tiny, tiny, tiny});
  const Tensor c = run1(Op::matmul, {a, b});
  EXPECT_EQ(c.dtype(), DType::bf16);
  EXPECT_EQ(c.get(0), 1.0 + std::ldexp(1.0, -7));
}

TEST(Matmul, EmptyContractionGivesZeros) {
  const Tensor c = run1(Op::matmul, {Tensor(DType::f32, {2, 0}), Tensor(DType::f32, {0, 3})});
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.to_f64(), std::vector<double>(6, 0.0));
}

TEST(Matmul, InferErrors) {
  EXPECT_NE(infer_error(Op::matmul, {{DType::f32, {3}}, {DType::f32, {3, 2}}}).find("rank >= 2"), std::string::npos);
  EXPECT_NE(infer_error(Op::matmul, {{DType::f32, {2, 3}}, {DType::bf16, {3, 2}}}).find("must have a's dtype f32"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::matmul, {{DType::i32, {2, 3}}, {DType::i32, {3, 2}}}).find("floating"), std::string::npos);
  EXPECT_EQ(infer_error(Op::matmul, {{DType::f32, {2, 3}}, {DType::f32, {4, 2}}}),
            "matmul: a [2,3] and b [4,2] do not contract: a has K = 3 (last dim), b has K = 4 (second to last dim)");
  EXPECT_EQ(infer_error(Op::matmul, {{DType::f32, {2, 2, 3}}, {DType::f32, {3, 3, 2}}}),
            "matmul: batch dims of a [2,2,3] and b [3,3,2] do not broadcast");
}

TEST(Matmul, Cost) {
  const TensorType a{DType::bf16, {4, 8, 16}}, b{DType::bf16, {16, 32}};
  const OpDef& def = op_def(Op::matmul);
  const std::vector<TensorType> inputs{a, b};
  const Attrs attrs;
  auto out = infer_node(Op::matmul, inputs, attrs);
  ASSERT_TRUE(out.ok());
  const OpCost cost = def.cost(OpCall{inputs, attrs}, *out);
  EXPECT_EQ(cost.flops, 2.0 * 4 * 8 * 32 * 16);
  EXPECT_EQ(cost.bytes, 2.0 * (4 * 8 * 16 + 16 * 32 + 4 * 8 * 32));
  EXPECT_TRUE(def.traits & kTraitMatmul);
}

// ---- linear ----

TEST(Linear, HandComputedWithBias) {
  const Tensor x = make(DType::f32, {1, 2}, {1, 2});
  const Tensor w = make(DType::f32, {3, 2}, {1, 0, 0, 1, 1, 1});  // [out 3, in 2]
  const Tensor b = make(DType::f32, {3}, {10, 20, 30});
  EXPECT_EQ(run1(Op::linear, {x, w, b}).to_f64(), (std::vector<double>{11, 22, 33}));
  EXPECT_EQ(run1(Op::linear, {x, w}).to_f64(), (std::vector<double>{1, 2, 3}));
}

TEST(Linear, EqualsMatmulWithTransposedWeightPlusBias) {
  const Tensor x = random_tensor(DType::f32, {2, 3, 7}, 4);
  const Tensor w = random_tensor(DType::f32, {5, 7}, 5);
  const Tensor b = random_tensor(DType::f32, {5}, 6);
  const Tensor wt = run1(Op::transpose, {w}, {{"perm", std::vector<int64_t>{1, 0}}});
  // matmul rounds before the bias is added, linear after: equal up to that one extra f32 rounding.
  const Tensor expected = run1(Op::add, {run1(Op::matmul, {x, wt}), b});
  const Tensor got = run1(Op::linear, {x, w, b});
  ASSERT_EQ(got.shape(), (Shape{2, 3, 5}));
  for (int64_t i = 0; i < got.numel(); ++i) expect_close(got.get(i), expected.get(i));
}

TEST(Linear, RealisticSizeMatchesNaiveLoopOnSamples) {
  constexpr int64_t kRows = 64, kIn = 3072, kOut = 3072;
  const Tensor x = random_tensor(DType::bf16, {kRows, kIn}, 7);
  const Tensor w = random_tensor(DType::bf16, {kOut, kIn}, 8);
  const Tensor b = random_tensor(DType::bf16, {kOut}, 9);
  const Tensor y = run1(Op::linear, {x, w, b});
  ASSERT_EQ(y.shape(), (Shape{kRows, kOut}));
  const std::vector<double> vx = x.to_f64(), vw = w.to_f64();
  std::mt19937 rng(10);
  int64_t exact = 0;
  for (int sample = 0; sample < 64; ++sample) {
    const int64_t r = rng() % kRows, n = rng() % kOut;
    double sum = b.get(n);
    for (int64_t k = 0; k < kIn; ++k) sum += vx[r * kIn + k] * vw[n * kIn + k];
    const double want = round_to_dtype(sum, DType::bf16);
    // Summation order may move a value across a bf16 rounding boundary: allow one bf16 ulp, but most must match.
    EXPECT_NEAR(y.get(r * kOut + n), want, std::ldexp(std::fabs(want), -7) + 1e-30);
    exact += y.get(r * kOut + n) == want;
  }
  EXPECT_GE(exact, 60);
}

TEST(Linear, InferErrors) {
  EXPECT_EQ(infer_error(Op::linear, {{DType::bf16, {2, 3072}}, {DType::bf16, {9216, 4096}}}),
            "linear: x [2,3072] does not match weight [9216,4096] (in features 4096)");
  EXPECT_NE(infer_error(Op::linear, {{DType::f32, {}}, {DType::f32, {2, 1}}}).find("rank >= 1"), std::string::npos);
  EXPECT_NE(infer_error(Op::linear, {{DType::f32, {2, 3}}, {DType::f32, {3}}}).find("[out features, in features]"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::linear, {{DType::i32, {2, 3}}, {DType::i32, {4, 3}}}).find("floating"), std::string::npos);
  EXPECT_EQ(infer_error(Op::linear, {{DType::bf16, {2, 3}}, {DType::f32, {4, 3}}}),
            "linear: weight f32[4,3] must have x's dtype bf16");
  EXPECT_EQ(infer_error(Op::linear, {{DType::f32, {2, 3}}, {DType::f32, {4, 3}}, {DType::f32, {3}}}),
            "linear: bias must be [4] (out features), got f32[3]");
  EXPECT_EQ(infer_error(Op::linear, {{DType::f32, {2, 3}}, {DType::f32, {4, 3}}, {DType::bf16, {4}}}),
            "linear: bias bf16[4] must have x's dtype f32");
  EXPECT_NE(infer_error(Op::linear, {{DType::f32, {2, 3}}}).find("takes 2 to 5 inputs"), std::string::npos);
}

// The scale / residual epilogue (ops::linear_inputs): each input where its attribute says, of the type it must have.
TEST(Linear, EpilogueInputs) {
  const TensorType x{DType::bf16, {2, 3}}, w{DType::bf16, {4, 3}}, b{DType::bf16, {4}}, s{DType::f32, {4}}, r{DType::bf16, {2, 4}};
  Attrs both;
  both.set("scale", int64_t{1});
  both.set("residual", int64_t{1});
  Attrs residual;
  residual.set("residual", int64_t{1});
  auto inferred = [](std::vector<TensorType> in, const Attrs& a) { return infer_node(Op::linear, in, a); };
  ASSERT_TRUE(inferred({x, w, b, s, r}, both).ok());
  ASSERT_TRUE(inferred({x, w, s, r}, both).ok());
  ASSERT_TRUE(inferred({x, w, r}, residual).ok());
  EXPECT_EQ((*inferred({x, w, b, s, r}, both))[0], (TensorType{DType::bf16, {2, 4}}));
  const ops::LinearInputs at = ops::linear_inputs(5, both);
  EXPECT_EQ(at.bias, 2);
  EXPECT_EQ(at.scale, 3);
  EXPECT_EQ(at.residual, 4);
  EXPECT_EQ(ops::linear_inputs(4, both).bias, -1);
  EXPECT_EQ(ops::linear_inputs(3, both).bias, -2);
  auto error = [](std::vector<TensorType> in, const Attrs& a) { return infer_error(Op::linear, std::move(in), a); };
  EXPECT_NE(error({x, w, b, s, r, r}, both).find("takes 2 to 5 inputs"), std::string::npos);
  EXPECT_NE(error({x, w, s}, both).find("takes x, w, an optional bias"), std::string::npos);
  EXPECT_EQ(error({x, w, b, {DType::bf16, {4}}, r}, both), "linear: scale must be f32[4] (one per out feature), got bf16[4]");
  EXPECT_EQ(error({x, w, b, {DType::f32, {1, 4}}, r}, both), "linear: scale must be f32[4] (one per out feature), got f32[1,4]");
  EXPECT_EQ(error({x, w, b, s, {DType::bf16, {1, 4}}}, both),
            "linear: residual must be bf16[2,4] (the output's type), got bf16[1,4]");
  EXPECT_EQ(error({x, w, {DType::f32, {2, 4}}}, residual), "linear: residual must be bf16[2,4] (the output's type), got f32[2,4]");
  Attrs gelu = residual;
  gelu.set("activation", std::string("gelu_tanh"));
  EXPECT_EQ(error({x, w, b, r}, gelu), "linear: activation gelu_tanh cannot follow a scale or residual epilogue");
}

// The reference computes scale ⊙ (x · wᵀ) + b + residual in double and rounds once.
TEST(Linear, EpilogueReference) {
  Tensor x(DType::f32, {1, 2}), w(DType::f32, {2, 2}), b(DType::f32, {2}), s(DType::f32, {2}), r(DType::f32, {1, 2});
  const double xv[] = {1, 2}, wv[] = {1, 0, 3, 4}, bv[] = {0.5, -1}, sv[] = {2, -0.25}, rv[] = {10, 20};
  for (int i = 0; i < 2; ++i) x.set(i, xv[i]), b.set(i, bv[i]), s.set(i, sv[i]), r.set(i, rv[i]);
  for (int i = 0; i < 4; ++i) w.set(i, wv[i]);
  Attrs both;
  both.set("scale", int64_t{1});
  both.set("residual", int64_t{1});
  std::vector<Tensor> out;
  out.emplace_back(DType::f32, Shape{1, 2});
  const Tensor* inputs[] = {&x, &w, &b, &s, &r};
  ASSERT_TRUE(op_def(Op::linear).reference(RefCall{inputs, both, out}).ok());
  EXPECT_EQ(out[0].get(0), 2 * 1 + 0.5 + 10);       // x·w0 = 1
  EXPECT_EQ(out[0].get(1), -0.25 * 11 - 1 + 20);    // x·w1 = 3 + 8
}

TEST(Linear, Cost) {
  const std::vector<TensorType> inputs{{DType::bf16, {2, 10, 64}}, {DType::bf16, {32, 64}}, {DType::bf16, {32}}};
  const Attrs attrs;
  auto out = infer_node(Op::linear, inputs, attrs);
  ASSERT_TRUE(out.ok());
  const OpCost cost = op_def(Op::linear).cost(OpCall{inputs, attrs}, *out);
  EXPECT_EQ(cost.flops, 2.0 * 20 * 32 * 64);
  EXPECT_EQ(cost.bytes, 2.0 * (20 * 64 + 32 * 64 + 32 + 20 * 32));
}

// ---- scaled_linear ----

// Dequantizes q [rows, k] with `scale` read through `group(r, c)`, exactly (power-of-two scales keep f32 exact).
Tensor dequantize(const Tensor& q, const Tensor& scale, const std::function<int64_t(int64_t, int64_t)>& group) {
  const int64_t k = q.shape().back(), rows = q.numel() / k;
  std::vector<double> v(static_cast<size_t>(q.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) v[r * k + c] = q.get(r * k + c) * scale.get(group(r, c));
  }
  return Tensor::from_f64(DType::f32, q.shape(), v);
}

Tensor power_of_two_scales(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& s : v) s = std::ldexp(1.0, static_cast<int>(rng() % 9) - 4);
  return Tensor::from_f64(DType::f32, shape, v);
}

struct ScaleCase {
  const char* name;
  Shape xs, ws;
  std::function<int64_t(int64_t, int64_t)> x_group, w_group;
};

TEST(ScaledLinear, EqualsLinearOfDequantizedOperands) {
  // K = 300 and N = 200 leave partial 128-blocks at the edges.
  constexpr int64_t kIn = 300, kOut = 200;
  const Tensor xq = random_tensor(DType::f8e4m3, {2, 3, kIn}, 11, -8, 8);
  const Tensor wq = random_tensor(DType::f8e4m3, {kOut, kIn}, 12, -8, 8);
  const Tensor bias = random_tensor(DType::f32, {kOut}, 13);
  const std::vector<ScaleCase> cases = {
      {"per-tensor", {}, {}, [](int64_t, int64_t) { return 0; }, [](int64_t, int64_t) { return 0; }},
      {"per-token/per-channel",
       {2, 3, 1},
       {kOut, 1},
       [](int64_t r, int64_t) { return r; },
       [](int64_t n, int64_t) { return n; }},
      {"blocks",  // xs k-block-major [K/128, 2, 3]: block c / 128 of row r (of 6) at (c / 128) * 6 + r
       {3, 2, 3},
       {2, 3},
       [](int64_t r, int64_t c) { return (c / 128) * 6 + r; },
       [](int64_t n, int64_t c) { return (n / 128) * 3 + c / 128; }},
  };
  for (const ScaleCase& sc : cases) {
    SCOPED_TRACE(sc.name);
    const Tensor xs = power_of_two_scales(sc.xs, 14), ws = power_of_two_scales(sc.ws, 15);
    const Tensor got = run1(Op::scaled_linear, {xq, xs, wq, ws, bias}, {{"out_dtype", std::string("f32")}});
    const Tensor want = run1(Op::linear, {dequantize(xq, xs, sc.x_group), dequantize(wq, ws, sc.w_group), bias});
    ASSERT_EQ(got.shape(), (Shape{2, 3, kOut}));
    EXPECT_EQ(got.dtype(), DType::f32);
    EXPECT_TRUE(got.bitwise_equal(want));
  }
}

// Block scales in the layouts cuBLASLt reads: x's 1x128 blocks k-block-major [K/128, M], w's 128x128 blocks
// row-major [N/128, K/128].
TEST(ScaledLinear, BlockScalesMatchNaiveLoop) {
  // Arbitrary (non power-of-two) scales, one distinct value per block, so a wrong block index shows. M = 5
  // differs from K/128 = 3, so a transposed reading of xs is out of step, not just permuted.
  constexpr int64_t kIn = 260, kOut = 130, kRows = 5;
  const Tensor xq = random_tensor(DType::f8e5m2, {kRows, kIn}, 16, -4, 4);
  const Tensor wq = random_tensor(DType::f8e4m3, {kOut, kIn}, 17, -4, 4);
  const Tensor xs = random_tensor(DType::f32, {3, kRows}, 18, 0.1, 2.0);
  const Tensor ws = random_tensor(DType::f32, {2, 3}, 19, 0.1, 2.0);
  const Tensor y = run1(Op::scaled_linear, {xq, xs, wq, ws}, {{"out_dtype", std::string("f32")}});
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t n = 0; n < kOut; ++n) {
      double sum = 0;
      for (int64_t c = 0; c < kIn; ++c) {
        sum += xq.get(r * kIn + c) * xs.get((c / 128) * kRows + r) * wq.get(n * kIn + c) *
               ws.get((n / 128) * 3 + c / 128);
      }
      expect_close(y.get(r * kOut + n), sum);
    }
  }
}

// Leading axes of x flatten into M: x [2, 3, K] takes xs [K/128, 2, 3]; quantize with scale_layout "k_major"
// produces exactly that, and the GEMM equals the dequantized one.
TEST(ScaledLinear, BlockScalesOfRank3ActivationsFromQuantize) {
  constexpr int64_t kIn = 256, kOut = 130;
  const Tensor x = random_tensor(DType::f32, {2, 3, kIn}, 21, -3, 3);
  const Tensor wq = random_tensor(DType::f8e4m3, {kOut, kIn}, 22, -4, 4);
  const Tensor ws = random_tensor(DType::f32, {2, 2}, 23, 0.1, 2.0);
  auto quantized = ref::run_op(Op::quantize, {x},
                               {{"granularity", std::string("block")},
                                {"block", std::vector<int64_t>{1, 128}},
                                {"scale_layout", std::string("k_major")}});
  ASSERT_TRUE(quantized.ok()) << quantized.error().message;
  const std::vector<Tensor>& q = *quantized;
  ASSERT_EQ(q[1].shape(), (Shape{2, 2, 3}));
  const Tensor y = run1(Op::scaled_linear, {q[0], q[1], wq, ws}, {{"out_dtype", std::string("f32")}});
  ASSERT_EQ(y.shape(), (Shape{2, 3, kOut}));
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t n = 0; n < kOut; n += 7) {
      double sum = 0;
      for (int64_t c = 0; c < kIn; ++c) {
        sum += q[0].get(r * kIn + c) * q[1].get((c / 128) * 6 + r) * wq.get(n * kIn + c) *
               ws.get((n / 128) * 2 + c / 128);
      }
      expect_close(y.get(r * kOut + n), sum);
    }
  }
}

TEST(ScaledLinear, DefaultsToBf16Output) {
  const Tensor xq = make(DType::f8e4m3, {1, 2}, {1, 2});
  const Tensor wq = make(DType::f8e4m3, {1, 2}, {3, 4});
  const Tensor y = run1(Op::scaled_linear, {xq, make(DType::f32, {}, {0.5}), wq, make(DType::f32, {}, {0.25})});
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.get(0), (1 * 3 + 2 * 4) * 0.5 * 0.25);
}

TEST(ScaledLinear, InferErrors) {
  const TensorType xq{DType::f8e4m3, {4, 300}}, wq{DType::f8e4m3, {200, 300}}, scalar{DType::f32, {}};
  EXPECT_EQ(infer_error(Op::scaled_linear, {xq, {DType::f32, {4, 2}}, wq, scalar}),
            "scaled_linear: scale xs has shape [4,2]; accepted: [] (per-tensor), [4,1] (per-token) or [3,4] "
            "(1x128 blocks, k-block-major as quantize scale_layout=\"k_major\" writes them)");
  // The token-major block grid (quantize's default layout) is not what the GEMM reads.
  EXPECT_NE(infer_error(Op::scaled_linear, {xq, {DType::f32, {4, 3}}, wq, scalar}).find("accepted"),
            std::string::npos);
  EXPECT_EQ(infer_error(Op::scaled_linear, {xq, scalar, wq, {DType::f32, {200}}}),
            "scaled_linear: scale ws has shape [200]; accepted: [] (per-tensor), [200,1] (per-channel) or [2,3] "
            "(128x128 blocks)");
  EXPECT_NE(infer_error(Op::scaled_linear, {xq, {DType::bf16, {}}, wq, scalar}).find("xs must be f32"),
            std::string::npos);
  EXPECT_EQ(infer_error(Op::scaled_linear, {{DType::bf16, {4, 300}}, scalar, wq, scalar}),
            "scaled_linear: xq must be f8e4m3 or f8e5m2, got bf16[4,300]");
  EXPECT_NE(infer_error(Op::scaled_linear, {xq, scalar, {DType::f32, {200, 300}}, scalar}).find("wq must be f8e4m3"),
            std::string::npos);
  EXPECT_EQ(infer_error(Op::scaled_linear, {xq, scalar, {DType::f8e4m3, {200, 256}}, scalar}),
            "scaled_linear: xq [4,300] does not match wq [200,256] (in features 256)");
  EXPECT_NE(infer_error(Op::scaled_linear, {xq, scalar, wq, scalar, {DType::f32, {300}}}).find("bias must be"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::scaled_linear, {xq, scalar, wq, scalar}, {{"out_dtype", std::string("i32")}})
                .find("must be a floating dtype"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::scaled_linear, {xq, scalar, wq, scalar}, {{"out_dtype", std::string("f99")}})
                .find("unknown dtype"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::scaled_linear, {{DType::f8e4m3, {}}, scalar, wq, scalar}).find("rank >= 1"),
            std::string::npos);
}

TEST(ScaledLinear, CostAndTraits) {
  const std::vector<TensorType> inputs{
      {DType::f8e4m3, {16, 256}}, {DType::f32, {16, 1}}, {DType::f8e4m3, {64, 256}}, {DType::f32, {64, 1}}};
  const Attrs attrs;
  auto out = infer_node(Op::scaled_linear, inputs, attrs);
  ASSERT_TRUE(out.ok());
  const OpCost cost = op_def(Op::scaled_linear).cost(OpCall{inputs, attrs}, *out);
  EXPECT_EQ(cost.flops, 2.0 * 16 * 64 * 256);
  EXPECT_EQ(cost.bytes, 16.0 * 256 + 16 * 4 + 64 * 256 + 64 * 4 + 16 * 64 * 2);
  EXPECT_EQ(op_def(Op::scaled_linear).traits, kTraitMatmul | kTraitQuantize);
}

}  // namespace
}  // namespace kiln
