// Horizontal GEMM merge: golden rewrites of q/k/v, gate/up and FP8 projections, the cases that must not merge,
// staging of the merged weights, and bit-identical outputs on zoo models (tiny ones run; real sizes only
// rewritten and verified).
#include "passes/merge_gemms.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/weights.h"
#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/cse.h"
#include "passes/staging.h"

namespace kiln {
namespace {

using testing::expect_golden;

int merged_groups(const passes::PassReport& report) {
  int n = 0;
  for (const std::string& note : report.notes) n += note.rfind("merged ", 0) == 0;
  return n;
}

bool has_note(const passes::PassReport& report, const std::string& needle) {
  for (const std::string& note : report.notes) {
    if (note.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string all_notes(const passes::PassReport& report) {
  std::string s;
  for (const std::string& note : report.notes) s += note + "\n";
  return s;
}

// A consumer of %q sits between the members and %k is a graph output: both must keep working.
TEST(PassMergeGemms, QkvWithBias) {
  const passes::PassReport r = expect_golden(passes::merge_parallel_gemms, R"(graph g {
      input %x: bf16[2,3,8] per_call
      input %wq: bf16[8,8] weight
      input %bq: bf16[8] weight
      input %wk: bf16[4,8] weight
      input %bk: bf16[4] weight
      input %wv: bf16[4,8] weight
      input %bv: bf16[4] weight
      %q: bf16[2,3,8] = linear(%x, %wq, %bq)
      %qe: bf16[2,3,8] = exp(%q)
      %k: bf16[2,3,4] = linear(%x, %wk, %bk)
      %v: bf16[2,3,4] = linear(%x, %wv, %bv)
      %kv: bf16[2,3,4] = mul(%k, %v)
      output qe = %qe
      output kv = %kv
      output k = %k
    })", R"(graph g {
      input %x: bf16[2,3,8] per_call
      input %wq: bf16[8,8] weight
      input %bq: bf16[8] weight
      input %wk: bf16[4,8] weight
      input %bk: bf16[4] weight
      input %wv: bf16[4,8] weight
      input %bv: bf16[4] weight
      %wq.merged: bf16[16,8] = concat(%wq, %wk, %wv) {axis=0}
      %bq.merged: bf16[16] = concat(%bq, %bk, %bv) {axis=0}
      %q.merged: bf16[2,3,16] = linear(%x, %wq.merged, %bq.merged)
      %q: bf16[2,3,8], %k: bf16[2,3,4], %v: bf16[2,3,4] = split(%q.merged) {axis=-1, sizes=[8,4,4]}
      %qe: bf16[2,3,8] = exp(%q)
      %kv: bf16[2,3,4] = mul(%k, %v)
      output qe = %qe
      output kv = %kv
      output k = %k
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(merged_groups(r), 1);
  EXPECT_EQ(r.nodes_before, 5);
  EXPECT_EQ(r.nodes_after, 6);
}

TEST(PassMergeGemms, GateUpWithoutBias) {
  const passes::PassReport r = expect_golden(passes::merge_parallel_gemms, R"(graph g {
      input %h: f32[5,16] per_call
      input %w_gate: f32[24,16] weight
      input %w_up: f32[24,16] weight
      %gate: f32[5,24] = linear(%h, %w_gate)
      %up: f32[5,24] = linear(%h, %w_up)
      %act: f32[5,24] = silu(%gate)
      %y: f32[5,24] = mul(%act, %up)
      output y = %y
    })", R"(graph g {
      input %h: f32[5,16] per_call
      input %w_gate: f32[24,16] weight
      input %w_up: f32[24,16] weight
      %w_gate.merged: f32[48,16] = concat(%w_gate, %w_up) {axis=0}
      %gate.merged: f32[5,48] = linear(%h, %w_gate.merged)
      %gate: f32[5,24], %up: f32[5,24] = split(%gate.merged) {axis=-1, sizes=[24,24]}
      %act: f32[5,24] = silu(%gate)
      %y: f32[5,24] = mul(%act, %up)
      output y = %y
    })");
  EXPECT_EQ(merged_groups(r), 1);
}

// A member without bias gets a -0.0 bias: x + -0.0 == x for every x, a -0.0 dot product included. (The
// reference's BLAS starts its sums at +0.0 and never yields -0.0, so a +0.0 fill would pass the bit check too;
// -0.0 is what keeps any other implementation exact.)
const char* kMixedBias = R"(graph g {
    input %x: bf16[2,4] per_call
    input %wa: bf16[3,4] weight
    input %ba: bf16[3] weight
    input %wb: bf16[2,4] weight
    %a: bf16[2,3] = linear(%x, %wa, %ba)
    %b: bf16[2,2] = linear(%x, %wb)
    output a = %a
    output b = %b
  })";

TEST(PassMergeGemms, MixedBiasGetsNegativeZeroBias) {
  expect_golden(passes::merge_parallel_gemms, kMixedBias, R"(graph g {
      input %x: bf16[2,4] per_call
      input %wa: bf16[3,4] weight
      input %ba: bf16[3] weight
      input %wb: bf16[2,4] weight
      %wb.zero_bias: bf16[2] = full() {shape=[2], value=-0.0, dtype="bf16"}
      %wa.merged: bf16[5,4] = concat(%wa, %wb) {axis=0}
      %ba.merged: bf16[5] = concat(%ba, %wb.zero_bias) {axis=0}
      %a.merged: bf16[2,5] = linear(%x, %wa.merged, %ba.merged)
      %a: bf16[2,3], %b: bf16[2,2] = split(%a.merged) {axis=-1, sizes=[3,2]}
      output a = %a
      output b = %b
    })");
}

TEST(PassMergeGemms, Fp8PerChannelScales) {
  expect_golden(passes::merge_parallel_gemms, R"(graph g {
      input %xq: f8e4m3[4,32] per_call
      input %xs: f32[4,1] per_call
      input %wq1: f8e4m3[16,32] weight
      input %ws1: f32[16,1] weight
      input %b1: bf16[16] weight
      input %wq2: f8e4m3[8,32] weight
      input %ws2: f32[8,1] weight
      input %b2: bf16[8] weight
      %y1: bf16[4,16] = scaled_linear(%xq, %xs, %wq1, %ws1, %b1) {out_dtype="bf16"}
      %y2: bf16[4,8] = scaled_linear(%xq, %xs, %wq2, %ws2, %b2) {out_dtype="bf16"}
      output y1 = %y1
      output y2 = %y2
    })", R"(graph g {
      input %xq: f8e4m3[4,32] per_call
      input %xs: f32[4,1] per_call
      input %wq1: f8e4m3[16,32] weight
      input %ws1: f32[16,1] weight
      input %b1: bf16[16] weight
      input %wq2: f8e4m3[8,32] weight
      input %ws2: f32[8,1] weight
      input %b2: bf16[8] weight
      %wq1.merged: f8e4m3[24,32] = concat(%wq1, %wq2) {axis=0}
      %ws1.merged: f32[24,1] = concat(%ws1, %ws2) {axis=0}
      %b1.merged: bf16[24] = concat(%b1, %b2) {axis=0}
      %y1.merged: bf16[4,24] = scaled_linear(%xq, %xs, %wq1.merged, %ws1.merged, %b1.merged) {out_dtype="bf16"}
      %y1: bf16[4,16], %y2: bf16[4,8] = split(%y1.merged) {axis=-1, sizes=[16,8]}
      output y1 = %y1
      output y2 = %y2
    })");
}

// Per-tensor weight scales become per-channel by broadcast (the same value on every row): bit-exact.
TEST(PassMergeGemms, Fp8PerTensorScalesBroadcastToPerChannel) {
  expect_golden(passes::merge_parallel_gemms, R"(graph g {
      input %xq: f8e4m3[3,16] per_call
      input %xs: f32[] per_call
      input %wq1: f8e4m3[8,16] weight
      input %ws1: f32[] weight
      input %wq2: f8e4m3[4,16] weight
      input %ws2: f32[4,1] weight
      %y1: f32[3,8] = scaled_linear(%xq, %xs, %wq1, %ws1) {out_dtype="f32"}
      %y2: f32[3,4] = scaled_linear(%xq, %xs, %wq2, %ws2) {out_dtype="f32"}
      output y1 = %y1
      output y2 = %y2
    })", R"(graph g {
      input %xq: f8e4m3[3,16] per_call
      input %xs: f32[] per_call
      input %wq1: f8e4m3[8,16] weight
      input %ws1: f32[] weight
      input %wq2: f8e4m3[4,16] weight
      input %ws2: f32[4,1] weight
      %ws1.per_channel: f32[8,1] = broadcast(%ws1) {shape=[8,1]}
      %wq1.merged: f8e4m3[12,16] = concat(%wq1, %wq2) {axis=0}
      %ws1.merged: f32[12,1] = concat(%ws1.per_channel, %ws2) {axis=0}
      %y1.merged: f32[3,12] = scaled_linear(%xq, %xs, %wq1.merged, %ws1.merged) {out_dtype="f32"}
      %y1: f32[3,8], %y2: f32[3,4] = split(%y1.merged) {axis=-1, sizes=[8,4]}
      output y1 = %y1
      output y2 = %y2
    })");
}

