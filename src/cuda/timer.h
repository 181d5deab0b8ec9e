// Timing device work with the host's launch latency kept out of the figure. Timed from an idle stream, a
// region starts when the GPU reaches its start event, and the work's launches reach the GPU only as fast as
// the host enqueues them: every figure carries a few microseconds of host time (on an H100 a 6.3 MB copy read
// 8.6 us timed that way and 4.6 us held, a 9 KB kernel 8.5 us; session 30), which hides small
// kernels' differences and compresses every ratio between candidates towards 1. A StreamTimer first launches
// a one-thread kernel that spins on the GPU's global timer while the host enqueues the start event, the work
// and the end event, so the GPU runs them back to back: the figure is the work's own device time, as it is
// in a busy pipeline. For kernels and library calls timed alone (tuner candidates, GEMM algorithms, copies);
// a plan timed as a peer times itself, each call from an idle device, keeps the plain events
// (backend::TimingOptions::hold).
#pragma once

#include <cuda.h>

#include <functional>
#include <optional>
#include <vector>

#include "cuda/driver.h"
#include "util/result.h"

namespace kiln::cuda {

class StreamTimer {
 public:
  // In the current context (the spinning kernel is PTX the driver compiles for whatever GPU is there).
  static Result<StreamTimer> create();
  // Milliseconds of each of `reps` calls of `work` (which only enqueues work on `stream`), after `warmup`
  // calls. The spin lasts three times the work's latest host enqueue (20 us to 5 ms); a sample whose enqueue
  // outlasted the spin is taken again with a longer one. `before_each` (optional) enqueues untimed work ahead of
  // each sample's spin (an L2 flush: gemm.h, BlasLt::benchmark).
  Result<std::vector<double>> samples_ms(CUstream stream, const std::function<Status()>& work, int warmup, int reps,
                                         const std::function<Status()>& before_each = {});

 private:
  StreamTimer(Module module, CUfunction hold, Event start, Event end)
      : module_(std::move(module)), hold_(hold), start_(std::move(start)), end_(std::move(end)) {}
  Module module_;
  CUfunction hold_ = nullptr;
  Event start_, end_;
};

// The timer in `slot`, made there on first use (owners keep one per stream user: the backend, cuBLASLt's
// benchmark, the bench tool).
Result<StreamTimer*> timer_in(std::optional<StreamTimer>& slot);

}  // namespace kiln::cuda
