#include "report/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kiln::report {
namespace {

using nlohmann::json;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

enum class Unit { ms, seconds, percent, ratio, count };

std::string format_value(double v, Unit unit) {
  switch (unit) {
    case Unit::ms: return fmt::format("{:.4g} ms", v * 1e3);
    case Unit::seconds: return fmt::format("{:.4g} s", v);
    case Unit::percent: return fmt::format("{:.4g}%", v * 100);
    case Unit::ratio: return fmt::format("{:.4g}×", v);
    case Unit::count: return fmt::format("{:.4g}", v);
  }
  return "";
}

// A figure: the value at `pointer` in `report`, in an element naming the pointer.
std::string figure(const json& report, const std::string& pointer, Unit unit, const char* tag = "td") {
  const double v = report.at(json::json_pointer(pointer)).get<double>();
  return fmt::format("<{0} data-k=\"{1}\">{2}</{0}>", tag, pointer, format_value(v, unit));
}

std::string text_cell(const std::string& s) { return "<td>" + escape(s) + "</td>"; }

const char* kStyle = R"(body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}
td:first-child,th:first-child{text-align:left}.note{color:#666}.kept{color:#070}.dropped{color:#a00}
svg text{font:11px system-ui,sans-serif}.headline span{font-weight:600})";

std::string waterfall_svg(const json& report) {
  const json& w = report["waterfall"];
  const double top = w[0]["seconds"].get<double>();
  const int bar = 70, gap = 20, height = 220, left = 50;
  const int width = left + static_cast<int>(w.size() + 1) * (bar + gap);
  auto y_of = [&](double s) { return 10 + height * (1 - s / top); };
  std::string svg = fmt::format("<svg width=\"{}\" height=\"{}\" role=\"img\">", width, height + 60);
  auto rect = [&](int x, double from, double to, const char* color, const std::string& title) {
    return fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"><title>{}</title></rect>", x,
                       y_of(std::max(from, to)), bar, std::max(1.0, std::abs(y_of(from) - y_of(to))), color,
                       escape(title));
  };
  for (size_t i = 0; i < w.size(); ++i) {
    const int x = left + static_cast<int>(i) * (bar + gap);
    const double s = w[i]["seconds"].get<double>();
    const std::string label = w[i]["label"].get<std::string>();
    if (i == 0) {
      svg += rect(x, 0, s, "#888", label);
    } else {
      const double gain = w[i]["gain_seconds"].get<double>();
      svg += rect(x, s, s + gain, gain >= 0 ? "#2a7" : "#c54", label);
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", x + bar / 2, height + 25,
                       escape(i == 0 ? std::string("baseline") : label));
  }
  const int x = left + static_cast<int>(w.size()) * (bar + gap);
  const double final_s = w.back()["seconds"].get<double>();
  svg += rect(x, 0, final_s, "#357", "final");
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">final</text>", x + bar / 2, height + 25);
  svg += fmt::format("<text x=\"4\" y=\"20\">{}</text>", format_value(top, Unit::ms));
  return svg + "</svg>";
}

