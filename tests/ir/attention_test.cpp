// attention against a naive loop written here (scores, mask, causal limit, softmax, weighted sum, one key at a
// time), hand-computed cases, softmax rows, every inference error, and costs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "ir/ops.h"
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

Tensor run1(const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  auto result = ref::run_op(Op::attention, inputs, attrs);
  EXPECT_TRUE(result.ok()) << result.error().message;
  if (!result.ok()) return Tensor();
  return std::move((*result)[0]);
}

std::string infer_error(std::vector<TensorType> inputs, const Attrs& attrs = {}) {
  auto result = infer_node(Op::attention, inputs, attrs);
  return result.ok() ? std::string() : result.error().message;
}

// Mask element for scores[b, h, i, j], numpy broadcasting by hand (trailing-aligned, size-1 dims repeat).
double mask_at(const Tensor& mask, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t index4[4] = {b, h, i, j};
  const Shape& s = mask.shape();
  const size_t lead = 4 - s.size();
  int64_t flat = 0;
  for (size_t a = 0; a < s.size(); ++a) flat = flat * s[a] + (s[a] == 1 ? 0 : index4[lead + a]);
  return mask.get(flat);
}

// Naive attention in double: out[b, h, i, :] = sum_j softmax_j(score_ij) v[b, h / group, j, :].
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, bool causal,
                                    std::optional<double> scale_attr = std::nullopt) {
  const int64_t batch = q.shape()[0], hq = q.shape()[1], sq = q.shape()[2], d = q.shape()[3];
  const int64_t hkv = k.shape()[1], sk = k.shape()[2], dv = v.shape()[3];
  const double scale = scale_attr ? *scale_attr : 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(static_cast<size_t>(batch * hq * sq * dv), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> score(static_cast<size_t>(sk));
        std::vector<bool> attend(static_cast<size_t>(sk), true);
        double best = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < sk; ++j) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c)
            s += q.get(((b * hq + h) * sq + i) * d + c) * k.get(((b * hkv + g) * sk + j) * d + c);
          s *= scale;
          if (causal && j > i + sk - sq) attend[j] = false;
          if (mask && mask->dtype() == DType::boolean && mask_at(*mask, b, h, i, j) == 0) attend[j] = false;
          if (mask && mask->dtype() != DType::boolean) s += mask_at(*mask, b, h, i, j);
          if (std::isinf(s) && s < 0) attend[j] = false;
          score[j] = s;
          if (attend[j]) best = std::max(best, s);
        }
        double total = 0;
        for (int64_t j = 0; j < sk; ++j) total += attend[j] ? std::exp(score[j] - best) : 0.0;
        if (total == 0) continue;  // fully masked: zeros
        for (int64_t j = 0; j < sk; ++j) {
          if (!attend[j]) continue;
          const double p = std::exp(score[j] - best) / total;
          for (int64_t c = 0; c < dv; ++c) {
            out[((b * hq + h) * sq + i) * dv + c] += p * v.get(((b * hkv + g) * sk + j) * dv + c);
          }
        }
      }
    }
  }
  return out;
}

void expect_matches(const Tensor& got, const std::vector<double>& want) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i) {
    EXPECT_NEAR(got.get(i), want[i], 1e-6 * std::max(1.0, std::fabs(want[i]))) << "element " << i;
  }
}

Attrs causal_attrs() { return {{"causal", int64_t{1}}}; }

TEST(Attention, HandComputed) {
  // One query [1, 0] against keys [1, 0] and [0, 1], scale 1: weights e/(e+1) and 1/(e+1).
  const Tensor q = make(DType::f32, {1, 1, 1, 2}, {1, 0});
  const Tensor k = make(DType::f32, {1, 1, 2, 2}, {1, 0, 0, 1});
  const Tensor v = make(DType::f32, {1, 1, 2, 1}, {10, 20});
  const Tensor o = run1({q, k, v}, {{"scale", 1.0}});
  const double e = std::exp(1.0);
  EXPECT_NEAR(o.get(0), (10 * e + 20) / (e + 1), 1e-5);
}

