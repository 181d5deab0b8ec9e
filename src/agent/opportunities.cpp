#include "agent/opportunities.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "passes/fuse_rows.h"

namespace kiln::agent {

const char* opportunity_level_name(OpportunityLevel level) {
  return level == OpportunityLevel::model ? "model" : "kernel";
}

namespace {

struct PassTarget {
  const char* pass;
  std::set<OpClass> classes;  // the step classes whose time the pass can change
  const char* description;
};

const std::vector<PassTarget>& pass_targets() {
  static const std::vector<PassTarget> kTargets = {
      {"merge-gemms", {OpClass::matmul}, "GEMMs that share an input become one GEMM"},
      {"pack-scales", {OpClass::matmul, OpClass::quantize}, "FP8 weight scales packed at load time in the GEMM's layout"},
      {"fast-accumulation", {OpClass::matmul}, "FP8 GEMMs use the library's fast accumulation (judged by the numerics gate)"},
      {"fuse-rows",
       {OpClass::elementwise, OpClass::rowwise, OpClass::reduction, OpClass::quantize, OpClass::view},
       "memory-bound primitives over the same rows become one generated kernel"},
      {"fold-epilogues", {OpClass::matmul, OpClass::elementwise}, "lone bias adds and GELUs fold into their GEMM"},
      {"residual-epilogues", {OpClass::matmul, OpClass::elementwise},
       "a GEMM's gated residual update (x + gate * (GEMM + b)) becomes its epilogue"},
  };
  return kTargets;
}

double step_model_seconds(const profile::StepProfile& s, double launch_seconds) {
  return launch_seconds + s.roofline.floor_seconds;
}

}  // namespace

double measured_launch_seconds(const profile::PlanProfile& profile) {
  std::vector<double> over;
  for (const profile::StepProfile& s : profile.steps) over.push_back(std::max(0.0, s.seconds - s.roofline.floor_seconds));
  if (over.empty()) return 0;
  std::sort(over.begin(), over.end());
  return over[over.size() / 10];
}

double predicted_graph_seconds(const Graph& graph, const backend::DeviceInfo& device, double launch_seconds) {
  double seconds = 0;
  std::set<NodeId> grouped;
  for (const passes::FusedGroup& group : passes::collect_fused_groups(graph)) {
    double flops = 0;
    for (NodeId id : group.members) {
      flops += node_cost(graph, id).flops;
      grouped.insert(id);
    }
    seconds += launch_seconds + profile::roofline_point(flops, group.bytes, device).floor_seconds;
  }
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    if (grouped.count(id) || op_has_trait(graph.node(id).op, kTraitSource)) continue;
    const OpCost cost = node_cost(graph, id);
    seconds += launch_seconds + profile::roofline_point(cost.flops, cost.bytes, device).floor_seconds;
  }
  return seconds;
}

Result<std::vector<Opportunity>> pass_opportunities(const Graph& model, const PlanConfig& current,
                                                    const profile::PlanProfile& profile,
                                                    const passes::SupportsFn& supports) {
  const double launch = measured_launch_seconds(profile);
  KILN_ASSIGN_OR_RETURN(Graph current_graph, build_graph(model, current, supports));
  const double current_predicted = predicted_graph_seconds(current_graph, profile.device, launch);
  std::vector<Opportunity> out;
  for (const PassTarget& target : pass_targets()) {
    if (!current.disabled_passes.count(target.pass)) continue;
    Opportunity o;
    o.name = target.pass;
    o.level = OpportunityLevel::model;
    o.description = target.description;
    double targeted_seconds = 0, targeted_model = 0;
    for (const profile::StepProfile& s : profile.steps) {
      if (!target.classes.count(s.op_class)) continue;
      targeted_seconds += s.seconds;
      targeted_model += step_model_seconds(s, launch);
    }
    o.time_share = profile.steps_seconds > 0 ? targeted_seconds / profile.steps_seconds : 0;
    PlanConfig next = current;
    next.disabled_passes.erase(target.pass);
    KILN_ASSIGN_OR_RETURN(Graph next_graph, build_graph(model, next, supports));
    const double saving = current_predicted - predicted_graph_seconds(next_graph, profile.device, launch);
    o.predicted_gain = targeted_model > 0 ? std::clamp(saving / targeted_model, 0.0, 1.0) : 0;
    const std::string pass = target.pass;
    o.apply = [pass](const PlanConfig& config) -> Result<PlanConfig> {
      PlanConfig c = config;
      c.disabled_passes.erase(pass);
      return c;
    };
    out.push_back(std::move(o));
  }
  return out;
}

Opportunity lanes_opportunity(int lanes) {
  Opportunity o;
  o.name = "multi-stream";
  o.level = OpportunityLevel::model;
  o.description = fmt::format("independent chains of steps (a double block's image and text streams) on {} lanes",
                              lanes);
  o.time_share = 1;
  o.apply = [lanes](const PlanConfig& config) -> Result<PlanConfig> {
    PlanConfig c = config;
    c.lanes = lanes;
    return c;
  };
  return o;
}

Opportunity kernel_tuning_opportunity(const profile::PlanProfile& profile) {
  const double launch = measured_launch_seconds(profile);
  Opportunity o;
  o.name = "tune-kernels";
  o.level = OpportunityLevel::kernel;
  o.description = "search schedules for the generated kernels (the tuner)";
  double seconds = 0, removable = 0;
  for (const profile::StepProfile& s : profile.steps) {
    if (s.kind != "kernel") continue;
    seconds += s.seconds;
    removable += std::max(0.0, s.seconds - step_model_seconds(s, launch));
  }
  o.time_share = profile.steps_seconds > 0 ? seconds / profile.steps_seconds : 0;
  o.predicted_gain = seconds > 0 ? removable / seconds : 0;
  return o;
}

void rank_opportunities(std::vector<Opportunity>& opportunities, bool by_level) {
  std::stable_sort(opportunities.begin(), opportunities.end(), [by_level](const Opportunity& a, const Opportunity& b) {
    if (by_level && a.level != b.level) return a.level == OpportunityLevel::model;
    return a.score() > b.score();
  });
}

}  // namespace kiln::agent
