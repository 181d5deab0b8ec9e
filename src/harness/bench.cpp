#include "harness/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "harness/inputs.h"
#include "harness/worker_client.h"

namespace kiln::harness {
namespace {

size_t round_up_64(size_t n) { return n == 0 ? 64 : (n + 63) / 64 * 64; }

struct BenchRun {
  CandidateOutcome outcome;                  // passed, or what went wrong
  std::vector<std::vector<double>> samples;  // per library, seconds per call, in time order
  std::vector<int64_t> calls_per_sample;
  int64_t rotation_bytes = 0;
  double other_load_cores = 0;
};

// Busy and total jiffies of the whole machine (/proc/stat); steal counts as busy: someone else had the CPU.
struct CpuTimes {
  double busy = 0;
  double total = 0;
};
CpuTimes read_cpu_times() {
  std::ifstream in("/proc/stat");
  std::string label;
  in >> label;
  CpuTimes t;
  double field = 0;
  for (int i = 0; i < 8 && in >> field; ++i) {
    t.total += field;
    if (i != 3 && i != 4) t.busy += field;  // idle, iowait
  }
  return t;
}

bool parse_samples(const std::string& text, size_t libraries, BenchRun& run) {
  std::istringstream in(text);
  std::string word;
  if (!(in >> word) || word != "calls_per_sample") return false;
  run.calls_per_sample.resize(libraries);
  for (int64_t& c : run.calls_per_sample) {
    if (!(in >> c)) return false;
  }
  run.samples.assign(libraries, {});
  double value = 0;
  for (size_t k = 0; in >> value; k = (k + 1) % libraries) run.samples[k].push_back(value);
  return !run.samples[0].empty() && run.samples.back().size() == run.samples[0].size();
}

BenchRun run_bench_worker(const KernelTask& task, const std::vector<std::string>& libraries,
                          const BenchOptions& options) {
  BenchRun run;
  auto fault = [&](std::string summary) {
    run.outcome.cls = OutcomeClass::harness_fault;
    run.outcome.evidence.summary = std::move(summary);
    return run;
  };
  WorkerRequest request;
  request.mode = WorkerMode::bench;
  for (const std::string& lib : libraries) request.libraries.push_back(std::filesystem::absolute(lib).string());
  request.inputs = task_input_types(task);
  request.outputs = task_output_types(task);
  request.guard_bytes = options.worker.guard_bytes;
  request.drop_privileges = options.worker.drop_privileges;
  request.trials = 1;

  const uint64_t seed = fresh_secret_seed();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    inputs.push_back(draw_input(request.inputs[i], Distribution::normal, derive_seed(seed, 0, i)));
  }
  auto reference = run_task_reference(task, inputs);
  if (!reference.ok()) return fault("the reference failed on task " + task.name + ": " + reference.error().message);

  size_t slot_bytes = 0;
  for (const TensorType& t : request.inputs) slot_bytes += round_up_64(type_bytes(t));
  for (const TensorType& t : request.outputs) slot_bytes += round_up_64(type_bytes(t));
  const auto wanted =
      static_cast<int64_t>(options.rotation_cache_multiple * static_cast<double>(last_level_cache_bytes()));
  const int64_t rotation = std::min(wanted, options.max_rotation_bytes);
  request.bench = {
      options.warmup_seconds,
      options.min_seconds,
      options.max_seconds,
      options.min_samples,
      options.max_samples,
      options.sample_seconds,
      std::clamp<int64_t>((rotation + static_cast<int64_t>(slot_bytes) - 1) / static_cast<int64_t>(slot_bytes), 1,
                        options.max_rotation_slots)};
  run.rotation_bytes = request.bench.slots * static_cast<int64_t>(slot_bytes);

