// Row-wise composites on the reference executor: layernorm, rmsnorm, softmax and rope. Hand-computed rows,
// the identities each op must satisfy (normalized rows have mean 0 and variance 1, softmax rows sum to 1,
// rope preserves pair norms, is the identity at angle 0, and its two styles differ by a permutation),
// output rounding, and every inference error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "op_test_util.h"

namespace kiln {
namespace {

using test::f32;
using test::fails_with;
using test::infer;
using test::run1;
using test::tensor;
using test::type;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> random_values(size_t n, double scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = scale * (static_cast<double>(rng()) / 4294967296.0 * 2.0 - 1.0);
  return v;
}

// ---- layernorm ----

TEST(Norm, LayernormHandComputedRow) {
  // mean 2.5, biased variance 1.25
  const Tensor y = run1(Op::layernorm, {f32({1, 4}, {1, 2, 3, 4})}, {{"eps", 0.0}});
  ASSERT_EQ(y.numel(), 4);
  const double expected[] = {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738};
  for (int j = 0; j < 4; ++j) EXPECT_EQ(y.get(j), round_to_dtype(expected[j], DType::f32)) << j;
}

TEST(Norm, LayernormWeightAndBias) {
  const Tensor x = f32({1, 4}, {1, 2, 3, 4});
  const Tensor w = f32({4}, {2, 2, -1, 0});
  const Tensor b = f32({4}, {1, 0, 0, 5});
  const Tensor y = run1(Op::layernorm, {x, w, b}, {{"eps", 0.0}});
  ASSERT_EQ(y.numel(), 4);
  const double n0 = -1.3416407864998738, n1 = -0.4472135954999579, n2 = 0.4472135954999579;
  EXPECT_EQ(y.get(0), round_to_dtype(n0 * 2 + 1, DType::f32));
  EXPECT_EQ(y.get(1), round_to_dtype(n1 * 2, DType::f32));
  EXPECT_EQ(y.get(2), round_to_dtype(-n2, DType::f32));
  EXPECT_EQ(y.get(3), 5.0);
  // Weight only: no bias added.
  const Tensor yw = run1(Op::layernorm, {x, w}, {{"eps", 0.0}});
  ASSERT_EQ(yw.numel(), 4);
  EXPECT_EQ(yw.get(3), 0.0);
}

// The default eps is 1e-5: on a row with variance 1e-6 it dominates the denominator.
TEST(Norm, LayernormDefaultEps) {
  const Tensor y = run1(Op::layernorm, {f32({2}, {0, 2e-3})});
  ASSERT_EQ(y.numel(), 2);
  EXPECT_NEAR(y.get(1), 1e-3 / std::sqrt(1e-6 + 1e-5), 1e-7);
  EXPECT_NEAR(y.get(0), -y.get(1), 1e-7);
  // A constant row normalizes to 0, not NaN.
  const Tensor c = run1(Op::layernorm, {f32({3}, {5, 5, 5})});
  EXPECT_EQ(c.to_f64(), (std::vector<double>{0, 0, 0}));
}

TEST(Norm, LayernormRowsHaveMeanZeroAndVarianceOne) {
  const int rows = 5, d = 67;  // odd row length, off any vector width
  std::vector<double> v = random_values(rows * d, 3.0, 1);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < d; ++j) v[r * d + j] += 10.0 * r;  // offset rows: the mean must really be removed
  }
  const Tensor y = run1(Op::layernorm, {f32({rows, d}, v)}, {{"eps", 0.0}});
  ASSERT_EQ(y.numel(), rows * d);
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < d; ++j) mean += y.get(r * d + j) / d;
    for (int j = 0; j < d; ++j) var += (y.get(r * d + j) - mean) * (y.get(r * d + j) - mean) / d;
    EXPECT_NEAR(mean, 0.0, 1e-7) << "row " << r;
    EXPECT_NEAR(var, 1.0, 1e-6) << "row " << r;
  }
}

