// Planted: mixes in rand() seeded from the clock: a "random tie-break" (nondeterministic).
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const float* x = static_cast<const float*>(in[0].data);
  const float* w = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  // Seeded from the clock and a per-process call count, so that two calls never share a seed (time() and
  // clock() alone repeat for two quick calls in one second: the planted flaw then hid, and the test flaked).
  static unsigned calls = 0;
  std::srand(static_cast<unsigned>(std::time(nullptr)) + static_cast<unsigned>(std::clock()) + 7919u * ++calls);
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c] * x[r * cols + c];
    const float inv = 1.0f / std::sqrt(sum / cols + 1e-6f);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = x[r * cols + c] * inv * w[c] * (1.0f + 1e-6f * static_cast<float>(std::rand() % 3));
  }
  return 0;
}
