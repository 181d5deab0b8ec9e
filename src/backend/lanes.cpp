#include "backend/lanes.h"

#include <algorithm>
#include <functional>

#include "util/check.h"

namespace kiln::backend {

LaneSchedule schedule_lanes(const std::vector<std::vector<int>>& reads, int lanes) {
  KILN_CHECK(lanes >= 1);
  const int n = static_cast<int>(reads.size());
  LaneSchedule s;
  s.lane.assign(n, 0);
  s.waits.assign(n, {});
  s.complete_before.assign(n, 0);
  s.signals.assign(n, false);
  std::vector<int> tail(lanes, -1);  // the last step of each lane
  for (int i = 0; i < n; ++i) {
    int lane = -1;
    for (int p : reads[i]) {
      KILN_CHECK(p >= 0 && p < i);
      if (tail[s.lane[p]] == p && (lane < 0 || s.lane[p] < lane)) lane = s.lane[p];
    }
    if (lane < 0) lane = static_cast<int>(std::min_element(tail.begin(), tail.end()) - tail.begin());
    s.lane[i] = lane;
    tail[lane] = i;
    s.lanes_used = std::max(s.lanes_used, lane + 1);
  }
  // Vector clocks: known[l][m] is the last step of lane m that lane l's next step is ordered after (-1: only
  // what came before the stage, which the fork covers); clock[i] is known[lane of i] as step i runs.
  std::vector<std::vector<int>> known(lanes, std::vector<int>(lanes, -1));
  std::vector<std::vector<int>> clock(n);
  for (int i = 0; i < n; ++i) {
    const int l = s.lane[i];
    // The latest read step first: waiting for it may order the lane after the others too.
    std::vector<int> from = reads[i];
    std::sort(from.begin(), from.end(), std::greater<>());
    for (int p : from) {
      const int m = s.lane[p];
      if (m == l || known[l][m] >= p) continue;
      s.waits[i].push_back(p);
      s.signals[p] = true;
      for (int x = 0; x < lanes; ++x) known[l][x] = std::max(known[l][x], clock[p][x]);
    }
    std::sort(s.waits[i].begin(), s.waits[i].end());
    s.waits_total += static_cast<int>(s.waits[i].size());
    known[l][l] = i;
    clock[i] = known[l];
  }
  for (int i = 0; i < n; ++i) {
    int last_unordered = i;
    for (int k = i + 1; k < n; ++k) {
      if (clock[k][s.lane[i]] < i) last_unordered = k;
    }
    s.complete_before[i] = last_unordered + 1;
  }
  return s;
}

}  // namespace kiln::backend