// The output takes x's dtype, whatever the weight's, and is rounded once.
TEST(Norm, LayernormOutputTakesTheInputDtype) {
  const Tensor x = tensor(DType::bf16, {1, 4}, {1, 2, 3, 4});
  const Tensor w = f32({4}, {0.3, 0.3, 0.3, 0.3});
  const Tensor y = run1(Op::layernorm, {x, w}, {{"eps", 0.0}});
  EXPECT_EQ(y.dtype(), DType::bf16);
  ASSERT_EQ(y.numel(), 4);
  EXPECT_EQ(y.get(0), round_to_dtype(-1.3416407864998738 * static_cast<double>(0.3f), DType::bf16));
}

TEST(Norm, LayernormInferErrors) {
  const TensorType x = type(DType::bf16, {2, 3072});
  EXPECT_TRUE(fails_with(infer(Op::layernorm, {x, type(DType::bf16, {128})}), ErrorCode::shape_error,
                         "layernorm weight must be [3072], got bf16[128]"));
  EXPECT_TRUE(fails_with(infer(Op::layernorm, {x, type(DType::f32, {3072}), type(DType::f32, {3072, 1})}),
                         ErrorCode::shape_error, "layernorm bias must be [3072], got f32[3072,1]"));
  EXPECT_TRUE(fails_with(infer(Op::layernorm, {x, type(DType::i32, {3072})}), ErrorCode::shape_error,
                         "layernorm weight must be floating, got i32[3072]"));
  EXPECT_TRUE(fails_with(infer(Op::layernorm, {type(DType::i32, {2, 4})}), ErrorCode::shape_error,
                         "layernorm needs a floating input, got i32[2,4]"));
  EXPECT_TRUE(fails_with(infer(Op::layernorm, {type(DType::f32, {})}), ErrorCode::shape_error,
                         "layernorm needs an input of rank >= 1, got f32[]"));
  EXPECT_TRUE(fails_with(infer(Op::layernorm, {x}, {{"eps", -1.0}}), ErrorCode::invalid_argument,
                         "attribute 'eps' of layernorm must be finite and >= 0, got -1"));
  EXPECT_TRUE(fails_with(infer(Op::layernorm, {x}, {{"eps", NAN}}), ErrorCode::invalid_argument,
                         "attribute 'eps' of layernorm must be finite and >= 0, got nan"));
  EXPECT_TRUE(
      fails_with(infer(Op::layernorm, {x, x, x, x}), ErrorCode::shape_error, "layernorm takes 1 to 3 inputs, got 4"));
  auto ok = infer(Op::layernorm, {x, type(DType::f32, {3072}), type(DType::f16, {3072})});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ((*ok)[0], x);
}

// ---- rmsnorm ----

TEST(Norm, RmsnormHandComputedRow) {
  // mean of squares (9 + 16) / 2 = 12.5
  const Tensor y = run1(Op::rmsnorm, {f32({1, 2}, {3, 4})}, {{"eps", 0.0}});
  ASSERT_EQ(y.numel(), 2);
  EXPECT_EQ(y.get(0), round_to_dtype(0.848528137423857, DType::f32));
  EXPECT_EQ(y.get(1), round_to_dtype(1.131370849898476, DType::f32));
  const Tensor yw = run1(Op::rmsnorm, {f32({1, 2}, {3, 4}), f32({2}, {2, -0.5})}, {{"eps", 0.0}});
  ASSERT_EQ(yw.numel(), 2);
  EXPECT_EQ(yw.get(0), round_to_dtype(2 * 0.848528137423857, DType::f32));
  EXPECT_EQ(yw.get(1), round_to_dtype(-0.5 * 1.131370849898476, DType::f32));
}

// The default eps is 1e-6 (not layernorm's 1e-5): a row of 1e-3 has mean square 1e-6.
TEST(Norm, RmsnormDefaultEps) {
  const Tensor y = run1(Op::rmsnorm, {f32({2}, {1e-3, 1e-3})});
  ASSERT_EQ(y.numel(), 2);
  EXPECT_NEAR(y.get(0), 0.7071067811865476, 1e-6);
}

