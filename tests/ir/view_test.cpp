// Data-movement ops: hand-computed results, round trips (split/concat, transpose/inverse, reshape), Python
// slice semantics, gather with negative and out-of-range indices, bit exactness, inference errors and costs.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "ir/ops.h"
#include "ref/executor.h"

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;

// Values 0, 1, 2, ... so that every result can be read off by hand.
Tensor iota(DType dtype, Shape shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  return Tensor::from_f64(dtype, shape, v);
}

Tensor random_tensor(DType dtype, Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-10, 10);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  return Tensor::from_f64(dtype, shape, v);
}

std::vector<Tensor> run(Op op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  auto result = ref::run_op(op, inputs, attrs);
  EXPECT_TRUE(result.ok()) << result.error().message;
  return result.ok() ? std::move(*result) : std::vector<Tensor>{};
}

Tensor run1(Op op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  std::vector<Tensor> out = run(op, inputs, attrs);
  return out.size() == 1 ? std::move(out[0]) : Tensor();
}

std::string infer_error(Op op, std::vector<TensorType> inputs, const Attrs& attrs) {
  auto result = infer_node(op, inputs, attrs);
  return result.ok() ? std::string() : result.error().message;
}

OpCost cost_of(Op op, std::vector<TensorType> inputs, const Attrs& attrs) {
  auto out = infer_node(op, inputs, attrs);
  EXPECT_TRUE(out.ok());
  return op_def(op).cost(OpCall{inputs, attrs}, *out);
}

// ---- reshape ----

TEST(View, ReshapeInfersMinusOneAndKeepsBytes) {
  const Tensor x = random_tensor(DType::bf16, {2, 3, 4}, 1);
  const Tensor y = run1(Op::reshape, {x}, {{"shape", Ints{4, -1}}});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  const Tensor back = run1(Op::reshape, {y}, {{"shape", Ints{2, 3, 4}}});
  EXPECT_TRUE(back.bitwise_equal(x));
  EXPECT_EQ(run1(Op::reshape, {x}, {{"shape", Ints{-1}}}).shape(), (Shape{24}));
  EXPECT_EQ(run1(Op::reshape, {Tensor(DType::f32, {1, 1})}, {{"shape", Ints{}}}).shape(), (Shape{}));
}

TEST(View, ReshapeErrors) {
  const TensorType x{DType::f32, {2, 3}};
  EXPECT_EQ(infer_error(Op::reshape, {x}, {{"shape", Ints{-1, -1}}}), "reshape: shape [-1,-1] has more than one -1");
  EXPECT_EQ(infer_error(Op::reshape, {x}, {{"shape", Ints{4, 2}}}),
            "reshape: cannot reshape f32[2,3] (6 elements) to [4,2] (8 elements)");
  EXPECT_NE(infer_error(Op::reshape, {x}, {{"shape", Ints{4, -1}}}).find("cannot infer the -1"), std::string::npos);
  EXPECT_NE(infer_error(Op::reshape, {{DType::f32, {0, 3}}}, {{"shape", Ints{0, -1}}}).find("cannot infer"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::reshape, {x}, {{"shape", Ints{-2, -3}}}).find("negative dim"), std::string::npos);
  EXPECT_NE(infer_error(Op::reshape, {x}, {}).find("missing required attribute 'shape'"), std::string::npos);
  // A shape whose product passes int64 is refused by name rather than overflowing.
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(infer_error(Op::reshape, {x}, {{"shape", Ints{big, big}}}),
            "reshape: shape [1099511627776,1099511627776] has more elements than int64 holds");
}

TEST(View, ReshapeMovesNoBytes) {
  const OpCost cost = cost_of(Op::reshape, {{DType::f32, {8, 8}}}, {{"shape", Ints{64}}});
  EXPECT_EQ(cost.bytes, 0);
  EXPECT_EQ(cost.flops, 0);
}

// ---- transpose ----