std::string roofline_svg(const json& report) {
  const json& r = report["roofline"];
  const double bw = r["bandwidth_bytes_per_second"].get<double>(), peak = r["flops_per_second"].get<double>();
  const double ridge = peak / bw;
  double x_lo = ridge, x_hi = ridge, y_lo = peak;
  for (const json& p : r["points"]) {
    x_lo = std::min(x_lo, p["intensity"].get<double>());
    x_hi = std::max(x_hi, p["intensity"].get<double>());
    y_lo = std::min(y_lo, p["achieved_flops_per_second"].get<double>());
  }
  x_lo = std::pow(10, std::floor(std::log10(x_lo))), x_hi = std::pow(10, std::ceil(std::log10(x_hi) + 1e-9));
  y_lo = std::pow(10, std::floor(std::log10(std::max(y_lo, peak * 1e-9))));
  const double y_hi = std::pow(10, std::ceil(std::log10(peak) + 1e-9));
  const int w = 640, h = 360, left = 60, bottom = 40;
  auto px = [&](double x) { return left + (w - left - 10) * (std::log10(x) - std::log10(x_lo)) / (std::log10(x_hi) - std::log10(x_lo)); };
  auto py = [&](double y) { return (h - bottom) * (1 - (std::log10(y) - std::log10(y_lo)) / (std::log10(y_hi) - std::log10(y_lo))); };
  std::string svg = fmt::format("<svg width=\"{}\" height=\"{}\" role=\"img\">", w, h);
  svg += fmt::format("<rect x=\"{}\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#ccc\"/>", left, w - left - 10, h - bottom);
  const double x_mem_lo = std::max(x_lo, y_lo / bw);
  svg += fmt::format("<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"2\" points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\"/>",
                     px(x_mem_lo), py(x_mem_lo * bw), px(ridge), py(peak), px(x_hi), py(peak));
  for (double d = x_lo; d <= x_hi * 1.0001; d *= 10) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>", px(d), h - bottom + 15, d);
  }
  for (double d = y_lo; d <= y_hi * 1.0001; d *= 10) {
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>", left - 4, py(d) + 4, d);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">FLOPs per byte</text>", (left + w) / 2, h - 5);
  svg += "<text x=\"4\" y=\"12\">FLOP/s</text>";
  for (const json& p : r["points"]) {
    const bool memory = p["bound"] == "memory";
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\" fill-opacity=\"0.6\"><title>{} ({}-bound, "
                       "{} of the time, {:.3g}x over its floor)</title></circle>",
                       px(p["intensity"].get<double>()), py(std::max(y_lo, p["achieved_flops_per_second"].get<double>())),
                       3 + 12 * std::sqrt(p["share"].get<double>()), memory ? "#c60" : "#36c",
                       escape(p["label"].get<std::string>()), memory ? "memory" : "compute",
                       format_value(p["share"].get<double>(), Unit::percent), p["headroom"].get<double>());
  }
  return svg + "</svg>";
}

std::string section_waterfall(const json& report) {
  std::string s = "<h2>End-to-end latency: baseline through each kept optimization</h2>" + waterfall_svg(report);
  s += "<table><tr><th>step</th><th>level</th><th>end to end</th><th>gain</th></tr>";
  for (size_t i = 0; i < report["waterfall"].size(); ++i) {
    const json& w = report["waterfall"][i];
    const std::string p = fmt::format("/waterfall/{}", i);
    s += "<tr>" + text_cell(w["label"].get<std::string>()) + text_cell(w["level"].get<std::string>()) +
         figure(report, p + "/seconds", Unit::ms) + figure(report, p + "/gain_seconds", Unit::ms) + "</tr>";
  }
  s += "<tr><td>final</td><td></td>" + figure(report, "/final/seconds", Unit::ms) + "<td></td></tr></table>";
  const json& peers = report["peers"];
  if (peers.is_array() && !peers.empty()) {
    s += "<h3>Next to peers on the same model and device</h3><p class=\"note\">Measured outside kiln in the same "
         "session. From idle (<code>--peer</code>): kiln's final Plan timed as the peer script times itself, after "
         "the device idled (5 warm-up calls, the median of 30). Sustained (<code>--peer-sustained</code>): kiln's "
         "final Plan after running back to back, at the device's steady clocks. Ratio = kiln / the peer.</p>";
    s += "<table><tr><th>peer</th><th>regime</th><th>time</th><th>kiln final</th><th>kiln / peer</th></tr>";
    for (size_t i = 0; i < peers.size(); ++i) {
      const std::string p = fmt::format("/peers/{}", i);
      s += "<tr>" + text_cell(peers[i]["name"].get<std::string>()) + text_cell(peers[i]["regime"].get<std::string>()) +
           figure(report, p + "/seconds", Unit::ms) +
           figure(report, p + "/kiln_seconds", Unit::ms) + figure(report, p + "/kiln_over_peer", Unit::ratio) + "</tr>";
    }
    s += "</table>";
  }
  const json h2h = report.value("head_to_head", json::object());
  const json rounds = h2h.value("peers", json::array());
  if (!rounds.empty()) {
    s += "<h3>Head to head, in rounds</h3><p class=\"note\">Each round runs the peer (<code>--peer-command</code>, "
         "another process), then times kiln's final Plan from the same idle (5 warm-up calls, the median of 30): "
         "both figures of a round come from one power and clock state of the device. Ratio = kiln / the peer, "
         "within a round; the median and range over the rounds.</p>";
    s += "<table><tr><th>peer</th><th>rounds</th><th>peer (median)</th><th>kiln (median)</th>"
         "<th>kiln / peer (median)</th><th>least</th><th>greatest</th></tr>";
    for (size_t i = 0; i < rounds.size(); ++i) {
      const std::string p = fmt::format("/head_to_head/peers/{}", i);
      s += "<tr>" + text_cell(rounds[i]["name"].get<std::string>()) +
           text_cell(std::to_string(rounds[i]["rounds"].get<int>())) +
           figure(report, p + "/peer_median_seconds", Unit::ms) + figure(report, p + "/kiln_median_seconds", Unit::ms) +
           figure(report, p + "/kiln_over_peer_median", Unit::ratio) +
           figure(report, p + "/kiln_over_peer_min", Unit::ratio) +
           figure(report, p + "/kiln_over_peer_max", Unit::ratio) + "</tr>";
    }
    s += "</table>";
  }
  const std::string stopped = h2h.value("error", "");
  if (!stopped.empty()) s += "<p class=\"note\">Head to head stopped short: " + escape(stopped) + "</p>";
  return s;
}

