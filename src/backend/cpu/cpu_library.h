// The CPU backend's library ops (cpu_backend.h): GEMMs through OpenBLAS sgemm, blocked attention.
#pragma once

#include <span>

#include "backend/backend.h"

namespace kiln::backend::cpu {

// Every element of `t` as f32 (bf16/f16/fp8 decoded exactly); elements [first, first + count) into `out`.
std::vector<float> to_f32(const DeviceTensor& t);
void to_f32_into(const DeviceTensor& t, int64_t first, int64_t count, float* out);
// Stores f32 values into `t`, rounding to its dtype (round to nearest even).
void store_f32(const float* values, const DeviceTensor& t);

Status run_linear(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out);
Status run_scaled_linear(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out);
Status run_matmul(std::span<const DeviceTensor> in, const DeviceTensor& out);
Status run_attention(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out);

}  // namespace kiln::backend::cpu
