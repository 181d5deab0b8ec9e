#include "harness/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/check.h"

namespace kiln::harness {
namespace {

struct FloatLayout {
  int mantissa_bits;
  int min_exponent;  // of the smallest normal
};

// Indexed by DType; non-float dtypes have no layout.
constexpr FloatLayout kLayouts[] = {{23, -126}, {10, -14}, {7, -126}, {3, -6}, {2, -14}, {0, 0}, {0, 0}, {0, 0}};
static_assert(sizeof(kLayouts) / sizeof(kLayouts[0]) == kDTypeCount, "one layout per dtype");

bool same_bits(const Tensor& a, const Tensor& b, int64_t i) {
  const size_t size = dtype_size(a.dtype());
  return std::memcmp(a.data() + i * size, b.data() + i * size, size) == 0;
}

}  // namespace

double half_ulp(double value, DType dtype) {
  if (!dtype_is_float(dtype)) return 0;
  const FloatLayout f = kLayouts[static_cast<int>(dtype)];
  int e2 = 0;
  std::frexp(std::fabs(value), &e2);  // |value| = m * 2^e2, m in [0.5, 1)
  const int exponent = value == 0 ? f.min_exponent : std::max(e2 - 1, f.min_exponent);
  return std::ldexp(0.5, exponent - f.mantissa_bits);
}

double smallest_normal(DType dtype) {
  if (!dtype_is_float(dtype)) return 0;
  return std::ldexp(1.0, kLayouts[static_cast<int>(dtype)].min_exponent);
}

double ErrorStats::baseline_ratio() const {
  if (max_abs_error == 0) return 0;
  return baseline_max_error > 0 ? max_abs_error / baseline_max_error : INFINITY;
}

std::string Comparison::describe() const {
  const ErrorStats& s = stats;
  switch (kind) {
    case Mismatch::none:
      return fmt::format("max error {:.3g} ({:.2f}x baseline {:.3g}, {:.2f} ulp) within threshold {:.3g}",
                         s.max_abs_error, s.baseline_ratio(), s.baseline_max_error, s.max_ulp_error, s.threshold);
    case Mismatch::non_finite:
      return fmt::format("{} elements non-finite where the reference is not, or the other way; first at element {}",
                         count, first_element);
    case Mismatch::too_large:
      return fmt::format(
          "max error {:.3g} at element {} (reference {:.9g}, got {:.9g}) exceeds threshold {:.3g} "
          "({:.1f}x baseline {:.3g}); {} elements over",
          s.max_abs_error, s.worst_element, s.worst_reference, s.worst_candidate, s.threshold, s.baseline_ratio(),
          s.baseline_max_error, count);
    case Mismatch::not_exact:
      return fmt::format("claims exactness but {} elements differ bitwise; first at element {}", count, first_element);
  }
  return "?";
}

Comparison compare_output(const Tensor& reference, const Tensor& candidate, const TolerancePolicy& policy, bool exact,
                          int64_t reduction_length, std::optional<DType> precision) {
  KILN_CHECK(reference.dtype() == candidate.dtype() && reference.shape() == candidate.shape());
  const DType dtype = precision.value_or(reference.dtype());
  const bool bitwise = exact || !dtype_is_float(reference.dtype());
  const double accumulation =
      reduction_length > 1 ? policy.accumulation_weight * std::sqrt(static_cast<double>(reduction_length)) : 0.0;
  Comparison c;
  ErrorStats& s = c.stats;
  s.elements = reference.numel();
  int64_t non_finite = 0, first_non_finite = -1, not_exact = 0, first_not_exact = -1;
  double sum_error = 0;
  int64_t finite_count = 0;
  for (int64_t i = 0; i < s.elements; ++i) {
    const double r = reference.get(i);
    const double x = candidate.get(i);
    if (bitwise && !same_bits(reference, candidate, i) && !(std::isnan(r) && std::isnan(x))) {
      if (not_exact++ == 0) first_not_exact = i;
    }
    if (!std::isfinite(r) || !std::isfinite(x)) {
      const bool match = (std::isnan(r) && std::isnan(x)) || (std::isinf(r) && r == x);
      if (!match && non_finite++ == 0) first_non_finite = i;
      continue;
    }
    const double error = std::fabs(x - r);
    const double baseline = half_ulp(r, dtype) + accumulation * half_ulp(r, DType::f32);
    sum_error += error;
    ++finite_count;
    s.baseline_max_error = std::max(s.baseline_max_error, baseline);
    s.max_ulp_error = std::max(s.max_ulp_error, error / (2 * half_ulp(r, dtype)));
    if (error > s.max_abs_error || s.worst_element < 0) {
      s.max_abs_error = error;
      s.worst_element = i;
      s.worst_reference = r;
      s.worst_candidate = x;
    }
  }
  s.mean_abs_error = finite_count ? sum_error / static_cast<double>(finite_count) : 0;
  const double slack = policy.absolute_slack >= 0 ? policy.absolute_slack : smallest_normal(dtype);
  s.threshold = bitwise ? 0
                        : std::max({policy.baseline_multiple * s.baseline_max_error,
                                    policy.sensitivity_multiple * policy.sensitivity, slack});
  if (non_finite > 0) {
    c.kind = Mismatch::non_finite;
    c.count = non_finite;
    c.first_element = first_non_finite;
  } else if (not_exact > 0) {
    c.kind = Mismatch::not_exact;
    c.count = not_exact;
    c.first_element = first_not_exact;
  } else if (!bitwise && s.max_abs_error > s.threshold) {
    c.kind = Mismatch::too_large;
    for (int64_t i = 0; i < s.elements; ++i) {
      const double r = reference.get(i);
      if (std::isfinite(r) && std::fabs(candidate.get(i) - r) > s.threshold) ++c.count;
    }
  }
  return c;
}

void merge_error_stats(ErrorStats& a, const ErrorStats& b) {
  const int64_t total = a.elements + b.elements;
  const double mean =
      total > 0
          ? (a.mean_abs_error * static_cast<double>(a.elements) + b.mean_abs_error * static_cast<double>(b.elements)) /
                static_cast<double>(total)
          : 0;
  auto closeness = [](const ErrorStats& s) {
    return s.threshold > 0 ? s.max_abs_error / s.threshold : (s.max_abs_error > 0 ? INFINITY : 0);
  };
  const double ulps = std::max(a.max_ulp_error, b.max_ulp_error);
  if (a.worst_element < 0 || closeness(b) > closeness(a)) a = b;
  a.elements = total;
  a.mean_abs_error = mean;
  a.max_ulp_error = ulps;
}

}  // namespace kiln::harness
