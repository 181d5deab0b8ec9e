// The model-level pass pipeline: the passes in order, the graph verified between them, any pass disabled by
// name. A pass that only prepares another's rewrite (split-gemms for fold-epilogues) runs only with it, and one
// that only pays where steps run side by side (defer-columns) only with two lanes or more.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "passes/pass.h"
#include "passes/staging.h"

namespace kiln::passes {

struct PipelineOptions {
  std::set<std::string> disabled;  // pass names to skip
  bool verify_between = true;      // verify_graph after every pass (tests and debug builds)
  SupportsFn supports;             // the target backend's; empty: every form (pass.h)
  int lanes = 1;                   // the plan's lanes (backend::PlanOptions::lanes): defer-columns needs 2
};

struct PipelineResult {
  Graph graph;
  std::vector<PassReport> reports;
  StageWork input_work;                // of the input graph
  std::vector<StageWork> stage_work;   // after each pass, one per report
};

// The pass names, in pipeline order.
std::vector<std::string> pipeline_pass_names();

// Runs every enabled pass in order. An unknown name in `disabled` or a pass that breaks an IR invariant is an
// error naming the pass.
Result<PipelineResult> run_pipeline(const Graph& graph, const PipelineOptions& options = {});

}  // namespace kiln::passes
