// Split reductions: a per-tensor amax becomes a row amax then an amax over the rows (bit-identical, NaN
// included); sums, reductions without the last axis and small reductions are left alone; in the pipeline the
// first level fuses with its producer into a row kernel.
#include "passes/split_reductions.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pass_test_util.h"
#include "harness/inputs.h"
#include "models/zoo.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

TEST(PassSplitReductions, AWholeTensorAmaxGoesThroughRows) {
  const passes::PassReport r = testing::expect_golden(passes::split_reductions, R"(graph g {
      input %x: f32[2,64,512] per_call
      %a: f32[1,1,1] = reduce_amax(%x) {axes=[0,1,2], keepdims=1}
      %m: f32[2] = reduce_max(%x) {axes=[1,-1]}
      output a = %a
      output m = %m
    })", R"(graph g {
      input %x: f32[2,64,512] per_call
      %a.rows: f32[2,64,1] = reduce_amax(%x) {axes=[2], keepdims=1}
      %a: f32[1,1,1] = reduce_amax(%a.rows) {axes=[0,1,2], keepdims=1}
      %m.rows: f32[2,64,1] = reduce_max(%x) {axes=[2], keepdims=1}
      %m: f32[2] = reduce_max(%m.rows) {axes=[1,-1]}
      output a = %a
      output m = %m
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("reduce_amax"), 1);
  EXPECT_EQ(r.found.at("reduce_max"), 1);
}

TEST(PassSplitReductions, SumsRowReductionsAndSmallOnesStay) {
  const char* graph = R"(graph g {
      input %x: f32[64,512] per_call
      input %y: f32[4,8] per_call
      %s: f32[] = reduce_sum(%x) {axes=[0,1]}
      %r: f32[64,1] = reduce_amax(%x) {axes=[1], keepdims=1}
      %c: f32[1,512] = reduce_max(%x) {axes=[0], keepdims=1}
      %t: f32[] = reduce_amax(%y) {axes=[0,1]}
      output s = %s
      output r = %r
      output c = %c
      output t = %t
    })";
  const passes::PassReport r = testing::expect_golden(passes::split_reductions, graph, graph);
  EXPECT_FALSE(r.changed);
}

// NaN anywhere still gives NaN; the exactness check of expect_golden draws finite inputs, so this one plants it.
TEST(PassSplitReductions, ANanStillPropagates) {
  const Graph g = testing::parse_or_die(R"(graph g {
      input %x: f32[64,512] per_call
      %a: f32[] = reduce_amax(%x) {axes=[0,1]}
      output a = %a
    })");
  const Graph split = passes::split_reductions(g).graph;
  Tensor x = harness::draw_input(g.value(g.inputs()[0].value).type, harness::Distribution::normal, 3);
  x.set(12345, std::nan(""));
  auto a = ref::run_graph(split, {{"x", x}});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(std::isnan(a->at("a").get(0)));
}

// The tensor-scaled FP8 block (512 image tokens: its image activations pass the size threshold, its text ones
// do not): no amax over a whole image activation is left, and the row level is inside a fused group (with
// the cast it reads), not a kernel of its own.
TEST(PassSplitReductions, Fp8TensorScalesInThePipeline) {
  auto model = models::build_zoo_model("flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor,img_tokens=512");
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto optimized = passes::run_pipeline(*model);
  ASSERT_TRUE(optimized.ok());
  const Graph& g = optimized->graph;
  int rows_level = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != Op::reduce_amax) continue;
    const TensorType& x = g.value(n.inputs[0]).type;
    if (x.shape.back() == 1) continue;  // a second level: one value per row
    const std::string name = g.value(n.outputs[0]).name;
    if (shape_numel(x.shape) < passes::kSplitReductionMinElements) continue;  // small: one block either way
    EXPECT_EQ(n.attrs.get_ints("axes"), std::vector<int64_t>{static_cast<int64_t>(x.shape.size()) - 1}) << name;
    EXPECT_GE(n.group, 0) << name << " should be fused with its producer";
    ++rows_level;
  }
  EXPECT_GE(rows_level, 4);
}

}  // namespace
}  // namespace kiln
