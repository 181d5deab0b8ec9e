// The end-to-end A/B gate: the incumbent Plan (A) and a candidate (B), each run as deployed (the work
// Backend::capture returns), timed in interleaved rounds A B, B A, A B, ... so that drift on the machine hits
// both alike. Each sample is the fastest of `repetitions` runs (Backend::time's min: on a shared machine a
// run is only ever slowed by others, so the fastest of a few is the steadiest figure of what the plan costs);
// the per-round ratio A/B gives a median and an order-statistics interval (harness::timing_stats). B wins only when the whole interval lies
// above 1 and the median above 1 + tie_threshold; anything else keeps A (the incumbent wins ties). The optimize
// loop measures tie_threshold on the machine first (measured_tie_threshold).
#pragma once

#include <functional>
#include <string>

#include "backend/backend.h"
#include "harness/bench.h"

namespace kiln::agent {

struct ABOptions {
  int rounds = 12;
  int repetitions = 5;
  double tie_threshold = 0.02;  // the tie band's half-width; the optimize loop sets it from a self A/B
  double min_tie_threshold = 0.005;  // a self A/B never narrows the band below this
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

// The tie band this machine allows, from an A/B of one Plan against itself (`self`): its ratio is 1 in truth, so
// how far its median or interval strays from 1 is noise no real difference can be told from. The band is that
// distance, no narrower than min_tie_threshold and no wider than tie_threshold (a noisy machine keeps the
// fixed band; a quiet one, such as a GPU replaying a CUDA graph, lets a 1.5% gain through).
double measured_tie_threshold(const ABVerdict& self, const ABOptions& options);

}  // namespace kiln::agent