TEST(Attention, MatchesNaiveLoop) {
  const Tensor q = random_tensor(DType::f32, {2, 3, 5, 8}, 1, -2, 2);
  const Tensor k = random_tensor(DType::f32, {2, 3, 7, 8}, 2, -2, 2);
  const Tensor v = random_tensor(DType::f32, {2, 3, 7, 6}, 3);  // Dv != D
  const Tensor o = run1({q, k, v});
  EXPECT_EQ(o.shape(), (Shape{2, 3, 5, 6}));
  expect_matches(o, naive_attention(q, k, v, nullptr, false));
}

TEST(Attention, ScaleAttribute) {
  const Tensor q = random_tensor(DType::f32, {1, 2, 4, 8}, 4, -2, 2);
  const Tensor k = random_tensor(DType::f32, {1, 2, 6, 8}, 5, -2, 2);
  const Tensor v = random_tensor(DType::f32, {1, 2, 6, 8}, 6);
  expect_matches(run1({q, k, v}, {{"scale", 0.7}}), naive_attention(q, k, v, nullptr, false, 0.7));
}

TEST(Attention, CausalWithFewerQueriesThanKeysIsBottomRightAligned) {
  // Sq = 3, Sk = 7: query i sees keys 0..i+4, the last query sees all (a decode step with a KV cache).
  const Tensor q = random_tensor(DType::f32, {1, 2, 3, 4}, 7, -2, 2);
  const Tensor k = random_tensor(DType::f32, {1, 2, 7, 4}, 8, -2, 2);
  const Tensor v = random_tensor(DType::f32, {1, 2, 7, 4}, 9);
  const Tensor o = run1({q, k, v}, causal_attrs());
  expect_matches(o, naive_attention(q, k, v, nullptr, true));
  // The last query row is unmasked: it equals the non-causal result.
  const Tensor full = run1({q, k, v});
  for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(o.get(2 * 4 + c), full.get(2 * 4 + c));
}

TEST(Attention, CausalWithMoreQueriesThanKeysZeroesUnseeingRows) {
  // Sq = 5, Sk = 3: queries 0 and 1 see no key (j <= i - 2), so their rows are 0.
  const Tensor q = random_tensor(DType::f32, {1, 1, 5, 4}, 10);
  const Tensor k = random_tensor(DType::f32, {1, 1, 3, 4}, 11);
  const Tensor v = random_tensor(DType::f32, {1, 1, 3, 4}, 12, 1, 2);
  const Tensor o = run1({q, k, v}, causal_attrs());
  for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(o.get(c), 0.0);
  expect_matches(o, naive_attention(q, k, v, nullptr, true));
}

TEST(Attention, CausalAcrossQueryBlocks) {
  // More query rows than one block of the reference (256), so blocks and their key limits are exercised.
  const Tensor q = random_tensor(DType::f32, {1, 1, 300, 4}, 13);
  const Tensor k = random_tensor(DType::f32, {1, 1, 310, 4}, 14);
  const Tensor v = random_tensor(DType::f32, {1, 1, 310, 3}, 15);
  expect_matches(run1({q, k, v}, causal_attrs()), naive_attention(q, k, v, nullptr, true));
  expect_matches(run1({q, k, v}), naive_attention(q, k, v, nullptr, false));
}

TEST(Attention, GroupedQueryHeads) {
  // Hq = 6, Hkv = 2: q heads 0-2 use kv head 0, heads 3-5 kv head 1 (h / 3, not h % 2).
  const Tensor q = random_tensor(DType::f32, {2, 6, 4, 8}, 16, -2, 2);
  const Tensor k = random_tensor(DType::f32, {2, 2, 5, 8}, 17, -2, 2);
  const Tensor v = random_tensor(DType::f32, {2, 2, 5, 8}, 18);
  expect_matches(run1({q, k, v}), naive_attention(q, k, v, nullptr, false));
  expect_matches(run1({q, k, v}, causal_attrs()), naive_attention(q, k, v, nullptr, true));
}

