#include "tune/search.h"

#include <algorithm>

namespace kiln::tune {
namespace {

bool contains(const std::vector<kernel::Schedule>& list, const kernel::Schedule& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

}  // namespace

int schedule_distance(const kernel::Schedule& a, const kernel::Schedule& b) {
  return (a.rows_per_task != b.rows_per_task) + (a.threads != b.threads) + (a.threads_per_row != b.threads_per_row) +
         (a.vector_width != b.vector_width) + (a.cache_row != b.cache_row) + (a.unroll != b.unroll) + (a.tables != b.tables) +
         (a.stream_stores != b.stream_stores) + (a.pairs != b.pairs) + (a.moments != b.moments) +
         (a.registers != b.registers);
}

std::vector<kernel::Schedule> harness_space(const std::vector<kernel::Schedule>& space) {
  std::vector<kernel::Schedule> out;
  for (kernel::Schedule s : space) {
    s.threads = 1;
    if (!contains(out, s)) out.push_back(s);
  }
  return out;
}

std::vector<kernel::Schedule> initial_candidates(const std::vector<kernel::Schedule>& space,
                                                 const kernel::Schedule& first, int count) {
  std::vector<kernel::Schedule> out = {first};
  if (count <= 1 || space.empty()) return out;
  const size_t want = static_cast<size_t>(count - 1);
  const size_t n = space.size();
  for (size_t i = 0; i < want && i < n; ++i) {
    // Evenly spread indices, the ends included: 0, (n-1)/(want-1), ..., n-1.
    const size_t index = want == 1 ? n / 2 : i * (n - 1) / (want - 1);
    if (!contains(out, space[index])) out.push_back(space[index]);
  }
  return out;
}

std::vector<kernel::Schedule> untried_neighbours(const std::vector<kernel::Schedule>& space,
                                                 const kernel::Schedule& center,
                                                 const std::vector<kernel::Schedule>& tried) {
  std::vector<kernel::Schedule> out;
  for (const kernel::Schedule& s : space) {
    if (schedule_distance(s, center) == 1 && !contains(tried, s) && !contains(out, s)) out.push_back(s);
  }
  return out;
}

}  // namespace kiln::tune
