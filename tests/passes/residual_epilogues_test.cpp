#include "passes/residual_epilogues.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/plan.h"
#include "ir/ops/op_util.h"
#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

// The pass's graph against the original on the reference: one rounding instead of three (bf16) stays within a
// few ulps of the output.
void expect_close_on_reference(const Graph& before, const Graph& after, const std::string& output, double tolerance) {
  const auto inputs = testing::test_inputs(before, 5);
  auto a = ref::run_graph(before, inputs);
  auto b = ref::run_graph(after, inputs);
  ASSERT_TRUE(a.ok() && b.ok());
  double worst = 0;
  for (int64_t i = 0; i < a->at(output).numel(); ++i) {
    worst = std::max(worst, std::fabs(a->at(output).get(i) - b->at(output).get(i)));
  }
  EXPECT_LE(worst, tolerance);
}

// FLUX's gated residual update after a GEMM: o = x + gate ⊙ (linear(a, w) + b).
constexpr const char* kGatedUpdate = R"(
      input %a: bf16[1,6,8] per_call
      input %w: bf16[4,8] weight
      input %b: bf16[4] weight
      input %x: bf16[1,6,4] per_call
      input %gate: bf16[1,1,4] per_call
      %y: bf16[1,6,4] = linear(%a, %w)
      %yb: bf16[1,6,4] = add(%y, %b)
      %g: bf16[1,6,4] = mul(%gate, %yb)
      %o: bf16[1,6,4] = add(%x, %g)
)";

TEST(PassResidualEpilogues, FluxGatedResidualBecomesTheGemmEpilogue) {
  Graph g = testing::parse_or_die("graph g {" + std::string(kGatedUpdate) + "output o = %o }");
  auto r = passes::fold_residual_epilogues(g);
  EXPECT_TRUE(r.report.changed);
  EXPECT_EQ(r.report.found.at("linear + bias ⊙ gate + residual epilogue"), 1);
  EXPECT_EQ(print_graph_text(r.graph), print_graph_text(testing::parse_or_die(R"(graph g {
      input %a: bf16[1,6,8] per_call
      input %w: bf16[4,8] weight
      input %b: bf16[4] weight
      input %x: bf16[1,6,4] per_call
      input %gate: bf16[1,1,4] per_call
      %o/gate: bf16[4] = reshape(%gate) {shape=[4]}
      %o/gated_bias: bf16[4] = mul(%o/gate, %b)
      %o/scale: f32[4] = cast(%o/gate) {to="f32"}
      %o: bf16[1,6,4] = linear(%a, %w, %o/gated_bias, %o/scale, %x) {residual=1, scale=1}
      output o = %o
    })")));
  EXPECT_TRUE(verify_graph(r.graph).ok());
  expect_close_on_reference(g, r.graph, "o", 0.1);
}

// A target without the per-feature scale (cuBLASLt on the H200 for bf16): the gated update stays as it was, the
// plain residual add still folds, and the pass says why it left the other.
TEST(PassResidualEpilogues, WritesOnlyFormsTheTargetRuns) {
  Graph g = testing::parse_or_die("graph g {" + std::string(kGatedUpdate) + R"(
      %z: bf16[1,6,4] = linear(%a, %w)
      %p: bf16[1,6,4] = add(%o, %z)
      output p = %p
    })");
  int asked = 0;
  const passes::SupportsFn no_scale = [&](Op op, std::span<const TensorType> inputs, const Attrs& attrs) -> Status {
    ++asked;
    EXPECT_EQ(op, Op::linear);
    EXPECT_NE(ops::linear_inputs(inputs.size(), attrs).bias, -2) << inputs.size() << " inputs fit no layout";
    if (attrs.get_int("scale", 0) != 0) return make_error(ErrorCode::unsupported, "no per-feature scale here");
    return ok_status();
  };
  auto r = passes::fold_residual_epilogues(g, no_scale);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(r.report.found.count("linear + bias ⊙ gate + residual epilogue"), 0u);
  EXPECT_EQ(r.report.found.at("linear + residual epilogue"), 1);
  EXPECT_EQ(r.report.found.at("left: the backend has no such epilogue"), 1);
  ASSERT_FALSE(r.report.notes.empty());
  EXPECT_NE(r.report.notes[0].find("no per-feature scale here"), std::string::npos) << r.report.notes[0];
  int gated = 0;
  for (const Node& n : r.graph.nodes()) gated += n.op == Op::linear && n.attrs.get_int("scale", 0) != 0;
  EXPECT_EQ(gated, 0);
  EXPECT_TRUE(verify_graph(r.graph).ok());
  expect_close_on_reference(g, r.graph, "p", 0.1);
}

