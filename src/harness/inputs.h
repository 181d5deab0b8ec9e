// Trial inputs: values drawn from a seed the candidate never sees (the parent draws them; the worker gets only
// the bytes). Two distributions: standard normal, and a wide one (random signs, magnitudes log-uniform over
// 1e-3..1e3) that exposes kernels which lose small values next to large ones or overflow intermediates.
#pragma once

#include <cstdint>

#include "ir/ops.h"

namespace kiln::harness {

enum class Distribution { normal, wide };
const char* distribution_name(Distribution distribution);  // "normal", "wide"

// Values rounded to `type.dtype`. Float values are clamped to a quarter of the dtype's largest finite value;
// integers are drawn from [0, 8), bools from {0, 1}.
Tensor draw_input(const TensorType& type, Distribution distribution, uint64_t seed);

uint64_t fresh_secret_seed();  // from std::random_device: differs on every call and every run
uint64_t derive_seed(uint64_t secret, uint64_t a, uint64_t b);  // a well-mixed function of all three

}  // namespace kiln::harness
