// Concat piece joining: the text and image stream's q/k RMSNorm+RoPE of a FLUX block become one kernel over
// the joint sequence each, computing the same bits on the CPU backend as the per-stream kernels did; pieces
// that are not the same kernel stay apart.
#include "passes/join_concat_pieces.h"

#include <gtest/gtest.h>

#include "../backend/backend_test_util.h"
#include "kernel/kernel_ir.h"
#include "models/weights.h"
#include "pass_test_util.h"
#include "models/zoo.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

TEST(PassJoinConcatPieces, FluxQkNormsBecomeOneKernelOverTheJointSequence) {
  auto model = models::build_zoo_model("flux1-double-block:tiny");
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto apart = passes::run_pipeline(*model, testing::pipeline_without({"join-concat-pieces"}));
  auto joined = passes::run_pipeline(*model);
  ASSERT_TRUE(apart.ok() && joined.ok());
  const passes::PassReport* report = nullptr;
  for (const passes::PassReport& r : joined->reports) {
    if (r.pass == "join-concat-pieces") report = &r;
  }
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->found.at("concat of 2 pieces joined into one kernel"), 2) << ::testing::PrintToString(report->notes);
  // Four per-stream norm kernels and two concat copies are two kernels.
  EXPECT_EQ(passes::collect_fused_groups(apart->graph).size() - passes::collect_fused_groups(joined->graph).size(), 4u);
  // Each joined kernel holds the concat and both streams' norms (reductions) and lowers as one kernel.
  int joint = 0;
  for (const passes::FusedGroup& g : passes::collect_fused_groups(joined->graph)) {
    int concats = 0, reductions = 0;
    for (NodeId m : g.members) {
      concats += joined->graph.node(m).op == Op::concat;
      reductions += joined->graph.node(m).op == Op::reduce_mean;
    }
    if (concats == 0 || reductions < 2) continue;
    ++joint;
    EXPECT_TRUE(kernel::lower_nodes(joined->graph, g.members, "k").ok());
  }
  EXPECT_EQ(joint, 2);
  // The same arithmetic per element: the CPU backend's outputs are bit-identical either way.
  backend::Backend& cpu = testing::cpu_backend();
  auto a = backend::Plan::build(cpu, apart->graph);
  auto b = backend::Plan::build(cpu, joined->graph);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto inputs = models::random_inputs(*model, 5);
  auto x = (*a)->run(inputs);
  auto y = (*b)->run(inputs);
  ASSERT_TRUE(x.ok() && y.ok());
  for (const auto& [name, t] : *x) EXPECT_TRUE(t.bitwise_equal(y->at(name))) << name;
}

// concat(silu(layernorm(a)), silu(layernorm(b))) along the rows joins into one kernel (the row shapes differ,
// so without the join each piece's reduction is its own kernel); with exp for the second piece's silu the pieces
// are different kernels and stay apart. The plan matches the reference either way.
TEST(PassJoinConcatPieces, OnlyTheSameKernelJoins) {
  for (const bool same : {true, false}) {
    Graph g;
    const ValueId a = *g.add_input("a", {DType::bf16, {2, 8, 128}}, Binding::per_call);
    const ValueId b = *g.add_input("b", {DType::bf16, {2, 24, 128}}, Binding::per_call);
    const ValueId na = (*g.add_node(Op::layernorm, {a}, {{"eps", 1e-6}}, {"na"}))[0];
    const ValueId fa = (*g.add_node(Op::silu, {na}, {}, {"fa"}))[0];
    const ValueId nb = (*g.add_node(Op::layernorm, {b}, {{"eps", 1e-6}}, {"nb"}))[0];
    const ValueId fb = (*g.add_node(same ? Op::silu : Op::exp, {nb}, {}, {"fb"}))[0];
    const ValueId c = (*g.add_node(Op::concat, {fa, fb}, {{"axis", int64_t{1}}}, {"c"}))[0];
    ASSERT_TRUE(g.add_output("c", c).ok());
    auto r = passes::run_pipeline(g);
    ASSERT_TRUE(r.ok()) << r.error().message;
    int joins = 0;
    for (const passes::PassReport& rep : r->reports) {
      if (rep.pass == "join-concat-pieces") joins = static_cast<int>(rep.found.size());
    }
    EXPECT_EQ(joins, same ? 1 : 0) << same;
    EXPECT_EQ(passes::collect_fused_groups(r->graph).size(), same ? 1u : 3u) << same;
    const std::string failure = testing::check_plan_on(testing::cpu_backend(), r->graph, g, false, 128);
    EXPECT_EQ(failure, "") << same;
  }
}

}  // namespace
}  // namespace kiln
