// Chrome / Perfetto trace-event JSON of plan profiles (profile.h): each profile one process track, each step
// one complete event ("ph": "X"), the steps laid end to end at their median figures, with its op class, bound,
// FLOPs, bytes and headroom as args. Open the file in ui.perfetto.dev or chrome://tracing.
#pragma once

#include <string>
#include <vector>

#include "profile/profile.h"

namespace kiln::profile {

struct TraceTrack {
  std::string name;  // "baseline", "final"
  const PlanProfile* profile = nullptr;
};

// {"traceEvents": [...], "displayTimeUnit": "ms"}; times in microseconds as the format wants.
std::string trace_event_json(const std::vector<TraceTrack>& tracks);

}  // namespace kiln::profile
