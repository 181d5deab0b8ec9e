// The optimize report as data (report.json): the end-to-end waterfall from the baseline through each kept
// optimization, the time breakdown by op class before and after, the roofline points of the final Plan's
// steps, the ranked opportunities, every attempt with its outcome and reason, and the knowledge-base reuse.
// The HTML page (report_html.h) is rendered from this JSON alone, so every figure on it is one of these.
#pragma once

#include <nlohmann/json.hpp>

#include "agent/optimize.h"

namespace kiln::report {

inline constexpr const char* kReportFormat = "kiln-report/1";

// `knowledge_connected`: whether a knowledge base was plugged in (the reuse section says so when not).
nlohmann::json report_json(const agent::OptimizeResult& result, bool knowledge_connected);

}  // namespace kiln::report
