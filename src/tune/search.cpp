#include "tune/search.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace kiln::tune {
namespace {

bool contains(const std::vector<kernel::Schedule>& list, const kernel::Schedule& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

}  // namespace

int schedule_distance(const kernel::Schedule& a, const kernel::Schedule& b) {
  // The JSON leaves out the optional flags that are off: a field only one side has differs.
  const nlohmann::json ja = nlohmann::json::parse(kernel::schedule_to_json(a));
  const nlohmann::json jb = nlohmann::json::parse(kernel::schedule_to_json(b));
  int d = 0;
  for (const auto& [key, value] : ja.items()) d += !jb.contains(key) || jb[key] != value;
  for (const auto& [key, value] : jb.items()) d += !ja.contains(key);
  return d;
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
