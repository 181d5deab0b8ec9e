// Clean: rmsnorm with eight partial sums (a reassociating but correct reduction order).
#include <cmath>

#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const float* x = static_cast<const float*>(in[0].data);
  const float* w = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      for (int k = 0; k < 8; ++k) partial[k] += xr[c + k] * xr[c + k];
    }
    float sum = 0;
    for (; c < cols; ++c) sum += xr[c] * xr[c];
    for (int k = 0; k < 8; ++k) sum += partial[k];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(cols) + 1e-6f);
    for (c = 0; c < cols; ++c) y[r * cols + c] = xr[c] * inv * w[c];
  }
  return 0;
}
