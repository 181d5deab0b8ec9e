// Dead-code elimination: drops every node none of whose outputs reaches a graph output. Exact. Graph inputs
// stay (they are the model's interface) even when nothing reads them.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult eliminate_dead_code(const Graph& graph);

}  // namespace kiln::passes
