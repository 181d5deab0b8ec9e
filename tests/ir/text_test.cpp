// Tests of the text form (ir/text.h): the golden printed form, lossless round trips (value ids, types,
// attributes, bindings, outputs, floats bit for bit), the accepted layout variations and load_graph_file.
// Malformed input is covered by tests/errors/parse_errors_test.cpp.
#include "ir/text.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "graph_equal.h"
#include "ir/json.h"
#include "ir/serial_util.h"

namespace kiln {
namespace {

using testing::expect_graphs_equal;

TensorType tt(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

ValueId node1(Graph& g, Op op, std::vector<ValueId> inputs, Attrs attrs, const std::string& name) {
  auto r = g.add_node(op, std::move(inputs), std::move(attrs), {name});
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? (*r)[0] : -1;
}

// Every binding, a scalar, broadcasting, string attributes, a dotted name and two outputs.
Graph sample_graph() {
  Graph g;
  g.name = "block";
  const ValueId x = *g.add_input("x", tt(DType::bf16, {2, 8}), Binding::per_call);
  const ValueId w = *g.add_input("w.weight", tt(DType::bf16, {8}), Binding::weight);
  const ValueId t = *g.add_input("t", tt(DType::f32, {}), Binding::per_step);
  const ValueId y = node1(g, Op::mul, {x, w}, {}, "y");
  const ValueId gl = node1(g, Op::gelu, {y}, {{"approximate", std::string("tanh")}}, "g");
  const ValueId s = node1(g, Op::swiglu, {gl}, {}, "s");
  const ValueId c = node1(g, Op::cast, {s}, {{"to", std::string("f32")}}, "c");
  const ValueId out = node1(g, Op::add, {c, t}, {}, "out");
  EXPECT_TRUE(g.add_output("out", out).ok());
  EXPECT_TRUE(g.add_output("hidden", y).ok());
  return g;
}

const char kSampleText[] =
    "graph block {\n"
    "  input %x: bf16[2,8] per_call\n"
    "  input %w.weight: bf16[8] weight\n"
    "  input %t: f32[] per_step\n"
    "  %y: bf16[2,8] = mul(%x, %w.weight)\n"
    "  %g: bf16[2,8] = gelu(%y) {approximate=\"tanh\"}\n"
    "  %s: bf16[2,4] = swiglu(%g)\n"
    "  %c: f32[2,4] = cast(%s) {to=\"f32\"}\n"
    "  %out: f32[2,4] = add(%c, %t)\n"
    "  output out = %out\n"
    "  output hidden = %y\n"
    "}\n";

Graph parse_ok(std::string_view text) {
  auto r = parse_graph_text(text);
  EXPECT_TRUE(r.ok()) << r.error().message << "\nin:\n" << text;
  return r.ok() ? std::move(r).value() : Graph{};
}

// parse(print(g)) equals g and prints the same bytes.
void expect_text_round_trip(const Graph& g) {
  const std::string text = print_graph_text(g);
  auto parsed = parse_graph_text(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\nin:\n" << text;
  expect_graphs_equal(g, *parsed);
  EXPECT_EQ(print_graph_text(*parsed), text);
  EXPECT_TRUE(verify_graph(*parsed).ok());
}

TEST(TextPrint, GoldenForm) { EXPECT_EQ(print_graph_text(sample_graph()), kSampleText); }

TEST(TextPrint, IsStable) {
  const Graph g = sample_graph();
  EXPECT_EQ(print_graph_text(g), print_graph_text(g));
}

TEST(TextRoundTrip, SampleIsLossless) {
  expect_text_round_trip(sample_graph());
  expect_graphs_equal(sample_graph(), parse_ok(kSampleText));
}

TEST(TextRoundTrip, EmptyGraph) {
  Graph g;
  expect_text_round_trip(g);
  EXPECT_EQ(print_graph_text(g), "graph graph {\n}\n");
}

// An input added after a node is printed after it, so value ids survive the round trip.
TEST(TextRoundTrip, InterleavedInputsKeepValueIds) {
  Graph g;
  const ValueId a = *g.add_input("a", tt(DType::f32, {4}), Binding::per_call);
  const ValueId n = node1(g, Op::neg, {a}, {}, "n");
  const ValueId b = *g.add_input("b", tt(DType::f32, {4}), Binding::weight);
  const ValueId s = node1(g, Op::sub, {n, b}, {}, "s");
  ASSERT_TRUE(g.add_output("s", s).ok());
  const std::string text = print_graph_text(g);
  EXPECT_LT(text.find("%n: f32[4] = neg"), text.find("input %b"));
  expect_text_round_trip(g);
  EXPECT_EQ(parse_ok(text).find_value("b"), b);
}

TEST(TextParse, AcceptsCommentsAndFreeLayout) {
  const Graph g = parse_ok(
      "# a leading comment\n"
      "graph   block{   # after the name\n"
      "input %x : bf16[ 2 , 8 ]per_call input %w.weight:bf16[8] weight\n"
      "\tinput %t: f32[] per_step\r\n"
      "  %y: bf16[2,8] = mul( %x ,%w.weight )\n"
      "  %g: bf16[2,8]=gelu(%y){ approximate = \"tanh\" }  # trailing comment\n"
      "  %s: bf16[2,4] = swiglu(%g) {}\n"
      "  %c: f32[2,4] = cast(%s) {to=\"f32\"}\n"
      "  %out: f32[2,4] = add(%c, %t)\n"
      "  output out=%out\n"
      "  output hidden = %y}\n"
      "# done\n");
  expect_graphs_equal(sample_graph(), g);
}

// Names may contain ':' (ONNX names do); a definition's name ends before the ':' that precedes its type.
TEST(TextParse, ColonsInNames) {
  Graph g;
  const ValueId x = *g.add_input("onnx::Mul_1", tt(DType::f32, {3}), Binding::per_call);
  const ValueId y = node1(g, Op::exp, {x}, {}, "a:");
  ASSERT_TRUE(g.add_output("out:0", y).ok());
  const std::string text = print_graph_text(g);
  EXPECT_NE(text.find("input %onnx::Mul_1: f32[3] per_call"), std::string::npos) << text;
  EXPECT_NE(text.find("%a:: f32[3] = exp(%onnx::Mul_1)"), std::string::npos) << text;
  expect_text_round_trip(g);
}

TEST(TextParse, GraphNamesNeedingQuotes) {
  for (const char* name : {"my block", "", "quote\" back\\slash\ttab\nnewline\x01\x7f", "caf\xc3\xa9"}) {
    Graph g;
    g.name = name;
    const ValueId x = *g.add_input("x", tt(DType::f32, {1}), Binding::per_call);
    ASSERT_TRUE(g.add_output("x", x).ok());
    const std::string text = print_graph_text(g);
    EXPECT_EQ(text.find('\n'), text.find(" {\n") + 2) << "the name stays on one line: " << text;
    expect_text_round_trip(g);
  }
  EXPECT_EQ(print_graph_text([] {
              Graph g;
              g.name = "a b";
              return g;
            }()),
            "graph \"a b\" {\n}\n");
}

// Attributes take the kind the op's schema declares: "eps=1" is a float, "value=2" for full too.
TEST(TextParse, CoercesAttributeKindsToTheSchema) {
  const Graph g = parse_ok(
      "graph g {\n"
      "  input %x: f32[2,4] per_call\n"
      "  %n: f32[2,4] = layernorm(%x) {eps=1}\n"
      "  %f: f32[2,4] = full() {shape=[2,4], value=2}\n"
      "  %z: f32[] = full() {shape=[], value=-3}\n"
      "  output n = %n\n"
      "}\n");
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_TRUE(std::holds_alternative<double>(*g.nodes()[0].attrs.find("eps")));
  EXPECT_EQ(std::get<double>(*g.nodes()[0].attrs.find("eps")), 1.0);
  EXPECT_EQ(std::get<double>(*g.nodes()[1].attrs.find("value")), 2.0);
  EXPECT_EQ(g.nodes()[2].attrs.get_ints("shape"), Shape{});
  EXPECT_EQ(g.value(g.nodes()[2].outputs[0]).type.shape, Shape{});
  // Printed back as floats.
  const std::string text = print_graph_text(g);
  EXPECT_NE(text.find("{eps=1.0}"), std::string::npos) << text;
  EXPECT_NE(text.find("{shape=[2,4], value=2.0}"), std::string::npos) << text;
  EXPECT_NE(text.find("{shape=[], value=-3.0}"), std::string::npos) << text;
}

TEST(TextFloats, FormatIsShortestAndLooksLikeAFloat) {
  EXPECT_EQ(serial::format_float(1.0), "1.0");
  EXPECT_EQ(serial::format_float(100.0), "100.0");
  EXPECT_EQ(serial::format_float(-0.0), "-0.0");
  EXPECT_EQ(serial::format_float(1e-6), "1e-06");
  EXPECT_EQ(serial::format_float(0.1), "0.1");
  EXPECT_EQ(serial::format_float(1e21), "1e+21");
  EXPECT_EQ(serial::format_float(HUGE_VAL), "inf");
  EXPECT_EQ(serial::format_float(-HUGE_VAL), "-inf");
  EXPECT_EQ(serial::format_float(std::nan("")), "nan");
  EXPECT_EQ(serial::format_float(-std::nan("")), "nan");
}

const double kAwkwardFloats[] = {0.1,
                                 1.0 / 3.0,
                                 -2.5,
                                 1e-6,
                                 1e21,
                                 123456789.0,
                                 9007199254740993.0,  // 2^53 + 1 rounds to 2^53
                                 std::numeric_limits<double>::max(),
                                 std::numeric_limits<double>::min(),
                                 std::numeric_limits<double>::denorm_min(),
                                 -0.0,
                                 0.0,
                                 HUGE_VAL,
                                 -HUGE_VAL,
                                 std::nan("")};

Graph graph_of_fills() {
  Graph g;
  int i = 0;
  for (double v : kAwkwardFloats) {
    node1(g, Op::full, {}, {{"shape", std::vector<int64_t>{2}}, {"value", v}}, "f" + std::to_string(i++));
  }
  return g;
}

TEST(TextFloats, RoundTripBitForBit) {
  const Graph g = graph_of_fills();
  ASSERT_EQ(g.nodes().size(), std::size(kAwkwardFloats));
  expect_text_round_trip(g);
  const std::string text = print_graph_text(g);
  for (const char* spelled : {"value=0.1}", "value=1e-06}", "value=1e+21}", "value=123456789.0}", "value=-0.0}",
                              "value=0.0}", "value=inf}", "value=-inf}", "value=nan}", "value=5e-324}"}) {
    EXPECT_NE(text.find(spelled), std::string::npos) << spelled << " in\n" << text;
  }
  // Parsing by hand-written spellings: %.17g style and exponents with capital E read the same.
  const Graph h = parse_ok(
      "graph g {\n  %a: f32[2] = full() {shape=[2], value=0.10000000000000001}\n"
      "  %b: f32[2] = full() {shape=[2], value=1E-6}\n}\n");
  EXPECT_EQ(std::get<double>(*h.nodes()[0].attrs.find("value")), 0.1);
  EXPECT_EQ(std::get<double>(*h.nodes()[1].attrs.find("value")), 1e-6);
}

TEST(TextOps, MultiOutputSplit) {
  const char text[] =
      "graph g {\n"
      "  input %x: bf16[2,6] per_call\n"
      "  %a: bf16[2,3], %b: bf16[2,3] = split(%x) {axis=-1, sizes=[3,3]}\n"
      "  output a = %a\n"
      "  output b = %b\n"
      "}\n";
  const Graph g = parse_ok(text);
  ASSERT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.nodes()[0].outputs.size(), 2u);
  EXPECT_EQ(g.nodes()[0].attrs.get_ints("sizes"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(g.nodes()[0].attrs.get_int("axis", 0), -1);
  EXPECT_EQ(print_graph_text(g), text);
  expect_text_round_trip(g);
}

// The example of docs/ir-format.md: linear, layernorm, gelu and integer lists.
TEST(TextOps, TransformerBlockFromTheDocs) {
  const char text[] =
      "graph flux_block {\n"
      "  input %img: bf16[1,16,32] per_call\n"
      "  input %img_mod.weight: bf16[64,32] weight\n"
      "  input %img_mod.bias: bf16[64] weight\n"
      "  %y: bf16[1,16,64] = linear(%img, %img_mod.weight, %img_mod.bias)\n"
      "  %n: bf16[1,16,64] = layernorm(%y) {eps=1e-06}\n"
      "  %g: bf16[1,16,64] = gelu(%n) {approximate=\"tanh\"}\n"
      "  %h0: bf16[1,16,32], %h1: bf16[1,16,32] = split(%g) {axis=-1, sizes=[32,32]}\n"
      "  %r: bf16[1,16,32] = add(%h0, %h1)\n"
      "  output img_out = %r\n"
      "}\n";
  const Graph g = parse_ok(text);
  EXPECT_EQ(print_graph_text(g), text);
  expect_text_round_trip(g);
}

// The ```kiln and ```json examples in docs/ir-format.md parse, and the JSON one is printed as shown.
TEST(TextDocs, ExamplesInTheFormatDocParse) {
  const auto repo = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  std::ifstream in(repo / "docs" / "ir-format.md");
  ASSERT_TRUE(in) << "docs/ir-format.md not found";
  std::string line, block, language;
  int examples = 0;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) != 0) {
      block += line + "\n";
      continue;
    }
    if (language.empty() && line.size() > 3) {
      language = line.substr(3);
      block.clear();
      continue;
    }
    if (language == "kiln") {
      auto g = parse_graph_text(block, "ir-format.md");
      ASSERT_TRUE(g.ok()) << g.error().message;
      ++examples;
    } else if (language == "json") {
      auto g = parse_graph_json(block, "ir-format.md");
      ASSERT_TRUE(g.ok()) << g.error().message;
      EXPECT_EQ(print_graph_json(*g), block);
      ++examples;
    }
    language.clear();
  }
  EXPECT_EQ(examples, 2);
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("kiln_text_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& contents) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << contents;
    return p;
  }

 private:
  std::filesystem::path path_;
};

TEST(TextLoadFile, ChoosesTheFormByExtension) {
  TempDir dir;
  const Graph g = sample_graph();
  auto from_text = load_graph_file(dir.write("g.kiln", print_graph_text(g)));
  ASSERT_TRUE(from_text.ok()) << from_text.error().message;
  expect_graphs_equal(g, *from_text);
  auto from_json = load_graph_file(dir.write("g.json", print_graph_json(g)));
  ASSERT_TRUE(from_json.ok()) << from_json.error().message;
  expect_graphs_equal(g, *from_json);
}

TEST(TextLoadFile, ParseErrorsNameTheFile) {
  TempDir dir;
  const std::string path = dir.write("bad.kiln", "graph g {\n  input %x: f33[2] per_call\n}\n");
  testing::expect_error(load_graph_file(path), ErrorCode::parse_error, {path + ":2:13: ", "unknown dtype 'f33'"});
}

}  // namespace
}  // namespace kiln
