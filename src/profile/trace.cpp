#include "profile/trace.h"

#include <nlohmann/json.hpp>

namespace kiln::profile {

std::string trace_event_json(const std::vector<TraceTrack>& tracks) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t t = 0; t < tracks.size(); ++t) {
    KILN_CHECK(tracks[t].profile != nullptr, "trace track without a profile");
    const int pid = static_cast<int>(t) + 1;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 1},
                      {"args", {{"name", tracks[t].name}}}});
    for (const StepProfile& s : tracks[t].profile->steps) {
      events.push_back({{"name", s.label},
                        {"cat", std::string(op_class_name(s.op_class))},
                        {"ph", "X"},
                        {"ts", s.start_seconds * 1e6},
                        {"dur", s.seconds * 1e6},
                        {"pid", pid},
                        {"tid", 1},
                        {"args",
                         {{"step", s.index},
                          {"kind", s.kind},
                          {"bound", std::string(bound_name(s.roofline.bound))},
                          {"flops", s.roofline.flops},
                          {"bytes", s.roofline.bytes},
                          {"floor_us", s.roofline.floor_seconds * 1e6},
                          {"headroom", s.headroom},
                          {"share", s.share}}}});
    }
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(1);
}

}  // namespace kiln::profile
