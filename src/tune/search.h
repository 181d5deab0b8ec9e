// The search strategy of the tuner, apart from how candidates are measured (tuner.h): which schedules to try
// first, and where to look next. It is local search over the kernel's schedule space:
//   round 0   the default schedule, then schedules spread evenly over the space (a coarse sample);
//   round n   every untried schedule one field away from the best so far (rows_per_task, vector_width,
//             cache_row, unroll, threads_per_row), until a round finds nothing better or the budget ends.
// The space is first reduced to what the harness can tell apart: harness candidates run on one thread, so
// schedules that differ only in `threads` are one candidate.
#pragma once

#include <vector>

#include "kernel/schedule.h"

namespace kiln::tune {

// `space` with threads = 1 everywhere and duplicates dropped, in first-seen order.
std::vector<kernel::Schedule> harness_space(const std::vector<kernel::Schedule>& space);

// The first round: `first` (the default), then up to count - 1 schedules of `space` spread evenly over it.
std::vector<kernel::Schedule> initial_candidates(const std::vector<kernel::Schedule>& space,
                                                 const kernel::Schedule& first, int count);

// The schedules of `space` that differ from `center` in exactly one field and are not in `tried`.
std::vector<kernel::Schedule> untried_neighbours(const std::vector<kernel::Schedule>& space,
                                                 const kernel::Schedule& center,
                                                 const std::vector<kernel::Schedule>& tried);

// How many fields two schedules differ in: every field, read off their JSON (kernel::schedule_to_json), so a
// field added to Schedule counts without a change here.
int schedule_distance(const kernel::Schedule& a, const kernel::Schedule& b);

}  // namespace kiln::tune