// 128x128 block scales: members with N % 128 == 0 concatenate, and a partial block may end the merge.
TEST(PassMergeGemms, Fp8BlockScales) {
  expect_golden(passes::merge_parallel_gemms, R"(graph g {
      input %xq: f8e4m3[2,256] per_call
      input %xs: f32[2,2] per_call
      input %wq1: f8e4m3[128,256] weight
      input %ws1: f32[1,2] weight
      input %wq2: f8e4m3[256,256] weight
      input %ws2: f32[2,2] weight
      input %wq3: f8e4m3[64,256] weight
      input %ws3: f32[1,2] weight
      %y1: bf16[2,128] = scaled_linear(%xq, %xs, %wq1, %ws1)
      %y2: bf16[2,256] = scaled_linear(%xq, %xs, %wq2, %ws2)
      %y3: bf16[2,64] = scaled_linear(%xq, %xs, %wq3, %ws3)
      output y1 = %y1
      output y2 = %y2
      output y3 = %y3
    })", R"(graph g {
      input %xq: f8e4m3[2,256] per_call
      input %xs: f32[2,2] per_call
      input %wq1: f8e4m3[128,256] weight
      input %ws1: f32[1,2] weight
      input %wq2: f8e4m3[256,256] weight
      input %ws2: f32[2,2] weight
      input %wq3: f8e4m3[64,256] weight
      input %ws3: f32[1,2] weight
      %wq1.merged: f8e4m3[448,256] = concat(%wq1, %wq2, %wq3) {axis=0}
      %ws1.merged: f32[4,2] = concat(%ws1, %ws2, %ws3) {axis=0}
      %y1.merged: bf16[2,448] = scaled_linear(%xq, %xs, %wq1.merged, %ws1.merged)
      %y1: bf16[2,128], %y2: bf16[2,256], %y3: bf16[2,64] = split(%y1.merged) {axis=-1, sizes=[128,256,64]}
      output y1 = %y1
      output y2 = %y2
      output y3 = %y3
    })");
}

