#include "passes/fuse_rows.h"

#include <gtest/gtest.h>

#include <map>

#include "ir/ops/op_util.h"
#include "models/weights.h"
#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

using testing::expect_golden;

TEST(PassFuseRows, GatedResidualAndRmsNormBecomeOneGroup) {
  const auto r = expect_golden([](const Graph& g) { return passes::fuse_row_groups(g); }, R"(graph g {
      input %x: f32[4,8] per_call
      input %h: f32[4,8] per_call
      input %gate: f32[8] per_call
      %gh: f32[4,8] = mul(%h, %gate)
      %r: f32[4,8] = add(%x, %gh)
      %sq: f32[4,8] = mul(%r, %r)
      %ms: f32[4,1] = reduce_mean(%sq) {axes=[-1], keepdims=1}
      %rs: f32[4,1] = rsqrt(%ms)
      %y: f32[4,8] = mul(%r, %rs)
      output r = %r
      output y = %y
    })", R"(graph g {
      input %x: f32[4,8] per_call
      input %h: f32[4,8] per_call
      input %gate: f32[8] per_call
      %gh: f32[4,8] = mul(%h, %gate) @g0
      %r: f32[4,8] = add(%x, %gh) @g0
      %sq: f32[4,8] = mul(%r, %r) @g0
      %ms: f32[4,1] = reduce_mean(%sq) {axes=[-1], keepdims=1} @g0
      %rs: f32[4,1] = rsqrt(%ms) @g0
      %y: f32[4,8] = mul(%r, %rs) @g0
      output r = %r
      output y = %y
    })");
  EXPECT_TRUE(r.changed);
  // What the report lists, derived from the members: one reduction, one transcendental, four plain ops.
  ASSERT_EQ(r.found.size(), 1u);
  EXPECT_EQ(r.found.begin()->first, "reduce_mean -> rsqrt (+4 elementwise; writes 2)");
  EXPECT_EQ(r.found.begin()->second, 1);
}

TEST(PassFuseRows, LibraryOpsCyclesStagesAndMisalignedRowsSplitGroups) {
  Graph g = testing::parse_or_die(R"(graph g {
      input %x: f32[4,8] per_call
      input %w: f32[8,8] weight
      input %b: f32[8] weight
      %e: f32[4,8] = exp(%x)
      %l: f32[4,8] = linear(%e, %w)
      %s: f32[4,8] = add(%l, %e)
      %wb: f32[8] = exp(%b)
      %t: f32[4,8] = mul(%s, %wb)
      %col: f32[1,8] = reduce_sum(%t) {axes=[0], keepdims=1}
      %u: f32[4,8] = sub(%t, %col)
      output u = %u
    })");
  // Rows of at most 8 elements: a whole-tensor "row" (one block for everything) is not allowed here.
  auto result = passes::fuse_row_groups(g, {8});
  const Graph& f = result.graph;
  auto group = [&](const char* name) { return f.node(f.value(*f.find_value(name)).producer).group; };
  EXPECT_EQ(group("l"), -1);                 // a GEMM is a library op
  EXPECT_NE(group("e"), group("s"));         // e -> linear -> s would be a cycle through the GEMM
  EXPECT_NE(group("wb"), group("t"));        // weight-time work stays out of per-call kernels
  EXPECT_EQ(group("s"), group("t"));
  EXPECT_NE(group("col"), group("u"));       // a column sum is not a row of u: rows do not line up
  testing::expect_bit_identical(g, f);
}

// The pipeline on every zoo model's tiny configuration: verified, and outputs within the numerics policy of
// the unfused graph (decompose reassociates: f32 intermediates instead of one rounding per composite).
TEST(PassFuseRows, ZooTinyModelsKeepTheirOutputs) {
  for (const models::ZooEntry& e : models::zoo_models()) {
    for (const std::string& spec : {e.name + ":tiny", e.name + ":tiny,dtype=fp8,fp8_scaling=channel",
                                    e.name + ":tiny,dtype=fp8,fp8_scaling=block"}) {
      SCOPED_TRACE(spec);
      auto g = models::build_zoo_model(spec);
      ASSERT_TRUE(g.ok()) << g.error().message;
      auto opt = passes::run_pipeline(*g);
      ASSERT_TRUE(opt.ok()) << opt.error().message;
      const auto inputs = models::random_inputs(*g, 5);
      auto a = ref::run_graph(*g, inputs);
      auto b = ref::run_graph(opt->graph, inputs);
      ASSERT_TRUE(a.ok()) << a.error().message;
      ASSERT_TRUE(b.ok()) << b.error().message;
      for (const auto& [name, t] : *a) {
        const Tensor& u = b->at(name);
        double max_err = 0, max_ref = 0;
        for (int64_t i = 0; i < t.numel(); ++i) {
          max_err = std::max(max_err, std::fabs(t.get(i) - u.get(i)));
          max_ref = std::max(max_ref, std::fabs(t.get(i)));
        }
        // bf16 output: a few ulps of the output's range after a whole model of reassociated rounding.
        EXPECT_LE(max_err, 0.08 * std::max(1.0, max_ref)) << name;
      }
    }
  }
}

