// The per-step profile of a Plan: every step (generated kernel, library call, reference fallback) timed on
// its own, in plan order, with its share of the total, its op class, and where it sits on the device's
// roofline (bound, floor, headroom). The profile is what the optimize loop ranks opportunities from, what the
// report breaks time down by, and what the trace (trace.h) draws.
//
// Timing: each repetition runs every step once in order, each step between two host clock reads with the
// device synchronized after it (so a step's figure includes its launch and its wait, as a timeline of a
// synchronized run shows them); a step's figure is the median over repetitions. The sum of the step figures
// is therefore above the end-to-end time of the plan run as deployed, which the optimize loop measures
// separately (Backend::capture).
//
// Each step's own device time is measured too (kernel_seconds): the step launched kKernelRepeats times in a
// row, captured as the backend deploys work (a CUDA graph on GPUs), replayed and divided, so launch and
// synchronization costs drop out. The roofline headroom is taken from it where it was measured; a step that
// cannot be captured (a reference fallback copies to the host) keeps the synchronized figure.
//
// A memory-bound generated kernel is also set beside a device-to-device copy of as many bytes (half read,
// half written), timed the same way (copy_seconds): the bandwidth a kernel of that size can get, launch ramp
// and tail included, where the device's measured bandwidth is that of a copy many times larger. On the CUDA
// backend that copy is a kernel of one 16-byte vector a thread (Backend::copy), replayed in the same CUDA graph
// form as the step, so the two differ only in what the kernels do.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "backend/plan.h"
#include "profile/roofline.h"

namespace kiln::profile {

struct ProfileOptions {
  int warmup = 1;       // whole-plan runs before timing
  int repetitions = 5;  // timed runs; a step's figure is the median
  bool kernel_times = true;  // also measure each step's own device time (kernel_seconds)
};
constexpr int kKernelRepeats = 8;

struct StepProfile {
  size_t index = 0;
  std::string label;
  std::string kind;  // "kernel" | "library" | "fallback"
  OpClass op_class = OpClass::elementwise;
  int nodes = 0;
  double seconds = 0;        // median over repetitions
  double kernel_seconds = 0; // the step's own device time (see above), or 0 where not measured
  double copy_seconds = 0;   // a copy of the kernel's bytes timed like kernel_seconds (memory-bound kernels), or 0
  double start_seconds = 0;  // the steps before it laid end to end at their figures (the trace's timeline)
  RooflinePoint roofline;
  double share = 0;     // seconds / PlanProfile::steps_seconds
  double headroom = 0;  // (kernel_seconds, else seconds) / roofline.floor_seconds (0 without work to bound it)
  // The time the roofline judges: kernel_seconds where measured, else seconds.
  double device_seconds() const { return kernel_seconds > 0 ? kernel_seconds : seconds; }
};

struct PlanProfile {
  backend::DeviceInfo device;
  std::vector<StepProfile> steps;
  double steps_seconds = 0;  // sum of the step figures
  std::array<double, kOpClassCount> class_seconds{};  // steps_seconds split by StepProfile::op_class
  int repetitions = 0;
};

// Profiles `plan`, whose inputs are already set (Plan::set_inputs). Errors are the plan's own.
Result<PlanProfile> profile_plan(backend::Plan& plan, backend::Backend& backend, const ProfileOptions& options = {});

const char* step_kind_name(backend::Plan::Step::Kind kind);

}  // namespace kiln::profile
