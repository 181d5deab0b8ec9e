// The transcendentals kiln's generated kernels approximate, in double precision: what the CPU math sweep
// (cpu_math_test.cpp) and the GPU coarse-form sweep (tests/cuda/gpu_backend_test.cpp) measure against.
#pragma once

#include <cmath>

namespace kiln::testing {

inline double exact_exp(double x) { return std::exp(x); }
inline double exact_tanh(double x) { return std::tanh(x); }
inline double exact_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double exact_silu(double x) { return x / (1.0 + std::exp(-x)); }
// 0.5 x (1 + tanh(z/2)) as x / (1 + e^-z): the same function, without the cancellation of 1 + tanh in double.
inline double exact_gelu_tanh(double x) {
  const double z = 2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-z));
}
inline double exact_gelu_erf(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

}  // namespace kiln::testing
