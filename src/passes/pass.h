// What every pass is: a pure function from graph to graph plus a report of what it changed.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

// Exact rewrites must leave the reference executor's outputs bit-identical; reassociating ones are judged
// against fp64 under the numerics policy.
enum class Exactness { exact, reassociating };

struct PassReport {
  std::string pass;
  bool changed = false;
  int nodes_before = 0;
  int nodes_after = 0;
  std::vector<std::string> notes;  // one line per change, for `kiln opt --report`
  // What the pass found, by pattern (derived from the graph, e.g. the op names of a fused group's members)
  // -> how many times: the summary line `kiln opt` prints per pass.
  std::map<std::string, int> found;
};

// Whether the backend the graph is built for runs `op` on these input types and attributes (a backend's
// `supports`). A pass that can write a node in more than one form asks before it writes a form only some
// backends run (a GEMM epilogue the library may lack); empty means every form is fine (the reference, the CPU).
using SupportsFn = std::function<Status(Op, std::span<const TensorType>, const Attrs&)>;

struct PassResult {
  Graph graph;
  PassReport report;
};

}  // namespace kiln::passes
