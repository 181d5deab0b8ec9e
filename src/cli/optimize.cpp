// kiln optimize [MODEL] [--workload FILE]: the optimize loop (agent/optimize.h) on one backend with the
// knowledge base (agent/kb_knowledge.h: stored plans, lessons, recipes) and the CPU tuner plugged in: baseline,
// profile, ranked opportunities behind the numerics and end-to-end A/B gates. Writes the plan artifact, its
// config, the report (HTML + JSON) and a Perfetto trace per bucket (with a workload, one directory per bucket
// and workload.html/json). Progress goes to stderr, one line per event; the summary to stdout.
#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "agent/in_process_tuner.h"
#include "agent/kb_knowledge.h"
#include "agent/optimize.h"
#include "agent/optimize_workload.h"
#include "backend/plan_artifact.h"
#include "kb/fingerprint.h"
#include "workload/workload.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "models/weights.h"
#include "profile/trace.h"
#include "report/peer_command.h"
#include "report/report_html.h"
#include "report/report_json.h"

namespace kiln::cli {
namespace {

struct OptimizeArgs {
  std::string model = "zoo:flux1-dev:tiny";
  std::string workload;
  std::vector<std::string> peers;  // NAME=MS figures measured outside kiln (report::PeerFigure)
  std::string backend = "cpu";
  std::string budget = "3m";
  std::string output_dir = "kiln-out";
  std::string kb_path = "kiln-kb.sqlite";
  bool no_kb = false;
  bool force = false;
  double tune_share = 0.5;
  double settle_seconds = 2;
  double sustain_seconds = 1;
  std::vector<std::string> sustained_peers;  // NAME=MS figures of peers timed under sustained load
  std::string peer_command;                  // run before each head-to-head round (report/peer_command.h)
  int peer_rounds = 3;
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

// plan.json (the plan artifact), plan-config.json, report.json, report.html and trace.json of one bucket.
Status write_bucket(const std::filesystem::path& dir, const agent::OptimizeResult& result, bool knowledge,
                    const backend::PlanArtifactInfo& info, const std::vector<report::PeerFigure>& peers) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::io_error, "cannot create " + dir.string() + ": " + ec.message());
  KILN_TRY(backend::save_plan_artifact(*result.final_plan, info, (dir / "plan.json").string()));
  const nlohmann::json report = report::report_json(result, knowledge, peers);
  const std::vector<profile::TraceTrack> tracks = {{"baseline", &result.baseline_profile},
                                                   {"final", &result.final_profile}};
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"plan-config.json", agent::final_plan_json(result) + "\n"},
           {"report.json", report.dump(1) + "\n"},
           {"report.html", report::render_report_html(report)},
           {"trace.json", profile::trace_event_json(tracks) + "\n"}}) {
    KILN_TRY(write_file(dir / name, text));
  }
  return ok_status();
}

void print_bucket(const std::string& name, const agent::OptimizeResult& r) {
  fmt::print("{}{} on {}: {:.4g} ms -> {:.4g} ms ({:.2f}x), {} of {} attempts kept, {:.1f} s{}\n", name,
             r.model_key, r.device.name, r.baseline_seconds() * 1e3, r.final_seconds() * 1e3,
             r.baseline_seconds() / r.final_seconds(), r.waterfall.size() - 1, r.attempts.size(), r.elapsed_seconds,
             r.plan_reused ? " (stored plan re-verified)" : "");
  fmt::print("  final: the Plan timed alone at the end ({} warm-up calls, median of {}); the kept A/B ratios chained "
             "from the baseline gave {:.4g} ms{}\n", agent::kPeerTiming.warmup, agent::kPeerTiming.repetitions,
             r.final_chained_seconds * 1e3,
             r.final_sustained_seconds > 0
                 ? fmt::format("; under sustained load {:.4g} ms", r.final_sustained_seconds * 1e3)
                 : std::string());
  for (const agent::AttemptRecord& a : r.attempts) fmt::print("  {:<16} {:<8} {}\n", a.opportunity, a.outcome, a.reason);
  const agent::KnowledgeCounts& c = r.knowledge_counts;
  const std::string plan = c.plan_hits        ? "plan reused"
                           : c.near_plan_hits ? "near plan " + r.near_plan + " as the prior"
                           : c.plan_rejected  ? "plan rejected"
                                              : "plan decided";
  fmt::print("  knowledge base: {}, {} exact / {} near recipe hits, {} cold tasks, {} undecided, {} candidates "
             "compiled, {} lessons applied\n",
             plan, c.exact_hits, c.near_hits, c.cold_tasks, c.tasks_undecided, c.tune_candidates, c.lessons_applied);
}

