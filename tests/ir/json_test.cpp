// Tests of the JSON form (ir/json.h): the golden printed form, lossless round trips, agreement with the text
// form, non-finite floats as strings, schema-driven attribute kinds and the optional fields.
// Malformed input is covered by tests/errors/parse_errors_test.cpp.
#include "ir/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph_equal.h"
#include "ir/text.h"

namespace kiln {
namespace {

using testing::expect_graphs_equal;

TensorType tt(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

ValueId node1(Graph& g, Op op, std::vector<ValueId> inputs, Attrs attrs, const std::string& name) {
  auto r = g.add_node(op, std::move(inputs), std::move(attrs), {name});
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? (*r)[0] : -1;
}

Graph small_graph() {
  Graph g;
  g.name = "small";
  const ValueId x = *g.add_input("x", tt(DType::f16, {2, 4}), Binding::per_call);
  const ValueId w = *g.add_input("w", tt(DType::f16, {4}), Binding::weight);
  const ValueId y = node1(g, Op::add, {x, w}, {}, "y");
  const ValueId z = node1(g, Op::gelu, {y}, {{"approximate", std::string("none")}}, "z");
  const ValueId f = node1(g, Op::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", 0.5}}, "half");
  EXPECT_TRUE(g.add_output("z", z).ok());
  EXPECT_TRUE(g.add_output("half", f).ok());
  return g;
}

const char kSmallJson[] =
    "{\n"
    " \"format\": \"kiln-graph\",\n"
    " \"version\": 1,\n"
    " \"name\": \"small\",\n"
    " \"inputs\": [\n"
    "  {\"name\":\"x\",\"dtype\":\"f16\",\"shape\":[2,4],\"binding\":\"per_call\"},\n"
    "  {\"name\":\"w\",\"dtype\":\"f16\",\"shape\":[4],\"binding\":\"weight\"}\n"
    " ],\n"
    " \"nodes\": [\n"
    "  {\"op\":\"add\",\"inputs\":[\"x\",\"w\"],\"outputs\":[{\"name\":\"y\",\"dtype\":\"f16\",\"shape\":[2,4]}]},\n"
    "  {\"op\":\"gelu\",\"inputs\":[\"y\"],\"outputs\":[{\"name\":\"z\",\"dtype\":\"f16\",\"shape\":[2,4]}],"
    "\"attrs\":{\"approximate\":\"none\"}},\n"
    "  {\"op\":\"full\",\"inputs\":[],\"outputs\":[{\"name\":\"half\",\"dtype\":\"f32\",\"shape\":[]}],"
    "\"attrs\":{\"shape\":[],\"value\":0.5}}\n"
    " ],\n"
    " \"outputs\": [\n"
    "  {\"name\":\"z\",\"value\":\"z\"},\n"
    "  {\"name\":\"half\",\"value\":\"half\"}\n"
    " ]\n"
    "}\n";

Graph parse_ok(std::string_view text) {
  auto r = parse_graph_json(text);
  EXPECT_TRUE(r.ok()) << r.error().message << "\nin:\n" << text;
  return r.ok() ? std::move(r).value() : Graph{};
}

void expect_json_round_trip(const Graph& g) {
  for (int indent : {1, 2, 0, -1}) {
    const std::string json = print_graph_json(g, indent);
    auto parsed = parse_graph_json(json);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\nin:\n" << json;
    expect_graphs_equal(g, *parsed);
    EXPECT_EQ(print_graph_json(*parsed, indent), json);
    // Both forms carry the same graph.
    EXPECT_EQ(print_graph_text(*parsed), print_graph_text(g));
  }
}

TEST(JsonPrint, GoldenForm) { EXPECT_EQ(print_graph_json(small_graph()), kSmallJson); }

TEST(JsonPrint, CompactIsOneLine) {
  const std::string json = print_graph_json(small_graph(), -1);
  EXPECT_EQ(json.find('\n'), json.size() - 1);
  EXPECT_EQ(json.rfind("{\"format\":\"kiln-graph\",\"version\":1,\"name\":\"small\",\"inputs\":[", 0), 0u);
}

TEST(JsonPrint, IndentWidth) {
  const std::string json = print_graph_json(small_graph(), 4);
  EXPECT_NE(json.find("\n    \"format\": \"kiln-graph\",\n"), std::string::npos) << json;
  EXPECT_NE(json.find("\n        {\"name\":\"x\""), std::string::npos) << json;
}

TEST(JsonRoundTrip, SmallIsLossless) {
  expect_json_round_trip(small_graph());
  expect_graphs_equal(small_graph(), parse_ok(kSmallJson));
}

TEST(JsonRoundTrip, EmptyGraph) {
  Graph g;
  expect_json_round_trip(g);
  EXPECT_NE(print_graph_json(g).find(" \"nodes\": [],\n"), std::string::npos);
}

// JSON keeps inputs and nodes apart; "after_nodes" records where an input was created among the nodes.
TEST(JsonRoundTrip, InterleavedInputsKeepValueIds) {
  Graph g;
  const ValueId a = *g.add_input("a", tt(DType::f32, {4}), Binding::per_call);
  const ValueId n = node1(g, Op::neg, {a}, {}, "n");
  const ValueId b = *g.add_input("b", tt(DType::f32, {4}), Binding::weight);
  const ValueId c = *g.add_input("c", tt(DType::f32, {4}), Binding::weight);
  const ValueId s = node1(g, Op::sub, {n, b}, {}, "s");
  const ValueId d = *g.add_input("d", tt(DType::f32, {}), Binding::per_step);
  const ValueId m = node1(g, Op::mul, {s, c}, {}, "m");
  const ValueId o = node1(g, Op::mul, {m, d}, {}, "o");
  ASSERT_TRUE(g.add_output("o", o).ok());
  const std::string json = print_graph_json(g);
  EXPECT_NE(json.find("\"name\":\"b\",\"dtype\":\"f32\",\"shape\":[4],\"binding\":\"weight\",\"after_nodes\":1"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"binding\":\"per_step\",\"after_nodes\":2}"), std::string::npos) << json;
  expect_json_round_trip(g);
}

TEST(JsonRoundTrip, TextAndJsonAgreeOnTheDocsExample) {
  auto g = parse_graph_text(
      "graph flux_block {\n"
      "  input %img: bf16[1,16,32] per_call\n"
      "  input %img_mod.weight: bf16[64,32] weight\n"
      "  input %img_mod.bias: bf16[64] weight\n"
      "  %y: bf16[1,16,64] = linear(%img, %img_mod.weight, %img_mod.bias)\n"
      "  %n: bf16[1,16,64] = layernorm(%y) {eps=1e-06}\n"
      "  %h0: bf16[1,16,32], %h1: bf16[1,16,32] = split(%n) {axis=-1, sizes=[32,32]}\n"
      "  %r: bf16[1,16,32] = add(%h0, %h1)\n"
      "  output img_out = %r\n"
      "}\n");
  ASSERT_TRUE(g.ok()) << g.error().message;
  expect_json_round_trip(*g);
  const std::string json = print_graph_json(*g);
  EXPECT_NE(json.find("\"attrs\":{\"eps\":1e-06}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"attrs\":{\"axis\":-1,\"sizes\":[32,32]}"), std::string::npos) << json;
}

TEST(JsonFloats, NonFiniteAreStringsAndAllRoundTripExactly) {
  const double values[] = {0.1,  1.0 / 3.0, 1e-6,     1e300,     std::numeric_limits<double>::denorm_min(),
                           -0.0, 1.0,       HUGE_VAL, -HUGE_VAL, std::nan("")};
  Graph g;
  int i = 0;
  for (double v : values) {
    node1(g, Op::full, {}, {{"shape", std::vector<int64_t>{1}}, {"value", v}}, "f" + std::to_string(i++));
  }
  expect_json_round_trip(g);
  const std::string json = print_graph_json(g);
  for (const char* spelled : {"\"value\":\"inf\"", "\"value\":\"-inf\"", "\"value\":\"nan\"", "\"value\":-0.0",
                              "\"value\":1.0}", "\"value\":0.1}"}) {
    EXPECT_NE(json.find(spelled), std::string::npos) << spelled << " in\n" << json;
  }
}

std::string one_node_json(const std::string& node, const std::string& inputs = "") {
  return "{\"format\":\"kiln-graph\",\"version\":1,\"inputs\":[" + inputs + "],\"nodes\":[" + node +
         "],\"outputs\":[]}";
}

// Kinds follow the op's schema: an integer for a float attribute is a float; "inf" is a float only where the
// schema asks for one.
TEST(JsonAttrs, CoercedToTheSchema) {
  const Graph g = parse_ok(
      one_node_json("{\"op\":\"full\",\"inputs\":[],\"outputs\":[{\"name\":\"f\",\"dtype\":\"f32\",\"shape\":[2]}],"
                    "\"attrs\":{\"shape\":[2],\"value\":3}},"
                    "{\"op\":\"full\",\"inputs\":[],\"outputs\":[{\"name\":\"i\",\"dtype\":\"f32\",\"shape\":[2]}],"
                    "\"attrs\":{\"shape\":[2],\"value\":\"-inf\"}}"));
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_TRUE(std::holds_alternative<double>(*g.nodes()[0].attrs.find("value")));
  EXPECT_EQ(g.nodes()[0].attrs.get_float("value", 0), 3.0);
  EXPECT_EQ(g.nodes()[1].attrs.get_float("value", 0), -HUGE_VAL);
  // A string attribute keeps the text "inf" as a string, which gelu then rejects by value.
  auto gelu = parse_graph_json(one_node_json(
      "{\"op\":\"gelu\",\"inputs\":[\"x\"],\"outputs\":[{\"name\":\"y\",\"dtype\":\"f32\",\"shape\":[2]}],"
      "\"attrs\":{\"approximate\":\"inf\"}}",
      "{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2],\"binding\":\"per_call\"}"));
  testing::expect_error(gelu, ErrorCode::invalid_argument, {"nodes[0]: node %y (gelu)", "\"inf\""});
}

TEST(JsonParse, OptionalFieldsAndAnyFieldOrder) {
  const Graph g = parse_ok(
      "{\"outputs\":[{\"value\":\"y\",\"name\":\"out\"}],"
      " \"nodes\":[{\"outputs\":[{\"shape\":[3],\"name\":\"y\",\"dtype\":\"f32\"}],\"inputs\":[\"x\"],\"op\":\"exp\"}],"
      " \"inputs\":[{\"binding\":\"per_call\",\"shape\":[3],\"dtype\":\"f32\",\"name\":\"x\"}],"
      " \"version\":1, \"format\":\"kiln-graph\"}");
  EXPECT_EQ(g.name, "graph");
  ASSERT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.nodes()[0].op, Op::exp);
  EXPECT_TRUE(g.nodes()[0].attrs.entries().empty());
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0].name, "out");
}

TEST(JsonParse, UnicodeGraphNameRoundTrips) {
  Graph g;
  g.name = "bloc \"\xc3\xa9\" \\ \x01";
  expect_json_round_trip(g);
  EXPECT_EQ(parse_ok("{\"format\":\"kiln-graph\",\"version\":1,\"name\":\"\\u00e9\",\"inputs\":[],\"nodes\":[],"
                     "\"outputs\":[]}")
                .name,
            "\xc3\xa9");
}

}  // namespace
}  // namespace kiln