std::string section_breakdown(const json& report) {
  std::string s = "<h2>Time by op class, before and after</h2><p class=\"note\">Step-by-step profile (each step timed "
                  "alone, device synchronized after it).</p>";
  s += "<table><tr><th>class</th><th>before</th><th>share</th><th>after</th><th>share</th></tr>";
  for (size_t i = 0; i < report["breakdown"]["classes"].size(); ++i) {
    const std::string p = fmt::format("/breakdown/classes/{}", i);
    s += "<tr>" + text_cell(report["breakdown"]["classes"][i]["class"].get<std::string>()) +
         figure(report, p + "/before_seconds", Unit::ms) + figure(report, p + "/before_share", Unit::percent) +
         figure(report, p + "/after_seconds", Unit::ms) + figure(report, p + "/after_share", Unit::percent) + "</tr>";
  }
  s += "<tr><td>all steps</td>" + figure(report, "/breakdown/before_seconds", Unit::ms) + "<td></td>" +
       figure(report, "/breakdown/after_seconds", Unit::ms) + "<td></td></tr></table>";
  return s;
}

std::string section_roofline(const json& report) {
  std::string s = "<h2>Roofline of the final plan's steps</h2><p class=\"note\">Device: " +
                  escape(report["device"]["name"].get<std::string>()) + ", bandwidth " +
                  fmt::format("{:.4g} GB/s", report["device"]["bandwidth_bytes_per_second"].get<double>() / 1e9) +
                  ", " + fmt::format("{:.4g} GFLOP/s", report["device"]["flops_per_second"].get<double>() / 1e9) +
                  " (measured). Orange: memory-bound, blue: compute-bound; area by share of time.</p>" +
                  roofline_svg(report);
  s += "<h2>Hottest steps of the final plan</h2><table><tr><th>step</th><th>class</th><th>time</th><th>alone, "
       "replayed</th><th>share</th><th>bound</th><th>floor</th><th>headroom</th></tr>";
  for (size_t i = 0; i < report["hot_steps"].size(); ++i) {
    const json& h = report["hot_steps"][i];
    const std::string p = fmt::format("/hot_steps/{}", i);
    s += "<tr>" + text_cell(h["label"].get<std::string>()) + text_cell(h["class"].get<std::string>()) +
         figure(report, p + "/seconds", Unit::ms) + figure(report, p + "/kernel_seconds", Unit::ms) +
         figure(report, p + "/share", Unit::percent) +
         text_cell(h["bound"].get<std::string>()) + figure(report, p + "/floor_seconds", Unit::ms) +
         figure(report, p + "/headroom", Unit::ratio) + "</tr>";
  }
  return s + "</table>";
}

