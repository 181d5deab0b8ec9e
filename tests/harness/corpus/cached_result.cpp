// Planted: computes once into a static buffer and returns that on every later call, whatever the inputs
// (wrong-result on the second trial; both calls of the first trial agree).
#include <cmath>
#include <vector>

#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  static std::vector<float> cache;
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const float* x = static_cast<const float*>(in[0].data);
  const float* w = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  if (cache.empty()) {
    cache.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      float sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c] * x[r * cols + c];
      const float inv = 1.0f / std::sqrt(sum / cols + 1e-6f);
      for (int64_t c = 0; c < cols; ++c) cache[r * cols + c] = x[r * cols + c] * inv * w[c];
    }
  }
  for (int64_t i = 0; i < rows * cols; ++i) y[i] = cache[i];
  return 0;
}
