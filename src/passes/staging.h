// Binding-time staging: every node is classified by the most variable input it depends on — weights only
// (and constants), per-step inputs (timestep, guidance), or per-call inputs (activations) — and the graph is
// split into three stages. The load stage runs once when weights are loaded (weight transposes, merged weight
// concatenation, FP8 scale packing); the step stage once per distinct per-step value, shared by every call of
// that step (the modulation of both classifier-free-guidance calls); the call stage on every call. A value
// crossing stages becomes an output of the earlier stage and an input of the later one, bound as the earlier
// stage's binding. Exact: the three stages run in order compute the same bits as the original graph.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace kiln::passes {

// Binding time of every value (indexed by ValueId): an input's binding, or the latest binding among a node's
// inputs (source nodes with no inputs are weight-time constants).
std::vector<Binding> classify_binding_times(const Graph& graph);

struct StagedGraph {
  Graph load;      // inputs: weights; outputs: what later stages read
  Graph per_step;  // inputs: per_step inputs + load outputs (as weights); outputs: what the call stage reads
  Graph per_call;  // inputs: per_call inputs + earlier stage outputs; outputs: the model's outputs
  PassReport report;
};

StagedGraph split_stages(const Graph& graph);

// The work each stage does, indexed by Binding: node count and the bytes those nodes move (cost model), plus
// the load-time nodes by op name. `kiln opt` compares it before and after each pass to show what moved to
// load time.
struct StageWork {
  int nodes[3] = {0, 0, 0};
  double bytes[3] = {0, 0, 0};
  std::map<std::string, int> load_ops;
  std::map<std::string, int> step_ops;  // per-step nodes by op name
};
StageWork measure_stage_work(const Graph& graph);

}  // namespace kiln::passes
