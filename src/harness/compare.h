// How a candidate's output is judged against the reference (DESIGN.md, numerics policy).
//
// The reference computes in double and rounds once to the output dtype: the best value the dtype can hold.
// The baseline is the error a sound implementation has against it: the output's own rounding (half an ulp of
// the output dtype at each value) plus, for a task that accumulates K terms (a row of a norm, the K of a
// GEMM; task_reduction_length), the typical error of accumulating them in f32, which grows like sqrt(K):
//
//   baseline(r) = half_ulp(r, output dtype) + accumulation_weight * sqrt(K) * half_ulp(r, f32)    (K > 1)
//
// A candidate passes when, for each output tensor, its largest error is no more than the largest of:
// `baseline_multiple` times the largest baseline (a normwise bound: max over elements on both sides),
// `sensitivity_multiple` times the output's quantization sensitivity (below; 0 without a quantize upstream),
// and the absolute slack (it only matters where the reference is all zeros or tiny). NaN and Inf must sit at
// exactly the reference's positions (Inf with its sign). Integer and bool outputs, and tasks that claim exactness,
// must match bit for bit (any NaN equals any NaN).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/tensor.h"

namespace kiln::harness {

struct TolerancePolicy {
  double baseline_multiple = 8.0;
  // Recursive f32 summation of K terms is typically off by about sqrt(K)/3 unit roundoffs of the sum; a norm
  // or mean passes that through a square root or a division, which keeps or halves it.
  double accumulation_weight = 0.25;
  double absolute_slack = -1;  // < 0: the smallest normal number of the output dtype
  // The reference's own spread when its quantize steps see inputs one ulp away (harness/sensitivity.h): an
  // error that large is sound. 0 (no quantize upstream) leaves the bound above as it is.
  double sensitivity = 0;
  double sensitivity_multiple = 2.0;
};

struct ErrorStats {
  int64_t elements = 0;
  double max_abs_error = 0;  // over elements where both values are finite
  double mean_abs_error = 0;
  double max_ulp_error = 0;       // in ulps of the output dtype at the reference value
  double baseline_max_error = 0;  // largest baseline(r) over the reference values
  double threshold = 0;           // what max_abs_error may reach
  int64_t worst_element = -1;
  double worst_reference = 0;
  double worst_candidate = 0;
  // max_abs_error / baseline_max_error: how many correctly-rounded errors the candidate is off (0 if exact).
  double baseline_ratio() const;
};

enum class Mismatch { none, non_finite, too_large, not_exact };

struct Comparison {
  Mismatch kind = Mismatch::none;
  int64_t first_element = -1;  // the first element at fault (for non_finite / not_exact)
  int64_t count = 0;           // elements at fault
  ErrorStats stats;
  std::string describe() const;  // one line: "max error 3.1e-05 at element 17 (ref 1.25, got 1.2500311) > ..."
};

// `reference` and `candidate` have the same dtype and shape; `reduction_length` is the K above. `precision` is
// the dtype whose half ulp the baseline takes (task_output_precisions: an exact widening cast's source dtype);
// by default the output's own.
Comparison compare_output(const Tensor& reference, const Tensor& candidate, const TolerancePolicy& policy, bool exact,
                          int64_t reduction_length = 1, std::optional<DType> precision = std::nullopt);

// Half the spacing of `dtype` around `value` (subnormal spacing near zero); 0 for non-float dtypes.
double half_ulp(double value, DType dtype);
double smallest_normal(DType dtype);

// Folds `b` (another trial's statistics of the same output) into `a`: keeps the statistics of whichever came
// closer to its threshold, sums the element counts, weights the means, keeps the larger ulp error.
void merge_error_stats(ErrorStats& a, const ErrorStats& b);

}  // namespace kiln::harness
