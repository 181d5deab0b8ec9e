// kiln opt MODEL: runs the model-level pass pipeline and reports what each pass changed, the memory-bound
// kernels before and after fusion and the bytes they move; optionally writes the optimized graph.
#include <fmt/format.h>

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
  std::string output;
  bool print = false;
  bool as_json = false;
  int notes = 5;
  ModelSourceOptions source;
};

int run_opt(const OptArgs& args) {
  auto graph = load_model(args.model, args.source);
  if (!graph.ok()) return report_error(graph.error());
  passes::PipelineOptions options;
  options.disabled.insert(args.disable.begin(), args.disable.end());
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
    for (const passes::PassReport& r : result->reports) {
      j["passes"].push_back({{"pass", r.pass}, {"changed", r.changed}, {"nodes_before", r.nodes_before},
                             {"nodes_after", r.nodes_after}, {"notes", r.notes}});
    }
    j["memory_bound_kernels"] = {{"before", k.kernels_before}, {"after", k.kernels_after}};
    j["memory_bound_bytes"] = {{"before", k.bytes_before}, {"after", k.bytes_after},
                               {"saved", k.bytes_before - k.bytes_after}};
    fmt::print("{}\n", j.dump(1));
    return 0;
  }
  fmt::print("model {}: {} nodes\n", args.model, graph->nodes().size());
  for (const passes::PassReport& r : result->reports) {
    fmt::print("  {:<10} {:>6} -> {:<6} nodes  {}\n", r.pass, r.nodes_before, r.nodes_after,
               r.changed ? "changed" : "no change");
    for (size_t i = 0; i < r.notes.size() && static_cast<int>(i) < args.notes; ++i) {
      fmt::print("             {}\n", r.notes[i]);
    }
    if (static_cast<int>(r.notes.size()) > args.notes) {
      fmt::print("             ... {} more\n", r.notes.size() - static_cast<size_t>(args.notes));
    }
  }
  fmt::print("memory-bound kernels per call: {} -> {}; bytes they move: {} -> {} (predicted saving {})\n",
             k.kernels_before, k.kernels_after, format_bytes(k.bytes_before), format_bytes(k.bytes_after),
             format_bytes(k.bytes_before - k.bytes_after));
  return 0;
}

}  // namespace

void add_opt_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("opt", "Run the model-level passes: decompose, CSE, DCE, row fusion; report");
  auto args = std::make_shared<OptArgs>();
  cmd->add_option("MODEL", args->model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")->required();
  add_model_source_options(cmd, &args->source);
  cmd->add_option("--disable", args->disable, "pass names to skip (repeatable)")->delimiter(',');
  cmd->add_option("-o,--output", args->output, "write the optimized graph (.json, else text)");
  cmd->add_flag("--print", args->print, "print the optimized graph in text form");
  cmd->add_flag("--json", args->as_json, "print the report as JSON");
  cmd->add_option("--notes", args->notes, "notes shown per pass")->capture_default_str();
  cmd->callback([=] { *exit_code = run_opt(*args); });
}

}  // namespace kiln::cli
