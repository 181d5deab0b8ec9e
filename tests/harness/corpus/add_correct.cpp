// Clean: elementwise add of two same-shape tensors, f32 or bf16 (bf16 computed in float, rounded to nearest
// even: exactly the reference, since the float sum of two bf16 values rounds correctly to bf16).
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
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  int64_t n = 1;
  for (int d = 0; d < out[0].rank; ++d) n *= out[0].shape[d];
  if (out[0].dtype == KILN_F32) {
    const float* a = static_cast<const float*>(in[0].data);
    const float* b = static_cast<const float*>(in[1].data);
    float* y = static_cast<float*>(out[0].data);
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
    return 0;
  }
  if (out[0].dtype == KILN_BF16) {
    const uint16_t* a = static_cast<const uint16_t*>(in[0].data);
    const uint16_t* b = static_cast<const uint16_t*>(in[1].data);
    uint16_t* y = static_cast<uint16_t*>(out[0].data);
    for (int64_t i = 0; i < n; ++i) y[i] = store_bf16(load_bf16(a[i]) + load_bf16(b[i]));
    return 0;
  }
  return 2;
}