// The known fusions fall out of the one rule on real-size graphs (graph only, nothing executed).
TEST(PassFuseRows, KnownFusionsAppearAtRealSize) {
  auto find_group = [](const Graph& g, std::vector<Op> ops) {
    for (const passes::FusedGroup& grp : passes::collect_fused_groups(g)) {
      bool all = true;
      for (Op op : ops) {
        bool found = false;
        for (NodeId m : grp.members) found = found || g.node(m).op == op;
        all = all && found;
      }
      if (all) return true;
    }
    return false;
  };
  auto fused = [](const std::string& spec) {
    auto g = models::build_zoo_model(spec);
    EXPECT_TRUE(g.ok());
    auto opt = passes::run_pipeline(*g);
    EXPECT_TRUE(opt.ok()) << opt.error().message;
    return opt->graph;
  };
  const Graph fp8 = fused("flux1-double-block:dtype=fp8,fp8_scaling=block");
  // LayerNorm + modulation + FP8 quantization (amax and scale) in one group.
  EXPECT_TRUE(find_group(fp8, {Op::reduce_mean, Op::rsqrt, Op::reduce_amax, Op::cast}));
  // GELU + FP8 quantization, before fold-epilogues hands the GELU to its GEMM (after it, no group holds one).
  auto unfolded = models::build_zoo_model("flux1-double-block:dtype=fp8,fp8_scaling=block");
  ASSERT_TRUE(unfolded.ok());
  auto without_fold = passes::run_pipeline(*unfolded, testing::pipeline_without({"fold-epilogues"}));
  ASSERT_TRUE(without_fold.ok()) << without_fold.error().message;
  EXPECT_TRUE(find_group(without_fold->graph, {Op::gelu, Op::reduce_amax}));
  EXPECT_FALSE(find_group(fp8, {Op::gelu}));
  const Graph bf16 = fused("flux1-double-block");
  // q/k RMSNorm reads the QKV GEMM output through its views (reshape + transpose as index maps).
  EXPECT_TRUE(find_group(bf16, {Op::transpose, Op::reduce_mean, Op::rsqrt}));
  // q/k RMSNorm + RoPE in one group per head row, reading the cos/sin tables through slices.
  EXPECT_TRUE(find_group(bf16, {Op::reduce_mean, Op::rsqrt, Op::slice, Op::sub}));
  // Gated residual + LayerNorm + scale/shift.
  EXPECT_TRUE(find_group(bf16, {Op::mul, Op::add, Op::reduce_mean, Op::rsqrt}));
  const Graph flux2 = fused("flux2-dev:double_blocks=1,single_blocks=1,dtype=fp8,fp8_scaling=block");
  // SwiGLU + FP8 quantization.
  EXPECT_TRUE(find_group(flux2, {Op::silu, Op::reduce_amax}));
}

// Bias adds are absorbed at real size: every add of a bias weight to a GEMM output either sits in a fused group
// with other work or went back into the GEMM as its epilogue; none is a kernel of its own.
TEST(PassFuseRows, BiasAddsAreAbsorbedAtRealSize) {
  for (const char* spec : {"flux1-dev", "flux1-dev:dtype=fp8"}) {
    SCOPED_TRACE(spec);
    auto g = models::build_zoo_model(spec);
    ASSERT_TRUE(g.ok());
    auto opt = passes::run_pipeline(*g);
    ASSERT_TRUE(opt.ok()) << opt.error().message;
    const Graph& f = opt->graph;
    std::map<int32_t, int> group_size;
    for (const Node& n : f.nodes()) {
      if (n.group >= 0 && !op_has_trait(n.op, kTraitView)) ++group_size[n.group];
    }
    int in_groups = 0, epilogues = 0;
    for (const Node& n : f.nodes()) {
      const bool biased = n.op == Op::linear ? ops::linear_inputs(n.inputs.size(), n.attrs).bias >= 0
                                             : n.op == Op::scaled_linear && n.inputs.size() == 5u;
      if (biased) ++epilogues;
      if (n.op != Op::add) continue;
      bool gemm_operand = false, bias_operand = false;
      for (ValueId v : n.inputs) {
        const NodeId p = f.value(v).producer;
        gemm_operand = gemm_operand || (p >= 0 && op_has_trait(f.node(p).op, kTraitMatmul));
        bias_operand = bias_operand || (f.value(v).type.shape.size() == 1 && f.is_graph_input(v));
      }
      if (!gemm_operand || !bias_operand) continue;
      EXPECT_GE(n.group, 0) << f.node_label(static_cast<NodeId>(&n - f.nodes().data()));
      EXPECT_GT(group_size[n.group], 1) << f.node_label(static_cast<NodeId>(&n - f.nodes().data()));
      ++in_groups;
    }
    // 242 bias adds: bf16 FLUX folds 198 into GEMM epilogues (116 with their gated residual update,
    // residual-epilogues), FP8 FLUX 82 (its GEMMs take no residual epilogue); the rest ride in fused groups.
    EXPECT_GT(in_groups + epilogues, 240);
    EXPECT_GT(epilogues, 80);
  }
}

}  // namespace
}  // namespace kiln
