// kiln optimize [MODEL]: the optimize loop (agent/optimize.h) on one backend: baseline, profile, ranked
// opportunities tried one by one behind the numerics and end-to-end A/B gates; writes the final plan, the
// report (HTML + JSON) and a Perfetto trace of the baseline and final plans into the output directory.
// Progress goes to stderr, one line per event; the summary to stdout.
#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "agent/optimize.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "models/weights.h"
#include "profile/trace.h"
#include "report/report_html.h"
#include "report/report_json.h"

namespace kiln::cli {
namespace {

struct OptimizeArgs {
  std::string model = "zoo:flux1-dev:tiny";
  std::string workload;
  std::string backend = "cpu";
  std::string budget = "10m";
  std::string output_dir = "kiln-out";
  uint64_t seed = 0;
  ModelSourceOptions source;
};

// "90", "90s", "5m", "1h" -> seconds.
Result<double> parse_duration(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = used ? text.substr(used) : "";
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (used == 0 || scale < 0 || value <= 0) {
    return make_error(ErrorCode::invalid_argument,
                      "--budget '" + text + "' is not a duration; give a positive number with s, m or h (e.g. 90s, 5m)");
  }
  return value * scale;
}

Status write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) return make_error(ErrorCode::io_error, "cannot write " + path.string());
  return ok_status();
}

int run_optimize(const OptimizeArgs& args) {
  if (!args.workload.empty()) {
    return report_error(make_error(ErrorCode::unsupported,
                                   "--workload " + args.workload +
                                       ": workload files are not read by this build yet (src/workload, issue 6); "
                                       "give the shapes in the model spec instead (e.g. zoo:flux1-dev:tiny,...)"));
  }
  auto budget = parse_duration(args.budget);
  if (!budget.ok()) return report_error(budget.error());
  auto loaded = load_model_with_weights(args.model, args.source);
  if (!loaded.ok()) return report_error(loaded.error());
  auto backend = backend::make_backend(args.backend);
  if (!backend.ok()) return report_error(backend.error());
  std::error_code ec;
  std::filesystem::create_directories(args.output_dir, ec);
  if (ec) return report_error(make_error(ErrorCode::io_error, "cannot create -o " + args.output_dir + ": " + ec.message()));

  std::map<std::string, Tensor> inputs = models::random_inputs(loaded->graph, args.seed);
  for (auto& [name, tensor] : loaded->weights) inputs[name] = std::move(tensor);
  agent::OptimizeOptions options;
  options.model_key = args.model;
  options.budget_seconds = *budget;
  options.progress = [](const std::string& line) { fmt::print(stderr, "kiln optimize {}\n", line); };
  auto result = agent::optimize(loaded->graph, inputs, **backend, options);
  if (!result.ok()) return report_error(result.error());

  const nlohmann::json report = report::report_json(*result, options.knowledge != nullptr);
  const std::filesystem::path dir(args.output_dir);
  const std::vector<profile::TraceTrack> tracks = {{"baseline", &result->baseline_profile},
                                                   {"final", &result->final_profile}};
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"plan.json", agent::final_plan_json(*result) + "\n"},
           {"report.json", report.dump(1) + "\n"},
           {"report.html", report::render_report_html(report)},
           {"trace.json", profile::trace_event_json(tracks) + "\n"}}) {
    Status st = write_file(dir / name, text);
    if (!st.ok()) return report_error(st.error());
  }
  fmt::print("{} on {}: {:.4g} ms -> {:.4g} ms ({:.2f}x), {} of {} attempts kept\n", args.model,
             result->device.name, result->baseline_seconds() * 1e3, result->final_seconds() * 1e3,
             result->baseline_seconds() / result->final_seconds(), result->waterfall.size() - 1,
             result->attempts.size());
  for (const agent::AttemptRecord& a : result->attempts) {
    fmt::print("  {:<16} {:<8} {}\n", a.opportunity, a.outcome, a.reason);
  }
  fmt::print("wrote {}/plan.json, report.html, report.json, trace.json\n", args.output_dir);
  return 0;
}

}  // namespace

void add_optimize_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "optimize", "Optimize a model for a backend: baseline, profile, ranked rewrites behind numerics and A/B gates, report");
  auto args = std::make_shared<OptimizeArgs>();
  cmd->add_option("MODEL", args->model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")
      ->capture_default_str();
  add_model_source_options(cmd, &args->source);
  cmd->add_option("--workload", args->workload, "workload file (shape buckets with traffic weights)");
  cmd->add_option("--backend", args->backend, "cpu, or cuda in builds with the CUDA backend")->capture_default_str();
  cmd->add_option("--budget", args->budget, "time after which no new attempt starts (90s, 5m, 1h)")->capture_default_str();
  cmd->add_option("-o,--output", args->output_dir, "output directory: plan.json, report.html, report.json, trace.json")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the random inputs and weights")->capture_default_str();
  cmd->callback([=] { *exit_code = run_optimize(*args); });
}

}  // namespace kiln::cli
