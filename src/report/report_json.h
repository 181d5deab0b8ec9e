// The optimize report as data (report.json): the end-to-end waterfall from the baseline through each kept
// optimization, the time breakdown by op class before and after, the roofline points of the final Plan's
// steps, the ranked opportunities, every attempt with its outcome and reason, and the knowledge-base reuse.
// The HTML page (report_html.h) is rendered from this JSON alone, so every figure on it is one of these.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/optimize.h"
#include "agent/optimize_workload.h"

namespace kiln::report {

inline constexpr const char* kReportFormat = "kiln-report/1";

// A time measured outside kiln on the same model and device (a peer such as torch.compile, measured in the
// same session: `kiln optimize --peer NAME=MS`). The report places it next to the final Plan's time.
// A peer timed under sustained load (`--peer-sustained`) sits next to kiln's sustained figure instead.
struct PeerFigure {
  std::string name;
  double seconds = 0;
  bool sustained = false;
};

// Parses NAME=MILLISECONDS (e.g. "torch.compile=2.53"); the error names what is wrong, and `what` where the text
// came from (an option, or a peer command's line).
Result<PeerFigure> parse_peer(const std::string& text, const std::string& what = "--peer");

// A peer command's line of figures (kiln optimize --peer-command): NAME=MILLISECONDS tokens separated by
// spaces, at least one, each name once.
Result<std::vector<PeerFigure>> parse_peer_line(const std::string& line);

// The head-to-head rounds (agent::OptimizeResult::peer_rounds) by peer: kiln over the peer within each round,
// and the median, least and greatest of those ratios.
struct HeadToHead {
  std::string name;
  int rounds = 0;
  double kiln_median_seconds = 0, peer_median_seconds = 0;
  double ratio_median = 0, ratio_min = 0, ratio_max = 0;
};
std::vector<HeadToHead> head_to_head(const agent::OptimizeResult& result);

// `knowledge_connected`: whether a knowledge base was plugged in (the reuse section says so when not).
// `peers`: outside figures for the same model (JSON "peers": name, seconds, and kiln's final time over it).
nlohmann::json report_json(const agent::OptimizeResult& result, bool knowledge_connected,
                           const std::vector<PeerFigure>& peers = {});

inline constexpr const char* kWorkloadReportFormat = "kiln-workload-report/1";
// Per bucket: weight, model, baseline and final end-to-end seconds, speedup, its report's directory; and the
// traffic-weighted totals. `dirs[i]` is bucket i's output directory relative to the workload report.
nlohmann::json workload_report_json(const agent::WorkloadResult& result, const std::vector<std::string>& dirs);

}  // namespace kiln::report
