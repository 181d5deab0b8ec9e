// Probe: what an f32 -> bf16 -> f32 rounding (round to nearest even) costs on this GPU, by the instruction that
// does it. Generated kernels round every bf16 op's result (kernel/emit.cpp, kiln_round_bf16); on an H100 the
// FP8 block's layernorm + modulate + amax kernel issued 4 F2F.BF16.F32 an element and ncu found it issue-bound
// (0.66 warps issued per scheduler cycle, DRAM at 46%). Each variant rounds 8 independent chains per thread,
// kSteps steps each (x = round(x * a + b)), and prints roundings per clock per SM:
//   f2f          cvt.rn.bf16.f32 (F2F.BF16.F32), shifted back
//   f2fp_single  cvt.rn.bf16x2.f32 of the value and 0 (F2FP.BF16.F32.PACK_AB), masked
//   f2fp_pair    cvt.rn.bf16x2.f32 of two chains' values, each half unpacked
//   integer      the bits: u + 0x7fff + ((u >> 16) & 1), masked, NaN quieted by a select
//   fma_only     the chain without a rounding (what the multiply-add alone costs)
// Build and run (on the GPU machine): nvcc -O3 -std=c++17 -arch=sm_90 bench/gpu/probe_bf16_rounding.cu
//   -o /tmp/probe_bf16 && /tmp/probe_bf16
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "probe_check.h"

constexpr int kChains = 8;
constexpr int kSteps = 512;

__device__ __forceinline__ float round_f2f(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return __uint_as_float((unsigned)h << 16);
}
__device__ __forceinline__ float round_f2fp_single(float f) {
  unsigned w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(f), "f"(0.0f));
  return __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void round_f2fp_pair(float& a, float& b) {
  unsigned w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(a), "f"(b));
  a = __uint_as_float(w & 0xffff0000u);
  b = __uint_as_float(w << 16);
}
__device__ __forceinline__ float round_integer(float f) {
  const unsigned u = __float_as_uint(f);
  return __uint_as_float((f != f ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

template <int kVariant>
__global__ void chains(float* out, float a, float b) {
  float x[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) x[c] = threadIdx.x * 1e-3f + c;
  for (int s = 0; s < kSteps; ++s) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) x[c] = x[c] * a + b;
    if (kVariant == 2) {
#pragma unroll
      for (int c = 0; c < kChains; c += 2) round_f2fp_pair(x[c], x[c + 1]);
    } else if (kVariant != 4) {
#pragma unroll
      for (int c = 0; c < kChains; ++c)
        x[c] = kVariant == 0 ? round_f2f(x[c]) : kVariant == 1 ? round_f2fp_single(x[c]) : round_integer(x[c]);
    }
  }
  float sum = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) sum += x[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <int kVariant>
double time_ms(float* out, int blocks, int threads) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) chains<kVariant><<<blocks, threads>>>(out, 0.999f, 0.25f);
  float best = 1e30f;
  for (int i = 0; i < 10; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    chains<kVariant><<<blocks, threads>>>(out, 0.999f, 0.25f);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best) best = ms;
  }
  CHECK_CUDA(cudaGetLastError());
  return best;
}

int main() {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const int threads = 256, blocks = prop.multiProcessorCount * 8;
  float* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float) * blocks * threads));
  const double roundings = double(blocks) * threads * kChains * kSteps;
  const double fma_ms = time_ms<4>(out, blocks, threads);
  std::printf("%s, %d SMs, max clock %.0f MHz; %d chains x %d steps a thread, %d blocks of %d\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1e3, kChains, kSteps, blocks, threads);
  const char* names[] = {"f2f", "f2fp_single", "f2fp_pair", "integer"};
  double ms[4] = {time_ms<0>(out, blocks, threads), time_ms<1>(out, blocks, threads), time_ms<2>(out, blocks, threads),
                  time_ms<3>(out, blocks, threads)};
  std::printf("  fma_only     %.3f ms\n", fma_ms);
  for (int v = 0; v < 4; ++v) {
    // Roundings per clock per SM at the max clock, beyond the chain's own multiply-add.
    const double extra_ms = ms[v] - fma_ms;
    const double per_clock = roundings / prop.multiProcessorCount / (extra_ms * 1e-3 * clock_khz * 1e3);
    std::printf("  %-12s %.3f ms   %.1f roundings per clock per SM beyond the multiply-add (%.1f counting all)\n",
                names[v], ms[v], per_clock,
                roundings / prop.multiProcessorCount / (ms[v] * 1e-3 * clock_khz * 1e3));
  }
  return 0;
}
