// libFuzzer target: parse_graph_json on arbitrary bytes. Besides "no crash, no hang, no unbounded memory"
// (checked by libFuzzer and the sanitizers), it checks what the parser promises: an error names its source
// ("fuzz.json: ..."), and an accepted graph verifies, prints to JSON that parses back to the same JSON (compact
// and indented), and converts through the text form without loss.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ir/json.h"
#include "ir/text.h"

namespace {

[[noreturn]] void fail(const char* what, const std::string& first, const std::string& second) {
  std::fprintf(stderr, "fuzz_json: %s\n--- first:\n%s\n--- second:\n%s\n", what, first.c_str(), second.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  kiln::Result<kiln::Graph> graph = kiln::parse_graph_json(input, "fuzz.json");
  if (!graph.ok()) {
    if (graph.error().message.rfind("fuzz.json: ", 0) != 0)
      fail("error does not name the source", "", graph.error().message);
    return 0;
  }
  kiln::Status verified = kiln::verify_graph(*graph);
  if (!verified.ok()) fail("accepted graph does not verify", std::string(input), verified.error().message);
  for (int indent : {1, -1}) {
    const std::string json = kiln::print_graph_json(*graph, indent);
    kiln::Result<kiln::Graph> again = kiln::parse_graph_json(json);
    if (!again.ok()) fail("printed JSON does not parse", json, again.error().message);
    const std::string json_again = kiln::print_graph_json(*again, indent);
    if (json_again != json) fail("JSON round trip changed the graph", json, json_again);
  }
  const std::string json = kiln::print_graph_json(*graph);
  const std::string text = kiln::print_graph_text(*graph);
  kiln::Result<kiln::Graph> from_text = kiln::parse_graph_text(text);
  if (!from_text.ok()) fail("printed text does not parse", text, from_text.error().message);
  const std::string json_via_text = kiln::print_graph_json(*from_text);
  if (json_via_text != json) fail("text round trip changed the graph", json, json_via_text);
  return 0;
}
