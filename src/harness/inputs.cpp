#include "harness/inputs.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace kiln::harness {

const char* distribution_name(Distribution distribution) {
  switch (distribution) {
    case Distribution::normal: return "normal";
    case Distribution::wide: return "wide";
  }
  return "?";
}

Tensor draw_input(const TensorType& type, Distribution distribution, uint64_t seed) {
  Tensor t(type.dtype, type.shape);
  std::mt19937_64 rng(seed);
  if (type.dtype == DType::boolean || dtype_is_integer(type.dtype)) {
    std::uniform_int_distribution<int64_t> ints(0, type.dtype == DType::boolean ? 1 : 7);
    for (int64_t i = 0; i < t.numel(); ++i) t.set_int(i, ints(rng));
    return t;
  }
  const double limit = dtype_max_finite(type.dtype) / 4;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> exponent(-3.0, 3.0);
  std::bernoulli_distribution negative(0.5);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = 0;
    if (distribution == Distribution::normal) {
      v = normal(rng);
    } else {
      v = std::pow(10.0, exponent(rng)) * (negative(rng) ? -1.0 : 1.0);
    }
    t.set(i, std::clamp(v, -limit, limit));
  }
  return t;
}

uint64_t fresh_secret_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

uint64_t derive_seed(uint64_t secret, uint64_t a, uint64_t b) {
  // splitmix64 finalizer over a combination of the three
  uint64_t z = secret ^ (a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full + 0x165667b19e3779f9ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace kiln::harness
