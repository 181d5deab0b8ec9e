// Early partial products: the golden rewrite of a GEMM over a concat whose pieces wait on different heavy work,
// the GEMMs that stay whole, a target without the residual epilogue, and FLUX's single block through the
// pipeline, where the pass runs only for plans of two lanes or more.
#include "passes/early_partials.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

// The largest |difference| between the two graphs' output `name` on the reference, over the largest |value|.
double relative_error(const Graph& before, const Graph& after, const std::string& name) {
  const auto inputs = testing::test_inputs(before, 7);
  auto a = ref::run_graph(before, inputs);
  auto b = ref::run_graph(after, inputs);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return 1;
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < a->at(name).numel(); ++i) {
    worst = std::max(worst, std::fabs(a->at(name).get(i) - b->at(name).get(i)));
    scale = std::max(scale, std::fabs(a->at(name).get(i)));
  }
  return worst / scale;
}

// FLUX's single block in miniature: %late waits on two GEMMs of its own, %early on one, and the output GEMM
// reads both through a concat along K. `pieces` is the concat's input list; `extra` more nodes.
Graph joined(const std::string& dtype, const std::string& pieces, const std::string& extra = "",
             const std::string& w2_binding = "weight") {
  const std::string t = dtype + "[1,6,";
  return testing::parse_or_die("graph g {\n"
                               "input %x: " + t + "8] per_call\n"
                               "input %wa: " + dtype + "[8,8] weight\n"
                               "input %wb: " + dtype + "[8,8] weight\n"
                               "input %wc: " + dtype + "[4,8] weight\n"
                               "input %w2: " + dtype + "[8,12] " + w2_binding + "\n"
                               "input %b2: " + dtype + "[8] weight\n"
                               "%a: " + t + "8] = linear(%x, %wa)\n"
                               "%late: " + t + "8] = linear(%a, %wb)\n"
                               "%c: " + t + "4] = linear(%x, %wc)\n"
                               "%early: " + t + "4] = gelu(%c) {approximate=\"tanh\"}\n"
                               "%cat: " + t + "12] = concat(" + pieces + ") {axis=2}\n"
                               "%y: " + t + "8] = linear(%cat, %w2, %b2)\n" + extra +
                               "output y = %y\n}");
}

TEST(PassEarlyPartials, TheEarlyPiecesShareRunsFirst) {
  const Graph g = joined("f32", "%late, %early");
  const passes::PassResult r = passes::split_early_partials(g);
  ASSERT_TRUE(r.report.changed);
  EXPECT_EQ(print_graph_text(r.graph), print_graph_text(testing::parse_or_die(R"(graph g {
      input %x: f32[1,6,8] per_call
      input %wa: f32[8,8] weight
      input %wb: f32[8,8] weight
      input %wc: f32[4,8] weight
      input %w2: f32[8,12] weight
      input %b2: f32[8] weight
      %a: f32[1,6,8] = linear(%x, %wa)
      %late: f32[1,6,8] = linear(%a, %wb)
      %c: f32[1,6,4] = linear(%x, %wc)
      %early: f32[1,6,4] = gelu(%c) {approximate="tanh"}
      %y.early.w: f32[8,4] = slice(%w2) {axis=1, start=8, end=12, step=1}
      %y.late.w: f32[8,8] = slice(%w2) {axis=1, start=0, end=8, step=1}
      %y.early: f32[1,6,8] = linear(%early, %y.early.w)
      %y: f32[1,6,8] = linear(%late, %y.late.w, %b2, %y.early) {residual=1}
      output y = %y
    })")));
  EXPECT_TRUE(verify_graph(r.graph).ok());
  EXPECT_EQ(r.report.found.at("linear over a concat: early partial product"), 1);
  ASSERT_EQ(r.report.notes.size(), 1u);
  EXPECT_NE(r.report.notes[0].find("late, waits alone on 1.536 KFLOP"), std::string::npos) << r.report.notes[0];
  // f32: the partial product's one extra rounding is far below the output's scale.
  EXPECT_LT(relative_error(g, r.graph, "y"), 1e-6);
  // Idempotent: the new GEMMs read no concat.
  EXPECT_FALSE(passes::split_early_partials(r.graph).report.changed);
}

// Pieces in any order, and early pieces that are not neighbours: one GEMM over both (a concat of the pieces and
// of their columns of w), the late piece's columns between theirs.
TEST(PassEarlyPartials, EarlyPiecesApartAreGatheredIntoOneGemm) {
  const std::string extra = "%cat2: bf16[1,6,16] = concat(%early, %late, %early2) {axis=2}\n"
                            "%y2: bf16[1,6,8] = linear(%cat2, %w3)\n";
  Graph g = testing::parse_or_die(R"(graph g {
      input %x: bf16[1,6,8] per_call
      input %wa: bf16[8,8] weight
      input %wb: bf16[8,8] weight
      input %wc: bf16[4,8] weight
      input %w3: bf16[8,16] weight
      %a: bf16[1,6,8] = linear(%x, %wa)
      %late: bf16[1,6,8] = linear(%a, %wb)
      %c: bf16[1,6,4] = linear(%x, %wc)
      %early: bf16[1,6,4] = gelu(%c) {approximate="tanh"}
      %early2: bf16[1,6,4] = neg(%c)
      )" + extra + "output y2 = %y2\n}");
  const passes::PassResult r = passes::split_early_partials(g);
  ASSERT_TRUE(r.report.changed);
  const std::string text = print_graph_text(r.graph);
  EXPECT_NE(text.find("%y2.early.x: bf16[1,6,8] = concat(%early, %early2) {axis=-1}"), std::string::npos) << text;
  EXPECT_NE(text.find("%y2.early.w.2: bf16[8,8] = concat(%y2.early.w, %y2.early.w.1) {axis=1}"), std::string::npos)
      << text;
  EXPECT_NE(text.find("slice(%w3) {axis=1, end=16, start=12, step=1}"), std::string::npos) << text;
  EXPECT_NE(text.find("%y2: bf16[1,6,8] = linear(%late, %y2.late.w, %y2.early) {residual=1}"), std::string::npos)
      << text;
  // bf16: one more rounding of the partial product, a few ulps of the output.
  EXPECT_LT(relative_error(g, r.graph, "y2"), 0.02);
}

