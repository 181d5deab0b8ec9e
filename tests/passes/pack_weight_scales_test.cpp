// Weight-scale packing: golden rewrites for per-channel scales, what is left alone (block grids and per-tensor
// scales, already the GEMM's layout; per-call scales; packed GEMMs), one pack per shared scale tensor, the packing landing in the
// load-time stage, and bit-identical outputs on the zoo's FP8 models (tiny ones run; real sizes rewritten).
#include "passes/pack_weight_scales.h"

#include <gtest/gtest.h>

#include "models/weights.h"
#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/pipeline.h"
#include "passes/staging.h"

namespace kiln {
namespace {

using testing::expect_golden;

// N = 256, K = 512: the 2 x 4 block grid is already the layout the GEMM (cuBLASLt BLK128x128_32F) reads (rows
// of a multiple of 4 scales), so the pass leaves the GEMMs as they are and says why; activation scales arrive
// k-block-major, [K/128, M].
TEST(PassPackScales, AlignedBlockScalesAreAlreadyTheGemmLayout) {
  const char* graph = R"(graph g {
      input %xq: f8e4m3[2,512] per_call
      input %xs: f32[4,2] per_call
      input %wq: f8e4m3[256,512] weight
      input %ws: f32[2,4] weight
      %y: f32[2,256] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="f32"}
      %z: bf16[2,256] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="bf16"}
      output y = %y
      output z = %z
    })";
  const passes::PassReport r = expect_golden(passes::pack_weight_scales, graph, graph);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.found.at("128x128 block grid (rows already aligned: the GEMM's layout)"), 2);
  EXPECT_EQ(r.found.count("pack_scales blocks"), 0u);
}

// K = 384: the checkpoint's 2 x 3 grid has rows of 3 scales; the GEMM reads rows of 4, so one load-time pack
// pads it, shared by both GEMMs.
TEST(PassPackScales, RaggedBlockGridRowsArePadded) {
  const char* graph = R"(graph g {
      input %xq: f8e4m3[2,384] per_call
      input %xs: f32[3,2] per_call
      input %wq: f8e4m3[256,384] weight
      input %ws: f32[2,3] weight
      %y: f32[2,256] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="f32"}
      %z: bf16[2,256] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="bf16"}
      output y = %y
      output z = %z
    })";
  const char* expected = R"(graph g {
      input %xq: f8e4m3[2,384] per_call
      input %xs: f32[3,2] per_call
      input %wq: f8e4m3[256,384] weight
      input %ws: f32[2,3] weight
      %ws.packed: f32[2,4] = pack_scales(%ws) {layout="blocks"}
      %y: f32[2,256] = scaled_linear(%xq, %xs, %wq, %ws.packed) {out_dtype="f32", ws_layout="packed"}
      %z: bf16[2,256] = scaled_linear(%xq, %xs, %wq, %ws.packed) {out_dtype="bf16", ws_layout="packed"}
      output y = %y
      output z = %z
    })";
  const passes::PassReport r = expect_golden(passes::pack_weight_scales, graph, expected);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("pack_scales blocks"), 1);
}

// Per-channel [N, 1] becomes the f32 vector [N]; a bias keeps its place; a per-tensor scale is already the
// GEMM's layout; a scale computed per call cannot be packed at load time and is reported.
TEST(PassPackScales, ChannelTensorAndPerCallScales) {
  const passes::PassReport r = expect_golden(passes::pack_weight_scales, R"(graph g {
      input %xq: f8e4m3[2,8] per_call
      input %xs: f32[2,1] per_call
      input %wq: f8e4m3[4,8] weight
      input %ws: f32[4,1] weight
      input %b: bf16[4] weight
      input %wt: f32[] weight
      input %wc: f32[4,1] per_call
      %y: bf16[2,4] = scaled_linear(%xq, %xs, %wq, %ws, %b) {out_dtype="bf16"}
      %t: bf16[2,4] = scaled_linear(%xq, %xs, %wq, %wt) {out_dtype="bf16"}
      %c: bf16[2,4] = scaled_linear(%xq, %xs, %wq, %wc) {out_dtype="bf16"}
      output y = %y
      output t = %t
      output c = %c
    })", R"(graph g {
      input %xq: f8e4m3[2,8] per_call
      input %xs: f32[2,1] per_call
      input %wq: f8e4m3[4,8] weight
      input %ws: f32[4,1] weight
      input %b: bf16[4] weight
      input %wt: f32[] weight
      input %wc: f32[4,1] per_call
      %ws.packed: f32[4] = pack_scales(%ws) {layout="vector"}
      %y: bf16[2,4] = scaled_linear(%xq, %xs, %wq, %ws.packed, %b) {out_dtype="bf16", ws_layout="packed"}
      %t: bf16[2,4] = scaled_linear(%xq, %xs, %wq, %wt) {out_dtype="bf16"}
      %c: bf16[2,4] = scaled_linear(%xq, %xs, %wq, %wc) {out_dtype="bf16"}
      output y = %y
      output t = %t
      output c = %c
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("pack_scales vector"), 1);
  bool reported = false;
  for (const std::string& note : r.notes) reported = reported || note.find("not packed: node %c") != std::string::npos;
  EXPECT_TRUE(reported);
}

