// Rematerialization: a group recomputes a short elementwise chain of another group from that chain's inputs
// when they are fewer bytes than the value it read.
#include "passes/rematerialize.h"

#include <gtest/gtest.h>

#include "models/zoo.h"
#include "passes/fuse_rows.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using testing::expect_golden;
using testing::parse_or_die;

// The bytes the fused groups of `input` move, less what they move once rematerialize has run.
double group_bytes_saved(const char* input) {
  const Graph in = parse_or_die(input);
  const Graph out = passes::rematerialize(in).graph;
  double before = 0, after = 0;
  for (const passes::FusedGroup& fg : passes::collect_fused_groups(in)) before += fg.bytes;
  for (const passes::FusedGroup& fg : passes::collect_fused_groups(out)) after += fg.bytes;
  return before - after;
}

// An FP8 tensor-scaled quantize after split-reductions and fuse-rows: g0 casts the bf16 activation to f32 and
// takes each row's amax; g1 the amax over the rows; g2, which needs it, divides and casts to FP8. g2 read g0's
// f32 cast (4 bytes an element); it now casts the bf16 activation itself (2 bytes) and g0 writes only its amax.
TEST(PassRematerialize, TheQuantizeCastRecomputesTheF32Copy) {
  const char* input = R"(graph g {
      input %x: bf16[64,256] per_call
      %c: f32[64,256] = cast(%x) {to="f32"} @g0
      %rows: f32[64,1] = reduce_amax(%c) {axes=[1], keepdims=1} @g0
      %amax: f32[1,1] = reduce_amax(%rows) {axes=[0,1], keepdims=1} @g1
      %scale: f32[1,1] = div(%amax, %amax) @g1
      %d: f32[64,256] = div(%c, %scale) @g2
      %q: f8e4m3[64,256] = cast(%d) {to="f8e4m3"} @g2
      output q = %q
      output scale = %scale
    })";
  const passes::PassReport r = expect_golden(passes::rematerialize, input, R"(graph g {
      input %x: bf16[64,256] per_call
      %c: f32[64,256] = cast(%x) {to="f32"} @g0
      %rows: f32[64,1] = reduce_amax(%c) {axes=[1], keepdims=1} @g0
      %amax: f32[1,1] = reduce_amax(%rows) {axes=[0,1], keepdims=1} @g1
      %scale: f32[1,1] = div(%amax, %amax) @g1
      %c.g2: f32[64,256] = cast(%x) {to="f32"} @g2
      %d: f32[64,256] = div(%c.g2, %scale) @g2
      %q: f8e4m3[64,256] = cast(%d) {to="f8e4m3"} @g2
      output q = %q
      output scale = %scale
    })");
  EXPECT_EQ(r.found.at("cast recomputed by its reader's group"), 1);
  // g0 no longer writes its f32 copy.
  EXPECT_DOUBLE_EQ(group_bytes_saved(input), 64 * 256 * (4 + 4 - 2));  // g0's f32 write and g2's f32 read, for a bf16 read
}

// A modulated layernorm's quantize: g0's f32 cast of its bf16 output is not recomputable from g0's inputs (the
// rows need their reduction), but it is one cast of g0's own bf16 value: g2 casts that value itself, and g0
// writes it (2 bytes an element) instead of the f32 copy (4).
TEST(PassRematerialize, AChainOverANarrowerValueOfItsGroup) {
  const char* input = R"(graph g {
      input %x: bf16[64,256] per_call
      %c: f32[64,256] = cast(%x) {to="f32"} @g0
      %m: f32[64,1] = reduce_mean(%c) {axes=[1], keepdims=1} @g0
      %n: f32[64,256] = sub(%c, %m) @g0
      %nb: bf16[64,256] = cast(%n) {to="bf16"} @g0
      %v: f32[64,256] = cast(%nb) {to="f32"} @g0
      %rows: f32[64,1] = reduce_amax(%v) {axes=[1], keepdims=1} @g0
      %amax: f32[1,1] = reduce_amax(%rows) {axes=[0,1], keepdims=1} @g1
      %d: f32[64,256] = mul(%v, %amax) @g2
      %q: f8e4m3[64,256] = cast(%d) {to="f8e4m3"} @g2
      output q = %q
    })";
  const passes::PassReport r = expect_golden(passes::rematerialize, input, R"(graph g {
      input %x: bf16[64,256] per_call
      %c: f32[64,256] = cast(%x) {to="f32"} @g0
      %m: f32[64,1] = reduce_mean(%c) {axes=[1], keepdims=1} @g0
      %n: f32[64,256] = sub(%c, %m) @g0
      %nb: bf16[64,256] = cast(%n) {to="bf16"} @g0
      %v: f32[64,256] = cast(%nb) {to="f32"} @g0
      %rows: f32[64,1] = reduce_amax(%v) {axes=[1], keepdims=1} @g0
      %amax: f32[1,1] = reduce_amax(%rows) {axes=[0,1], keepdims=1} @g1
      %v.g2: f32[64,256] = cast(%nb) {to="f32"} @g2
      %d: f32[64,256] = mul(%v.g2, %amax) @g2
      %q: f8e4m3[64,256] = cast(%d) {to="f8e4m3"} @g2
      output q = %q
    })");
  EXPECT_EQ(r.found.at("cast recomputed by its reader's group"), 1);
  EXPECT_DOUBLE_EQ(group_bytes_saved(input), 64 * 256 * (4 + 4 - 2 - 2));  // g0 writes and g2 reads bf16, not f32
}