TEST(PassEarlyPartials, StaysOneGemmWhereNoPieceIsEarly) {
  // Both pieces wait on the same heavy work (two halves of one GEMM's output).
  const std::string halves = R"(graph g {
      input %x: bf16[1,6,8] per_call
      input %wa: bf16[8,8] weight
      input %w2: bf16[8,8] weight
      %a: bf16[1,6,8] = linear(%x, %wa)
      %p: bf16[1,6,4], %q: bf16[1,6,4] = split(%a) {axis=2, sizes=[4,4]}
      %r: bf16[1,6,4] = neg(%q)
      %cat: bf16[1,6,8] = concat(%p, %r) {axis=2}
      %y: bf16[1,6,8] = linear(%cat, %w2)
      output y = %y
    })";
  EXPECT_FALSE(passes::split_early_partials(testing::parse_or_die(halves)).report.changed);
  // The concat read by something else too, the weight not bound at load time, and a concat along rows.
  EXPECT_FALSE(passes::split_early_partials(joined("bf16", "%late, %early", "%z: bf16[1,6,12] = neg(%cat)\n"))
                   .report.changed);
  EXPECT_FALSE(passes::split_early_partials(joined("bf16", "%late, %early", "", "per_call")).report.changed);
  const Graph rows = testing::parse_or_die(R"(graph g {
      input %x: bf16[1,6,8] per_call
      input %wa: bf16[8,8] weight
      input %w2: bf16[8,8] weight
      %a: bf16[1,6,8] = linear(%x, %wa)
      %cat: bf16[1,12,8] = concat(%a, %x) {axis=1}
      %y: bf16[1,12,8] = linear(%cat, %w2)
      output y = %y
    })");
  EXPECT_FALSE(passes::split_early_partials(rows).report.changed);
}

// A target without the residual epilogue: the late GEMM and a separate add.
TEST(PassEarlyPartials, ASeparateAddWhereTheTargetHasNoResidualEpilogue) {
  const Graph g = joined("bf16", "%late, %early");
  const passes::SupportsFn no_residual = [](Op op, std::span<const TensorType>, const Attrs& attrs) -> Status {
    if (op == Op::linear && attrs.get_int("residual", 0) != 0) return make_error(ErrorCode::unsupported, "no C");
    return ok_status();
  };
  const passes::PassResult r = passes::split_early_partials(g, no_residual);
  ASSERT_TRUE(r.report.changed);
  const std::string text = print_graph_text(r.graph);
  EXPECT_NE(text.find("%y.late: bf16[1,6,8] = linear(%late, %y.late.w, %b2)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("%y: bf16[1,6,8] = add(%y.late, %y.early)"), std::string::npos) << text;
  EXPECT_EQ(text.find("residual"), std::string::npos) << text;
  EXPECT_LT(relative_error(g, r.graph, "y"), 0.02);
}

// FLUX.1's single block: with two lanes linear2's MLP share (K = 12288) is its own GEMM and the attention share
// reads it as its residual; with one lane the pass does not run; the double block has no such GEMM. The whole
// pipeline's graph stays within bf16's few ulps of the model on the reference.
TEST(PassEarlyPartials, FluxSingleBlockOnTwoLanes) {
  auto report = [](const passes::PipelineResult& r) {
    for (const passes::PassReport& p : r.reports) {
      if (p.pass == "early-partials") return p;
    }
    return passes::PassReport{};
  };
  passes::PipelineOptions two;
  two.lanes = 2;
  auto single = models::build_zoo_model("flux1-single-block");
  ASSERT_TRUE(single.ok());
  auto one_lane = passes::run_pipeline(*single);
  auto two_lanes = passes::run_pipeline(*single, two);
  ASSERT_TRUE(one_lane.ok() && two_lanes.ok());
  EXPECT_TRUE(report(*one_lane).pass.empty());
  const passes::PassReport s = report(*two_lanes);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("node %linear2/linear (linear) starts on its early pieces: reshape K 3072 (late, waits "
                            "alone on 521.8 GFLOP), gelu K 12288 (early, waits alone on 347.9 GFLOP)"),
            std::string::npos)
      << s.notes[0];
  auto dbl = models::build_zoo_model("flux1-double-block");
  ASSERT_TRUE(dbl.ok());
  auto d = passes::run_pipeline(*dbl, two);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(report(*d).changed);

  auto tiny = models::build_zoo_model("flux1-single-block:tiny");
  ASSERT_TRUE(tiny.ok());
  auto optimized = passes::run_pipeline(*tiny, two);
  ASSERT_TRUE(optimized.ok()) << optimized.error().message;
  EXPECT_TRUE(report(*optimized).changed);
  EXPECT_LT(relative_error(*tiny, optimized->graph, "out"), 0.05);
}

}  // namespace
}  // namespace kiln