TEST(View, TransposeHandComputed) {
  const Tensor y = run1(Op::transpose, {iota(DType::f32, {2, 3})}, {{"perm", Ints{1, 0}}});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_f64(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(View, TransposeThenInverseIsIdentity) {
  const Tensor x = random_tensor(DType::f16, {2, 3, 4, 5}, 2);
  const Ints perm{2, 0, 3, 1}, inverse{1, 3, 0, 2};
  const Tensor y = run1(Op::transpose, {x}, {{"perm", perm}});
  EXPECT_EQ(y.shape(), (Shape{4, 2, 5, 3}));
  // y[a, b, c, d] = x[b, d, a, c]
  EXPECT_EQ(y.get(((1 * 2 + 1) * 5 + 4) * 3 + 2), x.get(((1 * 3 + 2) * 4 + 1) * 5 + 4));
  EXPECT_TRUE(run1(Op::transpose, {y}, {{"perm", inverse}}).bitwise_equal(x));
}

TEST(View, TransposeCopiesBitsNotValues) {
  // 2^62 + 1 is not a double: a copy through double would lose the low bit.
  Tensor x(DType::i64, {2, 2});
  for (int64_t i = 0; i < 4; ++i) x.set_int(i, (int64_t{1} << 62) + i);
  const Tensor y = run1(Op::transpose, {x}, {{"perm", Ints{1, 0}}});
  EXPECT_EQ(y.get_int(1), (int64_t{1} << 62) + 2);
  EXPECT_EQ(y.get_int(2), (int64_t{1} << 62) + 1);
}

TEST(View, TransposeErrors) {
  const TensorType x{DType::f32, {2, 3, 4}};
  EXPECT_EQ(infer_error(Op::transpose, {x}, {{"perm", Ints{0, 0, 1}}}),
            "transpose: perm [0,0,1] is not a permutation of 0..2 for f32[2,3,4]");
  EXPECT_NE(infer_error(Op::transpose, {x}, {{"perm", Ints{1, 0}}}).find("not a permutation"), std::string::npos);
  EXPECT_NE(infer_error(Op::transpose, {x}, {{"perm", Ints{0, 1, 3}}}).find("not a permutation"), std::string::npos);
  EXPECT_NE(infer_error(Op::transpose, {x}, {{"perm", Ints{-1, 0, 1}}}).find("not a permutation"), std::string::npos);
}

// ---- broadcast ----

TEST(View, BroadcastHandComputed) {
  const Tensor y = run1(Op::broadcast, {iota(DType::f32, {3, 1})}, {{"shape", Ints{2, 3, 2}}});
  EXPECT_EQ(y.to_f64(), (std::vector<double>{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}));
  const Tensor row = run1(Op::broadcast, {iota(DType::f32, {3})}, {{"shape", Ints{2, 3}}});
  EXPECT_EQ(row.to_f64(), (std::vector<double>{0, 1, 2, 0, 1, 2}));
}

TEST(View, BroadcastErrors) {
  EXPECT_EQ(infer_error(Op::broadcast, {{DType::f32, {3, 2}}}, {{"shape", Ints{4, 3}}}),
            "broadcast: cannot expand f32[3,2] to [4,3]: dim 0 of x is 3, neither 1 nor 4");
  EXPECT_NE(infer_error(Op::broadcast, {{DType::f32, {3, 2}}}, {{"shape", Ints{2}}}).find("lower rank"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::broadcast, {{DType::f32, {1}}}, {{"shape", Ints{-1}}}).find("negative"),
            std::string::npos);
  // Any inferred output is held to the parsed-shape limits: here 2^31 * 2^31 * 2^2 = 2^64 elements.
  EXPECT_NE(infer_error(Op::broadcast, {{DType::f32, {1}}}, {{"shape", Ints{int64_t{1} << 31, int64_t{1} << 31, 4}}})
                .find("broadcast output 0:"),
            std::string::npos);
}

// ---- concat and split ----

TEST(View, ConcatHandComputed) {
  const Tensor a = iota(DType::f32, {2, 2});
  const Tensor b = Tensor::from_f64(DType::f32, {2, 1}, std::vector<double>{9, 8});
  EXPECT_EQ(run1(Op::concat, {a, b}, {{"axis", int64_t{1}}}).to_f64(), (std::vector<double>{0, 1, 9, 2, 3, 8}));
  EXPECT_EQ(run1(Op::concat, {a, a}, {{"axis", int64_t{0}}}).to_f64(), (std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_TRUE(run1(Op::concat, {a}, {{"axis", int64_t{-1}}}).bitwise_equal(a));
}

TEST(View, SplitThenConcatIsIdentity) {
  const Tensor x = random_tensor(DType::bf16, {2, 7, 3}, 3);
  const std::vector<Tensor> parts = run(Op::split, {x}, {{"axis", int64_t{-2}}, {"sizes", Ints{3, 0, 4}}});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 0, 3}));
  EXPECT_EQ(parts[2].shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(parts[2].get(0), x.get(3 * 3));  // x[0, 3, 0]
  EXPECT_EQ(parts[0].get(9), x.get(7 * 3));  // x[1, 0, 0]
  EXPECT_TRUE(run1(Op::concat, parts, {{"axis", int64_t{1}}}).bitwise_equal(x));
}

TEST(View, ConcatErrors) {
  const TensorType a{DType::f32, {2, 3}};
  EXPECT_EQ(infer_error(Op::concat, {a, {DType::f32, {3, 3}}}, {{"axis", int64_t{1}}}),
            "concat: input 1 f32[3,3] does not match input 0 f32[2,3] outside axis 1");
  EXPECT_NE(infer_error(Op::concat, {a, {DType::f32, {2, 3, 1}}}, {{"axis", int64_t{0}}}).find("does not match"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::concat, {a, {DType::bf16, {2, 3}}}, {{"axis", int64_t{0}}}).find("one dtype"),
            std::string::npos);
  EXPECT_EQ(infer_error(Op::concat, {a, a}, {{"axis", int64_t{2}}}), "concat: axis 2 is out of range for f32[2,3] (rank 2)");
  EXPECT_NE(infer_error(Op::concat, {{DType::f32, {}}}, {{"axis", int64_t{0}}}).find("rank >= 1"), std::string::npos);
  EXPECT_NE(infer_error(Op::concat, {}, {{"axis", int64_t{0}}}).find("at least 1"), std::string::npos);
  // Dims whose sum passes int64, and a sum that fits int64 but passes the 2^62-element limit on any shape.
  const TensorType huge{DType::f32, {int64_t{1} << 62}};
  EXPECT_EQ(infer_error(Op::concat, {huge, huge}, {{"axis", int64_t{0}}}),
            "concat: the inputs' dim 0 sum past what int64 holds");
  const TensorType half{DType::f32, {int64_t{1} << 61}};
  EXPECT_NE(infer_error(Op::concat, {half, half, half}, {{"axis", int64_t{0}}}).find("concat output 0:"),
            std::string::npos);
}

TEST(View, SplitErrors) {
  const TensorType x{DType::f32, {2, 5}};
  EXPECT_EQ(infer_error(Op::split, {x}, {{"axis", int64_t{1}}, {"sizes", Ints{2, 2}}}),
            "split: sizes [2,2] sum to 4, but dim 1 of f32[2,5] is 5");
  EXPECT_NE(infer_error(Op::split, {x}, {{"axis", int64_t{1}}, {"sizes", Ints{6, -1}}}).find("negative"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::split, {x}, {{"axis", int64_t{1}}, {"sizes", Ints{}}}).find("must not be empty"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::split, {x}, {{"axis", int64_t{-3}}, {"sizes", Ints{2}}}).find("out of range"),
            std::string::npos);
  // Sizes whose running sum would pass int64 stop at the first one past the dim (the fuzzer's find).
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(infer_error(Op::split, {x}, {{"axis", int64_t{1}}, {"sizes", Ints{big, big, big}}}),
            "split: sizes [4611686018427387904,4611686018427387904,4611686018427387904] sum past dim 1 of f32[2,5] (5)");
  EXPECT_NE(infer_error(Op::split, {x}, {{"axis", int64_t{1}}, {"sizes", Ints{2, 4}}}).find("sum past dim 1"),
            std::string::npos);
}

TEST(View, CopyCosts) {
  const OpCost t = cost_of(Op::transpose, {{DType::bf16, {4, 8}}}, {{"perm", Ints{1, 0}}});
  EXPECT_EQ(t.bytes, 2.0 * 2 * 32);
  EXPECT_EQ(t.flops, 0);
  EXPECT_EQ(cost_of(Op::concat, {{DType::f32, {2, 3}}, {DType::f32, {2, 5}}}, {{"axis", int64_t{1}}}).bytes,
            4.0 * (6 + 10 + 16));
  EXPECT_EQ(cost_of(Op::broadcast, {{DType::f32, {3}}}, {{"shape", Ints{4, 3}}}).bytes, 4.0 * (3 + 12));
  // slice reads only what it keeps.
  EXPECT_EQ(cost_of(Op::slice, {{DType::f32, {10, 4}}},
                    {{"axis", int64_t{0}}, {"start", int64_t{0}}, {"end", int64_t{2}}})
                .bytes,
            4.0 * 2 * 8);
  EXPECT_EQ(op_def(Op::gather).traits, kTraitView);
}

// ---- slice ----

TEST(View, SliceFollowsPythonSemantics) {
  struct Case {
    int64_t start, end, step;
    std::vector<double> want;  // list(range(10))[start:end:step], computed in Python
  };
  const std::vector<Case> cases = {
      {2, 8, 1, {2, 3, 4, 5, 6, 7}}, {-3, 100, 1, {7, 8, 9}}, {-100, 3, 2, {0, 2}}, {5, 2, 1, {}},
      {1, -1, 3, {1, 4, 7}},         {0, 10, 4, {0, 4, 8}},   {-1, -5, 1, {}},      {9, 10, 5, {9}},
  };
  const Tensor x = iota(DType::f32, {10});
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.start) + ":" + std::to_string(c.end) + ":" + std::to_string(c.step));
    const Tensor y = run1(Op::slice, {x},
                          {{"axis", int64_t{0}}, {"start", c.start}, {"end", c.end}, {"step", c.step}});
    EXPECT_EQ(y.to_f64(), c.want);
  }
}