TEST(Attention, BoolMaskBroadcast) {
  const Tensor q = random_tensor(DType::f32, {2, 2, 4, 8}, 19, -2, 2);
  const Tensor k = random_tensor(DType::f32, {2, 2, 6, 8}, 20, -2, 2);
  const Tensor v = random_tensor(DType::f32, {2, 2, 6, 8}, 21);
  // [B, 1, 1, Sk]: a padding mask per batch; [Sq, Sk]: one pattern for all.
  Tensor padding(DType::boolean, {2, 1, 1, 6});
  for (int64_t j = 0; j < 6; ++j) {
    padding.set_int(j, j < 4);
    padding.set_int(6 + j, j != 2);
  }
  expect_matches(run1({q, k, v, padding}), naive_attention(q, k, v, &padding, false));
  Tensor pattern(DType::boolean, {4, 6});
  for (int64_t i = 0; i < 24; ++i) pattern.set_int(i, (i * 7) % 3 != 0);
  expect_matches(run1({q, k, v, pattern}), naive_attention(q, k, v, &pattern, false));
  expect_matches(run1({q, k, v, pattern}, causal_attrs()), naive_attention(q, k, v, &pattern, true));
}

TEST(Attention, BoolMaskBroadcastOverKeys) {
  // [1, 1, Sq, 1]: a per-query mask repeats over keys; rows that are false come out 0, the others unmasked.
  const Tensor q = random_tensor(DType::f32, {1, 2, 4, 8}, 34, -2, 2);
  const Tensor k = random_tensor(DType::f32, {1, 2, 6, 8}, 35, -2, 2);
  const Tensor v = random_tensor(DType::f32, {1, 2, 6, 8}, 36, 1, 2);
  Tensor rows(DType::boolean, {1, 1, 4, 1});
  rows.set_int(0, 1);
  rows.set_int(2, 1);
  const Tensor o = run1({q, k, v, rows});
  const Tensor full = run1({q, k, v});
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t c = 0; c < 8; ++c) {
        const int64_t at = (h * 4 + i) * 8 + c;
        EXPECT_EQ(o.get(at), i % 2 == 0 ? full.get(at) : 0.0) << "head " << h << " row " << i;
      }
    }
  }
}

TEST(Attention, FloatMaskIsAddedToScores) {
  const Tensor q = random_tensor(DType::f32, {1, 3, 4, 8}, 22, -2, 2);
  const Tensor k = random_tensor(DType::f32, {1, 3, 5, 8}, 23, -2, 2);
  const Tensor v = random_tensor(DType::f32, {1, 3, 5, 8}, 24);
  const Tensor bias = random_tensor(DType::bf16, {1, 3, 1, 5}, 25, -3, 3);  // per head and key (ALiBi-like)
  expect_matches(run1({q, k, v, bias}), naive_attention(q, k, v, &bias, false));
}

TEST(Attention, FullyMaskedRowGivesZero) {
  const Tensor q = random_tensor(DType::f32, {1, 1, 3, 4}, 26);
  const Tensor k = random_tensor(DType::f32, {1, 1, 4, 4}, 27);
  const Tensor v = random_tensor(DType::f32, {1, 1, 4, 2}, 28, 1, 2);
  Tensor mask(DType::boolean, {3, 4});
  for (int64_t j = 0; j < 4; ++j) {
    mask.set_int(j, 1);
    mask.set_int(8 + j, j == 3);  // row 1 stays all false
  }
  const Tensor o = run1({q, k, v, mask});
  EXPECT_EQ(o.get(2), 0.0);
  EXPECT_EQ(o.get(3), 0.0);
  expect_matches(o, naive_attention(q, k, v, &mask, false));
  // A float mask of -inf masks fully too: zeros, not NaN.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor minus_inf = make(DType::f32, {1, 4}, {-inf, -inf, -inf, -inf});
  const Tensor z = run1({q, k, v, minus_inf});
  for (int64_t i = 0; i < z.numel(); ++i) EXPECT_EQ(z.get(i), 0.0);
}

TEST(Attention, NoKeysGiveZeros) {
  const Tensor o = run1({random_tensor(DType::f32, {1, 2, 3, 4}, 37), Tensor(DType::f32, {1, 1, 0, 4}),
                         Tensor(DType::f32, {1, 1, 0, 5})});
  EXPECT_EQ(o.shape(), (Shape{1, 2, 3, 5}));
  EXPECT_EQ(o.to_f64(), std::vector<double>(30, 0.0));
}

