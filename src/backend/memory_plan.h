// The runtime's memory planner: per-call intermediates share one arena by liveness. Each request is a buffer
// live from the step that writes it to the last step that reads it (inclusive, in execution order); two
// requests may share bytes only when their live ranges are disjoint. Placement is greedy by size (largest
// first, each at the lowest aligned offset that overlaps no placed buffer live at the same time), the
// offset-assignment scheme of TFLite's arena planner: simple, deterministic and near the lower bound (the
// largest sum of sizes live at one step) on transformer graphs.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::backend {

struct MemoryRequest {
  int64_t bytes = 0;
  int first_step = 0;  // writes it
  int last_step = 0;   // last reads it (>= first_step)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per request, bytes from the arena's start, multiples of the alignment
  int64_t arena_bytes = 0;       // what the arena must hold
  int64_t unshared_bytes = 0;    // the sum of all requests (one buffer each, aligned)
  int64_t lower_bound_bytes = 0; // the largest sum of aligned sizes live at one step
};

inline constexpr int64_t kMemoryAlignment = 256;  // CUDA's allocation granularity for vector loads

// KILN_CHECKs that every request has bytes >= 0 and first_step <= last_step.
MemoryPlan plan_memory(const std::vector<MemoryRequest>& requests, int64_t alignment = kMemoryAlignment);

// Whether two requests are live at the same step.
inline bool memory_lives_overlap(const MemoryRequest& a, const MemoryRequest& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

}  // namespace kiln::backend
