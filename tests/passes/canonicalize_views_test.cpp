// View canonicalization: golden rewrites (composition, identities, transposes that are reshapes, views joining
// or cloned into the fused groups that read them, views that must stay), and bit-identical outputs on random
// view chains and on every zoo model's tiny configuration after the pipeline.
#include "passes/canonicalize_views.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "models/weights.h"
#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

using testing::expect_golden;

TEST(PassCanonicalizeViews, ComposesChainsAndRemovesIdentities) {
  const passes::PassReport r = expect_golden(passes::canonicalize_views, R"(graph g {
      input %x: f32[2,3,4] per_call
      input %u: f32[1,6,1,4] per_call
      input %b: f32[4] per_call
      %r1: f32[6,4] = reshape(%x) {shape=[6,4]}
      %r2: f32[24] = reshape(%r1) {shape=[24]}
      %t1: f32[3,2,4] = transpose(%x) {perm=[1,0,2]}
      %t2: f32[2,3,4] = transpose(%t1) {perm=[1,0,2]}
      %t3: f32[4,3,2] = transpose(%t1) {perm=[2,0,1]}
      %s1: f32[2,3,3] = slice(%x) {axis=-1, start=1, end=4}
      %s2: f32[2,3,2] = slice(%s1) {axis=2, start=0, end=3, step=2}
      %p0: f32[2,1,4], %p1: f32[2,2,4] = split(%x) {axis=1, sizes=[1,2]}
      %s3: f32[2,1,4] = slice(%p1) {axis=1, start=1, end=2}
      %same: f32[2,3,4] = reshape(%x) {shape=[2,3,4]}
      %all: f32[2,3,4] = slice(%same) {axis=0, start=0, end=2}
      %ut: f32[6,1,1,4] = transpose(%u) {perm=[1,0,2,3]}
      %b1: f32[3,4] = broadcast(%b) {shape=[3,4]}
      %b2: f32[2,3,4] = broadcast(%b1) {shape=[2,3,4]}
      %y: f32[2,3,4] = add(%t2, %all)
      output r2 = %r2
      output t3 = %t3
      output s2 = %s2
      output s3 = %s3
      output p0 = %p0
      output y = %y
      output ut = %ut
      output b2 = %b2
    })", R"(graph g {
      input %x: f32[2,3,4] per_call
      input %u: f32[1,6,1,4] per_call
      input %b: f32[4] per_call
      %r2: f32[24] = reshape(%x) {shape=[24]}
      %t3: f32[4,3,2] = transpose(%x) {perm=[2,1,0]}
      %s2: f32[2,3,2] = slice(%x) {axis=2, start=1, end=4, step=2}
      %p0: f32[2,1,4] = slice(%x) {axis=1, start=0, end=1, step=1}
      %s3: f32[2,1,4] = slice(%x) {axis=1, start=2, end=3, step=1}
      %ut: f32[6,1,1,4] = reshape(%u) {shape=[6,1,1,4]}
      %b2: f32[2,3,4] = broadcast(%b) {shape=[2,3,4]}
      %y: f32[2,3,4] = add(%x, %x)
      output r2 = %r2
      output t3 = %t3
      output s2 = %s2
      output s3 = %s3
      output p0 = %p0
      output y = %y
      output ut = %ut
      output b2 = %b2
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("reshape∘reshape"), 1);
  EXPECT_EQ(r.found.at("transpose∘transpose = identity, removed"), 1);
  EXPECT_EQ(r.found.at("transpose∘transpose"), 1);
  EXPECT_EQ(r.found.at("slice∘slice"), 2);  // s2 of s1; s3 of split's second piece
  EXPECT_EQ(r.found.at("split -> one slice per piece"), 1);
  EXPECT_EQ(r.found.at("identity reshape removed"), 1);
  EXPECT_EQ(r.found.at("identity slice removed"), 1);
  EXPECT_EQ(r.found.at("transpose of unit axes -> reshape"), 1);
  EXPECT_EQ(r.found.at("broadcast∘broadcast"), 1);
}