TEST(View, SliceMiddleAxis) {
  // x [2, 5, 3]; x[:, 1:5:2, :] keeps rows 1 and 3.
  const Tensor x = iota(DType::f32, {2, 5, 3});
  const Tensor y = run1(Op::slice, {x}, {{"axis", int64_t{-2}}, {"start", int64_t{1}}, {"end", int64_t{5}},
                                         {"step", int64_t{2}}});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y.to_f64(), (std::vector<double>{3, 4, 5, 9, 10, 11, 18, 19, 20, 24, 25, 26}));
}

TEST(View, SliceErrors) {
  const TensorType x{DType::f32, {4}};
  const Attrs zero_step{{"axis", int64_t{0}}, {"start", int64_t{0}}, {"end", int64_t{2}}, {"step", int64_t{0}}};
  EXPECT_EQ(infer_error(Op::slice, {x}, zero_step), "attribute 'step' of slice must be > 0, got 0");
  EXPECT_NE(infer_error(Op::slice, {x}, {{"axis", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{2}}})
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::slice, {x}, {{"axis", int64_t{0}}, {"start", int64_t{0}}}).find("'end'"),
            std::string::npos);
  EXPECT_NE(infer_error(Op::slice, {{DType::f32, {}}}, {{"axis", int64_t{0}}, {"start", int64_t{0}},
                                                        {"end", int64_t{1}}})
                .find("rank >= 1"),
            std::string::npos);
}

