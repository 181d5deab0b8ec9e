// Expected diagnostics of the graph parsers (ir/text.h, ir/json.h) and load_graph_file: every malformed input
// gives an Error with the right code whose message names the place (<source>:LINE:COL for text, the JSON path
// for JSON, the file for I/O) and the problem. None may crash, hang or allocate without bound.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../ir/graph_equal.h"
#include "ir/json.h"
#include "ir/text.h"

namespace kiln {
namespace {

using testing::expect_error;

struct ErrorCase {
  const char* label;
  std::string input;
  ErrorCode code;
  std::vector<std::string> parts;  // substrings the message must contain: the place, then the problem
};

void expect_case(const Result<Graph>& result, const ErrorCase& c) {
  SCOPED_TRACE(c.label);
  ASSERT_FALSE(result.ok()) << "accepted:\n" << c.input;
  EXPECT_EQ(error_code_name(result.error().code), std::string(error_code_name(c.code))) << result.error().message;
  for (const std::string& part : c.parts) {
    EXPECT_NE(result.error().message.find(part), std::string::npos)
        << "message: " << result.error().message << "\nmissing: " << part;
  }
}

// A graph text whose body is `body` after one input %x: f32[2].
std::string text_with(const std::string& body) { return "graph g {\n  input %x: f32[2] per_call\n" + body + "}\n"; }

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(ParseErrorsText, EachMalformedInputNamesItsPlaceAndProblem) {
  const ErrorCode P = ErrorCode::parse_error;
  const std::vector<ErrorCase> cases = {
      {"empty", "", P, {"<text>:1:1: ", "expected 'graph <name> {'"}},
      {"not a graph", "grap g {}", P, {"<text>:1:1: ", "expected 'graph"}},
      {"truncated in a shape", "graph g {\n  input %x: f32[2", P, {"<text>:2:18: ", "found end of input"}},
      {"truncated before the close",
       "graph g {\n  input %x: f32[2] per_call\n",
       P,
       {"<text>:3:1: ", "missing '}' at the end of graph g"}},
      {"unknown op",
       text_with("  %y: f32[2] = frobnicate(%x)\n"),
       ErrorCode::unknown_op,
       {"<text>:3:16: ", "unknown op 'frobnicate'"}},
      {"unknown value", text_with("  %y: f32[2] = neg(%nope)\n"), P, {"<text>:3:20: ", "unknown value %nope"}},
      {"use before definition",
       text_with("  %y: f32[2] = neg(%z)\n  %z: f32[2] = neg(%x)\n"),
       P,
       {"<text>:3:20: ", "unknown value %z"}},
      {"duplicate input",
       text_with("  input %x: f32[2] per_call\n"),
       P,
       {"<text>:3:9: ", "value %x is defined twice (first at <text>:2:9)"}},
      {"node redefines an input",
       text_with("  %x: f32[2] = neg(%x)\n"),
       P,
       {"<text>:3:3: ", "value %x is defined twice"}},
      {"duplicate output name in one node",
       "graph g {\n  input %x: f32[2,4] per_call\n  %a: f32[2,2], %a: f32[2,2] = split(%x) {axis=1, sizes=[2,2]}\n}",
       P,
       {"<text>:3:17: ", "value %a is defined twice (first at <text>:3:3)"}},
      {"duplicate graph output",
       text_with("  output o = %x\n  output o = %x\n"),
       P,
       {"<text>:4:10: ", "output 'o' is declared twice (first at <text>:3:10)"}},
      {"duplicate attribute",
       text_with("  %y: f32[2] = gelu(%x) {approximate=\"tanh\", approximate=\"none\"}\n"),
       P,
       {"<text>:3:46: ", "attribute 'approximate' is given twice"}},
      {"negative dimension",
       "graph g {\n  input %x: f32[2,-3] per_call\n}",
       P,
       {"<text>:2:19: ", "negative dimension -3"}},
      {"numel overflow",
       "graph g {\n  input %x: f32[4294967296,4294967296] per_call\n}",
       P,
       {"<text>:2:28: ", "more than 2^62 elements"}},
      {"huge integer",
       "graph g {\n  input %x: f32[99999999999999999999] per_call\n}",
       P,
       {"<text>:2:17: ", "integer 99999999999999999999 is out of the int64 range"}},
      {"rank 17",
       "graph g {\n  input %x: f32[" + repeat("1,", 16) + "1] per_call\n}",
       P,
       {"<text>:2:49: ", "rank is above the limit of 16"}},
      {"non-integer dimension",
       "graph g {\n  input %x: f32[2.5] per_call\n}",
       P,
       {"<text>:2:17: ", "a dimension must be an integer"}},
      {"unknown dtype", "graph g {\n  input %x: f33[2] per_call\n}", P, {"<text>:2:13: ", "unknown dtype 'f33'"}},
      {"unknown binding",
       "graph g {\n  input %x: f32[2] sometimes\n}",
       P,
       {"<text>:2:20: ", "expected a binding (weight, per_step or per_call)", "found 'sometimes'"}},
      {"missing type", "graph g {\n  input %x per_call\n}", P, {"<text>:2:12: ", "expected ':' and a type after %x"}},
      {"missing name after %",
       "graph g {\n  input %: f32[2] per_call\n}",
       P,
       {"<text>:2:10: ", "expected a value name after '%'"}},
      {"name too long",
       "graph g {\n  input %" + std::string(300, 'a') + ": f32[2] per_call\n}",
       P,
       {"<text>:2:10: ", "is longer than 256 characters"}},
      {"declared shape differs",
       text_with("  %y: f32[3] = neg(%x)\n"),
       ErrorCode::shape_error,
       {"<text>:3:3: ", "node %y (neg)", "declared f32[3] but the op gives f32[2]"}},
      {"declared dtype differs",
       text_with("  %y: bf16[2] = neg(%x)\n"),
       ErrorCode::shape_error,
       {"<text>:3:3: ", "declared bf16[2] but the op gives f32[2]"}},
      {"too few declared outputs",
       "graph g {\n  input %x: f32[2,4] per_call\n  %a: f32[2,2] = split(%x) {axis=1, sizes=[2,2]}\n}",
       ErrorCode::shape_error,
       {"<text>:3:3: ", "declares 1 outputs, the op produces 2"}},
      {"wrong input count",
       text_with("  %y: f32[2] = add(%x)\n"),
       ErrorCode::shape_error,
       {"<text>:3:3: ", "add takes 2 inputs, got 1"}},
      {"shapes that do not broadcast",
       "graph g {\n  input %x: f32[2] per_call\n  input %w: f32[3] weight\n  %y: f32[2] = add(%x, %w)\n}",
       ErrorCode::shape_error,
       {"<text>:4:3: ", "do not broadcast"}},
      {"attribute of the wrong kind",
       text_with("  %y: f32[2] = gelu(%x) {approximate=1}\n"),
       ErrorCode::invalid_argument,
       {"<text>:3:3: ", "attribute 'approximate' of gelu must be string"}},
      {"missing required attribute",
       text_with("  %y: f32[2] = cast(%x)\n"),
       ErrorCode::invalid_argument,
       {"<text>:3:3: ", "missing required attribute 'to'"}},
      {"unknown attribute",
       text_with("  %y: f32[2] = neg(%x) {alpha=1}\n"),
       ErrorCode::invalid_argument,
       {"<text>:3:3: ", "unknown attribute 'alpha' for neg"}},
      {"unterminated string",
       text_with("  %y: f32[2] = gelu(%x) {approximate=\"tanh}\n"),
       P,
       {"<text>:3:38: ", "unterminated string"}},
      {"unknown escape",
       text_with("  %y: f32[2] = gelu(%x) {approximate=\"ta\\qnh\"}\n"),
       P,
       {"<text>:3:41: ", "unknown escape in string"}},
      {"invalid UTF-8 in a string", "graph \"bad\\xff\" {\n}", P, {"<text>:1:7: ", "string is not valid UTF-8"}},
      {"unquoted string",
       text_with("  %y: f32[2] = gelu(%x) {approximate=tanh}\n"),
       P,
       {"<text>:3:38: ", "expected an attribute value", "found 'tanh' (strings are quoted)"}},
      {"list of strings",
       text_with("  %a: f32[1] = split(%x) {axis=0, sizes=[\"1\"]}\n"),
       P,
       {"<text>:3:42: ", "list elements must be numbers"}},
      {"malformed exponent",
       "graph g {\n  %f: f32[1] = full() {shape=[1], value=1e}\n}",
       P,
       {"<text>:2:41: ", "malformed exponent in number '1e'"}},
      {"float out of range",
       "graph g {\n  %f: f32[1] = full() {shape=[1], value=1e999}\n}",
       P,
       {"<text>:2:41: ", "number 1e999 is out of the range of a double"}},
      {"garbage statement", text_with("  banana\n"), P, {"<text>:3:3: ", "expected 'input', 'output', a node"}},
      {"NUL byte", std::string("graph g {\n\0}", 12), P, {"<text>:2:1: ", "found byte 0x00"}},
      {"text after the graph", "graph g {\n}\nextra", P, {"<text>:3:1: ", "unexpected 'extra' after the closing '}'"}},
      {"output of an unknown value", text_with("  output y = %nope\n"), P, {"<text>:3:14: ", "unknown value %nope"}},
      {"missing '=' in an output", text_with("  output y %x\n"), P, {"<text>:3:12: ", "expected '=' after output 'y'"}},
      {"missing ')'",
       text_with("  %y: f32[2] = neg(%x\n}"),
       P,
       {"<text>:4:1: ", "expected ',' or ')' between the inputs of neg"}},
  };
  for (const ErrorCase& c : cases) expect_case(parse_graph_text(c.input), c);
}

TEST(ParseErrorsText, SourceNameIsUsed) {
  expect_error(parse_graph_text("graph g {\n  banana\n}", "model.kiln"), ErrorCode::parse_error, {"model.kiln:2:3: "});
}

// Hostile sizes finish quickly with an error: deep brackets, megabytes of digits, long lists.
TEST(ParseErrorsText, HostileInputsFailFast) {
  const auto start = std::chrono::steady_clock::now();
  expect_error(
      parse_graph_text(text_with("  %a: f32[1] = split(%x) {axis=0, sizes=" + std::string(1000000, '[') + "}")),
      ErrorCode::parse_error, {"<text>:3:42: ", "list elements must be numbers"});
  expect_error(parse_graph_text("graph g {\n  input %x: f32[" + std::string(1000000, '9') + "] per_call\n}"),
               ErrorCode::parse_error, {"<text>:2:17: ", "out of the int64 range"});
  expect_error(parse_graph_text("graph g {\n  input %x: f32[" + repeat("0,", 100000) + "] per_call\n}"),
               ErrorCode::parse_error, {"rank is above the limit"});
  expect_error(parse_graph_text(repeat("# comment\n", 100000)), ErrorCode::parse_error, {"<text>:100001:1: "});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A JSON graph with one input %x: f32[2] and one node %y = neg(%x), with `node` replacing the node.
std::string json_with(const std::string& node, const std::string& outputs = "[{\"name\":\"y\",\"value\":\"y\"}]") {
  return R"({"format":"kiln-graph","version":1,"name":"g",
  "inputs":[{"name":"x","dtype":"f32","shape":[2],"binding":"per_call"}],
  "nodes":[)" +
         node + R"(],
  "outputs":)" +
         outputs + "}";
}
const std::string kNegNode = R"({"op":"neg","inputs":["x"],"outputs":[{"name":"y","dtype":"f32","shape":[2]}]})";

// The input list replaced.
std::string json_inputs(const std::string& inputs) {
  return R"({"format":"kiln-graph","version":1,"inputs":[)" + inputs + R"(],"nodes":[],"outputs":[]})";
}
std::string input_with(const std::string& fields) { return "{\"name\":\"x\"," + fields + "}"; }

TEST(ParseErrorsJson, EachMalformedInputNamesItsPathAndProblem) {
  const ErrorCode P = ErrorCode::parse_error;
  const std::string good = json_with(kNegNode);
  ASSERT_TRUE(parse_graph_json(good).ok()) << parse_graph_json(good).error().message;
  const std::vector<ErrorCase> cases = {
      {"empty", "", P, {"model.json: invalid JSON: parse error at line 1, column 1"}},
      {"truncated", good.substr(0, 60), P, {"model.json: invalid JSON: parse error at line 2"}},
      {"invalid UTF-8", "{\"name\":\"\xff\"}", P, {"model.json: invalid JSON: ", "UTF-8"}},
      {"float overflow",
       json_inputs(input_with(R"("dtype":"f32","shape":[1e400],"binding":"weight")")),
       P,
       {"model.json: invalid JSON: number overflow"}},
      {"deep nesting", std::string(100000, '['), P, {"model.json: JSON is nested more than 32 levels"}},
      {"root not an object", "[]", P, {"model.json: a graph must be a JSON object, got an array"}},
      {"missing format",
       R"({"version":1,"inputs":[],"nodes":[],"outputs":[]})",
       P,
       {"model.json: missing field 'format'"}},
      {"wrong format",
       R"({"format":"onnx","version":1,"inputs":[],"nodes":[],"outputs":[]})",
       P,
       {"model.json: format: must be \"kiln-graph\""}},
      {"future version",
       R"({"format":"kiln-graph","version":2,"inputs":[],"nodes":[],"outputs":[]})",
       ErrorCode::unsupported,
       {"model.json: version: version 2 is not supported"}},
      {"version as a string",
       R"({"format":"kiln-graph","version":"1","inputs":[],"nodes":[],"outputs":[]})",
       P,
       {"model.json: version: must be an integer, got a string"}},
      {"unknown top-level field",
       R"({"format":"kiln-graph","version":1,"inputs":[],"nodez":[],"outputs":[]})",
       P,
       {"model.json: nodez: unknown field (known: format, version, name, inputs, nodes, outputs)"}},
      {"nodes not an array",
       R"({"format":"kiln-graph","version":1,"inputs":[],"nodes":{},"outputs":[]})",
       P,
       {"model.json: nodes: must be an array, got an object"}},
      {"unknown node field",
       json_with(R"({"op":"neg","inputs":["x"],"outputs":[],"atrs":{}})"),
       P,
       {"model.json: nodes[0].atrs: unknown field"}},
      {"node not an object", json_with("7"), P, {"model.json: nodes[0]: a node must be an object, got an integer"}},
      {"unknown op",
       json_with(R"({"op":"frobnicate","inputs":["x"],"outputs":[]})"),
       ErrorCode::unknown_op,
       {"model.json: nodes[0].op: unknown op 'frobnicate'"}},
      {"unknown value",
       json_with(kNegNode + R"(,{"op":"add","inputs":["y","foo"],"outputs":[]})"),
       P,
       {"model.json: nodes[1].inputs[1]: unknown value %foo"}},
      {"input name not a string",
       json_with(R"({"op":"neg","inputs":[5],"outputs":[]})"),
       P,
       {"model.json: nodes[0].inputs[0]: must be a string, got an integer"}},
      {"no outputs",
       json_with(R"({"op":"neg","inputs":["x"],"outputs":[]})"),
       P,
       {"model.json: nodes[0].outputs: a node must declare at least one output"}},
      {"duplicate value name",
       json_with(R"({"op":"neg","inputs":["x"],"outputs":[{"name":"x","dtype":"f32","shape":[2]}]})"),
       P,
       {"model.json: nodes[0].outputs[0].name: value %x is defined twice (first at inputs[0].name)"}},
      {"invalid value name",
       json_inputs(R"({"name":"a b","dtype":"f32","shape":[2],"binding":"weight"})"),
       P,
       {"model.json: inputs[0].name: invalid value name 'a b'"}},
      {"missing binding",
       json_inputs(input_with(R"("dtype":"f32","shape":[2])")),
       P,
       {"model.json: inputs[0]: missing field 'binding'"}},
      {"unknown binding",
       json_inputs(input_with(R"("dtype":"f32","shape":[2],"binding":"sometimes")")),
       P,
       {"model.json: inputs[0].binding: unknown binding 'sometimes'"}},
      {"unknown dtype",
       json_inputs(input_with(R"("dtype":"f33","shape":[2],"binding":"weight")")),
       P,
       {"model.json: inputs[0].dtype: unknown dtype 'f33'"}},
      {"negative dimension",
       json_inputs(input_with(R"("dtype":"f32","shape":[2,-3],"binding":"weight")")),
       P,
       {"model.json: inputs[0].shape[1]: negative dimension -3"}},
      {"float dimension",
       json_inputs(input_with(R"("dtype":"f32","shape":[2.5],"binding":"weight")")),
       P,
       {"model.json: inputs[0].shape[0]: must be an integer, got a float"}},
      {"huge dimension",
       json_inputs(input_with(R"("dtype":"f32","shape":[18446744073709551615],"binding":"weight")")),
       P,
       {"model.json: inputs[0].shape[0]: integer is out of the int64 range"}},
      {"numel overflow",
       json_inputs(input_with(R"("dtype":"f32","shape":[4294967296,4294967296],"binding":"weight")")),
       P,
       {"model.json: inputs[0].shape: shape has more than 2^62 elements"}},
      {"rank 17",
       json_inputs(input_with(R"("dtype":"f32","shape":[)" + repeat("1,", 16) + R"(1],"binding":"weight")")),
       P,
       {"model.json: inputs[0].shape: rank 17 is above the limit of 16"}},
      {"shape not an array",
       json_inputs(input_with(R"("dtype":"f32","shape":"2x3","binding":"weight")")),
       P,
       {"model.json: inputs[0].shape: must be an array, got a string"}},
      {"after_nodes past the nodes",
       json_inputs(input_with(R"("dtype":"f32","shape":[2],"binding":"weight","after_nodes":5)")),
       P,
       {"model.json: inputs[0].after_nodes: must be between 0 and the number of nodes (0)"}},
      {"declared type differs",
       json_with(R"({"op":"neg","inputs":["x"],"outputs":[{"name":"y","dtype":"f32","shape":[3]}]})"),
       ErrorCode::shape_error,
       {"model.json: nodes[0]: node %y (neg)", "declared f32[3] but the op gives f32[2]"}},
      {"attrs not an object",
       json_with(R"({"op":"neg","inputs":["x"],"outputs":[{"name":"y","dtype":"f32","shape":[2]}],"attrs":[]})"),
       P,
       {"model.json: nodes[0].attrs: must be an object, got an array"}},
      {"boolean attribute",
       json_with(
           R"({"op":"gelu","inputs":["x"],"outputs":[{"name":"y","dtype":"f32","shape":[2]}],"attrs":{"approximate":true}})"),
       P,
       {"model.json: nodes[0].attrs.approximate: an attribute must be a number, a string or a list of numbers"}},
      {"list of objects",
       json_with(
           R"({"op":"split","inputs":["x"],"outputs":[{"name":"y","dtype":"f32","shape":[2]}],"attrs":{"axis":0,"sizes":[{}]}})"),
       P,
       {"model.json: nodes[0].attrs.sizes[0]: must be a number"}},
      {"attribute of the wrong kind",
       json_with(
           R"({"op":"gelu","inputs":["x"],"outputs":[{"name":"y","dtype":"f32","shape":[2]}],"attrs":{"approximate":1}})"),
       ErrorCode::invalid_argument,
       {"model.json: nodes[0]: node %y (gelu)", "must be string, got int"}},
      {"duplicate graph output",
       json_with(kNegNode, R"([{"name":"y","value":"y"},{"name":"y","value":"x"}])"),
       P,
       {"model.json: outputs[1].name: output 'y' is declared twice"}},
      {"output of an unknown value",
       json_with(kNegNode, R"([{"name":"y","value":"nope"}])"),
       P,
       {"model.json: outputs[0].value: unknown value %nope"}},
  };
  for (const ErrorCase& c : cases) expect_case(parse_graph_json(c.input, "model.json"), c);
}

TEST(ParseErrorsJson, AfterNodesMustNotDecrease) {
  const std::string json = R"({"format":"kiln-graph","version":1,"inputs":[
    {"name":"a","dtype":"f32","shape":[2],"binding":"weight","after_nodes":1},
    {"name":"b","dtype":"f32","shape":[2],"binding":"weight"}],
    "nodes":[{"op":"full","inputs":[],"outputs":[{"name":"f","dtype":"f32","shape":[2]}],"attrs":{"shape":[2],"value":1}}],
    "outputs":[]})";
  expect_error(parse_graph_json(json, "m.json"), ErrorCode::parse_error,
               {"m.json: inputs[1].after_nodes: must not be less than that of the input before it"});
}

