#include "tune/tuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "harness/machine.h"
#include "harness/task.h"
#include "kernel/emit.h"
#include "kernel/kernel_task.h"
#include "models/weights.h"
#include "tune/search.h"

namespace kiln::tune {
namespace {

using Clock = std::chrono::steady_clock;
using kernel::Schedule;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int logical_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

void remove_dir(const std::string& dir) {
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

// One candidate through check, emit, compile and verify. `library` is set when it passed.
struct Evaluated {
  CandidateRecord record;
  std::string library;
  std::string scratch;
};

Evaluated evaluate(const harness::KernelTask& task, const kernel::Kernel& k, const Schedule& s,
                   const std::string& round, const TuneOptions& options) {
  Evaluated e;
  e.record.schedule = s;
  e.record.round = round;
  Status implementable = kernel::can_implement(k, s, kernel::Target::cpu);
  auto source = implementable.ok() ? kernel::emit_harness_candidate(k, s) : Result<std::string>(implementable.error());
  if (!source.ok()) {
    e.record.outcome = "invalid-schedule";
    e.record.summary = source.error().message;
    return e;
  }
  std::string text = std::move(source).value();
  if (options.rewrite_source) text = options.rewrite_source(s, std::move(text));
  e.scratch = harness::make_scratch_dir(options.verify.worker.scratch_root, "tune");
  harness::CompiledCandidate built = harness::compile_candidate(text, e.scratch, options.compile);
  harness::CandidateOutcome outcome = built.outcome;
  if (outcome.cls == harness::OutcomeClass::compiled) outcome = harness::verify_candidate(task, built.library_path, options.verify);
  e.record.outcome = harness::outcome_class_name(outcome.cls);
  e.record.summary = outcome.evidence.summary;
  if (outcome.cls == harness::OutcomeClass::passed) e.library = built.library_path;
  return e;
}

// Evaluates `schedules` `jobs` at a time; stops starting new ones at `deadline`.
std::vector<Evaluated> evaluate_parallel(const harness::KernelTask& task, const kernel::Kernel& k,
                                         const std::vector<Schedule>& schedules, const std::string& round,
                                         const TuneOptions& options, Clock::time_point deadline) {
  std::vector<std::optional<Evaluated>> slots(schedules.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < schedules.size(); i = next++) {
      if (Clock::now() >= deadline) return;
      slots[i] = evaluate(task, k, schedules[i], round, options);
    }
  };
  const int jobs = std::clamp(options.jobs > 0 ? options.jobs : logical_cores(), 1,
                              static_cast<int>(std::max<size_t>(1, schedules.size())));
  std::vector<std::thread> threads;
  for (int j = 1; j < jobs; ++j) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  std::vector<Evaluated> out;
  for (auto& slot : slots) {
    if (slot) out.push_back(std::move(*slot));
  }
  return out;
}

void time_candidate(const harness::KernelTask& task, Evaluated& e, const TuneOptions& options) {
  if (e.library.empty()) return;
  const harness::BenchResult bench = harness::benchmark_candidate(task, e.library, options.bench);
  e.record.contended = bench.contended;
  e.record.quarantined = bench.quarantined;
  if (bench.quarantined) {
    e.record.summary = "quarantined: " + bench.quarantine_reason;
  } else if (bench.outcome.cls != harness::OutcomeClass::passed) {
    // Failed while timed (e.g. the post-timing check): that is the candidate's outcome.
    e.record.outcome = harness::outcome_class_name(bench.outcome.cls);
    e.record.summary = "during timing: " + bench.outcome.evidence.summary;
  }
  e.record.timed = bench.valid();
  if (e.record.timed) e.record.time = bench.time;
}

// The unfused baseline: every member of the group as its own kernel, default schedule, timed the same way.
void measure_baseline(const Graph& graph, const TuneTask& task, const TuneOptions& options, int cores,
                      KernelTuneResult& result) {
  double total = 0;
  for (NodeId m : task.members) {
    auto lowered = kernel::lower_nodes(graph, {m}, "member");
    if (!lowered.ok()) {
      result.baseline_note = graph.node_label(m) + " cannot be a kernel alone: " + lowered.error().message;
      return;
    }
    if (!kernel::alias_offsets(*lowered).empty()) continue;  // a view the plan would alias: free
    auto member_task = kernel::kernel_task(graph, *lowered);
    if (!member_task.ok()) {
      result.baseline_note = graph.node_label(m) + ": " + member_task.error().message;
      return;
    }
    Schedule s = kernel::default_schedule(*lowered, kernel::Target::cpu, cores);
    s.threads = 1;
    Evaluated e = evaluate(*member_task, *lowered, s, "baseline", options);
    time_candidate(*member_task, e, options);
    remove_dir(e.scratch);
    if (!e.record.timed) {
      result.baseline_note = graph.node_label(m) + " alone: " + e.record.outcome + " " + e.record.summary;
      return;
    }
    total += e.record.time.median;
    ++result.baseline_kernels;
  }
  result.baseline_seconds = total;
}

const Evaluated* fastest(const std::vector<Evaluated>& all) {
  const Evaluated* best = nullptr;
  for (const Evaluated& e : all) {
    if (e.record.timed && (!best || e.record.time.median < best->record.time.median)) best = &e;
  }
  return best;
}

}  // namespace

TuneOptions default_tune_options() {
  TuneOptions o;
  o.compile.flags = backend::CpuBackendOptions{}.flags;  // time the code the plan will run
  o.compile.cache_dir = (std::filesystem::temp_directory_path() / "kiln-tune-cache").string();
  o.bench.sessions = 2;
  o.bench.warmup_seconds = 0.02;
  o.bench.min_seconds = 0.04;
  o.bench.max_seconds = 0.3;
  o.bench.min_samples = 10;
  // The floor comes from a memcpy measured once per process; on a loaded machine it reads low (4.6 GB/s on
  // the 2-core development box under a load of 20, where a tiny rotating kernel ran at 7.7 GB/s) and would
  // quarantine honest candidates. A quarter of it still catches results that skip the work.
  o.bench.floor_fraction = 0.25;
  return o;
}

int KernelTuneResult::passed() const {
  return static_cast<int>(std::count_if(candidates.begin(), candidates.end(),
                                        [](const CandidateRecord& c) { return c.outcome == "passed"; }));
}

std::map<std::string, Schedule> TuneResult::schedules() const {
  std::map<std::string, Schedule> out;
  for (const KernelTuneResult& k : kernels) {
    if (k.tuned) out[k.hash] = k.winner;
  }
  return out;
}

Schedule plan_schedule(const kernel::Kernel& k, const Schedule& schedule, int cores) {
  Schedule s = schedule;
  s.threads = kernel::default_schedule(k, kernel::Target::cpu, cores).threads;
  s.rows_per_task = std::clamp<int64_t>(s.rows_per_task, 1, std::max<int64_t>(1, k.rows / s.threads));
  return s;
}

Result<KernelTuneResult> tune_kernel(const Graph& graph, const TuneTask& task, const TuneOptions& options) {
  KILN_CHECK(task.kind == TaskKind::kernel);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.budget_seconds));
  const int cores = options.cores > 0 ? options.cores : logical_cores();
  const kernel::Kernel& k = task.kernel;
  KILN_ASSIGN_OR_RETURN(harness::KernelTask harness_task, kernel::kernel_task(graph, k));

  KernelTuneResult result;
  result.hash = task.hash;
  result.label = task.label;
  result.shape = task_shape_text(task);
  result.occurrences = task.occurrences;
  result.default_schedule = kernel::default_schedule(k, kernel::Target::cpu, cores, harness::last_level_cache_bytes());
  result.winner = result.default_schedule;
  Schedule default_single = result.default_schedule;
  default_single.threads = 1;

  const std::vector<Schedule> space =
      harness_space(options.space ? options.space(k) : kernel::schedule_space(k, kernel::Target::cpu, cores));
  std::vector<Evaluated> all;
  std::vector<Schedule> tried;
  // The default and the unfused baseline are the reference points of every task: they are measured even
  // when the budget is already spent; the budget bounds the search beyond them.
  auto run_round = [&](std::vector<Schedule> batch, const std::string& round, Clock::time_point until) {
    const size_t room = static_cast<size_t>(std::max(0, options.max_candidates - static_cast<int>(tried.size())));
    if (batch.size() > room) {
      batch.resize(room);
      result.budget_exhausted = true;
    }
    std::vector<Evaluated> done = evaluate_parallel(harness_task, k, batch, round, options, until);
    if (done.size() < batch.size()) result.budget_exhausted = true;
    for (Evaluated& e : done) {
      tried.push_back(e.record.schedule);
      if (Clock::now() < until) {
        time_candidate(harness_task, e, options);
      } else if (!e.library.empty()) {
        result.budget_exhausted = true;
        e.record.summary = "passed; not timed: the budget ran out";
      }
      all.push_back(std::move(e));
    }
  };

  std::vector<Schedule> first = initial_candidates(space, default_single, options.initial_candidates);
  first[0] = default_single;
  std::vector<Schedule> round0 = {first.begin() + 1, first.end()};
  run_round({default_single}, "default", Clock::time_point::max());
  run_round(round0, "initial", deadline);
  for (int r = 1; r <= options.max_rounds && Clock::now() < deadline; ++r) {
    const Evaluated* best = fastest(all);
    if (!best) break;
    const Schedule center = best->record.schedule;
    const double best_time = best->record.time.median;
    std::vector<Schedule> next = untried_neighbours(space, center, tried);
    if (next.empty() || static_cast<int>(tried.size()) >= options.max_candidates) break;
    run_round(next, fmt::format("refine {}", r), deadline);
    const Evaluated* now = fastest(all);
    if (!now || now->record.time.median >= best_time) break;  // the round found nothing better
  }

  const Evaluated* by_default = nullptr;
  for (const Evaluated& e : all) {
    if (e.record.round == "default") by_default = &e;
  }
  const Evaluated* best = fastest(all);
  double worst = 0;
  for (const Evaluated& e : all) {
    if (e.record.timed) worst = std::max(worst, e.record.time.median);
  }
  result.worst_seconds = worst;
  if (by_default && by_default->record.timed) result.default_seconds = by_default->record.time.median;
  if (!best) {
    result.decision = "no candidate passed and was timed; the default schedule stays";
  } else if (!by_default || !by_default->record.timed) {
    result.tuned = true;
    result.winner = plan_schedule(k, best->record.schedule, cores);
    result.winner_seconds = best->record.time.median;
    result.decision = "the default schedule did not pass or was not timed; the fastest passing candidate wins";
  } else if (best == by_default) {
    result.tuned = true;
    result.winner_seconds = result.default_seconds;
    result.decision = "the default schedule is the fastest";
  } else {
    bool challenger_wins = !options.confirm_with_ab;
    if (options.confirm_with_ab) {
      harness::BenchOptions ab = options.bench;
      const harness::ABResult duel = harness::compare_candidates(harness_task, by_default->library, best->library, ab);
      result.ab_summary = duel.summary;
      challenger_wins = duel.a.valid() && duel.b.valid() && !duel.tie && duel.winner == harness::Winner::b;
    }
    result.tuned = true;
    if (challenger_wins) {
      result.winner = plan_schedule(k, best->record.schedule, cores);
      result.winner_seconds = best->record.time.median;
      result.decision = options.confirm_with_ab ? "faster than the default, confirmed by A/B" : "fastest (no A/B)";
    } else {
      result.winner_seconds = result.default_seconds;
      result.decision = "the fastest candidate did not beat the default in A/B (a tie keeps the default)";
    }
  }
  if (options.measure_baseline && task.members.size() > 1) measure_baseline(graph, task, options, cores, result);
  for (Evaluated& e : all) {
    remove_dir(e.scratch);
    result.candidates.push_back(std::move(e.record));
  }
  result.seconds = since(start);
  return result;
}

