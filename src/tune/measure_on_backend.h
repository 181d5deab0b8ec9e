// Measuring schedule candidates of one generated kernel in-process on a backend: the tuner's evaluator for
// devices whose candidates are kiln's own emitter output (the CUDA backend: NVRTC modules compiled, launched
// and timed by the backend itself, no worker round trip per candidate). Every candidate is checked against
// the reference executor on the same seeded inputs before it is timed; one that does not implement, compile,
// run or match is recorded with its reason and never timed. Externally proposed source goes through the
// harness workers instead (src/harness), where a crash cannot take the tuner down.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "harness/task.h"
#include "kernel/kernel_ir.h"
#include "kernel/schedule.h"

namespace kiln::tune {

struct ScheduleMeasurement {
  kernel::Schedule schedule;
  bool passed = false;      // implemented, compiled, ran and matched the reference
  std::string failure;      // why not, when !passed
  double median_seconds = 0;
  double min_seconds = 0;
  double worst_baseline_ratio = 0;  // largest error over outputs, in correctly-rounded errors (harness/compare.h)
  // The index of an earlier schedule of the same call that emits the same code (a field this kernel has no use
  // for, such as early loads where no load qualifies): that one is compiled, checked and timed, this one gets
  // its results. -1: measured itself.
  int same_code_as = -1;
};

struct MeasureOptions {
  backend::TimingOptions timing{3, 20};
  uint64_t seed = 1;
};

// The seeded inputs of a kernel and the reference's outputs for them: computed once per kernel (at real sizes
// the reference takes seconds) and shared by every round of a search.
struct ReferenceRun {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
};
Result<ReferenceRun> run_reference(const kernel::Kernel& kernel, const harness::KernelTask& task, uint64_t seed);

// `task` is kernel::kernel_task(graph, kernel): the oracle for `kernel`'s inputs and outputs, in kernel order.
// `reference` (optional) is run_reference(kernel, task, options.seed), computed here when null.
Result<std::vector<ScheduleMeasurement>> measure_schedules_on_backend(backend::Backend& backend,
                                                                     const kernel::Kernel& kernel,
                                                                     const harness::KernelTask& task,
                                                                     std::span<const kernel::Schedule> schedules,
                                                                     const MeasureOptions& options = {},
                                                                     const ReferenceRun* reference = nullptr);

// Local search over the kernel's schedule space on the backend, the strategy of tune/search.h: round 0 is
// `current` and schedules spread evenly over the space (so a budget of a few dozen reaches every
// threads-per-row, not only the space's first corner); each later round measures the untried neighbours of
// the fastest so far and the search ends when a round finds nothing faster or `max_candidates` have been
// measured. `measured[0]` is `current`; `best` indexes the fastest that passed (-1: none did).
struct BackendSearchOptions {
  size_t max_candidates = 24;  // the current schedule included
  size_t first_round = 12;     // schedules in round 0, the current one included
  MeasureOptions measure;
};
struct BackendSearch {
  std::vector<ScheduleMeasurement> measured;
  int best = -1;
  int rounds = 0;
};
Result<BackendSearch> search_schedules_on_backend(backend::Backend& backend, const kernel::Kernel& kernel,
                                                  const harness::KernelTask& task, const kernel::Schedule& current,
                                                  const BackendSearchOptions& options);

}  // namespace kiln::tune
