#include "passes/fold_epilogues.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

// x, w and b, then `body`: the graphs below are linear(x, w) + b and what follows it.
Graph with_linear_inputs(const std::string& body) {
  return testing::parse_or_die(R"(graph g {
      input %x: f32[3,4] per_call
      input %w: f32[5,4] weight
      input %b: f32[5] weight
)" + body + "}");
}

const char* kLoneBiasGelu = R"(
      %y: f32[3,5] = linear(%x, %w)
      %z: f32[3,5] = add(%y, %b) @g0
      %a: f32[3,5] = gelu(%z) {approximate="tanh"} @g0
      output a = %a
)";

// f32 throughout: one rounding instead of three stays within a few ulps on the reference.
void expect_same_values(const Graph& before_fold, const Graph& after_fold, std::initializer_list<const char*> outputs,
                        uint32_t seed) {
  const auto inputs = testing::test_inputs(before_fold, seed);
  auto before = ref::run_graph(before_fold, inputs);
  auto after = ref::run_graph(after_fold, inputs);
  ASSERT_TRUE(before.ok() && after.ok());
  for (const char* out : outputs) {
    for (int64_t i = 0; i < before->at(out).numel(); ++i) EXPECT_NEAR(before->at(out).get(i), after->at(out).get(i), 1e-6) << out;
  }
}

TEST(PassFoldEpilogues, LoneBiasAndGeluGoBackToTheGemm) {
  const Graph g = with_linear_inputs(kLoneBiasGelu);
  auto r = passes::fold_gemm_epilogues(g);
  EXPECT_TRUE(r.report.changed);
  EXPECT_EQ(print_graph_text(r.graph), print_graph_text(with_linear_inputs(R"(
      %a: f32[3,5] = linear(%x, %w, %b) {activation="gelu_tanh"}
      output a = %a
)")));
  expect_same_values(g, r.graph, {"a"}, 4);
}

TEST(PassFoldEpilogues, BiasInsideALargerGroupStays) {
  const std::string text = R"(graph g {
      input %x: f32[3,4] per_call
      input %w: f32[5,4] weight
      input %b: f32[5] weight
      input %r: f32[3,5] per_call
      %y: f32[3,5] = linear(%x, %w)
      %z: f32[3,5] = add(%y, %b) @g0
      %s: f32[3,5] = add(%z, %r) @g0
      output s = %s
    })";
  EXPECT_FALSE(passes::fold_gemm_epilogues(testing::parse_or_die(text)).report.changed);
}

// A GELU leaves a larger group too (the FP8 MLP's GELU + amax): the group keeps the rest and reads the GEMM's
// output; the reference gives the same values within the rounding the fold skips.
TEST(PassFoldEpilogues, GeluLeavesALargerGroup) {
  const std::string amax = R"(
      %m: f32[3,1] = reduce_amax(%a) {axes=[1], keepdims=1} @g0
      output m = %m
)";
  const Graph g = with_linear_inputs(kLoneBiasGelu + amax);
  auto r = passes::fold_gemm_epilogues(g);
  ASSERT_TRUE(r.report.changed);
  EXPECT_EQ(print_graph_text(r.graph), print_graph_text(with_linear_inputs(R"(
      %a: f32[3,5] = linear(%x, %w, %b) {activation="gelu_tanh"}
      output a = %a
)" + amax)));
  expect_same_values(g, r.graph, {"a", "m"}, 5);
}

// Only where the backend offers the epilogue: a refusal keeps the add and GELU, and the report says why.
TEST(PassFoldEpilogues, KeptWhereTheBackendRefusesTheEpilogue) {
  const Graph g = with_linear_inputs(kLoneBiasGelu);
  std::vector<std::string> asked;
  const passes::SupportsFn no_gelu = [&](Op op, std::span<const TensorType> inputs, const Attrs& attrs) -> Status {
    asked.push_back(fmt::format("{} {} inputs {}", op_name(op), inputs.size(), attrs.get_string("activation", "none")));
    if (attrs.get_string("activation", "none") != "none") return make_error(ErrorCode::unsupported, "no GELU epilogue here");
    return ok_status();
  };
  auto r = passes::fold_gemm_epilogues(g, no_gelu);
  EXPECT_FALSE(r.report.changed);
  EXPECT_EQ(print_graph_text(r.graph), print_graph_text(g));
  EXPECT_EQ(asked, std::vector<std::string>{"linear 3 inputs gelu_tanh"});
  ASSERT_EQ(r.report.notes.size(), 1u);
  EXPECT_NE(r.report.notes[0].find("no GELU epilogue here"), std::string::npos) << r.report.notes[0];
}

TEST(PassFoldEpilogues, FluxBlockKernelCountAndBytesDrop) {
  auto g = models::build_zoo_model("flux1-double-block");
  ASSERT_TRUE(g.ok());
  auto opt = passes::run_pipeline(*g);
  ASSERT_TRUE(opt.ok()) << opt.error().message;
  int epilogues = 0;
  for (const Node& n : opt->graph.nodes()) epilogues += n.attrs.get_string("activation", "none") == "gelu_tanh";
  EXPECT_EQ(epilogues, 2);  // the two MLP up-projections take bias + GELU
  const passes::KernelSummary k = passes::summarize_memory_bound_kernels(*g, opt->graph);
  EXPECT_LT(k.kernels_after * 2, k.kernels_before);
  EXPECT_LT(k.bytes_after, 0.6 * k.bytes_before);
}

}  // namespace
}  // namespace kiln
