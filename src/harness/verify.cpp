#include "harness/verify.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>

#include "harness/worker_client.h"

namespace kiln::harness {
namespace {

struct Trial {
  Distribution distribution;
  std::vector<Tensor> inputs;
  std::vector<Tensor> reference;
};

// "trial 2 1" -> "trial 2 (wide), call 1"; "load 0" -> "loading the candidate".
std::string label_step(const std::vector<Trial>& trials, const std::string& in_flight) {
  int t = -1, call = -1;
  if (std::sscanf(in_flight.c_str(), "trial %d %d", &t, &call) == 2 && t >= 0 && t < static_cast<int>(trials.size())) {
    return fmt::format("trial {} ({}), call {}", t, distribution_name(trials[static_cast<size_t>(t)].distribution),
                       call);
  }
  if (in_flight.rfind("load", 0) == 0) return "loading the candidate (its static initializers)";
  return in_flight;
}

void remove_dir(const std::string& dir, bool keep) {
  std::error_code ec;
  if (!keep) std::filesystem::remove_all(dir, ec);
}

}  // namespace

std::string default_worker_path(WorkerDevice device) {
  const char* name = device == WorkerDevice::cuda ? "kiln-gpu-worker" : "kiln-worker";
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const std::filesystem::path& dir : {exe.parent_path(), exe.parent_path().parent_path()}) {
    const std::filesystem::path candidate = dir / name;
    if (std::filesystem::exists(candidate, ec)) return candidate.string();
  }
  return "";
}

std::string make_scratch_dir(const std::string& root, const std::string& stem) {
  static std::atomic<int> counter{0};
  const std::filesystem::path base =
      root.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(root);
  const std::filesystem::path dir = base / fmt::format("kiln-{}-{}-{}", stem, getpid(), counter++);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  chmod(dir.c_str(), 0755);  // an unprivileged worker must read what is here (worker.h)
  return dir.string();
}

CandidateOutcome verify_candidate(const KernelTask& task, const std::string& library_path,
                                  const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t seed = options.seed != 0 ? options.seed : fresh_secret_seed();
  auto finish = [&](CandidateOutcome o) {
    o.evidence.seed = seed;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return o;
  };
  auto fault = [&](std::string summary) {
    CandidateOutcome o;
    o.cls = OutcomeClass::harness_fault;
    o.evidence.summary = std::move(summary);
    return finish(std::move(o));
  };

  WorkerRequest request;
  request.mode = WorkerMode::verify;
  request.libraries = {std::filesystem::absolute(library_path).string()};
  request.inputs = task_input_types(task);
  request.outputs = task_output_types(task);
  request.guard_bytes = options.worker.guard_bytes;
  request.drop_privileges = options.worker.drop_privileges;
  request.device = options.worker.device;
  if (options.trials_per_distribution < 1 || options.distributions.empty()) {
    return fault("verify options ask for no trials");
  }

  std::vector<Trial> trials;
  std::vector<std::vector<Tensor>> input_sets;
  for (int k = 0; k < options.trials_per_distribution; ++k) {
    for (Distribution d : options.distributions) {
      Trial trial{d, {}, {}};
      const uint64_t index = trials.size();
      for (size_t i = 0; i < request.inputs.size(); ++i) {
        trial.inputs.push_back(draw_input(request.inputs[i], d, derive_seed(seed, index, i)));
      }
      auto reference = run_task_reference(task, trial.inputs);
      if (!reference.ok()) return fault("the reference failed on task " + task.name + ": " + reference.error().message);
      trial.reference = std::move(reference).value();
      input_sets.push_back(trial.inputs);
      trials.push_back(std::move(trial));
    }
  }
  request.trials = static_cast<int>(trials.size());

  const RecordLayout layout = record_layout(request);
  const std::string scratch = make_scratch_dir(options.worker.scratch_root, "verify");
  auto run = run_worker(request, input_sets, options.worker, scratch);
  remove_dir(scratch, options.worker.keep_scratch);
  if (!run.ok()) return fault(run.error().message);
  auto unfinished =
      classify_unfinished(*run, options.worker, [&](const std::string& step) { return label_step(trials, step); });
  if (unfinished) {
    if (run->in_flight.rfind("trial", 0) == 0) {
      std::sscanf(run->in_flight.c_str(), "trial %d %d", &unfinished->evidence.trial, &unfinished->evidence.run);
      const int t = unfinished->evidence.trial;
      if (t >= 0 && t < request.trials) {
        unfinished->evidence.distribution = distribution_name(trials[static_cast<size_t>(t)].distribution);
      }
    }
    return finish(std::move(*unfinished));
  }
  if (run->results.size() != layout.bytes * 2 * trials.size()) {
    return fault(fmt::format("the worker left {} bytes of results, expected {}", run->results.size(),
                             layout.bytes * 2 * trials.size()));
  }

  std::vector<Finding> findings;
  std::vector<ErrorStats> errors, unused;
  const int64_t reduction_length = task_reduction_length(task);
  const std::vector<DType> precisions = task_output_precisions(task);
  const auto* results = reinterpret_cast<const std::byte*>(run->results.data());
  for (size_t t = 0; t < trials.size(); ++t) {
    const size_t before = findings.size();
    const std::byte* first = results + (2 * t) * layout.bytes;
    const std::byte* second = results + (2 * t + 1) * layout.bytes;
    const Expectation expected{trials[t].inputs, trials[t].reference, options.tolerance, task.exact, reduction_length,
                               precisions};
    check_record(first, request, 0, expected, findings, errors);
    const size_t after_first = findings.size();
    check_record(second, request, 1, expected, findings, unused);
    check_determinism(first, second, request, findings);
    for (size_t f = before; f < findings.size(); ++f) {
      Evidence& e = findings[f].evidence;
      e.trial = static_cast<int>(t);
      e.run = f < after_first ? 0 : 1;
      e.distribution = distribution_name(trials[t].distribution);
      e.summary = fmt::format("trial {} ({}), call {}: {}", t, e.distribution, e.run, e.summary);
    }
  }

  CandidateOutcome outcome;
  if (const Finding* worst = worst_finding(findings)) {
    outcome.cls = worst->cls;
    outcome.evidence = worst->evidence;
  } else {
    outcome.cls = OutcomeClass::passed;
    std::string summary = fmt::format("{} trials x 2 calls", trials.size());
    for (size_t i = 0; i < errors.size(); ++i) {
      summary += fmt::format("; output {}: max error {:.3g} = {:.2f}x baseline, {:.2f} ulp", i, errors[i].max_abs_error,
                             errors[i].baseline_ratio(), errors[i].max_ulp_error);
    }
    outcome.evidence.summary = summary;
  }
  outcome.evidence.errors = errors;
  outcome.evidence.worker_log = run->process.stderr_tail.substr(0, 8192);
  return finish(std::move(outcome));
}

CandidateOutcome evaluate_candidate(const KernelTask& task, const std::string& source, const CompileOptions& compile,
                                    const VerifyOptions& options) {
  const std::string scratch = make_scratch_dir(options.worker.scratch_root, "candidate");
  CompiledCandidate built = compile_candidate(source, scratch, compile);
  CandidateOutcome outcome = built.outcome;
  if (outcome.cls == OutcomeClass::compiled) {
    const double compile_seconds = outcome.seconds;
    outcome = verify_candidate(task, built.library_path, options);
    outcome.seconds += compile_seconds;
  }
  remove_dir(scratch, options.worker.keep_scratch);
  return outcome;
}

}  // namespace kiln::harness
