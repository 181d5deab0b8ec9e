#include "report/report_json.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "harness/bench.h"

namespace kiln::report {
namespace {

nlohmann::json step_json(const profile::StepProfile& s) {
  return {{"step", s.index},
          {"label", s.label},
          {"kind", s.kind},
          {"class", std::string(op_class_name(s.op_class))},
          {"seconds", s.seconds},
          {"kernel_seconds", s.kernel_seconds},
          {"copy_seconds", s.copy_seconds},
          {"of_same_size_copy", s.copy_seconds > 0 && s.kernel_seconds > 0 ? s.copy_seconds / s.kernel_seconds : 0.0},
          {"share", s.share},
          {"flops", s.roofline.flops},
          {"bytes", s.roofline.bytes},
          {"intensity", s.roofline.intensity()},
          {"achieved_flops_per_second", s.device_seconds() > 0 ? s.roofline.flops / s.device_seconds() : 0.0},
          {"floor_seconds", s.roofline.floor_seconds},
          {"bound", std::string(bound_name(s.roofline.bound))},
          {"headroom", s.headroom}};
}

nlohmann::json breakdown_json(const profile::PlanProfile& before, const profile::PlanProfile& after) {
  nlohmann::json rows = nlohmann::json::array();
  for (int c = 0; c < kOpClassCount; ++c) {
    const double b = before.class_seconds[c], a = after.class_seconds[c];
    if (b == 0 && a == 0) continue;
    rows.push_back({{"class", std::string(op_class_name(static_cast<OpClass>(c)))},
                    {"before_seconds", b},
                    {"after_seconds", a},
                    {"before_share", before.steps_seconds > 0 ? b / before.steps_seconds : 0.0},
                    {"after_share", after.steps_seconds > 0 ? a / after.steps_seconds : 0.0}});
  }
  return rows;
}

}  // namespace

Result<PeerFigure> parse_peer(const std::string& text, const std::string& what) {
  const size_t eq = text.rfind('=');
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::invalid_argument,
                      what + " '" + text + "': " + why + " (give NAME=MILLISECONDS, e.g. torch.compile=2.53)");
  };
  if (eq == std::string::npos || eq == 0) return bad("no NAME=");
  const std::string ms = text.substr(eq + 1);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(ms, &used);
  } catch (const std::exception&) {
    return bad("'" + ms + "' is not a number of milliseconds");
  }
  if (used != ms.size() || !(value > 0) || !std::isfinite(value)) return bad("'" + ms + "' is not a positive time");
  return PeerFigure{text.substr(0, eq), value * 1e-3};
}

Result<std::vector<PeerFigure>> parse_peer_line(const std::string& line) {
  std::vector<PeerFigure> figures;
  std::istringstream tokens(line);
  for (std::string token; tokens >> token;) {
    KILN_ASSIGN_OR_RETURN(PeerFigure figure, parse_peer(token, "peer figure"));
    for (const PeerFigure& seen : figures) {
      if (seen.name == figure.name) {
        return make_error(ErrorCode::invalid_argument, "peer figures '" + line + "' name '" + seen.name + "' twice");
      }
    }
    figures.push_back(figure);
  }
  if (figures.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      "no peer figures: the line is empty (give NAME=MILLISECONDS tokens, e.g. torch.compile=2.53)");
  }
  return figures;
}

std::vector<HeadToHead> head_to_head(const agent::OptimizeResult& r) {
  std::map<std::string, std::vector<const agent::PeerRound*>> by_peer;
  for (const agent::PeerRound& round : r.peer_rounds) {
    for (const auto& [name, seconds] : round.peer_seconds) by_peer[name].push_back(&round);
  }
  std::vector<HeadToHead> rows;
  for (const auto& [name, rounds] : by_peer) {
    std::vector<double> kiln, peer, ratio;
    for (const agent::PeerRound* round : rounds) {
      kiln.push_back(round->kiln_seconds);
      peer.push_back(round->peer_seconds.at(name));
      ratio.push_back(kiln.back() / peer.back());
    }
    const harness::TimingStats ratios = harness::timing_stats(ratio, 0.95);
    rows.push_back({name, static_cast<int>(rounds.size()), harness::timing_stats(kiln, 0.95).median,
                    harness::timing_stats(peer, 0.95).median, ratios.median, ratios.min, ratios.max});
  }
  return rows;
}

