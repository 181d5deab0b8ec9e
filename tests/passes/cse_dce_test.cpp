#include <gtest/gtest.h>

#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/pipeline.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using testing::expect_golden;

TEST(PassCse, MergesIdenticalNodesAndCommutedOperands) {
  const passes::PassReport r = expect_golden(passes::eliminate_common_subexpressions, R"(graph g {
      input %x: f32[2,3] per_call
      input %w: f32[3] weight
      %a: f32[2,3] = add(%x, %w)
      %b: f32[2,3] = add(%w, %x)
      %c: f32[2,3] = mul(%a, %b)
      %d: f32[2,3] = gelu(%a) {approximate="tanh"}
      %e: f32[2,3] = gelu(%b) {approximate="tanh"}
      %f: f32[2,3] = gelu(%b)
      %g: f32[2,3] = add(%d, %e)
      %h: f32[2,3] = add(%g, %f)
      %i: f32[2,3] = sub(%c, %h)
      output out = %i
      output also = %e
    })", R"(graph g {
      input %x: f32[2,3] per_call
      input %w: f32[3] weight
      %a: f32[2,3] = add(%x, %w)
      %c: f32[2,3] = mul(%a, %a)
      %d: f32[2,3] = gelu(%a) {approximate="tanh"}
      %f: f32[2,3] = gelu(%a)
      %g: f32[2,3] = add(%d, %d)
      %h: f32[2,3] = add(%g, %f)
      %i: f32[2,3] = sub(%c, %h)
      output out = %i
      output also = %d
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.nodes_before, 9);
  EXPECT_EQ(r.nodes_after, 7);
}

TEST(PassCse, KeepsNonCommutativeOperandOrderAndDistinctAttrs) {
  const std::string text = R"(graph g {
      input %x: f32[4] per_call
      input %y: f32[4] per_call
      %a: f32[4] = sub(%x, %y)
      %b: f32[4] = sub(%y, %x)
      %c: f32[4] = cast(%a) {to="bf16"}
      %d: bf16[4] = cast(%b) {to="bf16"}
      output a = %c
      output b = %d
    })";
  // The declared type of %c is wrong on purpose: this must not parse.
  EXPECT_FALSE(parse_graph_text(text).ok());
  const std::string fixed = R"(graph g {
      input %x: f32[4] per_call
      input %y: f32[4] per_call
      %a: f32[4] = sub(%x, %y)
      %b: f32[4] = sub(%y, %x)
      %c: bf16[4] = cast(%a) {to="bf16"}
      %d: f16[4] = cast(%a) {to="f16"}
      output a = %c
      output b = %d
      output c = %b
    })";
  const passes::PassReport r = expect_golden(passes::eliminate_common_subexpressions, fixed, fixed);
  EXPECT_FALSE(r.changed);
}

TEST(PassDce, RemovesNodesThatReachNoOutput) {
  const passes::PassReport r = expect_golden(passes::eliminate_dead_code, R"(graph g {
      input %x: f32[4] per_call
      input %unused: f32[4] weight
      %a: f32[4] = exp(%x)
      %b: f32[4] = tanh(%a)
      %dead1: f32[4] = sin(%b)
      %dead2: f32[4] = mul(%dead1, %unused)
      output out = %b
    })", R"(graph g {
      input %x: f32[4] per_call
      input %unused: f32[4] weight
      %a: f32[4] = exp(%x)
      %b: f32[4] = tanh(%a)
      output out = %b
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.notes.size(), 2u);
}

TEST(PassPipeline, RunsInOrderAndRejectsUnknownPassNames) {
  Graph g = testing::parse_or_die(R"(graph g {
      input %x: f32[4] per_call
      %a: f32[4] = exp(%x)
      %b: f32[4] = exp(%x)
      %c: f32[4] = add(%a, %b)
      output out = %a
    })");
  auto all = passes::run_pipeline(g);
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->graph.nodes().size(), 1u);  // cse merges %b into %a, dce drops %c
  auto no_dce = passes::run_pipeline(g, testing::pipeline_without({"dce"}));
  ASSERT_TRUE(no_dce.ok());
  EXPECT_EQ(no_dce->graph.nodes().size(), 2u);
  auto bad = passes::run_pipeline(g, testing::pipeline_without({"fuse-everything"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("fuse-everything"), std::string::npos);
}

// Equivalence fuzzing: random elementwise graphs with planted duplicates keep bit-identical outputs.
TEST(PassEquivalence, RandomGraphsStayBitIdentical) {
  std::mt19937 rng(7);
  const Op unary[] = {Op::exp, Op::tanh, Op::sigmoid, Op::neg, Op::silu, Op::sin};
  const Op binary[] = {Op::add, Op::sub, Op::mul, Op::max};
  for (int trial = 0; trial < 40; ++trial) {
    Graph g;
    std::vector<ValueId> pool;
    const DType dtype = trial % 2 ? DType::bf16 : DType::f32;
    for (int i = 0; i < 3; ++i) pool.push_back(*g.add_input("in" + std::to_string(i), {dtype, {3, 5}}, Binding::per_call));
    for (int n = 0; n < 25; ++n) {
      auto pick = [&] { return pool[rng() % pool.size()]; };
      Result<std::vector<ValueId>> out = std::vector<ValueId>{};
      if (rng() % 2) {
        out = g.add_node(unary[rng() % std::size(unary)], {pick()}, {});
      } else {
        out = g.add_node(binary[rng() % std::size(binary)], {pick(), pick()}, {});
      }
      ASSERT_TRUE(out.ok()) << out.error().message;
      pool.push_back((*out)[0]);
      if (rng() % 4 == 0) {  // plant a duplicate of the node just added
        const Node& last = g.node(static_cast<NodeId>(g.nodes().size()) - 1);
        auto dup = g.add_node(last.op, last.inputs, last.attrs);
        ASSERT_TRUE(dup.ok());
        pool.push_back((*dup)[0]);
      }
    }
    for (int o = 0; o < 3; ++o) ASSERT_TRUE(g.add_output("out" + std::to_string(o), pool[pool.size() - 1 - o * 3]).ok());
    auto result = passes::run_pipeline(g);
    ASSERT_TRUE(result.ok()) << result.error().message;
    EXPECT_LE(result->graph.nodes().size(), g.nodes().size());
    testing::expect_bit_identical(g, result->graph, static_cast<uint32_t>(trial));
  }
}

}  // namespace
}  // namespace kiln
