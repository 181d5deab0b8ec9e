#include "agent/plan_config.h"

#include "passes/pipeline.h"

namespace kiln::agent {

const std::vector<std::string>& fusion_pass_names() {
  static const std::vector<std::string> kNames = {"merge-gemms", "pack-scales", "fast-accumulation",
                                                     "residual-epilogues", "fuse-rows", "fold-epilogues"};
  return kNames;
}

PlanConfig baseline_config() {
  PlanConfig config;
  config.disabled_passes.insert(fusion_pass_names().begin(), fusion_pass_names().end());
  return config;
}

Result<Graph> build_graph(const Graph& model, const PlanConfig& config, const passes::SupportsFn& supports) {
  passes::PipelineOptions options;
  options.disabled = config.disabled_passes;
  options.supports = supports;
  options.lanes = config.lanes;
  KILN_ASSIGN_OR_RETURN(passes::PipelineResult result, passes::run_pipeline(model, options));
  Graph graph = std::move(result.graph);
  for (const GraphRewrite& rewrite : config.rewrites) {
    auto next = rewrite.apply(graph);
    if (!next.ok()) return with_context(next.error(), "rewrite " + rewrite.name);
    KILN_TRY(verify_graph(*next));
    graph = std::move(next).value();
  }
  return graph;
}

}  // namespace kiln::agent
