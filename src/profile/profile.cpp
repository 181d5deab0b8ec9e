#include "profile/profile.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace kiln::profile {

const char* step_kind_name(backend::Plan::Step::Kind kind) {
  switch (kind) {
    case backend::Plan::Step::Kind::kernel: return "kernel";
    case backend::Plan::Step::Kind::library: return "library";
    case backend::Plan::Step::Kind::fallback: return "fallback";
  }
  return "?";
}

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A step or copy replayed alone: the host's launch latency kept out (TimingOptions::hold), as inside a plan.
constexpr backend::TimingOptions kAloneTiming{1, 5, true};

// The step's own device time (profile.h), or 0 when the backend cannot capture or time it.
double kernel_time(backend::Plan& plan, backend::Backend& backend, size_t step) {
  auto replay = backend.capture([&]() -> Status {
    for (int i = 0; i < kKernelRepeats; ++i) KILN_TRY(plan.execute_step(step));
    return ok_status();
  });
  if (!replay.ok()) return 0;
  auto timing = backend.time(*replay, kAloneTiming);
  return timing.ok() ? timing->median_seconds / kKernelRepeats : 0;
}

// A device copy of `bytes` (bytes / 2 each way, in whole 16-byte vectors, so that a GPU backend copies with a vector
// kernel rather than the driver's copy), replayed as kernel_time replays a step; cached by size. 0 when the backend
// cannot allocate, capture or time it.
double copy_time(backend::Backend& backend, int64_t bytes, std::map<int64_t, double>& cache) {
  const int64_t words = std::max<int64_t>(4, bytes / 2 / 4 / 4 * 4);
  if (auto it = cache.find(words); it != cache.end()) return it->second;
  double seconds = 0;
  auto from = backend.allocate({DType::f32, {words}});
  auto to = backend.allocate({DType::f32, {words}});
  if (from.ok() && to.ok()) {
    auto replay = backend.capture([&]() -> Status {
      for (int i = 0; i < kKernelRepeats; ++i) KILN_TRY(backend.copy(*from, *to));
      return ok_status();
    });
    if (replay.ok()) {
      auto timing = backend.time(*replay, kAloneTiming);
      if (timing.ok()) seconds = timing->median_seconds / kKernelRepeats;
    }
  }
  if (from.ok()) backend.release(*from);
  if (to.ok()) backend.release(*to);
  return cache[words] = seconds;
}

}  // namespace

Result<PlanProfile> profile_plan(backend::Plan& plan, backend::Backend& backend, const ProfileOptions& options) {
  const std::vector<backend::Plan::Step>& steps = plan.steps();
  for (int i = 0; i < options.warmup; ++i) KILN_TRY(plan.execute());
  const int reps = std::max(1, options.repetitions);
  // times[rep][step]
  std::vector<std::vector<double>> times(reps, std::vector<double>(steps.size()));
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < reps; ++r) {
    for (size_t s = 0; s < steps.size(); ++s) {
      const auto start = Clock::now();
      KILN_TRY(plan.execute_step(s));
      KILN_TRY(backend.synchronize());
      times[r][s] = std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  PlanProfile profile;
  profile.device = backend.device();
  profile.repetitions = reps;
  double offset = 0;
  std::map<int64_t, double> copy_times;
  for (size_t s = 0; s < steps.size(); ++s) {
    StepProfile sp;
    sp.index = s;
    sp.label = steps[s].label;
    sp.kind = step_kind_name(steps[s].kind);
    sp.op_class = step_op_class(plan.graph(), steps[s]);
    sp.nodes = static_cast<int>(steps[s].nodes.size());
    std::vector<double> samples;
    for (int r = 0; r < reps; ++r) samples.push_back(times[r][s]);
    sp.seconds = median_of(samples);
    sp.start_seconds = offset;
    offset += sp.seconds;
    if (options.kernel_times && steps[s].kind != backend::Plan::Step::Kind::fallback) sp.kernel_seconds = kernel_time(plan, backend, s);
    OpCost cost = step_cost(plan.graph(), steps[s]);
    // A generated kernel's bytes as its lowering counts them: the elements its loads touch (a norm reading the
    // q third of a QKV GEMM's output reads that third), not its input tensors whole.
    const int ki = steps[s].kernel_index;
    if (steps[s].kind == backend::Plan::Step::Kind::kernel && ki >= 0 && static_cast<size_t>(ki) < plan.kernels().size()) {
      cost.bytes = plan.kernels()[static_cast<size_t>(ki)].kernel.bytes;
    }
    sp.roofline = roofline_point(cost.flops, cost.bytes, profile.device);
    sp.headroom = sp.roofline.floor_seconds > 0 ? sp.device_seconds() / sp.roofline.floor_seconds : 0;
    if (sp.kernel_seconds > 0 && steps[s].kind == backend::Plan::Step::Kind::kernel && sp.roofline.bound == Bound::memory &&
        cost.bytes > 0)
      sp.copy_seconds = copy_time(backend, static_cast<int64_t>(cost.bytes), copy_times);
    profile.steps_seconds += sp.seconds;
    profile.class_seconds[static_cast<int>(sp.op_class)] += sp.seconds;
    profile.steps.push_back(std::move(sp));
  }
  for (StepProfile& sp : profile.steps) sp.share = profile.steps_seconds > 0 ? sp.seconds / profile.steps_seconds : 0;
  return profile;
}

}  // namespace kiln::profile
