// Clean: rmsnorm on bf16 x and weight, computing in float and rounding once to bf16 (nearest even).
#include <cmath>
#include <cstring>

#include "kernel_abi.h"

static float load_bf16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

static uint16_t store_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  if (in[0].dtype != KILN_BF16 || in[1].dtype != KILN_BF16) return 1;
  const int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  const uint16_t* x = static_cast<const uint16_t*>(in[0].data);
  const uint16_t* w = static_cast<const uint16_t*>(in[1].data);
  uint16_t* y = static_cast<uint16_t*>(out[0].data);
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = load_bf16(x[r * cols + c]);
      sum += v * v;
    }
    const float inv = 1.0f / std::sqrt(sum / cols + 1e-6f);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = store_bf16(load_bf16(x[r * cols + c]) * inv * load_bf16(w[c]));
  }
  return 0;
}