TEST(PassResidualEpilogues, PlainResidualAndLoneGateFoldToo) {
  Graph plain = testing::parse_or_die(R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %x: f32[3,4] per_call
      %y: f32[3,4] = linear(%a, %w)
      %o: f32[3,4] = add(%y, %x)
      output o = %o
    })");
  auto folded = passes::fold_residual_epilogues(plain);
  EXPECT_EQ(folded.report.found.at("linear + residual epilogue"), 1);
  EXPECT_EQ(print_graph_text(folded.graph), print_graph_text(testing::parse_or_die(R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %x: f32[3,4] per_call
      %o: f32[3,4] = linear(%a, %w, %x) {residual=1}
      output o = %o
    })")));
  expect_close_on_reference(plain, folded.graph, "o", 1e-5);
  Graph gated = testing::parse_or_die(R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %s: f32[4] per_call
      %y: f32[3,4] = linear(%a, %w)
      %o: f32[3,4] = mul(%y, %s)
      output o = %o
    })");
  auto r = passes::fold_residual_epilogues(gated);
  EXPECT_EQ(r.report.found.at("linear ⊙ gate epilogue"), 1);
  EXPECT_EQ(r.graph.nodes().size(), 2u);  // the f32 gate's cast and the GEMM
  expect_close_on_reference(gated, r.graph, "o", 1e-5);
}

TEST(PassResidualEpilogues, ChainsThatCannotFoldStay) {
  for (const char* text : {
           // the GEMM's output has a second reader
           R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %x: f32[3,4] per_call
      %y: f32[3,4] = linear(%a, %w)
      %o: f32[3,4] = add(%y, %x)
      %p: f32[3,4] = mul(%y, %x)
      output o = %o
      output p = %p
    })",
           // a per-token gate is not one value per feature
           R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %s: f32[3,4] per_call
      %y: f32[3,4] = linear(%a, %w)
      %o: f32[3,4] = mul(%y, %s)
      output o = %o
    })",
           // the residual broadcasts: not the output's type
           R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %x: f32[4] per_call
      %y: f32[3,4] = linear(%a, %w)
      %o: f32[3,4] = add(%y, %x)
      %p: f32[3,4] = add(%o, %o)
      output p = %p
    })",
           // the GEMM already has an activation
           R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %x: f32[3,4] per_call
      %y: f32[3,4] = linear(%a, %w) {activation="gelu_tanh"}
      %o: f32[3,4] = add(%y, %x)
      output o = %o
    })"}) {
    EXPECT_FALSE(passes::fold_residual_epilogues(testing::parse_or_die(text)).report.changed) << text;
  }
}

// Where one chain's residual is another's gated product (o = s ⊙ A + t ⊙ B), the first chain folds and takes the
// second's product as its residual.
TEST(PassResidualEpilogues, MeetingChainsFoldOnce) {
  Graph g = testing::parse_or_die(R"(graph g {
      input %a: f32[3,8] per_call
      input %w: f32[4,8] weight
      input %v: f32[4,8] weight
      input %s: f32[4] per_call
      input %t: f32[4] per_call
      %y: f32[3,4] = linear(%a, %w)
      %z: f32[3,4] = linear(%a, %v)
      %ys: f32[3,4] = mul(%y, %s)
      %zt: f32[3,4] = mul(%z, %t)
      %o: f32[3,4] = add(%ys, %zt)
      output o = %o
    })");
  auto r = passes::fold_residual_epilogues(g);
  EXPECT_EQ(r.report.found.at("linear ⊙ gate + residual epilogue"), 1);
  EXPECT_TRUE(verify_graph(r.graph).ok());
  expect_close_on_reference(g, r.graph, "o", 1e-5);
}

// The whole FLUX double block: the four gated updates (image and text, after attention and after the MLP) fold,
// the memory-bound kernels move fewer bytes, and the CPU backend's plan of the optimized graph matches the
// reference executor on the unoptimized one.
TEST(PassResidualEpilogues, FluxBlockFoldsItsFourUpdatesAndStillMatches) {
  auto g = models::build_zoo_model("flux1-double-block:tiny");
  ASSERT_TRUE(g.ok());
  auto opt = passes::run_pipeline(*g);
  ASSERT_TRUE(opt.ok()) << opt.error().message;
  int folded = 0;
  for (const Node& n : opt->graph.nodes()) folded += n.op == Op::linear && n.attrs.get_int("residual", 0) == 1;
  EXPECT_EQ(folded, 4);
  passes::PipelineOptions without;
  without.disabled = {"residual-epilogues"};
  auto unfolded = passes::run_pipeline(*g, without);
  ASSERT_TRUE(unfolded.ok());
  EXPECT_LT(passes::summarize_memory_bound_kernels(*g, opt->graph).bytes_after,
            passes::summarize_memory_bound_kernels(*g, unfolded->graph).bytes_after);

  auto backend = backend::make_cpu_backend();
  auto plan = backend::Plan::build(*backend, opt->graph);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const auto inputs = testing::test_inputs(*g, 9);
  ASSERT_TRUE((*plan)->set_inputs(inputs).ok());
  ASSERT_TRUE((*plan)->execute().ok());
  auto outputs = (*plan)->outputs();
  ASSERT_TRUE(outputs.ok());
  auto want = ref::run_graph(*g, inputs);
  ASSERT_TRUE(want.ok());
  for (const GraphOutput& o : g->outputs()) {
    const Tensor& got = outputs->at(o.name);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      worst = std::max(worst, std::fabs(got.get(i) - want->at(o.name).get(i)));
      scale = std::max(scale, std::fabs(want->at(o.name).get(i)));
    }
    EXPECT_LE(worst, 0.05 * scale) << o.name;  // bf16 through a whole block: a few ulps of the largest value
  }
}

}  // namespace
}  // namespace kiln
