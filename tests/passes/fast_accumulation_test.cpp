// FP8 fast accumulation: every scaled_linear marked (a permission the reference ignores, so outputs are
// bit-identical), GEMMs already marked left alone, a backend that refuses the mark keeps the GEMM exact with a
// note, and a bad value of the attribute is an error naming it.
#include "passes/fast_accumulation.h"

#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

constexpr const char* kTwoGemms = R"(graph g {
    input %xq: f8e4m3[2,256] per_call
    input %xs: f32[] per_call
    input %wq: f8e4m3[128,256] weight
    input %ws: f32[] weight
    input %b: bf16[128] weight
    input %x: bf16[2,256] per_call
    input %w: bf16[128,256] weight
    %y: bf16[2,128] = scaled_linear(%xq, %xs, %wq, %ws, %b) {out_dtype="bf16"}
    %z: f32[2,128] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="f32", accumulation="exact"}
    %l: bf16[2,128] = linear(%x, %w)
    output y = %y
    output z = %z
    output l = %l
  })";

passes::PassResult mark(const Graph& g) { return passes::mark_fast_accumulation(g, {}); }

TEST(PassFastAccumulation, MarksUnmarkedScaledLinearsOnly) {
  const passes::PassReport r = testing::expect_golden(mark, kTwoGemms, R"(graph g {
      input %xq: f8e4m3[2,256] per_call
      input %xs: f32[] per_call
      input %wq: f8e4m3[128,256] weight
      input %ws: f32[] weight
      input %b: bf16[128] weight
      input %x: bf16[2,256] per_call
      input %w: bf16[128,256] weight
      %y: bf16[2,128] = scaled_linear(%xq, %xs, %wq, %ws, %b) {accumulation="fast", out_dtype="bf16"}
      %z: f32[2,128] = scaled_linear(%xq, %xs, %wq, %ws) {accumulation="exact", out_dtype="f32"}
      %l: bf16[2,128] = linear(%x, %w)
      output y = %y
      output z = %z
      output l = %l
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("scaled_linear"), 1);
  const Graph once = mark(testing::parse_or_die(kTwoGemms)).graph;
  const passes::PassResult twice = mark(once);
  EXPECT_FALSE(twice.report.changed);
  EXPECT_EQ(print_graph_text(twice.graph), print_graph_text(once));
}

TEST(PassFastAccumulation, ABackendThatRefusesKeepsTheGemmExact) {
  const Graph g = testing::parse_or_die(kTwoGemms);
  const passes::SupportsFn refuse = [](Op, std::span<const TensorType>, const Attrs& attrs) -> Status {
    if (attrs.get_string("accumulation", "exact") == "fast") return make_error(ErrorCode::unsupported, "no fast FP8 accumulation here");
    return ok_status();
  };
  const passes::PassResult r = passes::mark_fast_accumulation(g, refuse);
  EXPECT_FALSE(r.report.changed);
  EXPECT_EQ(print_graph_text(r.graph), print_graph_text(g));
  ASSERT_EQ(r.report.notes.size(), 1u);
  EXPECT_NE(r.report.notes[0].find("no fast FP8 accumulation here"), std::string::npos) << r.report.notes[0];
}

TEST(PassFastAccumulation, AnUnknownAccumulationIsAnErrorNamingIt) {
  std::string text = kTwoGemms;
  text.replace(text.find("accumulation=\"exact\""), 20, "accumulation=\"loose\"");
  auto g = parse_graph_text(text);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("attribute 'accumulation' of scaled_linear must be \"exact\" or \"fast\", got \"loose\""),
            std::string::npos)
      << g.error().message;
}

}  // namespace
}  // namespace kiln
