#include "cuda/timer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kiln::cuda {
namespace {

// Spins until the global timer (nanoseconds) has moved `ns` past its first reading.
constexpr const char* kHoldPtx = R"(.version 7.0
.target sm_50
.address_size 64
.visible .entry kiln_hold(.param .u64 kiln_hold_ns)
{
  .reg .pred %p;
  .reg .b64 %n, %t0, %t;
  ld.param.u64 %n, [kiln_hold_ns];
  mov.u64 %t0, %globaltimer;
WAIT:
  mov.u64 %t, %globaltimer;
  sub.u64 %t, %t, %t0;
  setp.lt.u64 %p, %t, %n;
  @%p bra WAIT;
  ret;
}
)";

constexpr double kMinHoldSeconds = 20e-6;
constexpr double kHoldOverEnqueue = 3;
constexpr double kMaxHoldSeconds = 5e-3;

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Result<StreamTimer> StreamTimer::create() {
  std::vector<char> image(kHoldPtx, kHoldPtx + std::strlen(kHoldPtx) + 1);  // PTX is loaded NUL-terminated
  KILN_ASSIGN_OR_RETURN(Module module, Module::load(image));
  KILN_ASSIGN_OR_RETURN(CUfunction hold, module.function("kiln_hold"));
  KILN_ASSIGN_OR_RETURN(Event start, Event::create());
  KILN_ASSIGN_OR_RETURN(Event end, Event::create());
  return StreamTimer(std::move(module), hold, std::move(start), std::move(end));
}

Result<StreamTimer*> timer_in(std::optional<StreamTimer>& slot) {
  if (!slot) {
    KILN_ASSIGN_OR_RETURN(StreamTimer timer, StreamTimer::create());
    slot.emplace(std::move(timer));
  }
  return &*slot;
}

Result<std::vector<double>> StreamTimer::samples_ms(CUstream stream, const std::function<Status()>& work, int warmup,
                                                    int reps, const std::function<Status()>& before_each) {
  // The spin follows the work's latest enqueue, not its slowest: a first call that loads modules or JIT-compiles
  // (cuBLASLt's first launch of a kernel: tens of ms) must not set the spin of every sample after it.
  double enqueue = 0;
  for (int i = 0; i < warmup; ++i) {
    const auto t = Clock::now();
    KILN_TRY(work());
    enqueue = since(t);
  }
  std::vector<double> samples;
  for (int r = 0; r < std::max(1, reps); ++r) {
    // One retake at most, with the spin the slow enqueue asks for: a host that stalls on every enqueue (a loaded
    // CI machine) still gets its samples.
    for (int attempt = 0; attempt < 2; ++attempt) {
      const double held = std::clamp(kHoldOverEnqueue * enqueue, kMinHoldSeconds, kMaxHoldSeconds);
      unsigned long long ns = static_cast<unsigned long long>(held * 1e9);
      if (before_each) KILN_TRY(before_each());
      KILN_TRY(launch(hold_, {}, stream, {&ns}));
      const auto t = Clock::now();
      KILN_TRY(start_.record(stream));
      KILN_TRY(work());
      KILN_TRY(end_.record(stream));
      enqueue = since(t);
      KILN_ASSIGN_OR_RETURN(double ms, Event::elapsed_ms(start_, end_));
      if (enqueue < held || attempt == 1) {
        samples.push_back(ms);
        break;
      }
    }
  }
  return samples;
}

}  // namespace kiln::cuda