// A partial block first, block next to row scales, and e4m3 next to e5m2: nothing can merge.
TEST(PassMergeGemms, Fp8IncompatibleScalesAreReportedNotMerged) {
  const std::string text = R"(graph g {
      input %xq: f8e4m3[2,256] per_call
      input %xs: f32[2,2] per_call
      input %wq1: f8e4m3[64,256] weight
      input %ws1: f32[1,2] weight
      input %wq2: f8e4m3[128,256] weight
      input %ws2: f32[1,2] weight
      input %wq3: f8e4m3[32,256] weight
      input %ws3: f32[32,1] weight
      input %wq4: f8e5m2[32,256] weight
      input %ws4: f32[32,1] weight
      %y1: bf16[2,64] = scaled_linear(%xq, %xs, %wq1, %ws1)
      %y2: bf16[2,128] = scaled_linear(%xq, %xs, %wq2, %ws2)
      %y3: bf16[2,32] = scaled_linear(%xq, %xs, %wq3, %ws3)
      %y4: bf16[2,32] = scaled_linear(%xq, %xs, %wq4, %ws4)
      output y1 = %y1
      output y2 = %y2
      output y3 = %y3
      output y4 = %y4
    })";
  const passes::PassReport r = expect_golden(passes::merge_parallel_gemms, text, text);
  EXPECT_FALSE(r.changed) << all_notes(r);
  EXPECT_EQ(r.notes.size(), 4u) << all_notes(r);
  EXPECT_TRUE(has_note(r, "partial 128-row scale block")) << all_notes(r);
  EXPECT_TRUE(has_note(r, "block and row scales cannot be concatenated")) << all_notes(r);
  EXPECT_TRUE(has_note(r, "its weight is f8e5m2, the group's f8e4m3")) << all_notes(r);
}