TEST(Attention, IdentityValuesGiveSoftmaxRows) {
  // With v = I (Sk = Dv), out[i, :] is row i of softmax(q k^T * scale): each sums to 1, matches a hand softmax.
  const int64_t sk = 5;
  const Tensor q = random_tensor(DType::f32, {1, 1, 3, 4}, 29, -2, 2);
  const Tensor k = random_tensor(DType::f32, {1, 1, sk, 4}, 30, -2, 2);
  std::vector<double> eye(sk * sk, 0.0);
  for (int64_t j = 0; j < sk; ++j) eye[j * sk + j] = 1;
  const Tensor v = make(DType::f32, {1, 1, sk, sk}, eye);
  const Tensor o = run1({q, k, v});
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<double> s(sk);
    double total = 0;
    for (int64_t j = 0; j < sk; ++j) {
      for (int64_t c = 0; c < 4; ++c) s[j] += q.get(i * 4 + c) * k.get(j * 4 + c) / 2.0;  // 1/sqrt(4)
      total += std::exp(s[j]);
    }
    double row_sum = 0;
    for (int64_t j = 0; j < sk; ++j) {
      EXPECT_NEAR(o.get(i * sk + j), std::exp(s[j]) / total, 1e-6);
      row_sum += o.get(i * sk + j);
    }
    EXPECT_NEAR(row_sum, 1.0, 1e-6);
  }
}

TEST(Attention, Bf16OutputRoundedOnceFromNaive) {
  const Tensor q = random_tensor(DType::bf16, {1, 2, 6, 16}, 31, -2, 2);
  const Tensor k = random_tensor(DType::bf16, {1, 2, 9, 16}, 32, -2, 2);
  const Tensor v = random_tensor(DType::bf16, {1, 2, 9, 16}, 33);
  const Tensor o = run1({q, k, v}, causal_attrs());
  EXPECT_EQ(o.dtype(), DType::bf16);
  const std::vector<double> want = naive_attention(q, k, v, nullptr, true);
  int64_t exact = 0;
  for (int64_t i = 0; i < o.numel(); ++i) {
    const double rounded = round_to_dtype(want[i], DType::bf16);
    EXPECT_NEAR(o.get(i), rounded, std::ldexp(std::fabs(rounded), -7) + 1e-30);
    exact += o.get(i) == rounded;
  }
  EXPECT_GE(exact, o.numel() * 9 / 10);
}

