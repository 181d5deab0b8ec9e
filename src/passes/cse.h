// Common-subexpression elimination by structural hashing: two nodes with the same op, attributes and
// (already deduplicated) inputs compute the same values, so the later one is dropped and its uses read the
// earlier one. Exact: every op is pure and deterministic. Source ops (full, arange) merge the same way.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult eliminate_common_subexpressions(const Graph& graph);

}  // namespace kiln::passes