class ScratchDir {
 public:
  ScratchDir() : path_(std::filesystem::temp_directory_path() / ("kiln_parse_errors_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string path(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& contents) const {
    std::ofstream(path(name), std::ios::binary) << contents;
    return path(name);
  }

 private:
  std::filesystem::path path_;
};

TEST(ParseErrorsFile, IoErrorsNameTheFile) {
  ScratchDir dir;
  const std::string missing = dir.path("missing.kiln");
  expect_error(load_graph_file(missing), ErrorCode::io_error, {missing + ": no such file"});
  const std::string folder = dir.path("folder.json");
  std::filesystem::create_directories(folder);
  expect_error(load_graph_file(folder), ErrorCode::io_error, {folder + ": not a regular file"});
  const std::string onnx = dir.write("model.onnx", "");
  expect_error(load_graph_file(onnx), ErrorCode::invalid_argument, {onnx + ": unknown graph file extension '.onnx'"});
  const std::string bad_json = dir.write("bad.json", "{\"format\": ");
  expect_error(load_graph_file(bad_json), ErrorCode::parse_error, {bad_json + ": invalid JSON"});
  const std::string empty_text = dir.write("empty.kiln", "");
  expect_error(load_graph_file(empty_text), ErrorCode::parse_error, {empty_text + ":1:1: "});
}

}  // namespace
}  // namespace kiln
