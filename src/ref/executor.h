// The reference executor: runs any graph on the CPU. Each op's reference computes in double and rounds its
// outputs to their dtypes (storage-faithful), so the result is what an exact implementation storing every
// intermediate in its declared dtype would produce. It is the oracle every pass, kernel and backend is
// checked against.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ref {

struct RunOptions {
  // Called after each node with its id (progress reporting for big graphs); may be empty.
  std::function<void(NodeId)> on_node;
  // Called before each node with the tensors it reads; when it fills `replaced` (one tensor per input, same
  // types) and returns true, the node reads those instead. Sensitivity runs use it (harness/sensitivity.h);
  // may be empty.
  std::function<bool(NodeId, std::span<const Tensor* const> inputs, std::vector<Tensor>& replaced)> replace_inputs;
};

// Runs `graph` with every graph input given by value name. Returns the outputs by output name. Errors name
// the missing or mistyped input, or the node whose reference failed.
Result<std::map<std::string, Tensor>> run_graph(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                                const RunOptions& options = {});

// Runs one op on concrete tensors (infers output types, allocates, calls the reference). For tests.
Result<std::vector<Tensor>> run_op(Op op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});

}  // namespace kiln::ref