// Linear type inference ties K and the weight dtype to x, so GEMMs of a different K read a different x.
TEST(PassMergeGemms, DifferentInputsAndDifferentKAreNotMerged) {
  const std::string text = R"(graph g {
      input %x: bf16[4,8] per_call
      input %y: bf16[4,8] per_call
      input %w1: bf16[6,8] weight
      input %w2: bf16[6,8] weight
      input %w3: bf16[6,16] weight
      %a: bf16[4,6] = linear(%x, %w1)
      %b: bf16[4,6] = linear(%y, %w2)
      %x2: bf16[2,16] = reshape(%x) {shape=[2,16]}
      %c: bf16[2,6] = linear(%x2, %w3)
      %d: bf16[4,6] = add(%a, %b)
      output d = %d
      output c = %c
    })";
  const passes::PassReport r = expect_golden(passes::merge_parallel_gemms, text, text);
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(r.notes.empty()) << all_notes(r);
}

// A weight computed after the first member (a transpose of a checkpoint tensor) moves up to the merged GEMM;
// a per-call "weight" would make the concat run every call and is reported instead.
TEST(PassMergeGemms, HoistsLateWeightNodesAndSkipsPerCallWeights) {
  const passes::PassReport r = expect_golden(passes::merge_parallel_gemms, R"(graph g {
      input %x: f32[3,8] per_call
      input %w1: f32[4,8] weight
      input %w2t: f32[8,4] weight
      input %w3: f32[4,8] per_call
      %a: f32[3,4] = linear(%x, %w1)
      %ea: f32[3,4] = exp(%a)
      %w2: f32[4,8] = transpose(%w2t) {perm=[1,0]}
      %b: f32[3,4] = linear(%x, %w2)
      %c: f32[3,4] = linear(%x, %w3)
      %s: f32[3,4] = add(%ea, %b)
      %t: f32[3,4] = add(%s, %c)
      output t = %t
    })", R"(graph g {
      input %x: f32[3,8] per_call
      input %w1: f32[4,8] weight
      input %w2t: f32[8,4] weight
      input %w3: f32[4,8] per_call
      %w2: f32[4,8] = transpose(%w2t) {perm=[1,0]}
      %w1.merged: f32[8,8] = concat(%w1, %w2) {axis=0}
      %a.merged: f32[3,8] = linear(%x, %w1.merged)
      %a: f32[3,4], %b: f32[3,4] = split(%a.merged) {axis=-1, sizes=[4,4]}
      %ea: f32[3,4] = exp(%a)
      %c: f32[3,4] = linear(%x, %w3)
      %s: f32[3,4] = add(%ea, %b)
      %t: f32[3,4] = add(%s, %c)
      output t = %t
    })");
  EXPECT_EQ(merged_groups(r), 1);
  EXPECT_TRUE(has_note(r, "%w3 is a per_call value")) << all_notes(r);
}