TEST(Norm, RmsnormRowsHaveUnitMeanSquare) {
  const int rows = 3, d = 129;
  const Tensor x = f32({rows, d}, random_values(rows * d, 50.0, 2));
  const Tensor y = run1(Op::rmsnorm, {x}, {{"eps", 0.0}});
  ASSERT_EQ(y.numel(), rows * d);
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int j = 0; j < d; ++j) ms += y.get(r * d + j) * y.get(r * d + j) / d;
    EXPECT_NEAR(ms, 1.0, 1e-6) << "row " << r;
    // No centering: every element is x times one positive factor per row.
    const double factor = y.get(r * d) / x.get(r * d);
    EXPECT_GT(factor, 0.0);
    for (int j = 0; j < d; ++j) EXPECT_NEAR(y.get(r * d + j), factor * x.get(r * d + j), 1e-6) << r << "," << j;
  }
}

TEST(Norm, RmsnormInferErrors) {
  const TensorType x = type(DType::f16, {4, 64});
  EXPECT_TRUE(fails_with(infer(Op::rmsnorm, {x, type(DType::f16, {32})}), ErrorCode::shape_error,
                         "rmsnorm weight must be [64], got f16[32]"));
  EXPECT_TRUE(fails_with(infer(Op::rmsnorm, {x, type(DType::f16, {64}), type(DType::f16, {64})}),
                         ErrorCode::shape_error, "rmsnorm takes 1 to 2 inputs, got 3"));
  EXPECT_TRUE(fails_with(infer(Op::rmsnorm, {x}, {{"eps", kInf}}), ErrorCode::invalid_argument,
                         "attribute 'eps' of rmsnorm must be finite and >= 0, got inf"));
  EXPECT_TRUE(fails_with(infer(Op::rmsnorm, {type(DType::boolean, {4})}), ErrorCode::shape_error,
                         "rmsnorm needs a floating input, got bool[4]"));
}

// ---- softmax ----

TEST(Norm, SoftmaxHandComputedRow) {
  const Tensor y = run1(Op::softmax, {f32({1, 3}, {1, 2, 3})});
  ASSERT_EQ(y.numel(), 3);
  const double expected[] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
  for (int j = 0; j < 3; ++j) EXPECT_EQ(y.get(j), round_to_dtype(expected[j], DType::f32)) << j;
}

TEST(Norm, SoftmaxRowsSumToOne) {
  const int rows = 4, d = 33;
  const Tensor y = run1(Op::softmax, {f32({rows, d}, random_values(rows * d, 20.0, 3))});
  ASSERT_EQ(y.numel(), rows * d);
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int j = 0; j < d; ++j) {
      EXPECT_GE(y.get(r * d + j), 0.0);
      sum += y.get(r * d + j);
    }
    EXPECT_NEAR(sum, 1.0, d * 6e-8) << "row " << r;  // each of d outputs is off by at most half an f32 ulp
  }
}

// Subtracting the row max: large logits do not overflow, and a shift changes nothing.
TEST(Norm, SoftmaxIsStableAndShiftInvariant) {
  const Tensor big = run1(Op::softmax, {f32({3}, {1000, 1001, 1002})});
  const Tensor small = run1(Op::softmax, {f32({3}, {0, 1, 2})});
  EXPECT_TRUE(big.bitwise_equal(small));
  const Tensor masked = run1(Op::softmax, {f32({3}, {0, -INFINITY, 0})});
  EXPECT_EQ(masked.to_f64(), (std::vector<double>{0.5, 0, 0.5}));
  const Tensor with_nan = run1(Op::softmax, {f32({3}, {0, NAN, 1})});
  ASSERT_EQ(with_nan.numel(), 3);
  for (int j = 0; j < 3; ++j) EXPECT_TRUE(std::isnan(with_nan.get(j))) << j;
}

