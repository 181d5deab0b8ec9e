// The per-kernel tuner: for each task of an optimized graph (task.h) it searches schedules (search.h) through
// the candidate harness and returns the winner with all the evidence.
//
// Per kernel task:
//   1. candidates: kernel::schedule_space (or a test's injected space), reduced to what the harness tells
//      apart (one thread); the default schedule is always the first candidate;
//   2. each candidate is checked (kernel::can_implement), emitted (kernel::emit_harness_candidate), compiled
//      and verified (harness compile_candidate + verify_candidate) in parallel, `jobs` at a time: every
//      outcome that is not a pass (invalid-schedule, compile-error, crashed, wrong-result, ...) is recorded
//      with its class and the search goes on;
//   3. the survivors are timed one after another with the benchmark protocol (harness/bench.h), never beside
//      each other or a compile;
//   4. local search refines around the best until a round finds nothing better or the budget (seconds,
//      candidates) runs out; exhaustion returns the best so far. The default schedule and the unfused
//      baseline are measured even when the budget is spent: they are what every figure is compared with;
//   5. a challenger only replaces the default when its own figure is lower AND it wins an interleaved A/B
//      against the default (the default is the incumbent and wins ties), so noise does not pick winners.
// The unfused baseline of a fused group (its member nodes each lowered as its own kernel with the default
// schedule, timed the same way) says what fusion bought. Harness candidates run on one thread, so the winner
// as the plan runs it takes `threads` from the default schedule (rows_per_task clamped to give every thread
// work); see plan_schedule.
//
// Library ops are not searched: the CPU backend has one variant per op; their time through Backend::time is
// listed beside the kernels (untuned).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "harness/bench.h"
#include "harness/compile.h"
#include "harness/verify.h"
#include "kernel/schedule.h"
#include "tune/task.h"

namespace kiln::tune {

struct TuneOptions {
  int jobs = 0;                // parallel compile + verify; 0: the logical cores
  int cores = 0;               // cores the plan's kernels use (default_schedule, schedule_space); 0: logical cores
  int max_candidates = 32;     // per kernel task, the default included
  double budget_seconds = 60;  // tune_kernel: this task; tune_graph: the whole graph, shared out per task
  int initial_candidates = 8;  // round 0 size
  int max_rounds = 4;          // refinement rounds after round 0
  bool measure_baseline = true;
  bool confirm_with_ab = true;
  harness::CompileOptions compile;  // tuner defaults: the CPU backend's flags and a shared cache (tuner.cpp)
  harness::VerifyOptions verify;
  harness::BenchOptions bench;      // tuner defaults: 2 short sessions per figure
  // Test hooks. `space`: the candidate schedules instead of kernel::schedule_space (invalid ones included,
  // to check they are rejected). `rewrite_source`: changes a candidate's emitted source before it compiles.
  std::function<std::vector<kernel::Schedule>(const kernel::Kernel&)> space;
  std::function<std::string(const kernel::Schedule&, std::string source)> rewrite_source;
  std::function<void(const std::string&)> progress;  // one line per finished task; empty: silent
};

// Options with the tuner's defaults filled in (compile flags and cache, short benchmark sessions).
TuneOptions default_tune_options();

struct CandidateRecord {
  kernel::Schedule schedule;  // as the harness ran it (one thread)
  std::string round;          // "default", "initial", "refine 1", ...
  std::string outcome;        // "invalid-schedule" or a harness outcome class ("passed", "compile-error", ...)
  std::string summary;        // the evidence in one line
  bool timed = false;         // a valid benchmark figure
  harness::TimingStats time;  // when timed
  bool quarantined = false;
  bool contended = false;
};

struct KernelTuneResult {
  std::string hash;
  std::string label;
  std::string shape;
  int occurrences = 0;
  kernel::Schedule default_schedule;  // as the plan runs it
  kernel::Schedule winner;            // as the plan runs it (plan_schedule)
  bool tuned = false;                 // the winner has a valid figure
  double winner_seconds = 0, default_seconds = 0, worst_seconds = 0;  // medians per call, one thread
  double baseline_seconds = 0;        // unfused: sum over member kernels; 0 when not measured
  int baseline_kernels = 0;           // member kernels timed (views aliasing cost nothing and are skipped)
  std::string baseline_note;
  std::string decision;               // why the winner is the winner
  std::string ab_summary;             // the A/B against the default, when run
  bool budget_exhausted = false;
  double seconds = 0;                 // spent on this task
  std::vector<CandidateRecord> candidates;

  int tried() const { return static_cast<int>(candidates.size()); }
  int passed() const;
};

struct LibraryTuneResult {
  std::string hash, label, shape;
  int occurrences = 0;
  double seconds = 0;  // Backend::time median (0: not timed)
  std::string note;
};

struct TuneResult {
  std::string model;
  std::string target = "cpu";
  std::string device;
  std::string protocol = harness::kBenchProtocol;
  std::string compiler;
  std::vector<KernelTuneResult> kernels;
  std::vector<LibraryTuneResult> library;
  std::vector<std::string> notes;
  // Winners by kernel hash, for backend::PlanOptions::schedules.
  std::map<std::string, kernel::Schedule> schedules() const;
};

// `schedule` as the plan runs it: threads from the default schedule, rows_per_task at most rows / threads.
kernel::Schedule plan_schedule(const kernel::Kernel& kernel, const kernel::Schedule& schedule, int cores);

// Tunes one kernel task of `graph` (the graph the task was collected from).
Result<KernelTuneResult> tune_kernel(const Graph& graph, const TuneTask& task, const TuneOptions& options);

// Checks, emits, compiles and verifies one schedule of a kernel task (no timing): how a knowledge-base
// recipe is re-verified before it is reused. `schedule` as the plan runs it (threads is set to 1 here).
CandidateRecord verify_schedule(const Graph& graph, const TuneTask& task, const kernel::Schedule& schedule,
                                const TuneOptions& options);

// Tunes every kernel task of an optimized graph and times its library ops on `library_backend` (may be
// null: then they are listed untimed). A graph with no tasks gives an empty result with a note.
Result<TuneResult> tune_graph(const Graph& graph, backend::Backend* library_backend, const TuneOptions& options);

}  // namespace kiln::tune