// ---- gather ----

Tensor indices(DType dtype, Shape shape, std::vector<int64_t> values) {
  Tensor t(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) t.set_int(static_cast<int64_t>(i), values[i]);
  return t;
}

TEST(Gather, EmbeddingLookupWithNegativeIndex) {
  // table [5, 3] (row r holds 3r, 3r+1, 3r+2); ids [2, 2] with -1 meaning the last row.
  const Tensor table = iota(DType::bf16, {5, 3});
  const Tensor ids = indices(DType::i64, {2, 2}, {0, 4, -1, 2});
  const Tensor y = run1(Op::gather, {table, ids}, {});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y.to_f64(), (std::vector<double>{0, 1, 2, 12, 13, 14, 12, 13, 14, 6, 7, 8}));
}

TEST(Gather, AlongInnerAxisWithI32AndScalarIndices) {
  const Tensor x = iota(DType::f32, {2, 4});
  const Tensor y = run1(Op::gather, {x, indices(DType::i32, {3}, {3, 0, -4})}, {{"axis", int64_t{1}}});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_f64(), (std::vector<double>{3, 0, 0, 7, 4, 4}));
  const Tensor s = run1(Op::gather, {x, indices(DType::i64, {}, {1})}, {{"axis", int64_t{0}}});
  EXPECT_EQ(s.shape(), (Shape{4}));
  EXPECT_EQ(s.to_f64(), (std::vector<double>{4, 5, 6, 7}));
}

TEST(Gather, OutOfRangeIndexIsAnError) {
  const Tensor table = iota(DType::f32, {5, 3});
  for (int64_t bad : {int64_t{5}, int64_t{-6}, int64_t{1} << 40}) {
    auto result = ref::run_op(Op::gather, {table, indices(DType::i64, {2}, {1, bad})}, {});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().message, "gather: index " + std::to_string(bad) +
                                          " (element 1 of the indices) is out of range for dim 0 of size 5 in data "
                                          "f32[5,3]");
  }
}

TEST(Gather, InferErrors) {
  EXPECT_EQ(infer_error(Op::gather, {{DType::f32, {5, 3}}, {DType::f32, {2}}}, {}),
            "gather: indices must be i32 or i64, got f32[2]");
  EXPECT_NE(infer_error(Op::gather, {{DType::f32, {}}, {DType::i32, {2}}}, {}).find("rank >= 1"), std::string::npos);
  EXPECT_NE(infer_error(Op::gather, {{DType::f32, {5, 3}}, {DType::i32, {2}}}, {{"axis", int64_t{2}}})
                .find("out of range"),
            std::string::npos);
}

TEST(Gather, Cost) {
  const OpCost c = cost_of(Op::gather, {{DType::bf16, {1000, 64}}, {DType::i32, {8}}}, {});
  EXPECT_EQ(c.bytes, 4.0 * 8 + 2.0 * 2 * 8 * 64);
}

}  // namespace
}  // namespace kiln
