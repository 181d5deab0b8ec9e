// The text form of an ir::Graph (files ending in .kiln): what golden pass tests, `kiln opt` and people read.
// Printing is stable (same graph, same bytes) and lossless: parsing the printed text gives a graph with equal
// values, types, attributes, bindings and outputs, in the same order. docs/ir-format.md describes the syntax:
//
//   graph block {
//     input %x: bf16[2,3072] per_call
//     %y: bf16[2,3072] = gelu(%x) {approximate="tanh"}
//     output out = %y
//   }
//
// Parse errors are values naming "<source>:LINE:COL"; a parsed graph always passes verify_graph.
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln {

std::string print_graph_text(const Graph& graph);
Result<Graph> parse_graph_text(std::string_view text, std::string_view source_name = "<text>");

// Reads a graph file, choosing the form by extension: ".json" (ir/json.h) or ".kiln" (text). Errors name the
// file: io_error when it cannot be read, invalid_argument for another extension, else the parser's error.
Result<Graph> load_graph_file(const std::string& path);

}  // namespace kiln
