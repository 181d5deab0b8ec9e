// Opportunities: what the optimize loop may try next, ranked by the time share of the steps each one targets
// times the gain it may achieve there. Model-level opportunities are the fusion passes of the pipeline, one
// each (merge-gemms, pack-scales, fuse-rows, fold-epilogues); the kernel-level one is tuning the hot
// generated kernels (through a Tuner, optimize.h).
//
// The achievable gain is predicted, not measured: the graph each opportunity would give is costed the way a
// Plan would run it (one launch per fused group or node, each at its roofline floor plus a launch overhead
// measured from the current profile), and the saving is taken as a fraction of what the targeted steps cost
// under the same model. For kernel tuning, the gain is the part of the kernels' measured time above their
// floor (and the launch overhead), which no schedule can remove.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "agent/plan_config.h"
#include "profile/profile.h"

namespace kiln::agent {

enum class OpportunityLevel { model, kernel };
const char* opportunity_level_name(OpportunityLevel level);

struct Opportunity {
  std::string name;
  OpportunityLevel level = OpportunityLevel::model;
  std::string description;
  double time_share = 0;      // of the current profile's time, in the steps it targets
  double predicted_gain = 0;  // fraction of those steps' time it may save, in [0, 1]
  double score() const { return time_share * predicted_gain; }
  // The config to try, from the current one; an error is recorded as the attempt's reason.
  std::function<Result<PlanConfig>(const PlanConfig& current)> apply;
};

// The launch overhead the profile shows: the 10th percentile of (step time - step floor), never negative.
double measured_launch_seconds(const profile::PlanProfile& profile);

// Predicted time of an optimized graph run as a Plan: per fused group and per remaining non-source node,
// `launch_seconds` plus its roofline floor on `device`.
double predicted_graph_seconds(const Graph& graph, const backend::DeviceInfo& device, double launch_seconds);

// One opportunity per fusion pass disabled in `current`, with its share and predicted gain from `profile`
// (of the Plan built from `model` under `current` for a target that runs what `supports` accepts). Errors
// come from the pipeline.
Result<std::vector<Opportunity>> pass_opportunities(const Graph& model, const PlanConfig& current,
                                                    const profile::PlanProfile& profile,
                                                    const passes::SupportsFn& supports = {});

// Plan level: steps on up to `lanes` lanes (backend/lanes.h), independent chains side by side. Its gain is not
// predicted (score 0): the A/B gate decides.
Opportunity lanes_opportunity(int lanes);

// The kernel-level opportunity over the profile's generated kernels; `apply` is left to the caller (the loop
// wires the tuner in).
Opportunity kernel_tuning_opportunity(const profile::PlanProfile& profile);

// Best score first; equal scores keep their given order. Model-level before kernel-level when `by_level`
// (the loop tunes the kernels of the final graph, since rewrites change which kernels exist).
void rank_opportunities(std::vector<Opportunity>& opportunities, bool by_level);

}  // namespace kiln::agent
