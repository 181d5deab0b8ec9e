#include "backend/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "util/check.h"

namespace kiln::backend {

namespace {

int64_t align_up(int64_t n, int64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

MemoryPlan plan_memory(const std::vector<MemoryRequest>& requests, int64_t alignment) {
  KILN_CHECK(alignment > 0);
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<int64_t> sizes(requests.size());
  std::map<int, int64_t> live_delta;  // step -> change in live bytes, for the lower bound
  for (size_t i = 0; i < requests.size(); ++i) {
    const MemoryRequest& r = requests[i];
    KILN_CHECK(r.bytes >= 0 && r.first_step <= r.last_step);
    sizes[i] = align_up(std::max<int64_t>(r.bytes, 1), alignment);
    plan.unshared_bytes += sizes[i];
    live_delta[r.first_step] += sizes[i];
    live_delta[r.last_step + 1] -= sizes[i];
  }
  int64_t live = 0;
  for (const auto& [step, delta] : live_delta) {
    live += delta;
    plan.lower_bound_bytes = std::max(plan.lower_bound_bytes, live);
  }

  // Largest first; ties by first use, then index, so the plan is deterministic.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    return requests[a].first_step < requests[b].first_step;
  });
  std::vector<size_t> placed;
  for (size_t i : order) {
    // The placed buffers live at the same time as this one, by offset: take the first gap that fits.
    std::vector<size_t> conflicts;
    for (size_t p : placed) {
      if (memory_lives_overlap(requests[i], requests[p])) conflicts.push_back(p);
    }
    std::sort(conflicts.begin(), conflicts.end(),
              [&](size_t a, size_t b) { return plan.offsets[a] < plan.offsets[b]; });
    int64_t offset = 0;
    for (size_t c : conflicts) {
      if (plan.offsets[c] >= offset + sizes[i]) break;  // the gap before c holds it
      offset = std::max(offset, plan.offsets[c] + sizes[c]);
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + sizes[i]);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace kiln::backend
