// The JSON form of an ir::Graph: for tools in other languages (importers, viewers) and for machine-written
// files. It carries exactly what the text form (ir/text.h) carries, so either converts to the other without
// loss. docs/ir-format.md gives the schema field by field. Non-finite float attributes are the strings
// "inf", "-inf" and "nan"; value names are written without the '%' sigil.
//
// Parse errors are values naming "<source>: <JSON path>: <problem>", e.g.
// "model.json: nodes[12].inputs[1]: unknown value %foo"; a parsed graph always passes verify_graph.
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln {

// indent >= 0: one field of the top-level object per line and one input, node or output per line, indented
// by `indent` spaces per level. indent < 0: everything on one line.
std::string print_graph_json(const Graph& graph, int indent = 1);
Result<Graph> parse_graph_json(std::string_view text, std::string_view source_name = "<json>");

}  // namespace kiln
