#include "agent/numerics_gate.h"

#include <fmt/format.h>

#include <algorithm>

#include "harness/compare.h"

namespace kiln::agent {

int64_t longest_accumulation(const Graph& graph) {
  int64_t k = 1;
  for (const Node& n : graph.nodes()) {
    for (ValueId v : n.inputs) {
      const Shape& s = graph.value(v).type.shape;
      if (!s.empty()) k = std::max(k, s.back());
    }
  }
  return k;
}

NumericsVerdict judge_numerics(const std::map<std::string, Tensor>& reference,
                               const std::map<std::string, Tensor>& candidate,
                               const std::map<std::string, double>& baseline_errors, const NumericsPolicy& policy,
                               int64_t reduction_length) {
  NumericsVerdict verdict;
  auto fail = [&verdict](OutputError& e, std::string why) {
    e.ok = false;
    e.detail = why;
    if (verdict.ok) verdict.reason = "output '" + e.output + "': " + why;
    verdict.ok = false;
  };
  for (const auto& [name, want] : reference) {
    OutputError e;
    e.output = name;
    auto got = candidate.find(name);
    if (got == candidate.end()) {
      fail(e, "missing from the plan's outputs");
      verdict.outputs.push_back(e);
      continue;
    }
    const harness::Comparison c = harness::compare_output(want, got->second, {}, false, reduction_length);
    e.max_error = c.stats.max_abs_error;
    e.detail = c.describe();
    if (c.kind == harness::Mismatch::non_finite) {
      fail(e, "NaN/Inf do not match the reference: " + c.describe());
    } else if (!baseline_errors.empty()) {
      auto base = baseline_errors.find(name);
      const double baseline = base == baseline_errors.end() ? 0.0 : base->second;
      e.allowed = policy.error_multiple * std::max(baseline, c.stats.baseline_max_error);
      if (e.max_error > e.allowed) {
        fail(e, fmt::format("max error {:.3g} > {:.3g} ({} x the baseline's {:.3g})", e.max_error, e.allowed,
                            policy.error_multiple, std::max(baseline, c.stats.baseline_max_error)));
      }
    }
    verdict.outputs.push_back(e);
  }
  return verdict;
}

}  // namespace kiln::agent
