// kiln run MODEL: runs a model on the reference executor (the oracle) and prints, per output, its statistics
// and a checksum of its bytes. Inputs are seeded random unless given in a safetensors file. With --backend it
// also runs the optimized graph's Plan; --save-plan writes that plan as an artifact and --plan runs a saved
// one (backend/plan_artifact.h); --workload/--bucket pick the model of one workload bucket (workload/workload.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "agent/numerics_gate.h"
#include "backend/plan.h"
#include "backend/plan_artifact.h"
#include "cli/model_source.h"
#include "harness/compare.h"
#include "harness/sensitivity.h"
#include "passes/pipeline.h"
#include "models/weights.h"
#include "ref/executor.h"
#include "tune/apply.h"
#include "tune/result_json.h"
#include "util/format.h"
#include "workload/workload.h"

namespace kiln::cli {
namespace {

struct RunArgs {
  std::string model = "zoo:flux1-dev:tiny";
  uint64_t seed = 0;
  std::string inputs_file;
  std::string save_outputs;
  double max_memory_gb = 8.0;
  bool as_json = false;
  std::string backend;  // empty: the reference executor only
  std::string save_plan;  // write the backend's plan here
  std::string plan;       // run this saved plan instead of optimizing MODEL
  std::string workload;   // a workload file; MODEL becomes its bucket's model
  std::string bucket;     // which bucket (default: the first)
  bool model_given = false;
  std::string schedules_file;  // a `kiln tune -o` result; empty: default schedules
  int lanes = 1;               // backend::PlanOptions::lanes
  bool compare_steps = false;  // every value a step writes becomes an output, compared with the reference
  ModelSourceOptions source;
};



uint64_t fnv1a(const std::byte* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint8_t>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

nlohmann::json tensor_summary(const Tensor& t) {
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  int64_t nans = 0, infs = 0, finite = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    if (std::isnan(v)) { ++nans; continue; }
    if (std::isinf(v)) { ++infs; continue; }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += v * v;
    ++finite;
  }
  const double mean = finite ? sum / finite : 0.0;
  const double var = finite ? std::max(0.0, sum_sq / finite - mean * mean) : 0.0;
  return {{"dtype", std::string(dtype_name(t.dtype()))},
          {"shape", t.shape()},
          {"min", finite ? lo : 0.0},
          {"max", finite ? hi : 0.0},
          {"mean", mean},
          {"std", std::sqrt(var)},
          {"nan", nans},
          {"inf", infs},
          {"checksum", fmt::format("{:016x}", fnv1a(t.data(), t.byte_size()))}};
}

// A rough upper bound of what the reference run holds at once: all inputs plus the four largest values.
double estimated_bytes(const Graph& graph) {
  double inputs = 0;
  std::vector<double> sizes;
  for (const GraphInput& in : graph.inputs()) inputs += static_cast<double>(type_bytes(graph.value(in.value).type));
  for (const Value& v : graph.values()) sizes.push_back(static_cast<double>(type_bytes(v.type)));
  std::sort(sizes.rbegin(), sizes.rend());
  double largest = 0;
  for (size_t i = 0; i < sizes.size() && i < 4; ++i) largest += sizes[i];
  return inputs + largest;
}


// A backend and, with --plan, the saved plan loaded on it (whose model the run then uses).
struct BackendRun {
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<backend::Plan> plan;
  backend::PlanArtifactInfo info;
  std::vector<std::string> warnings;
};

// Runs the optimized graph's fused plan (or the loaded one) on a backend and compares it with the reference
// outputs of the original graph (and of the optimized one, which the plan must match within the numerics
// policy).
Result<nlohmann::json> run_on_backend(BackendRun& run, const RunArgs& args, const Graph& graph,
                                      const std::map<std::string, Tensor>& inputs,
                                      const std::map<std::string, Tensor>& reference) {
  backend::Backend* backend = run.backend.get();
  const std::string& name = args.backend;
  std::vector<std::string> schedule_notes;
  size_t tuned_kernels = 0;
  if (!run.plan) {
    passes::PipelineOptions pipeline;
    pipeline.supports = backend->supports_fn();
    pipeline.lanes = std::clamp(args.lanes, 1, backend->lanes());  // as the plan will run (Plan::build)
    KILN_ASSIGN_OR_RETURN(passes::PipelineResult optimized, passes::run_pipeline(graph, pipeline));
    backend::PlanOptions plan_options;
    if (!args.schedules_file.empty()) {
      KILN_ASSIGN_OR_RETURN(tune::TuneResult tuned, tune::load_tune_result(args.schedules_file));
      KILN_ASSIGN_OR_RETURN(tune::AppliedSchedules applied,
                            tune::apply_tune_result(tuned, optimized.graph, backend->target(),
                                                    "'" + args.schedules_file + "'"));
      plan_options.schedules = applied.schedules;
      schedule_notes = applied.notes;
    }
    tuned_kernels = plan_options.schedules.size();
    plan_options.lanes = args.lanes;
    if (args.compare_steps) optimized.graph = backend::with_step_outputs(optimized.graph);
    KILN_ASSIGN_OR_RETURN(run.plan, backend::Plan::build(*backend, optimized.graph, plan_options));
  }
  backend::Plan* plan = run.plan.get();
  KILN_ASSIGN_OR_RETURN(auto optimized_reference, ref::run_graph(plan->graph(), inputs));
  if (!args.save_plan.empty()) KILN_TRY(backend::save_plan_artifact(*plan, run.info, args.save_plan));
  KILN_TRY(plan->set_inputs(inputs));
  KILN_TRY(plan->execute());  // warm
  const auto start = std::chrono::steady_clock::now();
  KILN_TRY(plan->execute());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  KILN_ASSIGN_OR_RETURN(auto outputs, plan->outputs());
  const backend::PlanSummary& s = plan->summary();
  std::vector<std::string> notes = run.warnings;
  notes.insert(notes.end(), s.notes.begin(), s.notes.end());
  nlohmann::json j = {{"name", name}, {"device", backend->device().name}, {"kernels", s.kernels},
                      {"library_calls", s.library_calls}, {"aliases", s.aliases}, {"windows", s.windows},
                      {"in_place_concats", s.in_place_concats}, {"fallbacks", s.fallbacks},
                      {"compile_seconds", s.compile_seconds}, {"run_seconds", seconds}, {"notes", notes},
                      {"stages", {{"load", s.load_steps}, {"per_step", s.per_step_steps}, {"per_call", s.per_call_steps}}},
                      {"per_step_hits", plan->stats().per_step_hits}, {"per_step_misses", plan->stats().per_step_misses},
                      {"memory_bytes", s.memory_bytes}, {"memory_bytes_without_reuse", s.memory_bytes_without_reuse},
                      {"bucket", run.info.bucket}, {"tuned_kernels", tuned_kernels},
                      {"lanes", s.lanes}, {"lane_waits", s.lane_waits}};
  for (const std::string& note : schedule_notes) j["notes"].push_back(note);
  if (!args.plan.empty()) j["plan_file"] = args.plan;
  if (!args.save_plan.empty()) j["saved_plan"] = args.save_plan;
  const int64_t k = agent::longest_accumulation(plan->graph());
  // Below an FP8 quantize a sound plan differs from the reference by whole grid steps where its own rounding
  // upstream puts an input on the other side of a boundary: the policy admits what the reference itself moves
  // when those inputs move one ulp (harness/sensitivity.h), as the backend tests judge plans.
  std::map<std::string, double> sensitivity;
  if (harness::has_discontinuous_steps(plan->graph())) {
    KILN_ASSIGN_OR_RETURN(sensitivity, harness::quantize_sensitivity(plan->graph(), inputs, optimized_reference));
  }
  auto policy_of = [&](const std::string& out) {
    harness::TolerancePolicy policy;
    if (auto it = sensitivity.find(out); it != sensitivity.end()) policy.sensitivity = it->second;
    return policy;
  };
  for (const auto& [out, want] : reference) {
    const Tensor& got = outputs.at(out);
    const harness::TolerancePolicy policy = policy_of(out);
    const harness::Comparison vs_original = harness::compare_output(want, got, {}, false, k);
    const harness::Comparison passes = harness::compare_output(want, optimized_reference.at(out), {}, false, k);
    const harness::Comparison vs_optimized =
        harness::compare_output(optimized_reference.at(out), got, policy, false, k);
    const double passes_error = passes.stats.max_abs_error;
    j["outputs"][out] = {{"max_error", vs_original.stats.max_abs_error},
                         {"passes_error", passes_error},
                         {"ratio_to_passes", passes_error > 0 ? vs_original.stats.max_abs_error / passes_error : 0.0},
                         {"max_error_vs_optimized", vs_optimized.stats.max_abs_error},
                         {"baseline_ratio_vs_optimized", vs_optimized.stats.baseline_ratio()},
                         {"quantize_sensitivity", policy.sensitivity},
                         {"within_policy", vs_optimized.kind == harness::Mismatch::none},
                         {"detail", vs_optimized.describe()}};
  }
  // --compare-steps: each step's value against the reference of the optimized graph, in node order.
  for (const GraphOutput& o : plan->graph().outputs()) {
    if (reference.count(o.name)) continue;
    const harness::Comparison c =
        harness::compare_output(optimized_reference.at(o.name), outputs.at(o.name), policy_of(o.name), false, k);
    j["steps"].push_back({{"name", o.name.substr(5)}, {"max_error", c.stats.max_abs_error},
                          {"baseline_ratio", c.stats.baseline_ratio()}, {"within_policy", c.kind == harness::Mismatch::none},
                          {"detail", c.describe()}});
  }
  return j;
}

// Resolves --plan (the model comes from the artifact) and --workload/--bucket (the model of a bucket).
Result<BackendRun> prepare_backend_run(RunArgs& args) {
  BackendRun run;
  run.info.model = args.model;
  if (args.lanes < 1) return make_error(ErrorCode::invalid_argument, fmt::format("--lanes {}: must be >= 1", args.lanes));
  if (args.lanes > 1 && (args.backend.empty() || !args.plan.empty())) {
    return make_error(ErrorCode::invalid_argument,
                      "--lanes applies to a plan kiln builds for --backend (a saved --plan carries its own)");
  }
  if (!args.schedules_file.empty()) {
    if (args.backend.empty()) {
      return make_error(ErrorCode::invalid_argument, "--schedules applies to a backend's plan; add --backend cpu (or cuda)");
    }
    if (!args.plan.empty()) {
      return make_error(ErrorCode::invalid_argument, "--schedules and --plan exclude each other: a saved plan carries its schedules");
    }
  }
  if (!args.plan.empty() || !args.save_plan.empty()) {
    if (args.backend.empty()) {
      return make_error(ErrorCode::invalid_argument, std::string(args.plan.empty() ? "--save-plan" : "--plan") +
                                                         " needs --backend (cpu, or cuda in CUDA builds)");
    }
  }
  if (!args.workload.empty()) {
    if (!args.plan.empty()) return make_error(ErrorCode::invalid_argument, "--workload and --plan exclude each other");
    KILN_ASSIGN_OR_RETURN(workload::Workload w, workload::load_workload(args.workload));
    if (!args.model_given && !w.model.empty()) args.model = w.model;
    const workload::WorkloadBucket* bucket = &w.buckets[0];
    if (!args.bucket.empty()) {
      bucket = nullptr;
      std::string names;
      for (const workload::WorkloadBucket& b : w.buckets) {
        names += (names.empty() ? "" : ", ") + b.name;
        if (b.name == args.bucket) bucket = &b;
      }
      if (!bucket) {
        return make_error(ErrorCode::invalid_argument, "workload " + args.workload + " has no bucket '" + args.bucket +
                                                           "'; its buckets: " + names);
      }
    }
    KILN_ASSIGN_OR_RETURN(workload::BucketModel m, workload::workload_model_spec(args.model, *bucket));
    args.model = m.spec;
    args.source.dims.insert(args.source.dims.end(), m.dims.begin(), m.dims.end());
    run.info.bucket = bucket->name;
    run.info.bucket_dims = bucket->dims;
  } else if (!args.bucket.empty()) {
    return make_error(ErrorCode::invalid_argument, "--bucket needs --workload");
  }
  run.info.model = args.model;
  run.info.model_dims = args.source.dims;
  run.info.model_per_step = args.source.per_step;
  if (args.backend.empty()) return run;
  KILN_ASSIGN_OR_RETURN(run.backend, backend::make_backend(args.backend));
  if (!args.plan.empty()) {
    KILN_ASSIGN_OR_RETURN(backend::LoadedPlan loaded, backend::load_plan_artifact(*run.backend, args.plan));
    if (args.model_given && args.model != loaded.info.model) {
      return make_error(ErrorCode::invalid_argument, "plan " + args.plan + " was built for " + loaded.info.model +
                                                         ", not " + args.model + "; leave MODEL out with --plan");
    }
    args.model = loaded.info.model;
    args.source.dims = loaded.info.model_dims;
    args.source.per_step = loaded.info.model_per_step;
    run.plan = std::move(loaded.plan);
    run.info = loaded.info;
    run.warnings = loaded.warnings;
  }
  return run;
}

int run(RunArgs args) {
  auto prepared = prepare_backend_run(args);
  if (!prepared.ok()) return report_error(prepared.error());
  auto loaded = load_model_with_weights(args.model, args.source);
  if (!loaded.ok()) return report_error(loaded.error());
  Graph* graph = &loaded->graph;
  const double need = estimated_bytes(*graph);
  if (need > args.max_memory_gb * 1e9) {
    return report_error(make_error(
        ErrorCode::invalid_argument,
        fmt::format("{} needs about {} for a reference run, over the --max-memory limit of {:.1f} GB; run a "
                    "smaller configuration (e.g. zoo:flux1-dev:tiny) or raise --max-memory",
                    args.model, format_bytes(need), args.max_memory_gb)));
  }
  std::map<std::string, Tensor> inputs = models::random_inputs(*graph, args.seed);
  for (auto& [name, tensor] : loaded->weights) inputs[name] = std::move(tensor);  // the model file's own weights
  if (!args.inputs_file.empty()) {
    auto loaded = models::load_safetensors(args.inputs_file);
    if (!loaded.ok()) return report_error(loaded.error());
    for (auto& [name, tensor] : *loaded) {
      auto id = graph->find_value(name);
      if (!id || !graph->is_graph_input(*id)) {
        return report_error(make_error(ErrorCode::invalid_argument, "'" + args.inputs_file + "' holds tensor '" +
                                                                        name + "', which is not an input of the model"));
      }
      inputs[name] = std::move(tensor);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto outputs = ref::run_graph(*graph, inputs);
  if (!outputs.ok()) return report_error(outputs.error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json result;
  result["model"] = args.model;
  result["seed"] = args.seed;
  result["reference_seconds"] = seconds;
  for (const auto& [name, tensor] : *outputs) result["outputs"][name] = tensor_summary(tensor);
  if (!args.backend.empty()) {
    auto backend_result = run_on_backend(*prepared, args, *graph, inputs, *outputs);
    if (!backend_result.ok()) return report_error(backend_result.error());
    result["backend"] = *backend_result;
  }
  if (!args.save_outputs.empty()) {
    auto saved = models::save_safetensors(args.save_outputs, *outputs);
    if (!saved.ok()) return report_error(saved.error());
  }
  if (args.as_json) {
    fmt::print("{}\n", result.dump(1));
    return 0;
  }
  fmt::print("model  {} (seed {}), reference executor: {:.3f} s\n", args.model, args.seed, seconds);
  if (result.contains("backend")) {
    const auto& b = result["backend"];
    fmt::print("backend {} ({}): fused plan of {} kernels, {} library calls, {} free views, {} windows read in place, "
               "{} concats written in place, {} reference fallbacks; compile {:.2f} s, run {:.4f} s\n",
               b["name"].get<std::string>(), b["device"].get<std::string>(), b["kernels"].get<int>(),
               b["library_calls"].get<int>(), b["aliases"].get<int>(), b["windows"].get<int>(),
               b["in_place_concats"].get<int>(), b["fallbacks"].get<int>(),
               b["compile_seconds"].get<double>(), b["run_seconds"].get<double>());
    fmt::print("  stages: {} load, {} per-step, {} per-call steps on {} lane(s), {} cross-lane waits; per-step stage "
               "computed {}x, reused {}x; memory {} ({} with one buffer per intermediate); bucket {}\n",
               b["stages"]["load"].get<int>(), b["stages"]["per_step"].get<int>(), b["stages"]["per_call"].get<int>(),
               b["lanes"].get<int>(), b["lane_waits"].get<int>(),
               b["per_step_misses"].get<int64_t>(), b["per_step_hits"].get<int64_t>(),
               format_bytes(b["memory_bytes"].get<double>()), format_bytes(b["memory_bytes_without_reuse"].get<double>()),
               b["bucket"].get<std::string>());
    if (b.contains("plan_file")) fmt::print("  plan loaded from {}\n", b["plan_file"].get<std::string>());
    if (b.contains("saved_plan")) fmt::print("  plan saved to {}\n", b["saved_plan"].get<std::string>());
    for (const auto& [name, o] : b["outputs"].items()) {
      const double sensitivity = o["quantize_sensitivity"].get<double>();
      fmt::print("  {:<10} max error vs reference {:.3g} ({:.2f}x the optimized graph's own error {:.3g}); vs the "
                 "reference of the optimized graph {:.3g} ({:.2f}x baseline{}): {}\n",
                 name, o["max_error"].get<double>(), o["ratio_to_passes"].get<double>(),
                 o["passes_error"].get<double>(), o["max_error_vs_optimized"].get<double>(),
                 o["baseline_ratio_vs_optimized"].get<double>(),
                 sensitivity > 0 ? fmt::format("; its FP8 rounding moves by {:.3g} when its inputs move one ulp", sensitivity) : "",
                 o["within_policy"].get<bool>() ? "ok" : "MISMATCH");
    }
    for (const auto& note : b["notes"]) fmt::print("  note: {}\n", note.get<std::string>());
    if (b.contains("steps")) {
      for (const auto& st : b["steps"]) {
        fmt::print("  step %{:<40} max error {:.3g} ({:.2f}x baseline): {}\n", st["name"].get<std::string>(),
                   st["max_error"].get<double>(), st["baseline_ratio"].get<double>(),
                   st["within_policy"].get<bool>() ? "ok" : st["detail"].get<std::string>());
      }
    }
  }
  for (const auto& [name, s] : result["outputs"].items()) {
    fmt::print("output {:<10} {}{}  min {:.6g}  max {:.6g}  mean {:.6g}  std {:.6g}  nan {}  inf {}  checksum {}\n",
               name, s["dtype"].get<std::string>(), shape_to_string(s["shape"].get<Shape>()), s["min"].get<double>(),
               s["max"].get<double>(), s["mean"].get<double>(), s["std"].get<double>(), s["nan"].get<int64_t>(),
               s["inf"].get<int64_t>(), s["checksum"].get<std::string>());
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("run", "Run a model on the reference executor: output statistics and checksums");
  auto args = std::make_shared<RunArgs>();
  auto* model = cmd->add_option("MODEL", args->model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")
                    ->capture_default_str();
  add_model_source_options(cmd, &args->source);
  cmd->add_option("--seed", args->seed, "seed of the random inputs and weights")->capture_default_str();
  cmd->add_option("--inputs", args->inputs_file,
                  "safetensors file with weights and/or inputs by value name (the rest are random)");
  cmd->add_option("--save-outputs", args->save_outputs, "write the outputs to this safetensors file");
  cmd->add_option("--max-memory", args->max_memory_gb, "refuse runs estimated above this many GB")
      ->capture_default_str();
  cmd->add_flag("--json", args->as_json, "print the result as JSON");
  cmd->add_option("--backend", args->backend,
                  "also run the optimized graph's fused plan on this backend (cpu, or cuda in builds with the CUDA backend) and report its error vs the "
                  "reference");
  cmd->add_option("--schedules", args->schedules_file,
                  "with --backend: run the kernels with the tuned schedules of this `kiln tune -o` file (winners by "
                  "kernel hash; ones for other kernels are ignored with a note)");
  cmd->add_option("--lanes", args->lanes,
                  "with --backend: let the plan's steps spread over this many of the backend's lanes (CUDA: 2 "
                  "streams; the CPU has 1), docs/runtime.md");
  cmd->add_flag("--compare-steps", args->compare_steps,
               "with --backend: also store every value a step writes and compare each with the reference of the "
               "optimized graph, in order (where a plan first departs from it)");
  cmd->add_option("--save-plan", args->save_plan, "with --backend: save the plan as an artifact (JSON) to this file");
  cmd->add_option("--plan", args->plan,
                  "with --backend: run this saved plan (its model, inputs seeded as usual) instead of optimizing MODEL");
  cmd->add_option("--workload", args->workload, "a workload file (docs/workload.md): run the model of one bucket");
  cmd->add_option("--bucket", args->bucket, "with --workload: the bucket by name (default: the first)");
  cmd->callback([=] {
    args->model_given = model->count() > 0;
    *exit_code = run(*args);
  });
}

}  // namespace kiln::cli