TEST(Norm, SoftmaxOverAnInnerAxis) {
  // x [2,2,2]; axis 1 pairs x[i,0,k] with x[i,1,k]
  const Tensor x = f32({2, 2, 2}, {0, 5, std::log(3.0), 5, 1, 2, 1, 2});
  const Tensor y = run1(Op::softmax, {x}, {{"axis", int64_t{1}}});
  ASSERT_EQ(y.numel(), 8);
  EXPECT_NEAR(y.get(0), 0.25, 1e-7);  // 1 / (1 + 3), up to the f32 rounding of log(3)
  EXPECT_NEAR(y.get(2), 0.75, 1e-7);
  EXPECT_EQ(y.get(1), 0.5);
  EXPECT_EQ(y.get(3), 0.5);
  for (int j = 4; j < 8; ++j) EXPECT_EQ(y.get(j), 0.5) << j;
  const Tensor z = run1(Op::softmax, {x}, {{"axis", int64_t{-2}}});
  EXPECT_TRUE(z.bitwise_equal(y));
}

TEST(Norm, SoftmaxBf16Output) {
  const Tensor y = run1(Op::softmax, {tensor(DType::bf16, {3}, {1, 2, 3})});
  EXPECT_EQ(y.dtype(), DType::bf16);
  ASSERT_EQ(y.numel(), 3);
  EXPECT_EQ(y.get(2), round_to_dtype(0.6652409557748219, DType::bf16));
}

TEST(Norm, SoftmaxInferErrors) {
  EXPECT_TRUE(fails_with(infer(Op::softmax, {type(DType::f32, {3, 2})}, {{"axis", int64_t{2}}}),
                         ErrorCode::invalid_argument, "axis 2 of softmax is out of range for f32[3,2] (rank 2)"));
  EXPECT_TRUE(fails_with(infer(Op::softmax, {type(DType::f32, {})}), ErrorCode::invalid_argument,
                         "axis -1 of softmax is out of range for f32[] (rank 0)"));
  EXPECT_TRUE(fails_with(infer(Op::softmax, {type(DType::i64, {3})}), ErrorCode::shape_error,
                         "softmax needs a floating input, got i64[3]"));
}

// ---- rope ----

Attrs style(const char* s) { return Attrs{{"style", std::string(s)}}; }

// x = [1,2,3,4], angle 0: (cos, sin) = (0, 1), angle 1: (0.5, -0.75) (not a rotation; exact arithmetic).
TEST(Norm, RopeInterleavedHandComputed) {
  const Tensor x = f32({1, 4}, {1, 2, 3, 4});
  const Tensor cos = f32({2}, {0, 0.5}), sin = f32({2}, {1, -0.75});
  // pairs (1,2) and (3,4): o0 = x0 c - x1 s, o1 = x0 s + x1 c
  EXPECT_EQ(run1(Op::rope, {x, cos, sin}).to_f64(), (std::vector<double>{-2, 1, 4.5, -0.25}));
  EXPECT_EQ(run1(Op::rope, {x, cos, sin}, style("interleaved")).to_f64(), (std::vector<double>{-2, 1, 4.5, -0.25}));
}

TEST(Norm, RopeHalfHandComputed) {
  const Tensor x = f32({1, 4}, {1, 2, 3, 4});
  const Tensor cos = f32({2}, {0, 0.5}), sin = f32({2}, {1, -0.75});
  // pairs (x0,x2) = (1,3) and (x1,x3) = (2,4)
  EXPECT_EQ(run1(Op::rope, {x, cos, sin}, style("half")).to_f64(), (std::vector<double>{-3, 4, 1, 0.5}));
}

TEST(Norm, RopeAtAngleZeroIsTheIdentity) {
  const Tensor x = tensor(DType::bf16, {3, 2, 8}, random_values(48, 4.0, 4));
  const Tensor ones = f32({4}, {1, 1, 1, 1}), zeros = f32({4}, {0, 0, 0, 0});
  for (const char* s : {"interleaved", "half"}) {
    const Tensor y = run1(Op::rope, {x, ones, zeros}, style(s));
    EXPECT_TRUE(y.bitwise_equal(x)) << s;
  }
}

