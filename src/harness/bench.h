// The benchmark protocol (kBenchProtocol). Timing happens in the worker, around the candidate, with
// steady_clock; the candidate never owns the clock.
//
//  - Buffers rotate: the worker holds enough copies of the inputs and outputs to exceed the last-level cache
//    (rotation_cache_multiple x LLC), and every call takes the next copy, so no call finds its data left in
//    cache by the one before.
//  - A figure is measured in `sessions` worker processes, one after another: each process gets its own
//    physical memory, and that alone moves a memory-bound kernel by several percent from run to run, more
//    than any interval computed inside one process admits.
//  - In each session: warm-up by time; then samples, each the mean of a batch of calls lasting about
//    sample_seconds, until both min_samples and min_seconds are reached (or max_samples / max_seconds).
//  - The figure is the median of the session medians, with the min and max of all samples, and an
//    order-statistics confidence interval over the session medians (6 sessions: [lowest, highest], 97%).
//    With one session, the interval comes from the medians of 10 consecutive blocks of its samples.
//  - The machine's other load during the measurement (cores kept busy by other processes, from /proc/stat)
//    is recorded with the figure; above contention_threshold the figure is marked contended: it says how
//    this machine performed then, not what the candidate costs.
//  - After timing, one more call into guarded buffers must still compute the right answer (same checks as
//    verification); otherwise the result is not valid.
//  - A median below the physical floor (the task's minimum bytes / measured memcpy bandwidth, times
//    floor_fraction) is quarantined: reported, never kept.
//  - A/B: both candidates in one worker on the same buffers, samples interleaved AB, BA, AB, ...; the time
//    ratio A/B per round gives a median and an interval. B is faster only when the whole interval lies above
//    1 and the median above 1 + tie_threshold; A only when the interval lies below 1 and the median below
//    1 - tie_threshold. Anything else is a tie, broken by a fixed order: A (pass the incumbent as A) wins.
// Every figure carries the protocol string and the machine record.
#pragma once

#include <string>
#include <vector>

#include "harness/machine.h"
#include "harness/outcome.h"
#include "harness/task.h"
#include "harness/verify.h"

namespace kiln::harness {

inline constexpr const char* kBenchProtocol =
    "kiln-bench-cpu/1 (rotating buffers > 2x LLC; per worker session: warm-up by time, batched samples; median of "
    "session medians with an order-statistics CI over sessions; post-timing check; memcpy floor; other-load "
    "record; A/B in one session, ABBA-interleaved, block CI of the ratio)";

struct BenchOptions {
  int sessions = 6;  // benchmark_candidate; compare_candidates uses one session
  double warmup_seconds = 0.1;
  double min_seconds = 0.1;  // per session
  double max_seconds = 1.0;
  int min_samples = 15;
  int max_samples = 100000;
  double sample_seconds = 2e-4;  // short samples: the median then steps over preemptions
  int blocks = 10;
  double rotation_cache_multiple = 2.0;
  int64_t max_rotation_bytes = 1ll << 30;
  // Each slot costs the worker its own tensor descriptors: a task of a few hundred bytes would otherwise ask
  // for millions of slots (and die of bad_alloc). Past this count the copies are far apart in the rotation.
  int64_t max_rotation_slots = 1 << 14;
  double confidence = 0.95;
  double tie_threshold = 0.02;         // A/B: a ratio within 1 +- this is a tie even when the interval excludes 1
  double floor_fraction = 1.0;         // quarantine below floor_fraction x the memory floor
  double contention_threshold = 0.5;  // cores busy with other work
  TolerancePolicy tolerance;           // for the post-timing check
  WorkerOptions worker;
  std::string compiler = "g++";  // for the machine record
};

struct TimingStats {
  int samples = 0;
  int64_t calls_per_sample = 0;
  double median = 0;  // seconds per call (for a ratio: A over B)
  double min = 0;
  double max = 0;
  double ci_low = 0;
  double ci_high = 0;
  double confidence = 0;
};

// Median, extremes and the order-statistics interval of the median (exact ranks from the binomial
// distribution; [min, max] when there are too few samples for the confidence asked).
TimingStats timing_stats(std::vector<double> samples, double confidence);
// The same median, min and max, with the interval taken over the medians of `blocks` consecutive blocks of
// the samples (in time order); plain timing_stats when there are fewer than 2 samples per block.
TimingStats blocked_timing_stats(const std::vector<double>& samples, double confidence, int blocks);
// Over several sessions: the median and interval of the session medians, min, max and count of all samples.
TimingStats session_timing_stats(const std::vector<std::vector<double>>& sessions, double confidence);

struct BenchResult {
  CandidateOutcome outcome;  // passed when the figure is valid; else the class of what went wrong
  TimingStats time;
  double floor_seconds = 0;  // minimum bytes / memcpy bandwidth
  bool quarantined = false;
  std::string quarantine_reason;
  int64_t rotation_bytes = 0;
  int sessions = 0;
  double other_load_cores = 0;  // during the measurement (mean over sessions)
  bool contended = false;
  std::string protocol = kBenchProtocol;
  MachineRecord machine;
  bool valid() const { return outcome.cls == OutcomeClass::passed && !quarantined; }
};

BenchResult benchmark_candidate(const KernelTask& task, const std::string& library_path,
                                const BenchOptions& options = {});

enum class Winner { a, b };

struct ABResult {
  BenchResult a, b;
  TimingStats ratio;  // per round: time of A / time of B
  bool tie = true;
  Winner winner = Winner::a;
  std::string summary;
  std::string protocol = kBenchProtocol;
  MachineRecord machine;
};

// Interleaved comparison; A is the incumbent and wins ties.
ABResult compare_candidates(const KernelTask& task, const std::string& library_a, const std::string& library_b,
                            const BenchOptions& options = {});

std::string bench_to_json(const BenchResult& result);

}  // namespace kiln::harness