// %v is read only by group 0: it joins it. %w is read by groups 0 and 1: each gets its own copy. %k is read by
// a GEMM as well: it stays a view (here not a contiguous window, so the summary counts it as a copy).
TEST(PassCanonicalizeViews, ViewsBecomeTheirGroupsIndexMaps) {
  const char* input = R"(graph g {
      input %x: f32[4,8] per_call
      input %w8: f32[8,8] weight
      %v: f32[4,8] = reshape(%x) {shape=[4,8]}
      %t: f32[8,4] = transpose(%x) {perm=[1,0]}
      %w: f32[4,8] = transpose(%t) {perm=[1,0]}
      %s: f32[4,4] = slice(%x) {axis=1, start=0, end=4}
      %k: f32[4,4] = slice(%x) {axis=1, start=4, end=8}
      %kk: f32[4,8] = concat(%k, %k) {axis=1}
      %l: f32[4,8] = linear(%kk, %w8)
      %a: f32[4,4] = exp(%s) @g0
      %b: f32[4,4] = mul(%a, %k) @g0
      %c: f32[4,4] = exp(%b) @g1
      %d: f32[4,4] = add(%c, %s) @g1
      output b = %b
      output d = %d
      output l = %l
    })";
  const passes::PassReport r = expect_golden(passes::canonicalize_views, input, R"(graph g {
      input %x: f32[4,8] per_call
      input %w8: f32[8,8] weight
      %s.g0: f32[4,4] = slice(%x) {axis=1, start=0, end=4} @g0
      %s.g1: f32[4,4] = slice(%x) {axis=1, start=0, end=4} @g1
      %k: f32[4,4] = slice(%x) {axis=1, start=4, end=8}
      %kk: f32[4,8] = concat(%k, %k) {axis=1}
      %l: f32[4,8] = linear(%kk, %w8)
      %a: f32[4,4] = exp(%s.g0) @g0
      %b: f32[4,4] = mul(%a, %k) @g0
      %c: f32[4,4] = exp(%b) @g1
      %d: f32[4,4] = add(%c, %s.g1) @g1
      output b = %b
      output d = %d
      output l = %l
    })");
  EXPECT_EQ(r.found.at("slice cloned into 2 groups"), 1);
  EXPECT_EQ(r.found.count("slice pushed into its reader's group"), 0u);
  // The concat feeding the GEMM copies; the slice %k is read by that concat (outside any group) and stays.
  Graph in = testing::parse_or_die(input);
  const passes::KernelSummary k = passes::summarize_memory_bound_kernels(in, passes::canonicalize_views(in).graph);
  EXPECT_EQ(k.view_copies_after, 2);
}