// Generated names avoid every name of the source graph, including ones defined later.
TEST(PassMergeGemms, GeneratedNamesDoNotCollide) {
  expect_golden(passes::merge_parallel_gemms, R"(graph g {
      input %x: f32[2,4] per_call
      input %w1: f32[3,4] weight
      input %w2: f32[3,4] weight
      %a: f32[2,3] = linear(%x, %w1)
      %b: f32[2,3] = linear(%x, %w2)
      %a.merged: f32[2,3] = add(%a, %b)
      %w1.merged: f32[2,3] = exp(%a.merged)
      output o = %w1.merged
    })", R"(graph g {
      input %x: f32[2,4] per_call
      input %w1: f32[3,4] weight
      input %w2: f32[3,4] weight
      %w1.merged.1: f32[6,4] = concat(%w1, %w2) {axis=0}
      %a.merged.1: f32[2,6] = linear(%x, %w1.merged.1)
      %a: f32[2,3], %b: f32[2,3] = split(%a.merged.1) {axis=-1, sizes=[3,3]}
      %a.merged: f32[2,3] = add(%a, %b)
      %w1.merged: f32[2,3] = exp(%a.merged)
      output o = %w1.merged
    })");
}

// The weight concats depend only on weights: staging computes them once at load time.
TEST(PassMergeGemms, MergedWeightsAreLoadTimeValues) {
  Graph g = testing::parse_or_die(R"(graph g {
      input %x: bf16[2,8] per_call
      input %t: bf16[2,8] per_step
      input %w1: bf16[4,8] weight
      input %b1: bf16[4] weight
      input %w2: bf16[4,8] weight
      %st: bf16[2,8] = silu(%t)
      %m1: bf16[2,4] = linear(%st, %w1, %b1)
      %m2: bf16[2,4] = linear(%st, %w2)
      %a: bf16[2,4] = linear(%x, %w1)
      %c: bf16[2,4] = linear(%x, %w2, %b1)
      %y: bf16[2,4] = mul(%a, %m1)
      %z: bf16[2,4] = add(%y, %m2)
      %u: bf16[2,4] = add(%z, %c)
      output u = %u
    })");
  const passes::PassResult r = passes::merge_parallel_gemms(g);
  ASSERT_TRUE(verify_graph(r.graph).ok());
  EXPECT_EQ(merged_groups(r.report), 2) << all_notes(r.report);
  testing::expect_bit_identical(g, r.graph);
  const std::vector<Binding> times = passes::classify_binding_times(r.graph);
  int concats = 0, fills = 0;
  for (const Node& node : r.graph.nodes()) {
    const Binding time = times[node.outputs[0]];
    if (node.op == Op::concat || node.op == Op::full) {
      EXPECT_EQ(time, Binding::weight) << r.graph.value(node.outputs[0]).name;
      (node.op == Op::concat ? concats : fills) += 1;
    }
    if (node.op == Op::linear) {
      EXPECT_NE(time, Binding::weight);
    }
  }
  EXPECT_EQ(concats, 4);
  EXPECT_EQ(fills, 2);
  const passes::StagedGraph staged = passes::split_stages(r.graph);
  int load_concats = 0;
  for (const Node& node : staged.load.nodes()) load_concats += node.op == Op::concat;
  EXPECT_EQ(load_concats, 4);
  for (const Node& node : staged.per_step.nodes()) EXPECT_NE(node.op, Op::concat);
  for (const Node& node : staged.per_call.nodes()) EXPECT_NE(node.op, Op::concat);
}

// ---- the size rule ----

