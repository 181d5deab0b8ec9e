// libFuzzer target: parse_graph_text on arbitrary bytes. Besides "no crash, no hang, no unbounded memory"
// (checked by libFuzzer and the sanitizers), it checks what the parser promises: an error names its place
// ("fuzz.kiln:..."), and an accepted graph verifies, prints to text that parses back to the same text, and
// converts through JSON without loss.
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
  std::fprintf(stderr, "fuzz_text: %s\n--- first:\n%s\n--- second:\n%s\n", what, first.c_str(), second.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  kiln::Result<kiln::Graph> graph = kiln::parse_graph_text(input, "fuzz.kiln");
  if (!graph.ok()) {
    if (graph.error().message.rfind("fuzz.kiln:", 0) != 0)
      fail("error does not name the source", "", graph.error().message);
    return 0;
  }
  kiln::Status verified = kiln::verify_graph(*graph);
  if (!verified.ok()) fail("accepted graph does not verify", std::string(input), verified.error().message);
  const std::string text = kiln::print_graph_text(*graph);
  kiln::Result<kiln::Graph> again = kiln::parse_graph_text(text);
  if (!again.ok()) fail("printed text does not parse", text, again.error().message);
  const std::string text_again = kiln::print_graph_text(*again);
  if (text_again != text) fail("text round trip changed the graph", text, text_again);
  const std::string json = kiln::print_graph_json(*graph);
  kiln::Result<kiln::Graph> from_json = kiln::parse_graph_json(json);
  if (!from_json.ok()) fail("printed JSON does not parse", json, from_json.error().message);
  const std::string text_via_json = kiln::print_graph_text(*from_json);
  if (text_via_json != text) fail("JSON round trip changed the graph", text, text_via_json);
  return 0;
}
