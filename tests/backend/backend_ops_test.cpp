// test_backend_ops for kiln: every op the CPU backend supports, over dtypes and awkward shapes (one row, odd
// columns, sizes off the vector width), and every fused-group pattern the pipeline produces on the zoo
// models' tiny configurations (collected generically), against the reference executor.
#include <gtest/gtest.h>

#include <set>

#include "backend_test_util.h"
#include "kernel/kernel_ir.h"
#include "models/zoo.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

using testing::check_plan;

struct OpCase {
  Op op;
  std::vector<TensorType> inputs;
  Attrs attrs;
};

std::string case_name(const OpCase& c) {
  std::string s = std::string(op_name(c.op));
  for (const TensorType& t : c.inputs) s += " " + type_to_string(t);
  for (const auto& [k, v] : c.attrs.entries()) s += " " + k;
  return s;
}

const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};
const Shape kAwkward[] = {{1, 1}, {1, 7}, {3, 17}, {2, 5, 33}, {4, 128}};

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases;
  auto add = [&](Op op, std::vector<TensorType> in, Attrs attrs = {}) { cases.push_back({op, std::move(in), std::move(attrs)}); };
  for (DType d : kFloatTypes) {
    for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::max, Op::min, Op::pow}) {
      for (const Shape& s : kAwkward) add(op, {{d, s}, {d, s}});
      add(op, {{d, {3, 17}}, {d, {17}}});
      add(op, {{d, {2, 1, 33}}, {d, {2, 5, 1}}});
      add(op, {{d, {}}, {d, {3, 5}}});
    }
    for (Op op : {Op::neg, Op::abs, Op::exp, Op::log, Op::sqrt, Op::rsqrt, Op::reciprocal, Op::tanh, Op::sigmoid,
                  Op::silu, Op::cos, Op::sin}) {
      for (const Shape& s : kAwkward) add(op, {{d, s}});
    }
    for (const Shape& s : kAwkward) {
      add(Op::gelu, {{d, s}});
      add(Op::gelu, {{d, s}}, {{"approximate", std::string("tanh")}});
    }
    for (DType to : {DType::f32, DType::bf16, DType::f16, DType::f8e4m3, DType::f8e5m2}) {
      add(Op::cast, {{d, {3, 17}}}, {{"to", std::string(dtype_name(to))}});
    }
    add(Op::swiglu, {{d, {1, 2}}});
    add(Op::swiglu, {{d, {3, 34}}});
    for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_amax}) {
      add(op, {{d, {3, 17}}}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
      add(op, {{d, {1, 7}}}, {{"axes", std::vector<int64_t>{-1}}});
      add(op, {{d, {3, 17}}}, {{"axes", std::vector<int64_t>{0}}});
      add(op, {{d, {2, 5, 33}}}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}});
      add(op, {{d, {2, 5, 33}}}, {{"axes", std::vector<int64_t>{0, 2}}});
    }
    for (const Shape& s : {Shape{1, 7}, Shape{3, 17}, Shape{2, 5, 33}}) {
      add(Op::layernorm, {{d, s}});
      add(Op::layernorm, {{d, s}, {d, {s.back()}}, {d, {s.back()}}});
      add(Op::rmsnorm, {{d, s}, {DType::f32, {s.back()}}}, {{"eps", 1e-5}});
      add(Op::softmax, {{d, s}});
      add(Op::softmax, {{d, s}}, {{"axis", int64_t{0}}});
    }
    for (const char* style : {"interleaved", "half"}) {
      add(Op::rope, {{d, {1, 2, 5, 8}}, {DType::f32, {5, 4}}, {DType::f32, {5, 4}}}, {{"style", std::string(style)}});
      add(Op::rope, {{d, {1, 1, 1, 2}}, {DType::f32, {1, 1}}, {DType::f32, {1, 1}}}, {{"style", std::string(style)}});
    }
    add(Op::matmul, {{d, {3, 5}}, {d, {5, 7}}});
    add(Op::matmul, {{d, {2, 3, 5}}, {d, {1, 5, 7}}});
    add(Op::linear, {{d, {3, 17}}, {d, {9, 17}}});
    add(Op::linear, {{d, {1, 2, 17}}, {d, {9, 17}}, {d, {9}}}, {{"activation", std::string("gelu_tanh")}});
    // The scale / residual epilogue (ops::linear_inputs), with and without a bias, and an empty K.
    add(Op::linear, {{d, {1, 3, 17}}, {d, {9, 17}}, {d, {9}}, {DType::f32, {9}}, {d, {1, 3, 9}}},
        {{"scale", int64_t{1}}, {"residual", int64_t{1}}});
    add(Op::linear, {{d, {3, 17}}, {d, {9, 17}}, {d, {3, 9}}}, {{"residual", int64_t{1}}});
    add(Op::linear, {{d, {3, 17}}, {d, {9, 17}}, {DType::f32, {9}}}, {{"scale", int64_t{1}}});
    add(Op::linear, {{d, {3, 0}}, {d, {9, 0}}, {d, {9}}});
    add(Op::attention, {{d, {1, 2, 5, 8}}, {d, {1, 1, 7, 8}}, {d, {1, 1, 7, 8}}});
    add(Op::attention, {{d, {1, 2, 5, 8}}, {d, {1, 2, 5, 8}}, {d, {1, 2, 5, 8}}}, {{"causal", int64_t{1}}});
    add(Op::attention, {{d, {1, 2, 3, 4}}, {d, {1, 2, 70, 4}}, {d, {1, 2, 70, 4}}, {DType::boolean, {3, 70}}});
    add(Op::attention, {{d, {1, 2, 3, 4}}, {d, {1, 2, 6, 4}}, {d, {1, 2, 6, 4}}, {d, {1, 1, 3, 6}}});
    // Token-major operands [b, s, h, d] (the layouts attention-layouts absorbs transposes into), GQA too.
    add(Op::attention, {{d, {1, 5, 2, 8}}, {d, {1, 7, 1, 8}}, {d, {1, 1, 7, 8}}},
        {{"q_layout", std::string("bshd")}, {"k_layout", std::string("bshd")}, {"out_layout", std::string("bshd")}});
    add(Op::attention, {{d, {1, 2, 5, 8}}, {d, {1, 5, 2, 8}}, {d, {1, 5, 2, 8}}},
        {{"v_layout", std::string("bshd")}, {"k_layout", std::string("bshd")}, {"causal", int64_t{1}}});
    add(Op::reshape, {{d, {2, 6}}}, {{"shape", std::vector<int64_t>{3, 4}}});
    add(Op::transpose, {{d, {2, 3, 5}}}, {{"perm", std::vector<int64_t>{2, 0, 1}}});
    add(Op::broadcast, {{d, {3, 1}}}, {{"shape", std::vector<int64_t>{2, 3, 5}}});
    add(Op::concat, {{d, {2, 3}}, {d, {2, 5}}}, {{"axis", int64_t{1}}});
    add(Op::concat, {{d, {2, 3}}, {d, {1, 3}}}, {{"axis", int64_t{0}}});
    add(Op::split, {{d, {2, 9}}}, {{"axis", int64_t{1}}, {"sizes", std::vector<int64_t>{4, 5}}});
    add(Op::slice, {{d, {3, 9}}}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{8}}, {"step", int64_t{3}}});
    add(Op::gather, {{d, {8, 5}}, {DType::i32, {4}}});
    for (const char* q : {"f8e4m3", "f8e5m2"}) {
      add(Op::quantize, {{d, {3, 17}}}, {{"dtype", std::string(q)}});
      add(Op::quantize, {{d, {1, 7}}}, {{"dtype", std::string(q)}, {"granularity", std::string("tensor")}});
      add(Op::quantize, {{d, {2, 256}}}, {{"dtype", std::string(q)}, {"granularity", std::string("block")}});
      add(Op::quantize, {{d, {2, 130}}}, {{"dtype", std::string(q)}, {"granularity", std::string("block")}});
      // 1x128 activation scales k-block-major ([K/128, M], what scaled_linear reads); M = 3 is not K/128.
      add(Op::quantize, {{d, {3, 256}}},
          {{"dtype", std::string(q)}, {"granularity", std::string("block")}, {"scale_layout", std::string("k_major")}});
    }
  }
  for (DType q : {DType::f8e4m3, DType::f8e5m2}) {
    add(Op::dequantize, {{q, {3, 17}}, {DType::f32, {3, 1}}}, {{"dtype", std::string("bf16")}});
    add(Op::dequantize, {{q, {2, 256}}, {DType::f32, {2, 2}}}, {{"granularity", std::string("block")}});
    add(Op::dequantize, {{q, {3, 17}}, {DType::f32, {}}}, {{"granularity", std::string("tensor")}});
    add(Op::scaled_linear, {{q, {3, 130}}, {DType::f32, {3, 1}}, {q, {9, 130}}, {DType::f32, {9, 1}}});
    add(Op::scaled_linear, {{q, {3, 130}}, {DType::f32, {}}, {q, {9, 130}}, {DType::f32, {}}, {DType::bf16, {9}}});
    // Block scales as cuBLASLt reads them: xs [K/128, M] k-block-major (M = 3, K/128 = 2, so a transposed
    // reading is caught), ws [N/128, K/128] row-major with a ragged last N block, dense as checkpoints hold
    // it or with its rows padded to 4 scales as pack_scales "blocks" writes it (ws_layout "packed").
    add(Op::dequantize, {{q, {3, 256}}, {DType::f32, {2, 3}}},
        {{"granularity", std::string("block")}, {"scale_layout", std::string("k_major")}});
    add(Op::scaled_linear, {{q, {3, 256}}, {DType::f32, {2, 3}}, {q, {130, 256}}, {DType::f32, {2, 2}}});
    add(Op::scaled_linear, {{q, {3, 256}}, {DType::f32, {2, 3}}, {q, {130, 256}}, {DType::f32, {2, 4}}},
        {{"ws_layout", std::string("packed")}});
    // Per-channel scales as pack_scales "vector" leaves them ([N], ws_layout "packed").
    add(Op::scaled_linear, {{q, {3, 130}}, {DType::f32, {3, 1}}, {q, {9, 130}}, {DType::f32, {9}}},
        {{"ws_layout", std::string("packed")}});
  }
  // Weight-scale packing (a load-time op): per-channel scales to a vector, block grids' rows padded.
  add(Op::pack_scales, {{DType::f32, {9, 1}}}, {{"layout", std::string("vector")}});
  add(Op::pack_scales, {{DType::f32, {3, 2}}}, {{"layout", std::string("blocks")}});
  add(Op::full, {}, {{"shape", std::vector<int64_t>{2, 3}}, {"value", 0.1}, {"dtype", std::string("bf16")}});
  add(Op::arange, {}, {{"size", int64_t{7}}, {"start", 0.5}});
  return cases;
}