// x [1, 8] f32 (32 B) and three heads w [16, 8] (512 B + 64 B of output each). With no launch credit and a
// 2% threshold the merged GEMM may move at most 32 / 0.02 = 1600 B: two heads (1184 B) merge, the third
// (1760 B) would not, and with nothing left to pair with it stays alone.
TEST(PassMergeGemms, SizeRuleCapsTheMergedGemm) {
  const Graph g = testing::parse_or_die(R"(graph g {
      input %x: f32[1,8] per_call
      input %w1: f32[16,8] weight
      input %w2: f32[16,8] weight
      input %w3: f32[16,8] weight
      %y1: f32[1,16] = linear(%x, %w1)
      %y2: f32[1,16] = linear(%x, %w2)
      %y3: f32[1,16] = linear(%x, %w3)
      output y1 = %y1
      output y2 = %y2
      output y3 = %y3
    })");
  const passes::PassResult capped = passes::merge_parallel_gemms_with(g, {0.0, 0.02});
  EXPECT_EQ(merged_groups(capped.report), 1);
  EXPECT_TRUE(has_note(capped.report, "merged 2 linear")) << all_notes(capped.report);
  EXPECT_TRUE(has_note(capped.report, "not merged: node %y3 (linear)")) << all_notes(capped.report);
  EXPECT_TRUE(has_note(capped.report, "below 2% of that")) << all_notes(capped.report);
  testing::expect_bit_identical(g, capped.graph);
  // A launch credit of 32 B doubles the cap: all three merge. A 3% threshold (cap 1067 B) merges none.
  EXPECT_TRUE(has_note(passes::merge_parallel_gemms_with(g, {32.0, 0.02}).report, "merged 3 linear"));
  EXPECT_FALSE(passes::merge_parallel_gemms_with(g, {0.0, 0.03}).report.changed);
  // The defaults merge everything this small.
  EXPECT_TRUE(has_note(passes::merge_parallel_gemms(g).report, "merged 3 linear"));
}

// Under the default rule no merged GEMM moves more than the cap, and FLUX.1's image and text modulation heads
// of a block still share one GEMM.
TEST(PassMergeGemmsZoo, RealSizeMergesStayUnderTheCap) {
  auto built = models::build_zoo_model("flux1-dev");
  ASSERT_TRUE(built.ok());
  const passes::PassResult r = passes::merge_parallel_gemms(*built);
  const passes::MergeOptions defaults;
  for (const Node& n : r.graph.nodes()) {
    if (n.op != Op::linear) continue;
    const double activation = static_cast<double>(type_bytes(r.graph.value(n.inputs[0]).type));
    const double cap = (activation + defaults.launch_overhead_bytes) / defaults.min_relative_saving;
    EXPECT_LE(node_cost(r.graph, static_cast<NodeId>(&n - r.graph.nodes().data())).bytes, cap);
  }
  auto producer_of = [&](const char* name) {
    return r.graph.value(*r.graph.find_value(name)).producer;
  };
  EXPECT_EQ(producer_of("double_blocks.0.img_mod.lin/linear"), producer_of("double_blocks.0.txt_mod.lin/linear"));
}

// ---- zoo models ----

struct ZooCase {
  const char* spec;
  std::vector<int> group_sizes;  // members of each merged group, in graph order (sorted when any_order)
  bool any_order = false;
};

int gemm_count(const Graph& graph) {
  int n = 0;
  for (const Node& node : graph.nodes()) n += op_has_trait(node.op, kTraitMatmul);
  return n;
}

void check_zoo_merge(const ZooCase& c, bool execute) {
  SCOPED_TRACE(c.spec);
  // CSE first, as the pipeline runs it: FP8 builders quantize a shared activation once per linear.
  auto built = models::build_zoo_model(c.spec);
  ASSERT_TRUE(built.ok()) << built.error().message;
  const Graph base = passes::eliminate_common_subexpressions(*built).graph;
  const passes::PassResult r = passes::merge_parallel_gemms(base);
  const Status verified = verify_graph(r.graph);
  ASSERT_TRUE(verified.ok()) << verified.error().message;
  std::vector<int> sizes;
  int folded = 0;
  for (const std::string& note : r.report.notes) {
    if (note.rfind("merged ", 0) != 0) continue;
    sizes.push_back(std::stoi(note.substr(7)));
    folded += sizes.back() - 1;
  }
  if (c.any_order) std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, c.group_sizes) << all_notes(r.report);
  EXPECT_EQ(gemm_count(r.graph), gemm_count(base) - folded);
  const passes::PassResult again = passes::merge_parallel_gemms(r.graph);
  EXPECT_FALSE(again.report.changed) << all_notes(again.report);
  if (!execute) return;
  const auto inputs = models::random_inputs(base, 11);
  auto a = ref::run_graph(base, inputs);
  auto b = ref::run_graph(r.graph, inputs);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(a->size(), b->size());
  for (const auto& [name, tensor] : *a) EXPECT_TRUE(tensor.bitwise_equal(b->at(name))) << "output " << name;
}