// Random chains of views over random shapes, with some of them read by a fused group: the pass is exact.
TEST(PassCanonicalizeViews, RandomViewChainsStayBitIdentical) {
  std::mt19937 rng(5);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  std::map<std::string, int> found;
  for (int trial = 0; trial < 300; ++trial) {
    Graph g;
    Shape shape = {1 + pick(3), 2 + pick(3), 2 + pick(4)};
    ValueId v = *g.add_input("x", {DType::bf16, shape}, Binding::per_call);
    std::vector<ValueId> values = {v};
    for (int step = 0; step < 8; ++step) {
      // Mostly chains (each view reading the last one), sometimes branches.
      const ValueId from =
          pick(3) ? values.back() : values[static_cast<size_t>(pick(static_cast<int>(values.size())))];
      const Shape s = g.value(from).type.shape;
      const auto rank = static_cast<int64_t>(s.size());
      Op op = Op::reshape;
      Attrs attrs;
      switch (pick(5)) {
        case 0: {  // reshape: flatten or split the first axis off
          Shape to = {shape_numel(s)};
          if (pick(2) && rank > 1) to = {s[0], shape_numel(s) / std::max<int64_t>(s[0], 1)};
          attrs = {{"shape", to}};
          break;
        }
        case 1: {
          op = Op::transpose;
          std::vector<int64_t> perm(static_cast<size_t>(rank));
          for (int64_t i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = i;
          std::shuffle(perm.begin(), perm.end(), rng);
          attrs = {{"perm", perm}};
          break;
        }
        case 2: {
          op = Op::slice;
          const int64_t axis = pick(static_cast<int>(rank));
          const int64_t dim = s[static_cast<size_t>(axis)];
          attrs = {{"axis", axis}, {"start", int64_t{pick(static_cast<int>(dim) + 1)}},
                   {"end", int64_t{pick(static_cast<int>(dim) + 2)}}, {"step", int64_t{1 + pick(2)}}};
          break;
        }
        case 3: {
          op = Op::broadcast;
          Shape to = s;
          to.insert(to.begin(), 1 + pick(2));
          attrs = {{"shape", to}};
          break;
        }
        default: {
          op = Op::split;
          const int64_t axis = pick(static_cast<int>(rank));
          const int64_t dim = s[static_cast<size_t>(axis)];
          const int64_t first = pick(static_cast<int>(dim) + 1);
          attrs = {{"axis", axis}, {"sizes", std::vector<int64_t>{first, dim - first}}};
          break;
        }
      }
      auto outs = g.add_node(op, {from}, attrs);
      ASSERT_TRUE(outs.ok()) << outs.error().message;
      values.insert(values.end(), outs->begin(), outs->end());
    }
    // Half the chains end in an elementwise op marked as a group, so views are pushed into it.
    const ValueId last = values.back();
    auto e = g.add_node(Op::neg, {last}, {});
    ASSERT_TRUE(e.ok());
    if (pick(2)) g.set_node_group(static_cast<NodeId>(g.nodes().size()) - 1, 0);
    for (size_t i = 1; i < values.size(); i += 2) ASSERT_TRUE(g.add_output("o" + std::to_string(i), values[i]).ok());
    ASSERT_TRUE(g.add_output("neg", (*e)[0]).ok());
    const passes::PassResult r = passes::canonicalize_views(g);
    for (const auto& [pattern, n] : r.report.found) found[pattern] += n;
    ASSERT_TRUE(verify_graph(r.graph).ok()) << print_graph_text(g);
    testing::expect_bit_identical(g, r.graph, static_cast<uint32_t>(trial));
    // Idempotent.
    EXPECT_EQ(print_graph_text(passes::canonicalize_views(r.graph).graph), print_graph_text(r.graph));
  }
  // The chains exercised every rewrite.
  for (const char* pattern : {"reshape∘reshape", "transpose∘transpose", "slice∘slice", "split -> one slice per piece",
                              "broadcast∘broadcast", "pushed into"}) {
    int n = 0;
    for (const auto& [p, count] : found) n += p.find(pattern) != std::string::npos ? count : 0;
    EXPECT_GT(n, 0) << pattern;
  }
}

// The pass on every zoo model's tiny configuration after the rest of the pipeline: bit-identical.
TEST(PassCanonicalizeViews, ZooTinyModelsStayBitIdentical) {
  for (const models::ZooEntry& e : models::zoo_models()) {
    for (const std::string& spec : {e.name + ":tiny", e.name + ":tiny,dtype=fp8,fp8_scaling=block"}) {
      SCOPED_TRACE(spec);
      auto g = models::build_zoo_model(spec);
      ASSERT_TRUE(g.ok()) << g.error().message;
      auto opt = passes::run_pipeline(*g, testing::pipeline_without({"canonicalize-views"}));
      ASSERT_TRUE(opt.ok()) << opt.error().message;
      const passes::PassResult r = passes::canonicalize_views(opt->graph);
      ASSERT_TRUE(verify_graph(r.graph).ok());
      const auto inputs = models::random_inputs(*g, 3);
      auto a = ref::run_graph(opt->graph, inputs);
      auto b = ref::run_graph(r.graph, inputs);
      ASSERT_TRUE(a.ok()) << a.error().message;
      ASSERT_TRUE(b.ok()) << b.error().message;
      for (const auto& [name, t] : *a) EXPECT_TRUE(t.bitwise_equal(b->at(name))) << name;
    }
  }
}

}  // namespace
}  // namespace kiln