TEST(BackendOps, EveryOpHasCases) {
  std::set<Op> covered;
  for (const OpCase& c : all_cases()) covered.insert(c.op);
  for (const OpDef* def : all_op_defs()) {
    EXPECT_TRUE(covered.count(def->op)) << "op " << def->name << " has no backend case: add one to all_cases()";
  }
}

// Single ops go through the model pipeline (decompose, fuse) like any graph, then run as a plan. Split by the
// dtype of the first input so ctest runs the parts in parallel.
int check_cases(std::optional<DType> first_input) {
  int tested = 0;
  for (const OpCase& c : all_cases()) {
    const bool f8_or_none = c.inputs.empty() || !(c.inputs[0].dtype == DType::f32 || c.inputs[0].dtype == DType::bf16 ||
                                                  c.inputs[0].dtype == DType::f16);
    if (first_input ? (c.inputs.empty() || c.inputs[0].dtype != *first_input) : !f8_or_none) continue;
    auto task = harness::make_op_task(c.op, c.inputs, c.attrs);
    EXPECT_TRUE(task.ok()) << case_name(c) << ": " << task.error().message;
    if (!task.ok()) continue;
    auto optimized = passes::run_pipeline(task->graph);
    EXPECT_TRUE(optimized.ok()) << case_name(c);
    if (!optimized.ok()) continue;
    for (const Node& n : optimized->graph.nodes()) {
      std::vector<TensorType> types;
      for (ValueId v : n.inputs) types.push_back(optimized->graph.value(v).type);
      Status st = testing::cpu_backend().supports(n.op, types, n.attrs);
      // Quantize with ragged blocks stays composite and runs on the reference fallback.
      if (n.op != Op::quantize) {
        EXPECT_TRUE(st.ok()) << case_name(c) << ": " << (st.ok() ? "" : st.error().message);
      }
    }
    const bool exact = op_has_trait(c.op, kTraitView) || op_has_trait(c.op, kTraitSource);
    EXPECT_EQ(check_plan(optimized->graph, task->graph, exact, harness::task_reduction_length(*task)), "")
        << case_name(c);
    ++tested;
  }
  return tested;
}