// What stays read: a chain through a reduction (its value exists only in its own group's pass), a chain whose
// inputs are more bytes than the value (two bf16 inputs for one bf16 sum), a longer chain than the limit (a cast
// and nine exps), and a value of another stage (a weight's cast, done once at load time).
TEST(PassRematerialize, WhatIsNotRecomputed) {
  const char* input = R"(graph g {
      input %x: bf16[8,64] per_call
      input %y: bf16[8,64] per_call
      input %w: bf16[64] weight
      %c: f32[8,64] = cast(%x) {to="f32"} @g0
      %m: f32[8,1] = reduce_mean(%c) {axes=[1], keepdims=1} @g0
      %n: f32[8,64] = sub(%c, %m) @g0
      %s: bf16[8,64] = add(%x, %y) @g1
      %c3: f32[8,64] = cast(%y) {to="f32"} @g3
      %e1: f32[8,64] = exp(%c3) @g3
      %e2: f32[8,64] = exp(%e1) @g3
      %e3: f32[8,64] = exp(%e2) @g3
      %e4: f32[8,64] = exp(%e3) @g3
      %e5: f32[8,64] = exp(%e4) @g3
      %e6: f32[8,64] = exp(%e5) @g3
      %e7: f32[8,64] = exp(%e6) @g3
      %e8: f32[8,64] = exp(%e7) @g3
      %e9: f32[8,64] = exp(%e8) @g3
      %wf: f32[64] = cast(%w) {to="f32"} @g4
      %o1: f32[8,64] = mul(%n, %n) @g2
      %o2: bf16[8,64] = mul(%s, %s) @g2
      %o3: f32[8,64] = mul(%e9, %wf) @g2
      output o1 = %o1
      output o2 = %o2
      output o3 = %o3
    })";
  Graph in = parse_or_die(input);
  const passes::PassResult r = passes::rematerialize(in);
  EXPECT_FALSE(r.report.changed) << print_graph_text(r.graph);
  EXPECT_EQ(print_graph_text(r.graph), print_graph_text(in));
}

// The FLUX double block, FP8 with tensor scales, through the pipeline: every quantize cast whose amax group made
// an f32 copy recomputes it: of a plain activation (the image tokens' attention output, the MLP GEMM's GELU
// output) from that activation, of a modulated layernorm's output (image and text, before attention and
// before the MLP) from the layernorm group's bf16 value, which that group then writes. The memory-bound
// kernels move fewer bytes than with the pass left out.
TEST(PassRematerialize, Fp8TensorScalesInThePipeline) {
  auto model = models::build_zoo_model("flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor,img_tokens=512");
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto with = passes::run_pipeline(*model);
  auto without = passes::run_pipeline(*model, testing::pipeline_without({"rematerialize"}));
  ASSERT_TRUE(with.ok() && without.ok());
  const passes::PassReport* report = nullptr;
  for (const passes::PassReport& r : with->reports) {
    if (r.pass == "rematerialize") report = &r;
  }
  ASSERT_NE(report, nullptr);
  int recomputed = 0;
  for (const auto& [pattern, n] : report->found) recomputed += n;
  std::string notes;
  for (const std::string& note : report->notes) notes += note + "\n";
  for (const char* cast : {"%img_attn.proj/quantize/cast of", "%img_mlp.2/quantize/cast of", "%img_attn.qkv/quantize/cast of",
                           "%img_mlp.0/quantize/cast of", "%txt_attn.qkv/quantize/cast of", "%txt_mlp.0/quantize/cast of"}) {
    EXPECT_NE(notes.find(cast), std::string::npos) << cast << "\n" << notes;
  }
  // The text tokens' attention output and MLP amax are one group with their cast: nothing to read back.
  EXPECT_EQ(recomputed, 6) << notes;
  const passes::KernelSummary a = passes::summarize_memory_bound_kernels(*model, with->graph);
  const passes::KernelSummary b = passes::summarize_memory_bound_kernels(*model, without->graph);
  EXPECT_LT(a.bytes_after, b.bytes_after);
  EXPECT_EQ(a.kernels_after, b.kernels_after);
}

}  // namespace
}  // namespace kiln
