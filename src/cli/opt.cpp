// kiln opt MODEL: runs the model-level pass pipeline and reports what each pass changed and found (by pattern),
// the work it moved into the load-time stage, the per-step stage, the memory-bound kernels before and after
// fusion and the bytes they move, and the views that still copy; optionally writes the optimized graph.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "ir/json.h"
#include "ir/text.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"
#include "util/format.h"

namespace kiln::cli {
namespace {

struct OptArgs {
  std::string model;
  std::vector<std::string> disable;
  std::vector<std::string> only;  // --passes: run just these (in pipeline order)
  std::string output;
  bool print = false;
  bool as_json = false;
  int notes = 5;
  int lanes = 1;
  ModelSourceOptions source;
};

// "a ×3, b ×2": patterns by descending count (ties by name), the first `shown` of them.
std::string describe_found(const std::map<std::string, int>& found, size_t shown = 8) {
  std::vector<std::pair<std::string, int>> sorted(found.begin(), found.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (size_t i = 0; i < sorted.size() && i < shown; ++i) {
    out += (i ? ", " : "") + sorted[i].first + " ×" + std::to_string(sorted[i].second);
  }
  if (sorted.size() > shown) out += fmt::format(", ... ({} more patterns)", sorted.size() - shown);
  return out;
}

int total_found(const std::map<std::string, int>& found) {
  int n = 0;
  for (const auto& [pattern, count] : found) n += count;
  return n;
}

// What a pass (or the whole pipeline) moved into the load-time stage: node and byte deltas and the ops gained.
struct Hoisted {
  int nodes = 0;
  double bytes = 0;
  std::map<std::string, int> ops;
};
Hoisted hoisted_between(const passes::StageWork& before, const passes::StageWork& after) {
  Hoisted h;
  h.nodes = after.nodes[0] - before.nodes[0];
  h.bytes = after.bytes[0] - before.bytes[0];
  for (const auto& [op, n] : after.load_ops) {
    auto it = before.load_ops.find(op);
    const int gained = n - (it == before.load_ops.end() ? 0 : it->second);
    if (gained > 0) h.ops[op] = gained;
  }
  return h;
}

int run_opt(const OptArgs& args) {
  auto graph = load_model(args.model, args.source);
  if (!graph.ok()) return report_error(graph.error());
  passes::PipelineOptions options;
  options.disabled.insert(args.disable.begin(), args.disable.end());
  options.lanes = args.lanes;
  if (!args.only.empty()) {
    const std::vector<std::string> all = passes::pipeline_pass_names();
    for (const std::string& name : args.only) {
      if (std::find(all.begin(), all.end(), name) == all.end()) {
        std::string known;
        for (const std::string& n : all) known += (known.empty() ? "" : ", ") + n;
        return report_error(
            make_error(ErrorCode::invalid_argument, "unknown pass '" + name + "' in --passes (passes: " + known + ")"));
      }
    }
    for (const std::string& name : all) {
      if (std::find(args.only.begin(), args.only.end(), name) == args.only.end()) options.disabled.insert(name);
    }
  }
  auto result = passes::run_pipeline(*graph, options);
  if (!result.ok()) return report_error(result.error());
  const passes::KernelSummary k = passes::summarize_memory_bound_kernels(*graph, result->graph);
  if (!args.output.empty()) {
    const bool json = args.output.size() >= 5 && args.output.substr(args.output.size() - 5) == ".json";
    std::ofstream out(args.output, std::ios::binary);
    out << (json ? print_graph_json(result->graph) : print_graph_text(result->graph));
    if (!out) return report_error(make_error(ErrorCode::io_error, "cannot write '" + args.output + "'"));
  }
  if (args.print) fmt::print("{}\n", print_graph_text(result->graph));
  if (args.as_json) {
    nlohmann::json j;
    j["model"] = args.model;
    const passes::StageWork* before = &result->input_work;
    for (size_t i = 0; i < result->reports.size(); ++i) {
      const passes::PassReport& r = result->reports[i];
      const Hoisted h = hoisted_between(*before, result->stage_work[i]);
      j["passes"].push_back({{"pass", r.pass}, {"changed", r.changed}, {"nodes_before", r.nodes_before},
                             {"nodes_after", r.nodes_after}, {"notes", r.notes}, {"found", r.found},
                             {"load_time", {{"nodes_added", h.nodes}, {"bytes_added", h.bytes}, {"ops_added", h.ops}}}});
      before = &result->stage_work[i];
    }
    const passes::StageWork& last = result->stage_work.empty() ? result->input_work : result->stage_work.back();
    const Hoisted total = hoisted_between(result->input_work, last);
    j["hoisted_to_load_time"] = {{"nodes", total.nodes}, {"bytes", total.bytes}, {"ops", total.ops},
                                 {"load_stage_nodes", last.nodes[0]}, {"load_stage_bytes", last.bytes[0]}};
    j["per_step_stage"] = {{"nodes", last.nodes[1]}, {"bytes", last.bytes[1]}, {"ops", last.step_ops}};
    j["memory_bound_kernels"] = {{"before", k.kernels_before}, {"after", k.kernels_after},
                                 {"view_copies_after", k.view_copies_after}};
    j["memory_bound_bytes"] = {{"before", k.bytes_before}, {"after", k.bytes_after},
                               {"saved", k.bytes_before - k.bytes_after}};
    fmt::print("{}\n", j.dump(1));
    return 0;
  }
  fmt::print("model {}: {} nodes\n", args.model, graph->nodes().size());
  const passes::StageWork* before = &result->input_work;
  for (size_t p = 0; p < result->reports.size(); ++p) {
    const passes::PassReport& r = result->reports[p];
    fmt::print("  {:<15} {:>6} -> {:<6} nodes  {}\n", r.pass, r.nodes_before, r.nodes_after,
               r.changed ? "changed" : "no change");
    if (!r.found.empty()) fmt::print("      found {}: {}\n", total_found(r.found), describe_found(r.found));
    const Hoisted h = hoisted_between(*before, result->stage_work[p]);
    if (h.nodes != 0 || h.bytes != 0) {
      fmt::print("      load-time stage: {:+} nodes, {}{} moved once at load{}{}\n", h.nodes, h.bytes < 0 ? "-" : "+",
                 format_bytes(std::fabs(h.bytes)), h.ops.empty() ? "" : " (", h.ops.empty() ? "" : describe_found(h.ops) + ")");
    }
    before = &result->stage_work[p];
    for (size_t i = 0; i < r.notes.size() && static_cast<int>(i) < args.notes; ++i) {
      fmt::print("             {}\n", r.notes[i]);
    }
    if (static_cast<int>(r.notes.size()) > args.notes) {
      fmt::print("             ... {} more\n", r.notes.size() - static_cast<size_t>(args.notes));
    }
  }
  const passes::StageWork& last = result->stage_work.empty() ? result->input_work : result->stage_work.back();
  const Hoisted total = hoisted_between(result->input_work, last);
  fmt::print("hoisted to load time: {} nodes, {} moved once at load{}{}; load-time stage {} -> {} nodes\n",
             total.nodes, format_bytes(total.bytes), total.ops.empty() ? "" : " (",
             total.ops.empty() ? "" : describe_found(total.ops) + ")", result->input_work.nodes[0], last.nodes[0]);
  if (last.nodes[1] > 0) {
    fmt::print("per-step stage: {} nodes, {} computed once per step and shared by every call of the step ({})\n",
               last.nodes[1], format_bytes(last.bytes[1]), describe_found(last.step_ops, 6));
  }
  fmt::print("memory-bound kernels per call: {} -> {}; bytes they move: {} -> {} (predicted saving {})\n",
             k.kernels_before, k.kernels_after, format_bytes(k.bytes_before), format_bytes(k.bytes_after),
             format_bytes(k.bytes_before - k.bytes_after));
  fmt::print("views that still copy: {} ({}); every other view is an index map of a fused group's loads or a "
             "contiguous window a library op reads\n",
             k.view_copies_after, format_bytes(k.view_copy_bytes_after));
  return 0;
}

}  // namespace

void add_opt_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("opt", "Run the model-level passes (GEMM merging, scale packing, decomposition, CSE/DCE, row fusion, epilogues, "
      "view canonicalization); report what each found, the load-time and per-step stages, kernels and bytes");
  auto args = std::make_shared<OptArgs>();
  cmd->add_option("MODEL", args->model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")->required();
  add_model_source_options(cmd, &args->source);
  cmd->add_option("--disable", args->disable, "pass names to skip (repeatable)")->delimiter(',');
  cmd->add_option("--passes", args->only, "run only these passes, in pipeline order (comma-separated)")->delimiter(',');
  cmd->add_option("-o,--output", args->output, "write the optimized graph (.json, else text)");
  cmd->add_flag("--print", args->print, "print the optimized graph in text form");
  cmd->add_flag("--json", args->as_json, "print the report as JSON");
  cmd->add_option("--notes", args->notes, "notes shown per pass")->capture_default_str();
  cmd->add_option("--lanes", args->lanes, "lanes the plan will run on (defer-columns runs with 2 or more)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([=] { *exit_code = run_opt(*args); });
}

}  // namespace kiln::cli