std::string section_attempts(const json& report) {
  std::string s = "<h2>Opportunities, ranked (time share × predicted gain)</h2><table><tr><th>opportunity</th>"
                  "<th>level</th><th>share</th><th>gain</th><th>score</th></tr>";
  for (size_t i = 0; i < report["opportunities"].size(); ++i) {
    const json& o = report["opportunities"][i];
    const std::string p = fmt::format("/opportunities/{}", i);
    s += "<tr>" + text_cell(o["name"].get<std::string>() + ": " + o["description"].get<std::string>()) +
         text_cell(o["level"].get<std::string>()) + figure(report, p + "/time_share", Unit::percent) +
         figure(report, p + "/predicted_gain", Unit::percent) + figure(report, p + "/score", Unit::percent) + "</tr>";
  }
  s += "</table><h2>Attempts</h2><table><tr><th>opportunity</th><th>outcome</th><th>A/B ratio</th><th>reason</th></tr>";
  std::string rejected;
  for (size_t i = 0; i < report["attempts"].size(); ++i) {
    const json& a = report["attempts"][i];
    const std::string p = fmt::format("/attempts/{}", i);
    const bool kept = a["kept"].get<bool>();
    const std::string row = "<tr>" + text_cell(a["opportunity"].get<std::string>()) +
                            fmt::format("<td class=\"{}\">{}</td>", kept ? "kept" : "dropped",
                                        escape(a["outcome"].get<std::string>())) +
                            (a["ratio"].get<double>() > 0 ? figure(report, p + "/ratio", Unit::ratio) : "<td></td>") +
                            "<td style=\"text-align:left\">" + escape(a["reason"].get<std::string>()) + "</td></tr>";
    s += row;
    if (!kept) rejected += row;
  }
  s += "</table><h2>Rejected attempts</h2>";
  s += rejected.empty() ? "<p class=\"note\">None.</p>"
                        : "<table><tr><th>opportunity</th><th>outcome</th><th>A/B ratio</th><th>reason</th></tr>" +
                              rejected + "</table>";
  return s;
}

std::string section_knowledge(const json& report) {
  std::string s = "<h2>Knowledge-base reuse</h2>";
  const json& kb = report["knowledge_base"];
  if (!kb["connected"].get<bool>()) return s + "<p class=\"note\">No knowledge base in this run (--no-kb).</p>";
  s += "<p>" + escape(kb["plan_note"].get<std::string>()) + "</p>";
  if (kb.contains("near_plan") && !kb["near_plan"].get<std::string>().empty()) {
    s += "<p>Near plan used as the prior: " + escape(kb["near_plan"].get<std::string>()) + "</p>";
  }
  s += "<table><tr><th>what</th><th>count</th></tr>";
  const std::vector<std::pair<const char*, const char*>> rows = {
      {"plan_hits", "stored plan re-verified and used"},
      {"plan_rejected", "stored plan not used (other fingerprint, failed re-verification)"},
      {"near_plan_hits", "near plan (same model structure, other sizes) verified, A/B'd and used as the prior"},
      {"near_plan_rejected", "near plan not used (numerics, not faster, unknown rewrites)"},
      {"exact_hits", "kernel recipes used without tuning (re-verified unless the default schedule)"},
      {"near_hits", "kernel tasks decided from a recipe at other shapes"},
      {"cold_tasks", "kernel tasks tuned from scratch"},
      {"tasks_undecided", "kernel tasks the tuner's budget did not reach (default schedule)"},
      {"tune_candidates", "schedules the tuner compiled"},
      {"lessons_applied", "rewrites skipped: a lesson says they regress here"},
      {"recipes_recorded", "recipes recorded"},
      {"lessons_recorded", "lessons recorded"},
      {"decisions_recorded", "decisions recorded"}};
  for (const auto& [key, label] : rows) {
    s += "<tr>" + text_cell(label) + figure(report, std::string("/knowledge_base/counts/") + key, Unit::count) + "</tr>";
  }
  s += "</table>";
  if (kb["reuse"].empty()) return s + "<p class=\"note\">Nothing reused.</p>";
  s += "<table><tr><th>opportunity</th><th>reused</th></tr>";
  for (const json& k : kb["reuse"]) s += "<tr>" + text_cell(k["opportunity"].get<std::string>()) + text_cell(k["what"].get<std::string>()) + "</tr>";
  return s + "</table>";
}

}  // namespace

