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
};

struct MeasureOptions {
  backend::TimingOptions timing{3, 20};
  uint64_t seed = 1;
};

// `task` is kernel::kernel_task(graph, kernel): the oracle for `kernel`'s inputs and outputs, in kernel order.
Result<std::vector<ScheduleMeasurement>> measure_schedules_on_backend(backend::Backend& backend,
                                                                     const kernel::Kernel& kernel,
                                                                     const harness::KernelTask& task,
                                                                     std::span<const kernel::Schedule> schedules,
                                                                     const MeasureOptions& options = {});

}  // namespace kiln::tune
