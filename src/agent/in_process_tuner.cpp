#include "agent/in_process_tuner.h"

#include <chrono>
#include <set>

#include "kernel/kernel_task.h"
#include "tune/measure_on_backend.h"

namespace kiln::agent {

Tuner in_process_tuner(const InProcessTunerOptions& options, InProcessTunerStats* stats) {
  return [options, stats](const TuneRequest& request) -> Result<std::map<std::string, kernel::Schedule>> {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    InProcessTunerStats local;
    InProcessTunerStats& s = stats ? *stats : local;
    const backend::Plan& plan = request.plan;
    backend::Backend& backend = request.backend;
    const int units = backend.device().compute_units;
    std::map<std::string, kernel::Schedule> winners;
    std::set<std::string> seen;
    for (size_t step_index : request.kernel_steps) {
      if (std::chrono::duration<double>(Clock::now() - start).count() >= options.budget_seconds) break;
      const backend::Plan::Step& step = plan.steps().at(step_index);
      if (step.kind != backend::Plan::Step::Kind::kernel || step.kernel_index < 0) continue;
      const backend::Plan::PlanKernel& pk = plan.kernels().at(static_cast<size_t>(step.kernel_index));
      if (!seen.insert(pk.hash).second) continue;
      KILN_ASSIGN_OR_RETURN(harness::KernelTask task, kernel::kernel_task(plan.graph(), pk.kernel));
      std::vector<kernel::Schedule> candidates = {pk.schedule};
      for (const kernel::Schedule& c : kernel::schedule_space(pk.kernel, backend.target(), units)) {
        if (candidates.size() >= options.max_candidates) break;
        if (!(c == pk.schedule)) candidates.push_back(c);
      }
      tune::MeasureOptions measure;
      measure.timing = options.timing;
      measure.seed = 1 + s.kernels_searched;
      KILN_ASSIGN_OR_RETURN(std::vector<tune::ScheduleMeasurement> measured,
                            tune::measure_schedules_on_backend(backend, pk.kernel, task, candidates, measure));
      ++s.kernels_searched;
      const tune::ScheduleMeasurement* best = nullptr;
      for (const tune::ScheduleMeasurement& m : measured) {
        ++s.candidates_measured;
        if (!m.passed) {
          ++s.candidates_failed;
          continue;
        }
        if (!best || m.median_seconds < best->median_seconds) best = &m;
      }
      const tune::ScheduleMeasurement& current = measured.front();
      if (!best || best == &current) continue;
      // The current schedule failing its own check would be a plan bug: never replace what was not measured.
      if (!current.passed) continue;
      if (best->median_seconds < current.median_seconds * (1.0 - options.min_gain)) {
        winners[pk.hash] = best->schedule;
        ++s.kernels_improved;
      }
    }
    return winners;
  };
}

}  // namespace kiln::agent