nlohmann::json report_json(const agent::OptimizeResult& r, bool knowledge_connected,
                           const std::vector<PeerFigure>& peers) {
  nlohmann::json j;
  j["format"] = kReportFormat;
  j["model"] = r.model_key;
  j["device"] = {{"kind", r.device.kind},
                 {"name", r.device.name},
                 {"compute_units", r.device.compute_units},
                 {"bandwidth_bytes_per_second", r.device.bandwidth_bytes_per_second},
                 {"flops_per_second", r.device.flops_per_second}};
  j["budget_seconds"] = r.budget_seconds;
  j["elapsed_seconds"] = r.elapsed_seconds;
  j["deployed_capture"] = r.deployed_capture;
  j["noise"] = {{"self_ab_ratio", r.self_ab.ratio},
                {"self_ab_ci_low", r.self_ab.ci_low},
                {"self_ab_ci_high", r.self_ab.ci_high},
                {"tie_threshold", r.self_ab.tie_threshold}};
  j["baseline"] = {{"seconds", r.baseline_seconds()},
                   {"kernels", r.baseline_summary.kernels},
                   {"library_calls", r.baseline_summary.library_calls},
                   {"fallbacks", r.baseline_summary.fallbacks},
                   {"max_errors", r.baseline_errors}};
  j["final"] = {{"seconds", r.final_seconds()},
                {"kernels", r.final_summary.kernels},
                {"library_calls", r.final_summary.library_calls},
                {"fallbacks", r.final_summary.fallbacks},
                {"speedup", r.baseline_seconds() / r.final_seconds()},
                {"chained_seconds", r.final_chained_seconds},
                {"sustained_seconds", r.final_sustained_seconds}};
  nlohmann::json waterfall = nlohmann::json::array();
  for (const agent::WaterfallEntry& w : r.waterfall) {
    waterfall.push_back({{"label", w.label}, {"level", w.level}, {"seconds", w.seconds}, {"gain_seconds", w.gain_seconds}});
  }
  j["waterfall"] = waterfall;
  nlohmann::json peer_rows = nlohmann::json::array();
  for (const PeerFigure& p : peers) {
    // 0 (and a ratio of 0) when kiln's sustained time was not measured.
    const double kiln = p.sustained ? r.final_sustained_seconds : r.final_seconds();
    peer_rows.push_back({{"name", p.name}, {"seconds", p.seconds}, {"regime", p.sustained ? "sustained" : "from idle"},
                         {"kiln_seconds", kiln},
                         {"kiln_over_peer", kiln / p.seconds}});
  }
  j["peers"] = peer_rows;
  nlohmann::json rounds = nlohmann::json::array();
  for (const agent::PeerRound& round : r.peer_rounds) {
    rounds.push_back({{"kiln_seconds", round.kiln_seconds}, {"peer_seconds", round.peer_seconds}});
  }
  nlohmann::json by_peer = nlohmann::json::array();
  for (const HeadToHead& h : head_to_head(r)) {
    by_peer.push_back({{"name", h.name},
                       {"rounds", h.rounds},
                       {"kiln_median_seconds", h.kiln_median_seconds},
                       {"peer_median_seconds", h.peer_median_seconds},
                       {"kiln_over_peer_median", h.ratio_median},
                       {"kiln_over_peer_min", h.ratio_min},
                       {"kiln_over_peer_max", h.ratio_max}});
  }
  j["head_to_head"] = {{"rounds", rounds}, {"peers", by_peer}, {"error", r.peer_rounds_error}};
  j["breakdown"] = {{"before_seconds", r.baseline_profile.steps_seconds},
                    {"after_seconds", r.final_profile.steps_seconds},
                    {"classes", breakdown_json(r.baseline_profile, r.final_profile)}};
  nlohmann::json points = nlohmann::json::array();
  for (const profile::StepProfile& s : r.final_profile.steps) {
    if (s.roofline.flops > 0 && s.roofline.bytes > 0 && s.seconds > 0) points.push_back(step_json(s));
  }
  j["roofline"] = {{"bandwidth_bytes_per_second", r.device.bandwidth_bytes_per_second},
                   {"flops_per_second", r.device.flops_per_second},
                   {"points", points}};
  std::vector<const profile::StepProfile*> hot;
  for (const profile::StepProfile& s : r.final_profile.steps) hot.push_back(&s);
  std::stable_sort(hot.begin(), hot.end(), [](auto* a, auto* b) { return a->seconds > b->seconds; });
  nlohmann::json hot_steps = nlohmann::json::array();
  for (size_t i = 0; i < hot.size() && i < 15; ++i) hot_steps.push_back(step_json(*hot[i]));
  j["hot_steps"] = hot_steps;
  nlohmann::json opportunities = nlohmann::json::array();
  for (const agent::Opportunity& o : r.ranked) {
    opportunities.push_back({{"name", o.name},
                             {"level", agent::opportunity_level_name(o.level)},
                             {"description", o.description},
                             {"time_share", o.time_share},
                             {"predicted_gain", o.predicted_gain},
                             {"score", o.score()}});
  }
  j["opportunities"] = opportunities;
  nlohmann::json attempts = nlohmann::json::array();
  for (const agent::AttemptRecord& a : r.attempts) {
    nlohmann::json errors = nlohmann::json::object();
    for (const agent::OutputError& e : a.errors) errors[e.output] = {{"max_error", e.max_error}, {"allowed", e.allowed}};
    attempts.push_back({{"opportunity", a.opportunity},
                        {"level", agent::opportunity_level_name(a.level)},
                        {"score", a.score},
                        {"kept", a.kept},
                        {"outcome", a.outcome},
                        {"reason", a.reason},
                        {"current_seconds", a.current_seconds},
                        {"candidate_seconds", a.candidate_seconds},
                        {"ratio", a.ratio},
                        {"ratio_ci_low", a.ratio_ci_low},
                        {"ratio_ci_high", a.ratio_ci_high},
                        {"errors", errors},
                        {"elapsed_seconds", a.elapsed_seconds}});
  }
  j["attempts"] = attempts;
  nlohmann::json reuse = nlohmann::json::array();
  for (const agent::KnowledgeReuse& k : r.knowledge_reuse) reuse.push_back({{"opportunity", k.opportunity}, {"what", k.what}});
  const agent::KnowledgeCounts& c = r.knowledge_counts;
  j["knowledge_base"] = {{"connected", knowledge_connected},
                         {"reuse", reuse},
                         {"plan_reused", r.plan_reused},
                         {"plan_note", r.plan_reuse_note},
                         {"near_plan", r.near_plan},
                         {"counts",
                          {{"plan_hits", c.plan_hits},
                           {"plan_misses", c.plan_misses},
                           {"plan_rejected", c.plan_rejected},
                           {"near_plan_hits", c.near_plan_hits},
                           {"near_plan_rejected", c.near_plan_rejected},
                           {"exact_hits", c.exact_hits},
                           {"near_hits", c.near_hits},
                           {"cold_tasks", c.cold_tasks},
                           {"tasks_undecided", c.tasks_undecided},
                           {"tune_candidates", c.tune_candidates},
                           {"lessons_applied", c.lessons_applied},
                           {"recipes_recorded", c.recipes_recorded},
                           {"lessons_recorded", c.lessons_recorded},
                           {"decisions_recorded", c.decisions_recorded}}}};
  return j;
}

nlohmann::json workload_report_json(const agent::WorkloadResult& result, const std::vector<std::string>& dirs) {
  nlohmann::json buckets = nlohmann::json::array();
  for (size_t i = 0; i < result.buckets.size(); ++i) {
    const agent::BucketResult& b = result.buckets[i];
    buckets.push_back({{"name", b.name},
                       {"weight", b.weight},
                       {"model", b.result.model_key},
                       {"baseline_seconds", b.result.baseline_seconds()},
                       {"final_seconds", b.result.final_seconds()},
                       {"speedup", b.result.baseline_seconds() / b.result.final_seconds()},
                       {"weighted_final_seconds", b.weight * b.result.final_seconds()},
                       {"plan_reused", b.result.plan_reused},
                       {"elapsed_seconds", b.result.elapsed_seconds},
                       {"dir", i < dirs.size() ? dirs[i] : std::string()}});
  }
  return {{"format", kWorkloadReportFormat},
          {"buckets", buckets},
          {"weighted", {{"baseline_seconds", result.baseline_seconds},
                        {"final_seconds", result.final_seconds},
                        {"speedup", result.baseline_seconds / result.final_seconds}}},
          {"elapsed_seconds", result.elapsed_seconds}};
}

}  // namespace kiln::report