std::string command_line(const OptimizeArgs& a) {
  std::string s = "kiln optimize " + a.model;
  if (!a.workload.empty()) s += " --workload " + a.workload;
  return s + " --backend " + a.backend + " --budget " + a.budget;
}

int run_optimize(const OptimizeArgs& args) {
  auto budget = parse_duration(args.budget);
  if (!budget.ok()) return report_error(budget.error());
  if (!(args.tune_share >= 0 && args.tune_share <= 1)) {
    return report_error(make_error(ErrorCode::invalid_argument, "--tune-share must be between 0 and 1"));
  }
  const bool with_workload = !args.workload.empty();
  std::vector<report::PeerFigure> peers;
  for (const std::string& text : args.peers) {
    auto peer = report::parse_peer(text);
    if (!peer.ok()) return report_error(peer.error());
    peers.push_back(*peer);
  }
  for (const std::string& text : args.sustained_peers) {
    auto peer = report::parse_peer(text, "--peer-sustained");
    if (!peer.ok()) return report_error(peer.error());
    if (!(args.sustain_seconds > 0))
      return report_error(make_error(ErrorCode::invalid_argument,
                                     "--peer-sustained needs kiln's own sustained time: give --sustain above 0"));
    peer->sustained = true;
    peers.push_back(*peer);
  }
  if (!(args.peer_rounds >= 1)) {
    return report_error(
        make_error(ErrorCode::invalid_argument,
                   fmt::format("--peer-rounds {} is not a number of rounds: give 1 or more", args.peer_rounds)));
  }
  if (with_workload && !args.peer_command.empty()) {
    return report_error(make_error(ErrorCode::invalid_argument,
                                   "--peer-command times a peer of one model at one shape; it does not apply to a "
                                   "workload's buckets (run kiln optimize on the bucket's model instead)"));
  }
  if (with_workload && !peers.empty()) {
    return report_error(make_error(ErrorCode::invalid_argument,
                                   "--peer is a figure for one model at one shape; it does not apply to a workload's "
                                   "buckets (run kiln optimize on the bucket's model instead)"));
  }
  workload::Workload w = workload::default_workload(args.model);
  std::string base_model = args.model;
  if (with_workload) {
    auto loaded = workload::load_workload(args.workload);
    if (!loaded.ok()) return report_error(loaded.error());
    w = std::move(loaded).value();
    if (!w.model.empty() && args.model == OptimizeArgs{}.model) base_model = w.model;
  }
  auto backend = backend::make_backend(args.backend);
  if (!backend.ok()) return report_error(backend.error());

  std::unique_ptr<agent::KbKnowledge> knowledge;
  agent::OptimizeOptions options;
  options.budget_seconds = *budget;
  options.settle_seconds = args.settle_seconds;
  options.sustain_seconds = args.sustain_seconds;
  options.progress = [](const std::string& line) { fmt::print(stderr, "kiln optimize {}\n", line); };
  if (!args.peer_command.empty()) {
    const report::PeerCommand peer{args.peer_command, "", (std::filesystem::path(args.output_dir) / "peer").string()};
    options.peer_round = [peer] { return report::run_peer_command(peer); };
    options.peer_rounds = args.peer_rounds;
  }
  if (!args.no_kb) {
    agent::KbKnowledgeOptions kb_options;
    kb_options.force = args.force;
    auto opened = agent::KbKnowledge::open(args.kb_path, kb::fingerprint_of((*backend)->device()),
                                           {command_line(args), base_model, args.workload, args.backend}, kb_options);
    if (!opened.ok()) return report_error(opened.error());
    knowledge = std::move(opened).value();
    options.knowledge = knowledge.get();
    if (args.backend == "cpu") options.tuner = knowledge->tuner();  // the harness tuner (docs/tuning.md)
  }
  if (args.backend != "cpu" && !args.no_kb) {
    // Kernels this backend runs in-process (CUDA): searched on the device itself, each candidate checked
    // against the reference first (agent/in_process_tuner.h). --no-kb promises no tuner on every backend
    // (it ran 63 s of a 110 s budget on the H200 in session 20 with --no-kb).
    agent::InProcessTunerOptions tuner_options;
    tuner_options.budget_seconds = args.tune_share * *budget;
    options.tuner = agent::in_process_tuner(tuner_options);
  }

  std::vector<agent::BucketSpec> buckets;
  std::vector<backend::PlanArtifactInfo> infos(w.buckets.size());
  for (size_t i = 0; i < w.buckets.size(); ++i) {
    const workload::WorkloadBucket& b = w.buckets[i];
    infos[i].bucket = b.name;
    infos[i].bucket_dims = b.dims;
    buckets.push_back({b.name, b.weight, [&, i]() -> Result<agent::BucketModel> {
                         const workload::WorkloadBucket& bucket = w.buckets[i];
                         KILN_ASSIGN_OR_RETURN(workload::BucketModel spec, workload::workload_model_spec(base_model, bucket));
                         ModelSourceOptions source = args.source;
                         for (const std::string& d : spec.dims) source.dims.push_back(d);
                         KILN_ASSIGN_OR_RETURN(LoadedModel loaded, load_model_with_weights(spec.spec, source));
                         infos[i].model = spec.spec;
                         infos[i].model_dims = source.dims;
                         infos[i].model_per_step = source.per_step;
                         agent::BucketModel m{spec.spec, std::move(loaded.graph), {}};
                         m.inputs = models::random_inputs(m.graph, args.seed);
                         for (auto& [name, tensor] : loaded.weights) m.inputs[name] = std::move(tensor);
                         return m;
                       }});
  }
  auto result = agent::optimize_workload(buckets, **backend, options, [&](double bucket_budget) {
    if (knowledge) knowledge->set_tune_budget(bucket_budget * args.tune_share);
  });
  if (knowledge) {
    for (const std::string& warning : knowledge->warnings()) fmt::print(stderr, "kiln optimize: knowledge base: {}\n", warning);
    Status st = knowledge->finish(result.ok());
    if (!st.ok()) fmt::print(stderr, "kiln optimize: knowledge base: {}\n", st.error().message);
  }
  if (!result.ok()) return report_error(result.error());

  const std::filesystem::path out(args.output_dir);
  std::vector<std::string> dirs;
  for (size_t i = 0; i < result->buckets.size(); ++i) {
    const agent::BucketResult& b = result->buckets[i];
    const std::string dir = with_workload ? b.name : ".";
    Status st = write_bucket(out / dir, b.result, knowledge != nullptr, infos[i], peers);
    if (!st.ok()) return report_error(st.error());
    dirs.push_back(dir);
    print_bucket(with_workload ? "[" + b.name + ", weight " + fmt::format("{:.3g}", b.weight) + "] " : "", b.result);
    for (const report::PeerFigure& p : peers) {
      const double kiln = p.sustained ? b.result.final_sustained_seconds : b.result.final_seconds();
      fmt::print("  next to {}{} ({:.4g} ms): kiln's final Plan ({:.4g} ms, timed as the peer is) is {:.2f}x its time\n",
                 p.name, p.sustained ? " under sustained load" : "", p.seconds * 1e3, kiln * 1e3, kiln / p.seconds);
    }
    for (const report::HeadToHead& h : report::head_to_head(b.result)) {
      fmt::print(
          "  head to head with {} over {} rounds in turn: kiln / peer {:.3f}x (median; {:.3f}x to {:.3f}x), "
          "kiln {:.4g} ms, {} {:.4g} ms (medians)\n",
          h.name, h.rounds, h.ratio_median, h.ratio_min, h.ratio_max, h.kiln_median_seconds * 1e3, h.name,
          h.peer_median_seconds * 1e3);
    }
    if (!b.result.peer_rounds_error.empty()) {
      fmt::print("  head to head stopped short: {}\n", b.result.peer_rounds_error);
    }
  }
  if (with_workload) {
    const nlohmann::json wj = report::workload_report_json(*result, dirs);
    for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
             {"workload.json", wj.dump(1) + "\n"}, {"workload.html", report::render_workload_html(wj)}}) {
      Status st = write_file(out / name, text);
      if (!st.ok()) return report_error(st.error());
    }
    fmt::print("weighted over {} buckets: {:.4g} ms -> {:.4g} ms ({:.2f}x) in {:.1f} s\n", result->buckets.size(),
               result->baseline_seconds * 1e3, result->final_seconds * 1e3,
               result->baseline_seconds / result->final_seconds, result->elapsed_seconds);
    fmt::print("wrote {}/workload.html, workload.json and per bucket plan.json, report.html, report.json, trace.json\n",
               args.output_dir);
  } else {
    fmt::print("wrote {}/plan.json (plan artifact), plan-config.json, report.html, report.json, trace.json\n",
               args.output_dir);
  }
  if (knowledge) fmt::print("knowledge base: {}\n", args.kb_path);
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
  cmd->add_option("-o,--output", args->output_dir,
                  "output directory: plan.json (plan artifact), plan-config.json, report.html, report.json, trace.json "
                  "(with --workload: one directory per bucket, workload.html and workload.json)")
      ->capture_default_str();
  cmd->add_option("--kb", args->kb_path, "knowledge base file (created when missing)")->capture_default_str();
  cmd->add_flag("--no-kb", args->no_kb, "no knowledge base: nothing reused or recorded, no tuner");
  cmd->add_flag("--force", args->force, "decide everything again: ignore stored plans and negative lessons");
  cmd->add_option("--tune-share", args->tune_share, "fraction of each bucket's budget the kernel tuner may use")
      ->capture_default_str();
  cmd->add_option("--settle", args->settle_seconds,
                  "seconds the device idles before the final Plan is timed, as a peer timed after its own compile "
                  "starts from an idle device")
      ->capture_default_str();
  cmd->add_option("--sustain", args->sustain_seconds,
                  "seconds the final Plan then runs back to back before 30 more calls are timed: its time under "
                  "sustained load (0: not measured)")
      ->capture_default_str();
  cmd->add_option("--peer-sustained", args->sustained_peers,
                  "NAME=MS: a peer's time under sustained load (bench/gpu/peer_regimes.py); the report shows kiln's "
                  "sustained time next to it (repeatable)");
  cmd->add_option("--seed", args->seed, "seed of the random inputs and weights")->capture_default_str();
  cmd->add_option("--peer", args->peers,
                  "NAME=MS: a peer's time for this model on this device, measured in the same session (e.g. "
                  "torch.compile=2.53); the report shows kiln's final time next to it (repeatable)");
  cmd->add_option("--peer-command", args->peer_command,
                  "head to head: a shell command (run in the current directory) that times a peer and prints "
                  "NAME=MS figures as its last line; after the final timing it runs before each of --peer-rounds "
                  "timings of the final Plan, so each round's ratio compares one state of the device");
  cmd->add_option("--peer-rounds", args->peer_rounds, "rounds of --peer-command and the final Plan, in turn")
      ->capture_default_str();
  cmd->callback([=] { *exit_code = run_optimize(*args); });
}

}  // namespace kiln::cli