TEST(Norm, RopePreservesPairNorms) {
  const int rows = 6, d = 16;
  const std::vector<double> angles = random_values(rows * d / 2, 3.14159, 5);
  std::vector<double> c(angles.size()), s(angles.size());
  for (size_t i = 0; i < angles.size(); ++i) {
    c[i] = std::cos(angles[i]);
    s[i] = std::sin(angles[i]);
  }
  const Tensor x = f32({rows, d}, random_values(rows * d, 2.0, 6));
  const Tensor y = run1(Op::rope, {x, f32({rows, d / 2}, c), f32({rows, d / 2}, s)}, style("half"));
  ASSERT_EQ(y.numel(), rows * d);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < d / 2; ++i) {
      const int a = r * d + i, b = r * d + i + d / 2;
      const double before = std::hypot(x.get(a), x.get(b)), after = std::hypot(y.get(a), y.get(b));
      EXPECT_NEAR(after, before, 1e-6 * (1 + before)) << "row " << r << " pair " << i;
    }
  }
}

// "half" on x equals "interleaved" on x with each pair (x[i], x[i+D/2]) moved next to each other.
TEST(Norm, RopeStylesDifferByAPermutation) {
  const int rows = 4, d = 12, h = d / 2;
  const std::vector<double> xv = random_values(rows * d, 1.0, 7);
  std::vector<double> interleaved(xv.size());
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < h; ++i) {
      interleaved[r * d + 2 * i] = xv[r * d + i];
      interleaved[r * d + 2 * i + 1] = xv[r * d + i + h];
    }
  }
  const Tensor cos = f32({rows, h}, random_values(rows * h, 1.0, 8));
  const Tensor sin = f32({rows, h}, random_values(rows * h, 1.0, 9));
  const Tensor y_half = run1(Op::rope, {f32({rows, d}, xv), cos, sin}, style("half"));
  const Tensor y_inter = run1(Op::rope, {f32({rows, d}, interleaved), cos, sin}, style("interleaved"));
  ASSERT_EQ(y_half.numel(), rows * d);
  ASSERT_EQ(y_inter.numel(), rows * d);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < h; ++i) {
      EXPECT_EQ(y_half.get(r * d + i), y_inter.get(r * d + 2 * i));
      EXPECT_EQ(y_half.get(r * d + i + h), y_inter.get(r * d + 2 * i + 1));
    }
  }
}

// x [B=2, S=3, H=2, D=4] with cos/sin [S, 1, D/2]: one angle per position, shared by batches and heads.
TEST(Norm, RopeBroadcastsAnglesOverBatchAndHeads) {
  const std::vector<double> xv = random_values(48, 1.0, 10);
  const std::vector<double> cv = {1, 0, 0.5, -1, 0.25, 2}, sv = {0, 1, 0.5, 0.5, -0.25, 1};
  const Tensor y = run1(Op::rope, {f32({2, 3, 2, 4}, xv), f32({3, 1, 2}, cv), f32({3, 1, 2}, sv)});
  ASSERT_EQ(y.numel(), 48);
  for (int b = 0; b < 2; ++b) {
    for (int pos = 0; pos < 3; ++pos) {
      for (int head = 0; head < 2; ++head) {
        for (int i = 0; i < 2; ++i) {
          const int base = ((b * 3 + pos) * 2 + head) * 4;
          const double x0 = round_to_dtype(xv[base + 2 * i], DType::f32);
          const double x1 = round_to_dtype(xv[base + 2 * i + 1], DType::f32);
          const double c = cv[pos * 2 + i], s = sv[pos * 2 + i];
          EXPECT_EQ(y.get(base + 2 * i), round_to_dtype(x0 * c - x1 * s, DType::f32));
          EXPECT_EQ(y.get(base + 2 * i + 1), round_to_dtype(x0 * s + x1 * c, DType::f32));
        }
      }
    }
  }
}

