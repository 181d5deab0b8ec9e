// Kernels as the GPU ran them, read with CUPTI's activity API: each kernel's start and end on the device's
// clock, inside a CUDA graph too. kiln-gpu-bench uses it to tell launch gaps from kernel time in a replayed
// plan: the figures "each step replayed alone" cannot give, since a step alone runs at other clocks and cache
// states than inside the plan. Linked into kiln-gpu-bench only (libcupti ships with the CUDA toolkit).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/result.h"

namespace kiln::tools {

struct TracedKernel {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;  // the device's timestamps
  uint32_t stream = 0;
};

// Runs `work` with CUPTI's concurrent-kernel activity records on (kernels keep running concurrently),
// flushes them and returns every kernel `work` ran, by start time. `work` must synchronize before it returns.
// Errors: CUPTI cannot subscribe (another profiler such as ncu holds it) or a CUPTI call fails, named.
Result<std::vector<TracedKernel>> trace_kernels(const std::function<Status()>& work);

// One run of a plan's kernels (the kernels of one replay): how long the GPU was busy and how long it spanned.
struct KernelSpan {
  int kernels = 0;
  double span_seconds = 0;  // the first kernel's start to the last kernel's end
  double busy_seconds = 0;  // the union of the kernels' intervals: time with at least one kernel running
  double sum_seconds = 0;   // the kernels' durations added (above busy when kernels overlap)
};
KernelSpan kernel_span(const std::vector<TracedKernel>& kernels);

// `kernels` traced over `runs` runs of the same work (each run the same launches): split into the runs, in
// order. Error when the count does not divide evenly (a run that launched other kernels).
Result<std::vector<std::vector<TracedKernel>>> split_runs(const std::vector<TracedKernel>& kernels, int runs);

}  // namespace kiln::tools