std::string render_report_html(const json& report) {
  std::string html = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kiln optimize: " +
                     escape(report["model"].get<std::string>()) + "</title><style>" + kStyle + "</style></head><body>";
  html += "<h1>kiln optimize: " + escape(report["model"].get<std::string>()) + "</h1>";
  html += "<p class=\"headline\">" + escape(report["device"]["name"].get<std::string>()) + " (" +
          escape(report["device"]["kind"].get<std::string>()) + "): baseline " +
          figure(report, "/baseline/seconds", Unit::ms, "span") + " → final " +
          figure(report, "/final/seconds", Unit::ms, "span") + ", " + figure(report, "/final/speedup", Unit::ratio, "span") +
          " faster; " + figure(report, "/final/kernels", Unit::count, "span") + " kernels + " +
          figure(report, "/final/library_calls", Unit::count, "span") + " library calls (baseline " +
          figure(report, "/baseline/kernels", Unit::count, "span") + " + " +
          figure(report, "/baseline/library_calls", Unit::count, "span") + "). Ran " +
          figure(report, "/elapsed_seconds", Unit::seconds, "span") + " of a " + figure(report, "/budget_seconds", Unit::seconds, "span") +
          " budget.</p>";
  const bool sustained = report["final"].value("sustained_seconds", 0.0) > 0;
  html += "<p class=\"note\">Final: the Plan timed alone at the end, after the device idled (5 warm-up calls, the "
          "median of 30)" +
          (sustained ? ", and " + figure(report, "/final/sustained_seconds", Unit::ms, "span") +
                           " under sustained load (after running back to back)"
                     : std::string()) +
          ". The kept A/B ratios chained from the baseline's time gave " +
          figure(report, "/final/chained_seconds", Unit::ms, "span") +
          " (each A/B runs its two plans interleaved, at other clocks than one plan under sustained load)." +
          // A reused stored plan is timed, not A/B'd: no noise was measured for it.
          (report["noise"]["tie_threshold"].get<double>() > 0
               ? " Noise: the baseline A/B'd against itself " + figure(report, "/noise/self_ab_ratio", Unit::ratio, "span") +
                     " [" + figure(report, "/noise/self_ab_ci_low", Unit::ratio, "span") + ", " +
                     figure(report, "/noise/self_ab_ci_high", Unit::ratio, "span") +
                     "], so a candidate must win by more than " +
                     figure(report, "/noise/tie_threshold", Unit::percent, "span") + "."
               : std::string()) +
          "</p>";
  if (!report["deployed_capture"].get<bool>()) {
    html += "<p class=\"note\">A plan could not be captured (reference fallbacks); it was timed uncaptured.</p>";
  }
  html += section_waterfall(report) + section_breakdown(report) + section_roofline(report) + section_attempts(report) +
          section_knowledge(report);
  return html + "</body></html>\n";
}

std::string render_workload_html(const json& w) {
  std::string html = std::string("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kiln optimize: "
                                 "workload</title><style>") + kStyle + "</style></head><body><h1>kiln optimize: workload</h1>";
  html += "<p class=\"headline\">Traffic-weighted end-to-end latency: baseline " +
          figure(w, "/weighted/baseline_seconds", Unit::ms, "span") + " → final " +
          figure(w, "/weighted/final_seconds", Unit::ms, "span") + ", " + figure(w, "/weighted/speedup", Unit::ratio, "span") +
          " faster, in " + figure(w, "/elapsed_seconds", Unit::seconds, "span") + ".</p>";
  html += "<table><tr><th>bucket</th><th>model</th><th>weight</th><th>baseline</th><th>final</th><th>speedup</th>"
          "<th>weight × final</th><th>plan</th><th>report</th></tr>";
  for (size_t i = 0; i < w["buckets"].size(); ++i) {
    const json& b = w["buckets"][i];
    const std::string p = "/buckets/" + std::to_string(i);
    const std::string dir = b["dir"].get<std::string>();
    html += "<tr>" + text_cell(b["name"].get<std::string>()) + text_cell(b["model"].get<std::string>()) +
            figure(w, p + "/weight", Unit::percent) + figure(w, p + "/baseline_seconds", Unit::ms) +
            figure(w, p + "/final_seconds", Unit::ms) + figure(w, p + "/speedup", Unit::ratio) +
            figure(w, p + "/weighted_final_seconds", Unit::ms) +
            text_cell(b["plan_reused"].get<bool>() ? "stored, re-verified" : "decided") + "<td><a href=\"" +
            escape(dir) + "/report.html\">" + escape(dir) + "</a></td></tr>";
  }
  return html + "</table></body></html>\n";
}

}  // namespace kiln::report
