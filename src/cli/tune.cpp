// kiln tune MODEL: runs the model-level passes, collects the kernel tasks of the fused plan (deduplicated by
// structural hash), searches schedules for each through the candidate harness (tune/tuner.h), and prints one
// row per task: candidates tried and passed, the winner's time against the default's, the worst candidate's
// and the unfused baseline's. `-o FILE` writes the winners and all evidence as JSON for `kiln run --schedules`.
#include <fmt/format.h>

#include <thread>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "passes/pipeline.h"
#include "tune/result_json.h"
#include "tune/tuner.h"

namespace kiln::cli {
namespace {

struct TuneArgs {
  std::string model;
  std::string backend = "cpu";
  double budget_seconds = 300;
  int max_candidates = 32;
  int jobs = 0;
  std::string output;
  bool candidates = false;
  bool quiet = false;
  bool no_baseline = false;
  ModelSourceOptions source;
};

std::string us(double seconds) { return seconds > 0 ? fmt::format("{:.2f}", seconds * 1e6) : "-"; }
std::string ratio(double num, double den) { return num > 0 && den > 0 ? fmt::format("{:.2f}x", num / den) : "-"; }

void print_candidates(const tune::KernelTuneResult& k) {
  fmt::print("\n  candidates of {} ({}):\n", k.hash, k.label);
  fmt::print("  {:<9} {:<40} {:<20} {:>10}  {}\n", "round", "schedule (one thread)", "outcome", "median us", "evidence");
  for (const tune::CandidateRecord& c : k.candidates) {
    fmt::print("  {:<9} {:<40} {:<20} {:>10}  {}\n", c.round, kernel::schedule_to_string(c.schedule), c.outcome,
               c.timed ? us(c.time.median) : "-", c.summary.substr(0, 100));
  }
}

void print_result(const tune::TuneResult& r, bool candidates) {
  fmt::print("kiln tune {} on {} ({}; {})\n", r.model, r.target, r.device, r.compiler);
  fmt::print("times: median us per call on one thread, benchmark protocol kiln-bench-cpu/1 (2 short sessions)\n\n");
  fmt::print("{:<3} {:<17} {:>4} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8}  {}\n", "#", "kernel hash", "occ",
             "tried", "passed", "best", "default", "worst", "unfused", "dflt/best", "unf/best", "winner");
  int i = 0;
  for (const tune::KernelTuneResult& k : r.kernels) {
    fmt::print("{:<3} {:<17} {:>4} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8}  {}{}\n", i++, k.hash.substr(0, 16),
               k.occurrences, k.tried(), k.passed(), us(k.winner_seconds), us(k.default_seconds),
               us(k.worst_seconds), us(k.baseline_seconds), ratio(k.default_seconds, k.winner_seconds),
               ratio(k.baseline_seconds, k.winner_seconds), kernel::schedule_to_string(k.winner),
               k.budget_exhausted ? " (budget)" : "");
    fmt::print("    {}: {}; {}\n", k.label.substr(0, 90), k.shape.substr(0, 120), k.decision);
    if (!k.baseline_note.empty()) fmt::print("    unfused baseline: {}\n", k.baseline_note);
  }
  for (const tune::LibraryTuneResult& l : r.library) {
    fmt::print("lib {:<17} {:>4} {:>9} us  {} ({})\n", "library call", l.occurrences, us(l.seconds), l.shape, l.note);
  }
  for (const std::string& note : r.notes) fmt::print("note: {}\n", note);
  if (candidates) {
    for (const tune::KernelTuneResult& k : r.kernels) print_candidates(k);
  }
}

int run_tune(const TuneArgs& args) {
  if (args.backend != "cpu") {
    return report_error(make_error(ErrorCode::unsupported,
                                   "kiln tune --backend " + args.backend +
                                       ": only the cpu tuner exists so far (GPU candidates need the GPU harness "
                                       "path); use --backend cpu"));
  }
  if (args.budget_seconds <= 0 || args.max_candidates < 1 || args.jobs < 0) {
    return report_error(make_error(ErrorCode::invalid_argument,
                                   "kiln tune: --budget must be > 0, --max-candidates >= 1 and --jobs >= 0"));
  }
  auto graph = load_model(args.model, args.source);
  if (!graph.ok()) return report_error(graph.error());
  auto backend = backend::make_backend(args.backend);
  if (!backend.ok()) return report_error(backend.error());
  passes::PipelineOptions pipeline;
  pipeline.supports = (*backend)->supports_fn();
  auto optimized = passes::run_pipeline(*graph, pipeline);
  if (!optimized.ok()) return report_error(optimized.error());

  tune::TuneOptions options = tune::default_tune_options();
  options.budget_seconds = args.budget_seconds;
  options.max_candidates = args.max_candidates;
  options.jobs = args.jobs;
  options.measure_baseline = !args.no_baseline;
  if (!args.quiet) options.progress = [](const std::string& line) { fmt::print(stderr, "tuned {}\n", line); };
  auto result = tune::tune_graph(optimized->graph, backend->get(), options);
  if (!result.ok()) return report_error(result.error());
  result->model = args.model;
  print_result(*result, args.candidates);
  if (!args.output.empty()) {
    Status saved = tune::save_tune_result(args.output, *result);
    if (!saved.ok()) return report_error(saved.error());
    fmt::print("wrote {} ({} tuned schedules; `kiln run {} --backend {} --schedules {}`)\n", args.output,
               result->schedules().size(), args.model, args.backend, args.output);
  }
  return 0;
}

}  // namespace

void add_tune_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("tune", "Search kernel schedules per task of the fused plan through the harness");
  auto args = std::make_shared<TuneArgs>();
  cmd->add_option("MODEL", args->model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")->required();
  add_model_source_options(cmd, &args->source);
  cmd->add_option("--backend", args->backend, "the backend whose kernels are tuned (cpu)")->capture_default_str();
  cmd->add_option("--budget", args->budget_seconds, "seconds for the whole model, shared out over its tasks")
      ->capture_default_str();
  cmd->add_option("--max-candidates", args->max_candidates, "candidates per task, the default schedule included")
      ->capture_default_str();
  cmd->add_option("--jobs", args->jobs, "candidates compiled and verified at once (0: the logical cores)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "write winners by kernel hash and all evidence to this JSON file");
  cmd->add_flag("--candidates", args->candidates, "also print every candidate of every task");
  cmd->add_flag("--no-baseline", args->no_baseline, "do not time the unfused baseline of fused groups");
  cmd->add_flag("--quiet", args->quiet, "no progress lines on stderr");
  cmd->callback([=] { *exit_code = run_tune(*args); });
}

}  // namespace kiln::cli
