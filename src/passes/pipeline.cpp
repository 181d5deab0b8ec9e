// The pipeline, as a table of contents: each line is one pass, in the order they run.
#include "passes/pipeline.h"

#include "passes/attention_layouts.h"
#include "passes/canonicalize_views.h"
#include "passes/join_concat_pieces.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/defer_columns.h"
#include "passes/decompose.h"
#include "passes/fast_accumulation.h"
#include "passes/fold_epilogues.h"
#include "passes/fuse_rows.h"
#include "passes/merge_gemms.h"
#include "passes/pack_weight_scales.h"
#include "passes/rematerialize.h"
#include "passes/residual_epilogues.h"
#include "passes/sink_concat.h"
#include "passes/split_gemms.h"
#include "passes/split_reductions.h"

namespace kiln::passes {
namespace {

struct PassEntry {
  const char* name;
  Exactness exactness;
  PassResult (*run)(const Graph&, const SupportsFn&);
  // A pass that only prepares another's rewrite runs only when that pass runs too: split-gemms without
  // fold-epilogues is two GEMMs and the same bias/GELU kernel, a slower plan (H200, session 18: 0.956x).
  const char* only_with = nullptr;
  // A pass that only pays where steps run side by side runs only when the plan has two lanes or more.
  bool needs_lanes = false;
};

// Most passes write one form whatever the backend: they take the graph alone.
template <PassResult (*Pass)(const Graph&)>
PassResult any_target(const Graph& g, const SupportsFn&) {
  return Pass(g);
}

PassResult fuse_rows_default(const Graph& g) { return fuse_row_groups(g); }

const PassEntry kPipeline[] = {
    {"cse-early", Exactness::exact, any_target<eliminate_common_subexpressions>}, // one quantize per shared input
    {"merge-gemms", Exactness::reassociating, any_target<merge_parallel_gemms>}, // GEMMs sharing an input become one
    {"split-gemms", Exactness::exact, any_target<split_gemms_by_epilogue>,       // columns wanting GELU: their own GEMM
     "fold-epilogues"},
    {"defer-columns", Exactness::exact, any_target<defer_late_columns>, nullptr, // late columns of a GEMV: a 2nd lane's
     true},
    {"pack-scales", Exactness::exact, any_target<pack_weight_scales>},          // FP8 weight scales into the GEMM layout
    {"fast-accumulation", Exactness::reassociating, mark_fast_accumulation},    // FP8 GEMMs may accumulate fast
    {"sink-concat", Exactness::exact, any_target<sink_concats>},                 // row ops move above joint concats
    {"decompose", Exactness::reassociating, any_target<decompose_composites>},  // composites -> primitives
    {"split-reductions", Exactness::exact, any_target<split_reductions>},       // whole-tensor amax: per row, then rows
    {"attention-layouts", Exactness::exact, any_target<absorb_attention_layouts>}, // head/token transposes into attention
    {"cse", Exactness::exact, any_target<eliminate_common_subexpressions>},     // structural hashing
    {"dce", Exactness::exact, any_target<eliminate_dead_code>},
    {"residual-epilogues", Exactness::reassociating, fold_residual_epilogues}, // x + gate * GEMM: its epilogue
    {"fuse-rows", Exactness::exact, any_target<fuse_rows_default>},              // annotates fused groups
    {"fold-epilogues", Exactness::reassociating, fold_gemm_epilogues},           // lone bias/any GELU back to the GEMM
    {"rematerialize", Exactness::exact, any_target<rematerialize>,                // a group recomputes a cheap input
     "fuse-rows"},
    {"canonicalize-views", Exactness::exact, any_target<canonicalize_views>},    // views become groups' load index maps
    {"join-concat-pieces", Exactness::exact, any_target<join_concat_pieces>},    // congruent pieces of a concat: one kernel
};

}  // namespace

std::vector<std::string> pipeline_pass_names() {
  std::vector<std::string> names;
  for (const PassEntry& p : kPipeline) names.push_back(p.name);
  return names;
}

Result<PipelineResult> run_pipeline(const Graph& graph, const PipelineOptions& options) {
  for (const std::string& name : options.disabled) {
    bool known = false;
    for (const PassEntry& p : kPipeline) known = known || name == p.name;
    if (!known) {
      std::string all;
      for (const PassEntry& p : kPipeline) all += (all.empty() ? "" : ", ") + std::string(p.name);
      return make_error(ErrorCode::invalid_argument, "unknown pass '" + name + "' (passes: " + all + ")");
    }
  }
  PipelineResult result{graph, {}, measure_stage_work(graph), {}};
  for (const PassEntry& p : kPipeline) {
    if (options.disabled.count(p.name) || (p.only_with && options.disabled.count(p.only_with))) continue;
    if (p.needs_lanes && options.lanes < 2) continue;
    PassResult step = p.run(result.graph, options.supports);
    if (options.verify_between) {
      Status verified = verify_graph(step.graph);
      if (!verified.ok()) return with_context(verified.error(), std::string("after pass ") + p.name);
    }
    result.graph = std::move(step.graph);
    result.reports.push_back(std::move(step.report));
    result.stage_work.push_back(measure_stage_work(result.graph));
  }
  return result;
}

}  // namespace kiln::passes