// Per double-stream block: to_q/k/v and add_q/k/v; img_mod and txt_mod of every block and norm_out share
// silu(temb).
TEST(PassMergeGemmsZoo, QwenImageTinyBitIdentical) {
  check_zoo_merge({"qwen-image:tiny", {3, 3, 3}}, true);
  check_zoo_merge({"qwen-image:tiny,blocks=2", {5, 3, 3, 3, 3}}, true);
  // FP8 blocks: the modulation heads are FP8 (N = 384) while norm_out stays bf16, so they merge apart.
  check_zoo_merge({"qwen-image:tiny,dtype=fp8,fp8_scaling=channel", {2, 3, 3}}, true);
  check_zoo_merge({"qwen-image:tiny,dtype=fp8,fp8_scaling=tensor", {2, 3, 3}}, true);
  // Tiny q/k/v have N = 64: a partial 128-row block can only end a merge, so only the mods merge.
  check_zoo_merge({"qwen-image:tiny,dtype=fp8,fp8_scaling=block", {2}}, true);
}

// Per layer: q/k/v (N = 64, 32, 32) and gate/up.
TEST(PassMergeGemmsZoo, Llama3TinyBitIdentical) {
  check_zoo_merge({"llama3-8b:tiny", {3, 2}}, true);
  check_zoo_merge({"llama3-8b:tiny,layers=2,embed=1", {3, 2, 3, 2}}, true);
  check_zoo_merge({"llama3-8b:tiny,mode=decode", {3, 2}}, true);
  check_zoo_merge({"llama3-8b:tiny,dtype=fp8,fp8_scaling=block", {2}}, true);  // gate/up: N = 128
}

// FLUX fuses q/k/v (and FLUX.2 gate/up) in its checkpoints already; what is left is the modulation heads on
// silu(vec): FLUX.2's three shared ones + the final layer's, FLUX.1's per-block ones + the final layer's.
TEST(PassMergeGemmsZoo, FluxTinyBitIdentical) {
  check_zoo_merge({"flux2-dev:tiny", {4}}, true);
  check_zoo_merge({"flux1-dev:tiny", {4}}, true);
  check_zoo_merge({"flux1-dev:tiny,double_blocks=2,single_blocks=2", {7}}, true);
  check_zoo_merge({"flux1-dev:tiny,dtype=fp8", {3}}, true);  // the final layer's head stays bf16
}

// At real sizes the size rule splits the 77 FLUX.1 / 121 Qwen-Image modulation heads on one [1, 3072] vector
// into merges of at most ~1.6 GB (14 heads of 113 MB; 28 single-block heads of 57 MB), in graph order.
TEST(PassMergeGemmsZoo, RealSizeGraphsRewriteAndVerify) {
  check_zoo_merge({"flux1-dev", {14, 14, 18, 28, 3}}, false);
  check_zoo_merge({"flux2-dev", {4}}, false);
  std::vector<int> qwen(60 * 2, 3);
  qwen.push_back(9);
  for (int i = 0; i < 8; ++i) qwen.push_back(14);
  check_zoo_merge({"qwen-image", qwen, true}, false);
  std::vector<int> llama;
  for (int i = 0; i < 32; ++i) llama.insert(llama.end(), {3, 2});
  check_zoo_merge({"llama3-8b:layers=32,embed=1", llama}, false);
  // Real FP8 block scaling: every N is a multiple of 128, so the block merges match the bf16 ones.
  check_zoo_merge({"llama3-8b:layers=2,dtype=fp8,fp8_scaling=block", {3, 2, 3, 2}}, false);
}

}  // namespace
}  // namespace kiln
