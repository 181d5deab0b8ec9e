// Benchmark (not a test): what a plain copy loop reaches on this machine's memory with cached and with
// non-temporal stores, next to glibc's memcpy, at 1 and 2 threads: the ceiling a generated kernel's row
// stores can have (a cached store first reads its line: 3 bytes of traffic per 2 written). 24 MiB of bf16 in,
// 24 MiB out (larger than the last-level cache), read + written bytes per second, best of 7. AVX2 only.
// Build: cmake -DKILN_BUILD_BENCH=ON, then `ninja kiln_cpu_copy_stores`; or by hand:
//        g++ -O3 -march=native bench/cpu_copy_stores.cpp -o /tmp/copy_stores -lpthread
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr size_t kElements = size_t{4096} * 3072;  // a FLUX [4096, 3072] bf16 activation

template <class F>
double gigabytes_per_second(int threads, F f) {
  double best = 1e9;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { f(kElements * t / threads, kElements * (t + 1) / threads); });
    for (std::thread& p : pool) p.join();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 4.0 * static_cast<double>(kElements) / best / 1e9;
}

}  // namespace

int main() {
  auto* a = static_cast<uint16_t*>(std::aligned_alloc(64, kElements * 2));
  auto* b = static_cast<uint16_t*>(std::aligned_alloc(64, kElements * 2));
  std::memset(a, 1, kElements * 2);
  std::memset(b, 2, kElements * 2);
  const __m256i one = _mm256_set1_epi16(1);
  for (int threads : {1, 2}) {
    const double copy = gigabytes_per_second(threads, [&](size_t i0, size_t i1) { std::memcpy(b + i0, a + i0, (i1 - i0) * 2); });
    const double cached = gigabytes_per_second(threads, [&](size_t i0, size_t i1) {
      for (size_t i = i0; i < i1; i += 16) {
        _mm256_storeu_si256((__m256i*)(b + i), _mm256_add_epi16(_mm256_loadu_si256((const __m256i*)(a + i)), one));
      }
    });
    const double streamed = gigabytes_per_second(threads, [&](size_t i0, size_t i1) {
      for (size_t i = i0; i < i1; i += 16) {
        _mm256_stream_si256((__m256i*)(b + i), _mm256_add_epi16(_mm256_load_si256((const __m256i*)(a + i)), one));
      }
      _mm_sfence();
    });
    std::printf("threads %d: memcpy %.2f GB/s, cached-store loop %.2f GB/s, non-temporal-store loop %.2f GB/s\n", threads,
                copy, cached, streamed);
  }
  std::free(a);
  std::free(b);
}
