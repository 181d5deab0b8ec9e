// The end-to-end A/B gate: the incumbent Plan (A) and a candidate (B), each run as deployed (the work
// Backend::capture returns), timed in interleaved rounds A B, B A, A B, ... so that drift on the machine hits
// both alike. Each sample is the fastest of `repetitions` runs (Backend::time's min: on a shared machine a
// run is only ever slowed by others, so the fastest of a few is the steadiest figure of what the plan costs);
// the per-round ratio A/B gives a median and an order-statistics interval (harness::timing_stats). B wins only when the whole interval lies
// above 1 and the median above 1 + tie_threshold; anything else keeps A (the incumbent wins ties).
#pragma once

#include <functional>
#include <string>

#include "backend/backend.h"
#include "harness/bench.h"

namespace kiln::agent {

struct ABOptions {
  int rounds = 12;
  int repetitions = 5;
  double tie_threshold = 0.02;
  double confidence = 0.95;
};

struct ABVerdict {
  harness::TimingStats a, b;  // seconds per run (over the rounds' samples)
  harness::TimingStats ratio;  // A / B per round: > 1 means B is faster
  bool b_wins = false;
  bool b_loses = false;  // the mirror test: the interval below 1 and the median below 1 - tie_threshold
  std::string summary;
};

// One Plan alone, with the same samples as the A/B gate (the fastest of `repetitions` runs, `rounds` of them):
// the baseline's figure, so that the waterfall's first bar and the A/B ratios measure the same thing.
Result<harness::TimingStats> time_deployed(backend::Backend& backend, const std::function<Status()>& work,
                                           const ABOptions& options = {});

Result<ABVerdict> ab_compare(backend::Backend& backend, const std::function<Status()>& a,
                             const std::function<Status()>& b, const ABOptions& options = {});

}  // namespace kiln::agent