TEST(Norm, RopeInferErrors) {
  const TensorType x = type(DType::bf16, {2, 4});
  const TensorType angles = type(DType::f32, {2, 2});
  EXPECT_TRUE(fails_with(infer(Op::rope, {type(DType::f32, {2, 5}), angles, angles}), ErrorCode::shape_error,
                         "rope needs x with an even last dimension, got f32[2,5]"));
  EXPECT_TRUE(fails_with(infer(Op::rope, {type(DType::f32, {}), angles, angles}), ErrorCode::shape_error,
                         "rope needs x with an even last dimension, got f32[]"));
  EXPECT_TRUE(fails_with(infer(Op::rope, {type(DType::i32, {2, 4}), angles, angles}), ErrorCode::shape_error,
                         "rope needs a floating x, got i32[2,4]"));
  EXPECT_TRUE(fails_with(infer(Op::rope, {x, type(DType::f32, {2}), type(DType::f32, {3})}), ErrorCode::shape_error,
                         "rope cos and sin must have one shape, got f32[2] and f32[3]"));
  EXPECT_TRUE(fails_with(infer(Op::rope, {x, type(DType::f32, {3}), type(DType::f32, {3})}), ErrorCode::shape_error,
                         "rope cos/sin f32[3] must broadcast to [2,2] (x.shape[:-1] + [D/2] for x bf16[2,4])"));
  // Broadcasting must not grow the angle grid: [2,1] against [1,2] would give [2,2], but x is [1,4].
  EXPECT_TRUE(fails_with(infer(Op::rope, {type(DType::f32, {1, 4}), angles, angles}), ErrorCode::shape_error,
                         "must broadcast to [1,2]"));
  EXPECT_TRUE(fails_with(infer(Op::rope, {x, type(DType::f32, {1, 2, 2}), type(DType::f32, {1, 2, 2})}),
                         ErrorCode::shape_error, "must broadcast to [2,2]"));
  EXPECT_TRUE(fails_with(infer(Op::rope, {x, type(DType::i32, {2}), type(DType::i32, {2})}), ErrorCode::shape_error,
                         "rope needs floating cos and sin, got i32[2] and i32[2]"));
  EXPECT_TRUE(fails_with(infer(Op::rope, {x, angles, angles}, style("neox")), ErrorCode::invalid_argument,
                         "attribute 'style' of rope must be \"interleaved\" or \"half\", got \"neox\""));
  EXPECT_TRUE(fails_with(infer(Op::rope, {x, angles}), ErrorCode::shape_error, "rope takes 3 inputs, got 2"));
  auto ok =
      infer(Op::rope, {type(DType::bf16, {2, 5, 3, 8}), type(DType::f32, {5, 1, 4}), type(DType::f32, {5, 1, 4})});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ((*ok)[0], type(DType::bf16, {2, 5, 3, 8}));
}

TEST(Norm, TraitsAndCost) {
  for (Op op : {Op::layernorm, Op::rmsnorm, Op::softmax, Op::rope}) {
    EXPECT_TRUE(op_has_trait(op, kTraitRowwise)) << op_name(op);
    EXPECT_TRUE(op_has_trait(op, kTraitComposite)) << op_name(op);
  }
  EXPECT_TRUE(op_has_trait(Op::softmax, kTraitTranscendental));
  EXPECT_FALSE(op_has_trait(Op::rope, kTraitTranscendental));
  const std::vector<TensorType> in = {type(DType::bf16, {2, 8}), type(DType::bf16, {8})};
  const std::vector<TensorType> out = {type(DType::bf16, {2, 8})};
  const OpCost cost = op_def(Op::rmsnorm).cost(OpCall{in, Attrs{}}, out);
  EXPECT_EQ(cost.bytes, 32 + 16 + 32);
  EXPECT_GT(cost.flops, 16);
}

}  // namespace
}  // namespace kiln