CandidateRecord verify_schedule(const Graph& graph, const TuneTask& task, const kernel::Schedule& schedule,
                                const TuneOptions& options) {
  KILN_CHECK(task.kind == TaskKind::kernel);
  auto harness_task = kernel::kernel_task(graph, task.kernel);
  if (!harness_task.ok()) {
    CandidateRecord r;
    r.schedule = schedule;
    r.outcome = "invalid-task";
    r.summary = harness_task.error().message;
    return r;
  }
  Schedule single = schedule;
  single.threads = 1;
  Evaluated e = evaluate(*harness_task, task.kernel, single, "re-verify", options);
  remove_dir(e.scratch);
  return e.record;
}

namespace {

LibraryTuneResult time_library(backend::Backend* backend, const TuneTask& task) {
  LibraryTuneResult r;
  r.hash = task.hash;
  r.label = task.label;
  r.shape = task_shape_text(task);
  r.occurrences = task.occurrences;
  r.note = "library call, one variant: untuned";
  if (!backend) return r;
  auto op_task = harness::make_op_task(task.op, task.input_types, task.attrs);
  if (!op_task.ok()) {
    r.note += "; not timed: " + op_task.error().message;
    return r;
  }
  std::map<std::string, Tensor> values = models::random_inputs(op_task->graph, 1);
  std::vector<backend::DeviceTensor> inputs, outputs;
  auto release = [&] {
    for (auto& t : inputs) backend->release(t);
    for (auto& t : outputs) backend->release(t);
  };
  Status st = ok_status();
  for (const GraphInput& in : op_task->graph.inputs()) {
    auto t = backend->allocate(op_task->graph.value(in.value).type);
    if (!t.ok()) { st = t.error(); break; }
    inputs.push_back(*t);
    st = backend->copy_to_device(values.at(op_task->graph.value(in.value).name), *t);
    if (!st.ok()) break;
  }
  for (const TensorType& type : harness::task_output_types(*op_task)) {
    if (!st.ok()) break;
    auto t = backend->allocate(type);
    if (!t.ok()) { st = t.error(); break; }
    outputs.push_back(*t);
  }
  if (st.ok()) {
    auto timing = backend->time([&] { return backend->run_library(task.op, task.attrs, inputs, outputs); });
    if (timing.ok()) r.seconds = timing->median_seconds;
    else st = timing.error();
  }
  if (!st.ok()) r.note += "; not timed: " + st.error().message;
  release();
  return r;
}

}  // namespace