TEST(BackendOps, EveryOpOnCpuMatchesTheReferenceF32) { EXPECT_GT(check_cases(DType::f32), 100); }
TEST(BackendOps, EveryOpOnCpuMatchesTheReferenceBF16) { EXPECT_GT(check_cases(DType::bf16), 100); }
TEST(BackendOps, EveryOpOnCpuMatchesTheReferenceF16) { EXPECT_GT(check_cases(DType::f16), 100); }
TEST(BackendOps, EveryOpOnCpuMatchesTheReferenceFP8AndSources) { EXPECT_GT(check_cases(std::nullopt), 10); }

// e4m3's overflow is NaN with the value's sign, as the reference writes it (the generated kernels wrote +NaN for
// every overflow until session 20).
TEST(BackendOps, Fp8CastOnCpuMatchesTheReferenceBitForBit) { EXPECT_EQ(testing::fp8_cast_bit_mismatches(testing::cpu_backend()), ""); }

// bf16 sums, differences and products as the reference rounds them (f32, then bf16), bit for bit.
TEST(BackendOps, Bf16ArithmeticOnCpuMatchesTheReferenceBitForBit) {
  EXPECT_EQ(testing::bf16_arithmetic_bit_mismatches(testing::cpu_backend()), "");
}

// Bad input is an error naming what is wrong, never a crash.
TEST(BackendOps, UnsupportedAndMistypedInputsAreErrors) {
  backend::Backend& b = testing::cpu_backend();
  const std::vector<TensorType> ints = {{DType::i32, {3, 4}}};
  Status st = b.supports(Op::exp, ints, {});
  EXPECT_FALSE(st.ok());
  st = b.supports(Op::layernorm, std::vector<TensorType>{{DType::f32, {3, 4}}}, {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("decompose"), std::string::npos) << st.error().message;
  // A library call with a mistyped output.
  auto x = b.allocate({DType::f32, {2, 3}});
  auto w = b.allocate({DType::f32, {4, 3}});
  auto y = b.allocate({DType::f32, {2, 5}});
  ASSERT_TRUE(x.ok() && w.ok() && y.ok());
  std::vector<backend::DeviceTensor> in = {*x, *w}, out = {*y};
  st = b.run_library(Op::linear, {}, in, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("f32[2,5]"), std::string::npos) << st.error().message;
  st = b.run_library(Op::exp, {}, std::vector<backend::DeviceTensor>{*x}, std::vector<backend::DeviceTensor>{*x});
  EXPECT_FALSE(st.ok());
  b.release(*x);
  b.release(*w);
  b.release(*y);
}

// ---- fused groups from the zoo ----


TEST(BackendOps, EveryZooFusedGroupOnCpuMatchesTheReference) {
  const std::vector<std::string> models = {
      "flux1-double-block:tiny", "flux1-double-block:tiny,img_tokens=1,txt_tokens=3",
      "flux1-double-block:tiny,dtype=f16", "flux1-double-block:tiny,dtype=f32",
      "flux1-double-block:tiny,dtype=fp8", "flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor",
      "flux1-double-block:tiny,dtype=fp8,fp8_scaling=block", "flux1-single-block:tiny",
      "flux1-single-block:tiny,dtype=fp8,img_tokens=5", "flux1-dev:tiny", "flux2-dev:tiny", "qwen-image:tiny",
      "llama3-8b:tiny"};
  std::set<std::string> seen;
  int groups = 0, fallbacks = 0;
  for (const std::string& spec : models) {
    auto model = models::build_zoo_model(spec);
    ASSERT_TRUE(model.ok()) << spec << ": " << model.error().message;
    auto optimized = passes::run_pipeline(*model);
    ASSERT_TRUE(optimized.ok()) << spec;
    for (const passes::FusedGroup& fg : passes::collect_fused_groups(optimized->graph)) {
      if (fg.outputs.empty()) continue;
      const Graph sub = testing::group_graph(optimized->graph, fg);
      auto k = kernel::lower_nodes(sub, [&] {
        std::vector<NodeId> all;
        for (NodeId i = 0; i < static_cast<NodeId>(sub.nodes().size()); ++i) all.push_back(i);
        return all;
      }(), "g");
      std::string key = k.ok() ? kernel::kernel_hash(*k) : spec + "#" + std::to_string(fg.id);
      if (!seen.insert(key).second) continue;
      ++groups;
      int fb = 0;
      EXPECT_EQ(check_plan(sub, sub, false, testing::row_length(sub), {}, &fb), "")
          << spec << " group " << fg.id << "\n" << (k.ok() ? kernel::kernel_to_text(*k) : k.error().message);
      fallbacks += fb;
      if (!k.ok()) continue;
      // Another schedule computes the same: two threads, re-read instead of cached rows, no simd, unrolled.
      backend::PlanOptions other;
      other.schedules[kernel::kernel_hash(*k)] = kernel::Schedule{1, 2, 1, 1, false, 4};
      EXPECT_EQ(check_plan(sub, sub, false, testing::row_length(sub), other), "") << spec << " group " << fg.id << " (reread)";
    }
  }
  EXPECT_GT(groups, 40);
  // Only the ragged-block quantizes (kept composite by decompose) may fall back.
  EXPECT_LE(fallbacks, 8);
}

}  // namespace
}  // namespace kiln
