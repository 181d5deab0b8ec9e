#include "agent/ab_gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kiln::agent {

Result<harness::TimingStats> time_deployed(backend::Backend& backend, const std::function<Status()>& work,
                                           const ABOptions& options) {
  const backend::TimingOptions timing{1, std::max(1, options.repetitions)};
  std::vector<double> samples;
  for (int round = 0; round < std::max(2, options.rounds); ++round) {
    KILN_ASSIGN_OR_RETURN(backend::Timing t, backend.time(work, timing));
    samples.push_back(t.min_seconds);
  }
  return harness::timing_stats(samples, options.confidence);
}

Result<ABVerdict> ab_compare(backend::Backend& backend, const std::function<Status()>& a,
                             const std::function<Status()>& b, const ABOptions& options) {
  const backend::TimingOptions timing{1, std::max(1, options.repetitions)};
  std::vector<double> ta, tb, ratios;
  for (int round = 0; round < std::max(2, options.rounds); ++round) {
    double sa = 0, sb = 0;
    if (round % 2 == 0) {
      KILN_ASSIGN_OR_RETURN(backend::Timing x, backend.time(a, timing));
      KILN_ASSIGN_OR_RETURN(backend::Timing y, backend.time(b, timing));
      sa = x.min_seconds, sb = y.min_seconds;
    } else {
      KILN_ASSIGN_OR_RETURN(backend::Timing y, backend.time(b, timing));
      KILN_ASSIGN_OR_RETURN(backend::Timing x, backend.time(a, timing));
      sa = x.min_seconds, sb = y.min_seconds;
    }
    ta.push_back(sa);
    tb.push_back(sb);
    ratios.push_back(sb > 0 ? sa / sb : 1.0);
  }
  ABVerdict v;
  v.a = harness::timing_stats(ta, options.confidence);
  v.b = harness::timing_stats(tb, options.confidence);
  v.ratio = harness::timing_stats(ratios, options.confidence);
  v.b_wins = v.ratio.ci_low > 1.0 && v.ratio.median > 1.0 + options.tie_threshold;
  v.b_loses = v.ratio.ci_high < 1.0 && v.ratio.median < 1.0 - options.tie_threshold;
  v.summary = fmt::format("{:.4g} ms -> {:.4g} ms, A/B {:.3f}x [{:.3f}, {:.3f}] over {} rounds: {}", v.a.median * 1e3,
                          v.b.median * 1e3, v.ratio.median, v.ratio.ci_low, v.ratio.ci_high, ratios.size(),
                          v.b_wins ? "faster" : v.b_loses ? "slower" : "no win beyond noise");
  return v;
}

double measured_tie_threshold(const ABVerdict& self, const ABOptions& options) {
  const double noise = std::max({std::abs(self.ratio.median - 1.0), std::abs(self.ratio.ci_low - 1.0),
                                 std::abs(self.ratio.ci_high - 1.0)});
  return std::clamp(noise, options.min_tie_threshold, std::max(options.min_tie_threshold, options.tie_threshold));
}

}  // namespace kiln::agent