Result<TuneResult> tune_graph(const Graph& graph, backend::Backend* library_backend, const TuneOptions& options) {
  KILN_ASSIGN_OR_RETURN(TaskList list, collect_tasks(graph));
  TuneResult result;
  result.model = graph.name;
  result.compiler = harness::compiler_version(options.compile.compiler);
  result.device = library_backend ? library_backend->device().name : "cpu";
  result.notes = list.notes;
  const auto start = Clock::now();
  int kernel_tasks = 0;
  for (const TuneTask& t : list.tasks) kernel_tasks += t.kind == TaskKind::kernel;
  if (list.tasks.empty()) {
    result.notes.push_back(fmt::format("{} has no tasks to tune ({} constants, {} free views)", graph.name,
                                       list.constants, list.aliases));
  }
  int left = kernel_tasks;
  for (const TuneTask& task : list.tasks) {
    if (task.kind == TaskKind::library) {
      result.library.push_back(time_library(library_backend, task));
      if (options.progress) options.progress("library " + task.label);
      continue;
    }
    TuneOptions per_task = options;
    per_task.budget_seconds = std::max(0.0, (options.budget_seconds - since(start)) / std::max(1, left));
    --left;
    KILN_ASSIGN_OR_RETURN(KernelTuneResult r, tune_kernel(graph, task, per_task));
    if (options.progress) {
      options.progress(fmt::format("kernel {}: {} tried, {} passed, {:.1f} s", r.label, r.tried(), r.passed(), r.seconds));
    }
    result.kernels.push_back(std::move(r));
  }
  return result;
}

}  // namespace kiln::tune
