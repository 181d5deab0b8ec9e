#include "agent/in_process_tuner.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "kernel/kernel_task.h"
#include "tune/measure_on_backend.h"

namespace kiln::agent {

Tuner in_process_tuner(const InProcessTunerOptions& options, InProcessTunerStats* stats) {
  return [options, stats](const TuneRequest& request) -> Result<std::map<std::string, kernel::Schedule>> {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    // Its own share, and never more than the loop has left (TuneRequest::budget_seconds): in session 18 a
    // search started at 44 s of a 60 s budget ran for 138 s.
    const double budget = std::min(options.budget_seconds, request.budget_seconds);
    InProcessTunerStats local;
    InProcessTunerStats& s = stats ? *stats : local;
    const backend::Plan& plan = request.plan;
    backend::Backend& backend = request.backend;
    std::map<std::string, kernel::Schedule> winners;
    std::set<std::string> seen;
    for (size_t step_index : request.kernel_steps) {
      if (std::chrono::duration<double>(Clock::now() - start).count() >= budget) break;
      const backend::Plan::Step& step = plan.steps().at(step_index);
      if (step.kind != backend::Plan::Step::Kind::kernel || step.kernel_index < 0) continue;
      const backend::Plan::PlanKernel& pk = plan.kernels().at(static_cast<size_t>(step.kernel_index));
      if (!seen.insert(pk.hash).second) continue;
      KILN_ASSIGN_OR_RETURN(harness::KernelTask task, kernel::kernel_task(plan.graph(), pk.kernel));
      tune::BackendSearchOptions search_options;
      search_options.max_candidates = options.max_candidates;
      search_options.first_round = std::min<size_t>(options.max_candidates, 12);
      search_options.measure.timing = options.timing;
      search_options.measure.seed = 1 + s.kernels_searched;
      KILN_ASSIGN_OR_RETURN(tune::BackendSearch search,
                            tune::search_schedules_on_backend(backend, pk.kernel, task, pk.schedule, search_options));
      ++s.kernels_searched;
      for (const tune::ScheduleMeasurement& m : search.measured) {
        ++s.candidates_measured;
        if (!m.passed) ++s.candidates_failed;
      }
      if (search.best <= 0) continue;  // the current schedule is the fastest (or nothing passed)
      const tune::ScheduleMeasurement& current = search.measured.front();
      const tune::ScheduleMeasurement& best = search.measured[static_cast<size_t>(search.best)];
      // The current schedule failing its own check would be a plan bug: never replace what was not measured.
      if (!current.passed) continue;
      if (best.median_seconds < current.median_seconds * (1.0 - options.min_gain)) {
        winners[pk.hash] = best.schedule;
        ++s.kernels_improved;
      }
    }
    return winners;
  };
}

}  // namespace kiln::agent
