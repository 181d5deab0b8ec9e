// The numerics gate of the optimize loop (DESIGN.md, numerics policy): a candidate Plan's outputs are compared
// with the reference executor's outputs of the original model. NaN and Inf must sit where the reference has
// them (harness::compare_output); the largest error of each output may not exceed `error_multiple` times the
// baseline Plan's own error against the same reference, or that many correctly-rounded errors
// (harness::ErrorStats::baseline_max_error) when the baseline's error is smaller.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::agent {

struct NumericsPolicy {
  double error_multiple = 4.0;
};

struct OutputError {
  std::string output;
  double max_error = 0;
  double allowed = 0;  // 0 when measuring the baseline itself
  bool ok = true;
  std::string detail;
};

struct NumericsVerdict {
  bool ok = true;
  std::vector<OutputError> outputs;
  std::string reason;  // the first output at fault, when !ok
};

// The K of the tolerance's sqrt(K) term: the longest last axis any node reads.
int64_t longest_accumulation(const Graph& graph);

// Errors of `candidate` against `reference`. With `baseline_errors` empty only NaN/Inf placement is judged
// (the baseline's own check); otherwise also the error bound above. A missing output is a failure naming it.
NumericsVerdict judge_numerics(const std::map<std::string, Tensor>& reference,
                               const std::map<std::string, Tensor>& candidate,
                               const std::map<std::string, double>& baseline_errors, const NumericsPolicy& policy,
                               int64_t reduction_length);

}  // namespace kiln::agent
