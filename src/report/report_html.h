// The optimize report as one self-contained HTML page (inline CSS and SVG, no external assets), rendered from
// the report JSON (report_json.h) alone.
//
// Every figure on the page sits in an element carrying the JSON pointer of the value it shows,
// `<td data-k="/waterfall/1/seconds">12.34 ms</td>`, and is printed with 4 significant digits in one of three
// units: seconds as "ms" (run times as "s"), fractions as "%", ratios as "×" (a bare number is a count). Tests and readers can
// recompute every figure from the JSON with that rule.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kiln::report {

std::string render_report_html(const nlohmann::json& report);
// The workload page (report_json.h workload_report_json): per-bucket figures, links to each bucket's report,
// the traffic-weighted totals; same figure rule.
std::string render_workload_html(const nlohmann::json& workload);

}  // namespace kiln::report
