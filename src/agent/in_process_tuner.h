// The kernel tuner for backends that run kiln's own generated kernels in-process (the CUDA backend: NVRTC
// modules compiled and launched by the backend, no worker per candidate). For each kernel step of the plan,
// hottest first and each distinct kernel once, it searches the kernel's schedule space on the backend itself
// (tune::search_schedules_on_backend: a spread first round, then the neighbours of the fastest; every
// candidate checked against the reference on fresh inputs, then timed) and
// keeps a schedule only when it beats the plan's current one by more than `min_gain`. The optimize loop's
// end-to-end A/B decides whether the tuned plan is kept. The CPU uses the harness tuner instead
// (kb_knowledge.h), where candidates run in sandboxed workers.
#pragma once

#include <cstddef>

#include "agent/optimize.h"
#include "backend/backend.h"

namespace kiln::agent {

struct InProcessTunerOptions {
  size_t max_candidates = 24;   // per kernel, the current schedule included
  double budget_seconds = 60;   // no kernel's search starts after this, nor after the request's budget_seconds
  double min_gain = 0.03;       // a winner must be this much faster than the current schedule
  backend::TimingOptions timing{3, 20};
};

struct InProcessTunerStats {
  int kernels_searched = 0;
  int candidates_measured = 0;
  int candidates_failed = 0;  // did not implement, compile, run or match the reference
  int kernels_improved = 0;
};

// `stats` (optional) is updated by every call of the returned tuner.
Tuner in_process_tuner(const InProcessTunerOptions& options, InProcessTunerStats* stats = nullptr);

}  // namespace kiln::agent