TEST(PassPackScales, IdempotentAndStagedAtLoadTime) {
  Graph g = testing::parse_or_die(R"(graph g {
      input %x: bf16[2,384] per_call
      input %wq: f8e4m3[256,384] weight
      input %ws: f32[256,1] weight
      %xq: f8e4m3[2,384], %xs: f32[2,1] = quantize(%x) {granularity="token"}
      %y: bf16[2,256] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="bf16"}
      output y = %y
    })");
  const passes::PassResult once = passes::pack_weight_scales(g);
  EXPECT_TRUE(once.report.changed);
  const passes::PassResult twice = passes::pack_weight_scales(once.graph);
  EXPECT_FALSE(twice.report.changed);
  EXPECT_EQ(print_graph_text(twice.graph), print_graph_text(once.graph));
  const passes::StagedGraph staged = passes::split_stages(once.graph);
  ASSERT_EQ(staged.load.nodes().size(), 1u);
  EXPECT_EQ(staged.load.nodes()[0].op, Op::pack_scales);
  for (const Node& n : staged.per_call.nodes()) EXPECT_NE(n.op, Op::pack_scales);
}

// Every FP8 scaling of every zoo model: the pass alone is bit-identical on the tiny configurations, and in
// the full pipeline every weight-scaled GEMM of a real-size model reads packed scales computed at load time.
TEST(PassPackScales, ZooFp8Models) {
  for (const char* scaling : {"channel", "block", "tensor"}) {
    for (const models::ZooEntry& e : models::zoo_models()) {
      const std::string spec = e.name + ":tiny,dtype=fp8,fp8_scaling=" + scaling;
      SCOPED_TRACE(spec);
      auto g = models::build_zoo_model(spec);
      ASSERT_TRUE(g.ok()) << g.error().message;
      const passes::PassResult packed = passes::pack_weight_scales(*g);
      ASSERT_TRUE(verify_graph(packed.graph).ok());
      const auto inputs = models::random_inputs(*g, 7);
      auto a = ref::run_graph(*g, inputs);
      auto b = ref::run_graph(packed.graph, inputs);
      ASSERT_TRUE(a.ok()) << a.error().message;
      ASSERT_TRUE(b.ok()) << b.error().message;
      for (const auto& [name, t] : *a) EXPECT_TRUE(t.bitwise_equal(b->at(name))) << name;
    }
  }
  // Real size, in the full pipeline: per-channel scales are packed once at load time for every GEMM; block
  // grids need no pack, and no pack is left per call.
  for (const char* scaling : {"channel", "block"}) {
    SCOPED_TRACE(scaling);
    auto g = models::build_zoo_model(std::string("flux1-dev:dtype=fp8,fp8_scaling=") + scaling);
    ASSERT_TRUE(g.ok()) << g.error().message;
    auto opt = passes::run_pipeline(*g);
    ASSERT_TRUE(opt.ok()) << opt.error().message;
    const std::vector<Binding> time = passes::classify_binding_times(opt->graph);
    int gemms = 0, packs = 0;
    const bool channel = std::string(scaling) == "channel";
    for (const Node& n : opt->graph.nodes()) {
      if (n.op == Op::scaled_linear) {
        ++gemms;
        EXPECT_EQ(n.attrs.get_string("ws_layout", "row_major"), channel ? "packed" : "row_major");
      }
      if (n.op == Op::pack_scales) {
        ++packs;
        EXPECT_EQ(time[n.outputs[0]], Binding::weight);
      }
    }
    EXPECT_GT(gemms, 100);
    if (channel) {
      EXPECT_GT(packs, 100);
    } else {
      EXPECT_EQ(packs, 0);
    }
  }
}

}  // namespace
}  // namespace kiln
