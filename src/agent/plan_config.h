// What the optimize loop varies between Plans of one model: which pipeline passes run, the kernel schedules
// (a tuner's winners, by kernel hash), and extra named graph rewrites applied after the pipeline (the seam
// for proposers that rewrite the graph themselves; tests plant regressing ones through it).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernel/schedule.h"
#include "passes/pass.h"

namespace kiln::agent {

struct GraphRewrite {
  std::string name;
  std::function<Result<Graph>(const Graph&)> apply;
};

struct PlanConfig {
  std::set<std::string> disabled_passes;
  std::map<std::string, kernel::Schedule> schedules;
  std::vector<GraphRewrite> rewrites;
  int lanes = 1;  // backend::PlanOptions::lanes: the multi-stream opportunity sets it
};

// The passes a naive lowering leaves out (one kernel or library call per op): the merges and fusions.
const std::vector<std::string>& fusion_pass_names();
// Baseline: the pipeline with fusion_pass_names() disabled.
PlanConfig baseline_config();

// The pipeline under `config` for a target that runs what `supports` accepts (passes::SupportsFn; empty:
// every form), then its rewrites in order.
Result<Graph> build_graph(const Graph& model, const PlanConfig& config, const passes::SupportsFn& supports = {});

}  // namespace kiln::agent
