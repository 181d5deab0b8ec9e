// Element conversion throughput: what the reference executor pays to decode and encode each element.
// Run: cmake -S . -B build/bench -DKILN_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release && build/bench/bench/kiln_dtype_bench
//
// Measured for bf16 on a shared 2-core Xeon at 2.3 GHz (GCC 12, -O3, no -march), ns per element, CPU time:
//                               generic frexp/ldexp path    integer encode + decode table
//   store_element                        34                          2.6 - 3.2
//   load_element                         18                          2.5 - 3.2
//   encode_elements / from_f64           34 (from_f64)               1.7 - 2.2
//   decode_elements / to_f64             18 (to_f64)                 0.35 (0.5 with to_f64's allocation)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "ir/dtype.h"
#include "ir/tensor.h"

namespace kiln {
namespace {

constexpr int64_t kElements = 1 << 16;

// Values like activations and weights: mostly within a few binades of 1, both signs.
std::vector<double> typical_values(int64_t n) {
  std::vector<double> values(static_cast<size_t>(n));
  uint64_t state = 42;
  for (auto& v : values) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double unit = static_cast<double>(state >> 11) * 0x1.0p-53;
    v = (unit - 0.5) * std::ldexp(1.0, static_cast<int>(state % 16) - 8);
  }
  return values;
}

void BM_StoreElement(benchmark::State& state, DType dtype) {
  const std::vector<double> values = typical_values(kElements);
  Tensor t(dtype, {kElements});
  const size_t size = dtype_size(dtype);
  for (auto _ : state) {
    for (int64_t i = 0; i < kElements; ++i) store_element(dtype, values[i], t.data() + i * size);
    benchmark::DoNotOptimize(t.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_LoadElement(benchmark::State& state, DType dtype) {
  const Tensor t = Tensor::from_f64(dtype, {kElements}, typical_values(kElements));
  const size_t size = dtype_size(dtype);
  std::vector<double> out(kElements);
  for (auto _ : state) {
    for (int64_t i = 0; i < kElements; ++i) out[i] = load_element(dtype, t.data() + i * size);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_EncodeElements(benchmark::State& state, DType dtype) {
  const std::vector<double> values = typical_values(kElements);
  Tensor t(dtype, {kElements});
  for (auto _ : state) {
    encode_elements(dtype, values.data(), t.data(), kElements);
    benchmark::DoNotOptimize(t.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

void BM_DecodeElements(benchmark::State& state, DType dtype) {
  const Tensor t = Tensor::from_f64(dtype, {kElements}, typical_values(kElements));
  std::vector<double> out(kElements);
  for (auto _ : state) {
    decode_elements(dtype, t.data(), out.data(), kElements);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// Includes allocating and zero-filling the result.
void BM_FromF64(benchmark::State& state, DType dtype) {
  const std::vector<double> values = typical_values(kElements);
  for (auto _ : state) {
    Tensor t = Tensor::from_f64(dtype, {kElements}, values);
    benchmark::DoNotOptimize(t.data());
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

// Includes allocating the result.
void BM_ToF64(benchmark::State& state, DType dtype) {
  const Tensor t = Tensor::from_f64(dtype, {kElements}, typical_values(kElements));
  for (auto _ : state) {
    std::vector<double> out = t.to_f64();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}

#define KILN_DTYPE_BENCH(fn)                    \
  BENCHMARK_CAPTURE(fn, f32, DType::f32);       \
  BENCHMARK_CAPTURE(fn, bf16, DType::bf16);     \
  BENCHMARK_CAPTURE(fn, f16, DType::f16);       \
  BENCHMARK_CAPTURE(fn, f8e4m3, DType::f8e4m3); \
  BENCHMARK_CAPTURE(fn, f8e5m2, DType::f8e5m2)

KILN_DTYPE_BENCH(BM_StoreElement);
KILN_DTYPE_BENCH(BM_LoadElement);
KILN_DTYPE_BENCH(BM_EncodeElements);
KILN_DTYPE_BENCH(BM_DecodeElements);
KILN_DTYPE_BENCH(BM_FromF64);
KILN_DTYPE_BENCH(BM_ToF64);

}  // namespace
}  // namespace kiln