  WorkerOptions worker = options.worker;
  // The worker's limit covers setup and the checks; the measurement's own time comes on top.
  worker.wall_seconds += static_cast<double>(libraries.size()) * options.warmup_seconds + options.max_seconds * 1.5;
  // The rotation copies are allocated after the worker's memory limit is set: they come on top of the headroom
  // (on a machine that reports a large last-level cache they are most of it).
  worker.memory_bytes += run.rotation_bytes;
  const RecordLayout layout = record_layout(request);
  const std::string scratch = make_scratch_dir(options.worker.scratch_root, "bench");
  const CpuTimes before = read_cpu_times();
  auto ran = run_worker(request, {inputs}, worker, scratch);
  const CpuTimes after = read_cpu_times();
  if (after.total > before.total) {
    const double busy_cores = (after.busy - before.busy) / (after.total - before.total) *
                              static_cast<double>(std::thread::hardware_concurrency());
    run.other_load_cores = std::max(0.0, busy_cores - 1.0);  // the worker itself keeps one core busy
  }
  if (!options.worker.keep_scratch) {
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  if (!ran.ok()) return fault(ran.error().message);
  if (auto unfinished = classify_unfinished(*ran, worker, [](const std::string& step) { return step; })) {
    run.outcome = std::move(*unfinished);
    return run;
  }
  if (!parse_samples(ran->samples, libraries.size(), run) || ran->results.size() != layout.bytes * libraries.size()) {
    return fault("the worker's timing results are incomplete");
  }
  std::vector<Finding> findings;
  std::vector<ErrorStats> errors;
  const Expectation expected{inputs, *reference, options.tolerance, task.exact, task_reduction_length(task),
                             task_output_precisions(task)};
  for (size_t k = 0; k < libraries.size(); ++k) {
    const size_t before = findings.size();
    check_record(reinterpret_cast<const std::byte*>(ran->results.data()) + k * layout.bytes, request, 0, expected,
                 findings, errors);
    for (size_t f = before; f < findings.size(); ++f) {
      findings[f].evidence.summary = fmt::format("candidate {} after timing: {}", k, findings[f].evidence.summary);
    }
  }
  if (const Finding* worst = worst_finding(findings)) {
    run.outcome.cls = worst->cls;
    run.outcome.evidence = worst->evidence;
  } else {
    run.outcome.cls = OutcomeClass::passed;
  }
  return run;
}

// `time` is already computed from run's samples (one session or several).
BenchResult make_result(const KernelTask& task, const BenchRun& run, const TimingStats& time, int sessions,
                        const BenchOptions& options, const MachineRecord& machine) {
  BenchResult r;
  r.sessions = sessions;
  r.outcome = run.outcome;
  r.machine = machine;
  r.rotation_bytes = run.rotation_bytes;
  r.floor_seconds = task_min_bytes(task) / machine.memcpy_bytes_per_second;
  r.other_load_cores = run.other_load_cores;
  r.contended = run.other_load_cores > options.contention_threshold;
  if (time.samples > 0) {
    r.time = time;
    if (r.time.median < options.floor_fraction * r.floor_seconds) {
      // Before calling it lazy, make sure the floor was not measured on a busy moment: measure the bandwidth
      // again (the better figure is kept) and judge against that.
      r.machine.memcpy_bytes_per_second = remeasure_memcpy_bandwidth();
      r.floor_seconds = task_min_bytes(task) / r.machine.memcpy_bytes_per_second;
    }
    if (r.time.median < options.floor_fraction * r.floor_seconds) {
      r.quarantined = true;
      r.quarantine_reason = fmt::format(
          "median {:.3g} s per call is below the memory floor {:.3g} s ({:.0f} bytes at {:.2f} GB/s measured)",
          r.time.median, r.floor_seconds, task_min_bytes(task), r.machine.memcpy_bytes_per_second / 1e9);
    }
  }
  if (r.outcome.cls == OutcomeClass::passed) {
    r.outcome.evidence.summary = fmt::format(
        "median {:.4g} s [{:.4g}, {:.4g}] over {} sessions, {} samples of {} calls; other load {:.2f} cores{}{}",
        r.time.median, r.time.ci_low, r.time.ci_high, sessions, r.time.samples, r.time.calls_per_sample,
        r.other_load_cores, r.contended ? " (contended)" : "",
        r.quarantined ? "; QUARANTINED: " + r.quarantine_reason : "");
  }
  return r;
}

}  // namespace

TimingStats timing_stats(std::vector<double> samples, double confidence) {
  TimingStats s;
  s.confidence = confidence;
  s.samples = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  // The largest rank j (1-based) with P(Binomial(n, 1/2) <= j - 1) <= alpha / 2: then [x_(j), x_(n+1-j)]
  // covers the median with probability >= confidence.
  const double half_alpha = (1.0 - confidence) / 2;
  const double log_n_factorial = std::lgamma(static_cast<double>(n) + 1);
  double cdf = 0;
  size_t j = 0;
  for (size_t i = 0; i < n / 2; ++i) {
    const double di = static_cast<double>(i);
    cdf += std::exp(log_n_factorial - std::lgamma(di + 1) - std::lgamma(static_cast<double>(n) - di + 1) -
                    static_cast<double>(n) * std::log(2.0));
    if (cdf > half_alpha) break;
    j = i + 1;
  }
  s.ci_low = j == 0 ? s.min : samples[j - 1];
  s.ci_high = j == 0 ? s.max : samples[n - j];
  return s;
}

TimingStats blocked_timing_stats(const std::vector<double>& samples, double confidence, int blocks) {
  TimingStats s = timing_stats(samples, confidence);
  const size_t n = samples.size();
  if (blocks < 2 || n < 2 * static_cast<size_t>(blocks)) return s;
  std::vector<double> medians;
  for (int b = 0; b < blocks; ++b) {
    const size_t begin = n * static_cast<size_t>(b) / static_cast<size_t>(blocks);
    const size_t end = n * static_cast<size_t>(b + 1) / static_cast<size_t>(blocks);
    medians.push_back(timing_stats({samples.begin() + static_cast<std::ptrdiff_t>(begin),
                                    samples.begin() + static_cast<std::ptrdiff_t>(end)},
                                   confidence)
                          .median);
  }
  const TimingStats over_blocks = timing_stats(medians, confidence);
  s.ci_low = std::min(over_blocks.ci_low, s.median);
  s.ci_high = std::max(over_blocks.ci_high, s.median);
  return s;
}

TimingStats session_timing_stats(const std::vector<std::vector<double>>& sessions, double confidence) {
  std::vector<double> medians, all;
  for (const std::vector<double>& s : sessions) {
    if (s.empty()) continue;
    medians.push_back(timing_stats(s, confidence).median);
    all.insert(all.end(), s.begin(), s.end());
  }
  TimingStats t = timing_stats(medians, confidence);
  const TimingStats pooled = timing_stats(all, confidence);
  t.samples = pooled.samples;
  t.min = pooled.min;
  t.max = pooled.max;
  return t;
}

BenchResult benchmark_candidate(const KernelTask& task, const std::string& library_path, const BenchOptions& options) {
  const MachineRecord machine = machine_record(options.compiler);
  const int sessions = std::max(1, options.sessions);
  std::vector<std::vector<double>> samples;
  BenchRun run;
  double load = 0;
  for (int s = 0; s < sessions; ++s) {
    run = run_bench_worker(task, {library_path}, options);
    load += run.other_load_cores;
    if (!run.samples.empty()) samples.push_back(run.samples[0]);  // a failed check still gets its figure judged
    if (run.outcome.cls != OutcomeClass::passed) break;
  }
  const int completed = static_cast<int>(samples.size());
  run.other_load_cores = load / std::max(1, completed);
  TimingStats time = completed == 1 ? blocked_timing_stats(samples[0], options.confidence, options.blocks)
                                    : session_timing_stats(samples, options.confidence);
  if (!run.calls_per_sample.empty()) time.calls_per_sample = run.calls_per_sample[0];
  return make_result(task, run, time, completed, options, machine);
}

ABResult compare_candidates(const KernelTask& task, const std::string& library_a, const std::string& library_b,
                            const BenchOptions& options) {
  const BenchRun run = run_bench_worker(task, {library_a, library_b}, options);
  ABResult ab;
  ab.machine = machine_record(options.compiler);
  for (size_t k = 0; k < 2; ++k) {
    TimingStats time;
    if (k < run.samples.size()) {
      time = blocked_timing_stats(run.samples[k], options.confidence, options.blocks);
      time.calls_per_sample = run.calls_per_sample[k];
    }
    (k == 0 ? ab.a : ab.b) = make_result(task, run, time, 1, options, ab.machine);
  }
  if (run.outcome.cls != OutcomeClass::passed || run.samples.size() != 2) {
    ab.summary = "no comparison: " + describe(run.outcome);
    return ab;
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < run.samples[0].size(); ++i) ratios.push_back(run.samples[0][i] / run.samples[1][i]);
  ab.ratio = blocked_timing_stats(ratios, options.confidence, options.blocks);
  const bool b_faster = ab.ratio.ci_low > 1 && ab.ratio.median > 1 + options.tie_threshold;
  const bool a_faster = ab.ratio.ci_high < 1 && ab.ratio.median < 1 - options.tie_threshold;
  ab.tie = !a_faster && !b_faster;
  ab.winner = b_faster && !ab.b.quarantined ? Winner::b : Winner::a;
  ab.summary =
      fmt::format("time A/B median {:.4f} [{:.4f}, {:.4f}] over {} rounds: {}", ab.ratio.median, ab.ratio.ci_low,
                  ab.ratio.ci_high, ab.ratio.samples, ab.tie ? "tie, A kept" : (b_faster ? "B faster" : "A faster"));
  if (ab.a.quarantined || ab.b.quarantined)
    ab.summary += "; quarantined: " + std::string(ab.a.quarantined ? "A " : "") + (ab.b.quarantined ? "B" : "");
  return ab;
}

std::string bench_to_json(const BenchResult& r) {
  const nlohmann::json j = {{"protocol", r.protocol},
                            {"outcome", outcome_class_name(r.outcome.cls)},
                            {"evidence", r.outcome.evidence.summary},
                            {"median_seconds", r.time.median},
                            {"min_seconds", r.time.min},
                            {"max_seconds", r.time.max},
                            {"ci_seconds", {r.time.ci_low, r.time.ci_high}},
                            {"confidence", r.time.confidence},
                            {"samples", r.time.samples},
                            {"calls_per_sample", r.time.calls_per_sample},
                            {"floor_seconds", r.floor_seconds},
                            {"quarantined", r.quarantined},
                            {"quarantine_reason", r.quarantine_reason},
                            {"rotation_bytes", r.rotation_bytes},
                            {"sessions", r.sessions},
                            {"other_load_cores", r.other_load_cores},
                            {"contended", r.contended},
                            {"machine", nlohmann::json::parse(machine_to_json(r.machine))}};
  return j.dump();
}

}  // namespace kiln::harness
