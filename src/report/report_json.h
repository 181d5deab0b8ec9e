// The optimize report as data (report.json): the end-to-end waterfall from the baseline through each kept
// optimization, the time breakdown by op class before and after, the roofline points of the final Plan's
// steps, the ranked opportunities, every attempt with its outcome and reason, and the knowledge-base reuse.
// The HTML page (report_html.h) is rendered from this JSON alone, so every figure on it is one of these.
#pragma once

#include <nlohmann/json.hpp>

#include "agent/optimize.h"
#include "agent/optimize_workload.h"

namespace kiln::report {

inline constexpr const char* kReportFormat = "kiln-report/1";

// `knowledge_connected`: whether a knowledge base was plugged in (the reuse section says so when not).
nlohmann::json report_json(const agent::OptimizeResult& result, bool knowledge_connected);

inline constexpr const char* kWorkloadReportFormat = "kiln-workload-report/1";
// Per bucket: weight, model, baseline and final end-to-end seconds, speedup, its report's directory; and the
// traffic-weighted totals. `dirs[i]` is bucket i's output directory relative to the workload report.
nlohmann::json workload_report_json(const agent::WorkloadResult& result, const std::vector<std::string>& dirs);

}  // namespace kiln::report