// [b, s, h, d] <-> [b, h, s, d] by hand.
Tensor swapped(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor out(t.dtype(), {s[0], s[2], s[1], s[3]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t j = 0; j < s[2]; ++j)
        for (int64_t e = 0; e < s[3]; ++e)
          out.set(((b * s[2] + j) * s[1] + i) * s[3] + e, t.get(((b * s[1] + i) * s[2] + j) * s[3] + e));
  return out;
}

// Each operand and the output may be token-major: the same values as the head-major attention, each tensor in
// its own layout, bit for bit (GQA and causal masking included).
TEST(Attention, TokenMajorLayoutsAreTheSameAttention) {
  const Tensor q = random_tensor(DType::bf16, {2, 4, 5, 8}, 1);
  const Tensor k = random_tensor(DType::bf16, {2, 2, 7, 8}, 2);
  const Tensor v = random_tensor(DType::bf16, {2, 2, 7, 8}, 3);
  const Attrs causal{{"causal", int64_t{1}}};
  const Tensor want = run1({q, k, v}, causal);
  for (int mask = 1; mask < 16; ++mask) {
    Attrs attrs = causal;
    const bool tm[4] = {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0, (mask & 8) != 0};
    const char* names[4] = {"q_layout", "k_layout", "v_layout", "out_layout"};
    for (int i = 0; i < 4; ++i) {
      if (tm[i]) attrs.set(names[i], std::string("bshd"));
    }
    const Tensor got = run1({tm[0] ? swapped(q) : q, tm[1] ? swapped(k) : k, tm[2] ? swapped(v) : v}, attrs);
    EXPECT_TRUE((tm[3] ? swapped(got) : got).bitwise_equal(want)) << "layout mask " << mask;
  }
}

TEST(Attention, InferErrors) {
  const TensorType q{DType::bf16, {2, 8, 16, 64}}, k{DType::bf16, {2, 2, 32, 64}}, v{DType::bf16, {2, 2, 32, 64}};
  EXPECT_EQ(infer_error({q, k, v}), "");
  EXPECT_EQ(infer_error({{DType::bf16, {8, 16, 64}}, k, v}),
            "attention: q must be [batch, heads, seq, head_dim] (or [batch, seq, heads, head_dim] with "
            "q_layout=\"bshd\"), got bf16[8,16,64]");
  EXPECT_EQ(infer_error({q, k, v}, {{"v_layout", std::string("sbhd")}}),
            "attribute 'v_layout' of attention must be \"bhsd\" or \"bshd\", got \"sbhd\"");
  // Token-major operands are judged in head-major order: k [2, 32, 2, 64] is k [2, 2, 32, 64].
  EXPECT_EQ(infer_error({q, {DType::bf16, {2, 32, 2, 64}}, v}, {{"k_layout", std::string("bshd")}}), "");
  EXPECT_NE(infer_error({q, {DType::bf16, {2, 2, 32, 64}}, v}, {{"k_layout", std::string("bshd")}}).find("k and v"),
            std::string::npos);
  const std::vector<TensorType> qkv = {q, k, v};
  auto out = infer_node(Op::attention, qkv, {{"out_layout", std::string("bshd")}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].shape, (Shape{2, 16, 8, 64}));
  EXPECT_EQ(infer_error({q, {DType::f32, {2, 2, 32, 64}}, v}), "attention: k f32[2,2,32,64] must have q's dtype bf16");
  EXPECT_NE(infer_error({{DType::i32, {2, 8, 16, 64}}, {DType::i32, {2, 2, 32, 64}}, {DType::i32, {2, 2, 32, 64}}})
                .find("floating"),
            std::string::npos);
  EXPECT_NE(infer_error({q, {DType::bf16, {1, 2, 32, 64}}, v}).find("batch sizes differ"), std::string::npos);
  EXPECT_NE(infer_error({q, k, {DType::bf16, {2, 2, 31, 64}}}).find("k and v must agree"), std::string::npos);
  EXPECT_NE(infer_error({q, {DType::bf16, {2, 2, 32, 32}}, v}).find("same head_dim"), std::string::npos);
  EXPECT_EQ(infer_error({q, {DType::bf16, {2, 3, 32, 64}}, {DType::bf16, {2, 3, 32, 64}}}),
            "attention: q heads (8) must be a multiple of kv heads (3) (q [2,8,16,64], k [2,3,32,64], v "
            "[2,3,32,64])");
  EXPECT_NE(infer_error({q, k, v, {DType::i32, {16, 32}}}).find("mask must be bool"), std::string::npos);
  EXPECT_EQ(infer_error({q, k, v, {DType::boolean, {16, 16}}}),
            "attention: mask bool[16,16] does not broadcast to the scores [2,8,16,32] [batch, q heads, q seq, k seq]");
  EXPECT_NE(infer_error({q, k, v, {DType::boolean, {1, 2, 8, 16, 32}}}).find("does not broadcast"), std::string::npos);
  EXPECT_EQ(infer_error({q, k, v}, {{"causal", int64_t{2}}}), "attribute 'causal' of attention must be 0 or 1, got 2");
  EXPECT_NE(infer_error({q, k, v}, {{"scale", int64_t{1}}}).find("must be float"), std::string::npos);
}

TEST(Attention, Cost) {
  const std::vector<TensorType> inputs{
      {DType::bf16, {2, 4, 3, 8}}, {DType::bf16, {2, 2, 5, 8}}, {DType::bf16, {2, 2, 5, 6}}};
  const OpDef& def = op_def(Op::attention);
  const Attrs plain, causal = causal_attrs();
  auto out = infer_node(Op::attention, inputs, plain);
  ASSERT_TRUE(out.ok());
  const OpCost full = def.cost(OpCall{inputs, plain}, *out);
  EXPECT_EQ(full.flops, 2.0 * 4 * 3 * 5 * 2 * (8 + 6));
  EXPECT_EQ(full.bytes, 2.0 * (2 * 4 * 3 * 8 + 2 * 2 * 5 * 8 + 2 * 2 * 5 * 6 + 2 * 4 * 3 * 6));
  // Sq = 3, Sk = 5: queries see 3, 4 and 5 keys.
  EXPECT_EQ(def.cost(OpCall{inputs, causal}, *out).flops, 2.0 * 4 * (3 + 4 + 5) * 2 * (8 + 6));
  EXPECT_EQ(def.traits, kTraitAttention);
}

}  // namespace
}  // namespace kiln
