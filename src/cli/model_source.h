// Resolving a MODEL argument: "zoo:NAME[:key=value,...]" builds a zoo model; anything else is a graph file
// (.json or .kiln text).
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::cli {

Result<Graph> load_model(const std::string& spec);

// Prints "kiln: error: MESSAGE" to stderr and returns the exit code for a failed command.
int report_error(const Error& error);

}  // namespace kiln::cli
