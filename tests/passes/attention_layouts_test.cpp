// Attention layouts: transposes that swap heads and tokens next to an attention are absorbed into its layout
// attributes (golden rewrites, bit-identical outputs), what is left alone, and the FLUX blocks, whose joint
// attention loses its output transpose and reads v through a plain concat.
#include "passes/attention_layouts.h"

#include <gtest/gtest.h>

#include "models/weights.h"
#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

using testing::expect_golden;

// q, k, v from a [b, s, h, d] projection through transposes; the output transposed back for the proj GEMM.
TEST(PassAttentionLayouts, TransposesAroundAttentionBecomeLayouts) {
  const char* input = R"(graph g {
      input %q: bf16[1,6,2,8] per_call
      input %k: bf16[1,6,2,8] per_call
      input %v: bf16[1,6,2,8] per_call
      %qt: bf16[1,2,6,8] = transpose(%q) {perm=[0,2,1,3]}
      %kt: bf16[1,2,6,8] = transpose(%k) {perm=[0,2,1,3]}
      %vt: bf16[1,2,6,8] = transpose(%v) {perm=[0,2,1,3]}
      %a: bf16[1,2,6,8] = attention(%qt, %kt, %vt)
      %o: bf16[1,6,2,8] = transpose(%a) {perm=[0,2,1,3]}
      output o = %o
    })";
  const char* expected = R"(graph g {
      input %q: bf16[1,6,2,8] per_call
      input %k: bf16[1,6,2,8] per_call
      input %v: bf16[1,6,2,8] per_call
      %qt: bf16[1,2,6,8] = transpose(%q) {perm=[0,2,1,3]}
      %kt: bf16[1,2,6,8] = transpose(%k) {perm=[0,2,1,3]}
      %vt: bf16[1,2,6,8] = transpose(%v) {perm=[0,2,1,3]}
      %a: bf16[1,6,2,8] = attention(%q, %k, %v) {k_layout="bshd", out_layout="bshd", q_layout="bshd", v_layout="bshd"}
      output o = %a
    })";
  const passes::PassReport r = expect_golden(passes::absorb_attention_layouts, input, expected);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("transpose into q_layout"), 1);
  EXPECT_EQ(r.found.at("transpose into out_layout"), 1);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("of transposing copies per call gone"), std::string::npos) << r.notes[0];
}

// Joint attention: v is the concat along tokens of two streams' transposes; it becomes the concat of the
// streams themselves along their token axis, read token-major. A concat with one non-transposed piece, a
// transpose by another permutation and an output also read untransposed stay as they are.
TEST(PassAttentionLayouts, JointConcatAndWhatIsLeftAlone) {
  const char* input = R"(graph g {
      input %q: bf16[1,2,5,8] per_call
      input %vt: bf16[1,2,8] per_call
      input %vi: bf16[1,3,2,8] per_call
      input %k: bf16[1,2,5,8] per_call
      %vt4: bf16[1,2,1,8] = reshape(%vt) {shape=[1,2,1,8]}
      %a0: bf16[1,1,2,8] = transpose(%vt4) {perm=[0,2,1,3]}
      %a1: bf16[1,2,3,8] = transpose(%vi) {perm=[0,2,1,3]}
      %kt: bf16[1,2,5,8] = transpose(%k) {perm=[0,1,2,3]}
      %a0b: bf16[1,2,2,8] = concat(%a0, %a0) {axis=1}
      %v: bf16[1,2,5,8] = concat(%a0b, %a1) {axis=2}
      %o: bf16[1,2,5,8] = attention(%q, %kt, %v)
      %ot: bf16[1,5,2,8] = transpose(%o) {perm=[0,2,1,3]}
      output ot = %ot
      output o = %o
    })";
  Graph in = testing::parse_or_die(input);
  passes::PassResult r = passes::absorb_attention_layouts(in);
  ASSERT_TRUE(verify_graph(r.graph).ok());
  testing::expect_bit_identical(in, r.graph);
  // v's concat has a piece that is itself a concat, not a transpose: left alone, like k (another permutation)
  // and the output (also a graph output).
  EXPECT_FALSE(r.report.changed);

  const char* joint = R"(graph g {
      input %q: bf16[1,2,5,8] per_call
      input %k: bf16[1,2,5,8] per_call
      input %vt: bf16[1,2,2,8] per_call
      input %vi: bf16[1,3,2,8] per_call
      %a0: bf16[1,2,2,8] = transpose(%vt) {perm=[0,2,1,3]}
      %a1: bf16[1,2,3,8] = transpose(%vi) {perm=[0,2,1,3]}
      %v: bf16[1,2,5,8] = concat(%a0, %a1) {axis=2}
      %o: bf16[1,2,5,8] = attention(%q, %k, %v)
      output o = %o
    })";
  const char* joint_expected = R"(graph g {
      input %q: bf16[1,2,5,8] per_call
      input %k: bf16[1,2,5,8] per_call
      input %vt: bf16[1,2,2,8] per_call
      input %vi: bf16[1,3,2,8] per_call
      %a0: bf16[1,2,2,8] = transpose(%vt) {perm=[0,2,1,3]}
      %a1: bf16[1,2,3,8] = transpose(%vi) {perm=[0,2,1,3]}
      %v: bf16[1,2,5,8] = concat(%a0, %a1) {axis=2}
      %v.token_major: bf16[1,5,2,8] = concat(%vt, %vi) {axis=1}
      %o: bf16[1,2,5,8] = attention(%q, %k, %v.token_major) {v_layout="bshd"}
      output o = %o
    })";
  const passes::PassReport jr = expect_golden(passes::absorb_attention_layouts, joint, joint_expected);
  EXPECT_EQ(jr.found.at("concat of transposes into v_layout"), 1);
}

// The FLUX blocks at real size, in the whole pipeline: the joint attention writes token-major (its output
// transpose is gone, so the reshape and the text/image split are free views) and reads v through a plain
// concat; no transpose of the attention's output is left. Outputs of the tiny blocks are bit-identical with
// and without the pass.
TEST(PassAttentionLayouts, FluxBlocks) {
  for (const char* model : {"flux1-double-block", "flux1-single-block"}) {
    SCOPED_TRACE(model);
    auto g = models::build_zoo_model(model);
    ASSERT_TRUE(g.ok()) << g.error().message;
    auto opt = passes::run_pipeline(*g);
    ASSERT_TRUE(opt.ok()) << opt.error().message;
    int attentions = 0;
    for (const Node& n : opt->graph.nodes()) {
      if (n.op != Op::attention) continue;
      ++attentions;
      EXPECT_EQ(n.attrs.get_string("out_layout", "bhsd"), "bshd");
    }
    EXPECT_EQ(attentions, 1);

    auto tiny = models::build_zoo_model(std::string(model) + ":tiny");
    ASSERT_TRUE(tiny.ok());
    passes::PipelineOptions without;
    without.disabled = {"attention-layouts"};
    auto a = passes::run_pipeline(*tiny);
    auto b = passes::run_pipeline(*tiny, without);
    ASSERT_TRUE(a.ok() && b.ok());
    const auto inputs = models::random_inputs(*tiny, 3);
    auto ra = ref::run_graph(a->graph, inputs);
    auto rb = ref::run_graph(b->graph, inputs);
    ASSERT_TRUE(ra.ok() && rb.ok());
    for (const auto& [name, t] : *ra) EXPECT_TRUE(t.bitwise_equal(rb->at(name))) << name;
  }
}

}  // namespace
}  // namespace kiln
