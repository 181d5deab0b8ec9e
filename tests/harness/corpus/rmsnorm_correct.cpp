// Clean: rmsnorm over the last axis, float accumulation, as a first attempt would write it.
// inputs: x [rows, cols] f32, weight [cols] f32; output y [rows, cols] f32.
#include <cmath>

#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  if (n_in != 2 || n_out != 1 || in[0].dtype != KILN_F32) return 1;
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const float* x = static_cast<const float*>(in[0].data);
  const float* w = static_cast<const float*>(in[1].data);
  float* y = static_cast<float*>(out[0].data);
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c] * x[r * cols + c];
    const float inv = 1.0f / std::sqrt(sum / cols + 1e-6f);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * inv * w[c];
  }
  return 0;
}
