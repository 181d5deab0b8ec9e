// Every zoo model, at its real size and its tiny size (and the FP8 variants), survives text and JSON round
// trips without loss: the re-parsed graph prints identically, has the same inputs, bindings and outputs, and
// (tiny sizes) computes bit-identical outputs on the reference executor.
#include <gtest/gtest.h>

#include "ir/json.h"
#include "ir/text.h"
#include "models/weights.h"
#include "models/zoo.h"
#include "ref/executor.h"

namespace kiln {
namespace {

std::vector<std::string> specs() {
  std::vector<std::string> out;
  for (const models::ZooEntry& e : models::zoo_models()) {
    out.push_back(e.name);
    out.push_back(e.name + ":tiny");
    out.push_back(e.name + ":tiny,dtype=fp8,fp8_scaling=block");
  }
  return out;
}

void expect_same_interface(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.inputs().size(), b.inputs().size());
  for (size_t i = 0; i < a.inputs().size(); ++i) {
    EXPECT_EQ(a.value(a.inputs()[i].value).name, b.value(b.inputs()[i].value).name);
    EXPECT_EQ(a.value(a.inputs()[i].value).type, b.value(b.inputs()[i].value).type);
    EXPECT_EQ(a.inputs()[i].binding, b.inputs()[i].binding);
  }
  ASSERT_EQ(a.outputs().size(), b.outputs().size());
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    EXPECT_EQ(a.outputs()[i].name, b.outputs()[i].name);
    EXPECT_EQ(a.value(a.outputs()[i].value).name, b.value(b.outputs()[i].value).name);
  }
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    EXPECT_EQ(a.nodes()[i].op, b.nodes()[i].op);
    EXPECT_EQ(a.nodes()[i].attrs, b.nodes()[i].attrs) << a.node_label(static_cast<NodeId>(i));
  }
}

TEST(ZooRoundTrip, TextAndJsonAreLossless) {
  for (const std::string& spec : specs()) {
    SCOPED_TRACE(spec);
    auto built = models::build_zoo_model(spec);
    ASSERT_TRUE(built.ok()) << built.error().message;
    const Graph& g = *built;
    const std::string text = print_graph_text(g);
    auto from_text = parse_graph_text(text, spec);
    ASSERT_TRUE(from_text.ok()) << from_text.error().message;
    EXPECT_EQ(print_graph_text(*from_text), text);
    expect_same_interface(g, *from_text);

    const std::string json = print_graph_json(g);
    auto from_json = parse_graph_json(json, spec);
    ASSERT_TRUE(from_json.ok()) << from_json.error().message;
    EXPECT_EQ(print_graph_json(*from_json), json);
    EXPECT_EQ(print_graph_text(*from_json), text);  // the two forms carry the same graph
    expect_same_interface(g, *from_json);
  }
}

TEST(ZooRoundTrip, ReparsedTinyModelsComputeTheSameBits) {
  for (const models::ZooEntry& e : models::zoo_models()) {
    const std::string spec = e.name + ":tiny";
    SCOPED_TRACE(spec);
    auto g = models::build_zoo_model(spec);
    ASSERT_TRUE(g.ok()) << g.error().message;
    auto back = parse_graph_json(print_graph_json(*g), spec);
    ASSERT_TRUE(back.ok()) << back.error().message;
    const auto inputs = models::random_inputs(*g, 11);
    auto a = ref::run_graph(*g, inputs);
    auto b = ref::run_graph(*back, inputs);
    ASSERT_TRUE(a.ok()) << a.error().message;
    ASSERT_TRUE(b.ok()) << b.error().message;
    for (const auto& [name, t] : *a) EXPECT_TRUE(t.bitwise_equal(b->at(name))) << name;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(GroupAnnotation, SurvivesTextAndJson) {
  auto g = parse_graph_text(R"(graph g {
      input %x: f32[2,3] per_call
      %a: f32[2,3] = exp(%x) @g0
      %b: f32[2,3] = tanh(%a) {} @g0
      %c: f32[2,3] = neg(%b) @g7
      output out = %c
    })");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->node(0).group, 0);
  EXPECT_EQ(g->node(2).group, 7);
  const std::string text = print_graph_text(*g);
  EXPECT_NE(text.find("neg(%b) @g7"), std::string::npos);
  auto back = parse_graph_json(print_graph_json(*g));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(print_graph_text(*back), text);
  EXPECT_FALSE(parse_graph_text("graph g { input %x: f32[2] per_call %a: f32[2] = exp(%x) @x1 output o = %a }").ok());
  EXPECT_FALSE(parse_graph_text("graph g { input %x: f32[2] per_call %a: f32[2] = exp(%x) @g-1 output o = %a }").ok());
}

}  // namespace
}  // namespace kiln
