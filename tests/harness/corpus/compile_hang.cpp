// Planted: 256 constant expressions of ~2^24 steps each, every one under the compiler's per-expression limit:
// minutes of compile time (compile-timeout under a short limit).
#include <utility>

#include "kernel_abi.h"

template <int Seed>
constexpr long long slow_sum() {
  long long s = Seed;
  for (long long i = 0; i < 4000; ++i)
    for (long long j = 0; j < 4000; ++j) s += i ^ j;
  return s;
}

template <int... Seeds>
constexpr long long sum_all(std::integer_sequence<int, Seeds...>) {
  return (slow_sum<Seeds>() + ...);
}

constexpr long long kTable = sum_all(std::make_integer_sequence<int, 256>{});

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  return kTable == 42 ? 1 : 0;
}
