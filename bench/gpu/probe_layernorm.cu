// Probe: how close can a layernorm + modulate over FLUX's rows (bf16 [rows, 3072], y = LN(x) * (1 + scale) + shift)
// come to a same-size 16-byte copy on this GPU, and which structure gets it there? The H200 held kiln's emitted
// kernels of this kind at 76-80% of such a copy while the H100 reached 90% (docs/performance.md, sessions 34 and 41).
// Each variant is checked against an fp64 host reference, then all are timed in interleaved rounds over rotated
// buffers (more bytes than the L2 holds), beside the copy:
//   block<T>      one block of T threads a row, 16-byte loads into registers, shift and scale loaded before the first
//                 reduction, mean then variance, each a block exchange (kiln's default shape at T = 128)
//   block<T>/1x   the same with the sum and the sum of squares exchanged once
//   warp<W>       one warp a row (12 16-byte loads a lane, held as bf16), W rows a block, shuffles only
//   warp<W>/loop  the same, each warp taking rows in turns with the next row's loads in flight (one resident wave)
//   copy16        a 16-byte copy of as many bytes (one vector a thread), and copy16x4 (four a thread)
// kiln's own kernel beside them: `kiln emit zoo:flux1-double-block --min-mb 40 -o /tmp/emitted.cu` prints the plan's
// big kernels; name the layernorm + modulate one (its header says "4096 rows, 50.3 MB") at build time with
//   -DKILN_EMITTED='"/tmp/emitted.cu"' -DKILN_LN_ROWS=4096 '-DKILN_LN_ENTRIES(X)=X(k1)' [-DKILN_LN_THREADS=128]
// and each entry runs as a variant with (x, scale, shift, y) in the header's launch shape (one row a block of
// KILN_LN_THREADS, the default schedule's), checked against the reference like the others.
// bench/gpu/probe_emitted_ln.sh does this, with edited copies of kiln's kernel beside it.
// Build and run (on the GPU machine): nvcc -O3 -std=c++20 -arch=sm_90 bench/gpu/probe_layernorm.cu -o /tmp/probe_ln
//   && /tmp/probe_ln [ROWS...]   (default 4096 4608: the double block's image rows, the single block's joint rows),
// then the q/k RMS norm + RoPE over 24 heads x 4608 tokens in threads a row and rows a thread group
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "probe_check.h"
#ifdef KILN_EMITTED
#include KILN_EMITTED
#endif
#ifndef KILN_LN_THREADS
#define KILN_LN_THREADS 128
#endif

namespace {

cudaStream_t g_stream;  // every launch, so that a CUDA graph can capture them

constexpr int kD = 3072;
constexpr int kD8 = kD / 8;  // 16-byte vectors a row
constexpr float kEps = 1e-6f;

__device__ __forceinline__ void unpack(const uint4& v, float f[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint4 pack(const float f[8]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// y = ((x - mean) * rstd) * (1 + scale) + shift for one 16-byte vector.
__device__ __forceinline__ uint4 modulate(const uint4& xv, const uint4& shv, const uint4& scv, float mean, float rstd) {
  float x[8], sh[8], sc[8], y[8];
  unpack(xv, x);
  unpack(shv, sh);
  unpack(scv, sc);
  for (int j = 0; j < 8; ++j) y[j] = (x[j] - mean) * rstd * (1.0f + sc[j]) + sh[j];
  return pack(y);
}

// A thread's share of a row: the sum of its elements and the sum of their squares.
template <int S>
__device__ __forceinline__ float2 sums(const uint4 (&v)[S]) {
  float sum = 0, sq = 0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    float f[8];
    unpack(v[s], f);
    for (int j = 0; j < 8; ++j) {
      sum += f[j];
      sq += f[j] * f[j];
    }
  }
  return make_float2(sum, sq);
}

// A thread's share of a row's sum of squared deviations from the mean.
template <int S>
__device__ __forceinline__ float squared_deviations(const uint4 (&v)[S], float mean) {
  float c = 0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    float f[8];
    unpack(v[s], f);
    for (int j = 0; j < 8; ++j) c += (f[j] - mean) * (f[j] - mean);
  }
  return c;
}

// One block of T threads a row. kOnePass: sum and sum of squares in one exchange.
template <int T, bool kOnePass>
__global__ void __launch_bounds__(T) ln_block(const uint4* __restrict__ x, const uint4* __restrict__ shift,
                                              const uint4* __restrict__ scale, uint4* __restrict__ y) {
  constexpr int S = kD8 / T;
  constexpr int W = T / 32;
  __shared__ float red[2][2][W];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const size_t row = blockIdx.x;
  uint4 v[S], sh[S], sc[S];
#pragma unroll
  for (int s = 0; s < S; ++s) v[s] = x[row * kD8 + s * T + t];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    sh[s] = shift[s * T + t];
    sc[s] = scale[s * T + t];
  }
  const float2 own = sums(v);
  float sum = own.x, sq = own.y;
  float mean, var;
  if (kOnePass) {
    sum = warp_sum(sum);
    sq = warp_sum(sq);
    if (lane == 0) red[0][0][warp] = sum, red[0][1][warp] = sq;
    __syncthreads();
    sum = 0, sq = 0;
    for (int w = 0; w < W; ++w) sum += red[0][0][w], sq += red[0][1][w];
    mean = sum / kD;
    var = fmaxf(sq / kD - mean * mean, 0.0f);
  } else {
    // A row's sum over the block: each warp's in its slot, one barrier, every thread adds the slots.
    auto block_sum = [&](float value, float* slot) {
      value = warp_sum(value);
      if (lane == 0) slot[warp] = value;
      __syncthreads();
      value = 0;
      for (int w = 0; w < W; ++w) value += slot[w];
      return value;
    };
    mean = block_sum(sum, red[0][0]) / kD;
    var = block_sum(squared_deviations(v, mean), red[1][0]) / kD;
  }
  const float rstd = rsqrtf(var + kEps);
#pragma unroll
  for (int s = 0; s < S; ++s) y[row * kD8 + s * T + t] = modulate(v[s], sh[s], sc[s], mean, rstd);
}

// One warp a row, W rows a block: 12 vectors a lane, no barrier.
__device__ __forceinline__ void ln_warp_row(const uint4 (&v)[kD8 / 32], const uint4* __restrict__ shift,
                                            const uint4* __restrict__ scale, uint4* __restrict__ yrow, int lane) {
  constexpr int S = kD8 / 32;
  const float mean = warp_sum(sums(v).x) / kD;
  const float rstd = rsqrtf(warp_sum(squared_deviations(v, mean)) / kD + kEps);
#pragma unroll
  for (int s = 0; s < S; ++s) yrow[s * 32 + lane] = modulate(v[s], shift[s * 32 + lane], scale[s * 32 + lane], mean, rstd);
}

template <int W>
__global__ void __launch_bounds__(32 * W) ln_warp(const uint4* __restrict__ x, const uint4* __restrict__ shift,
                                                  const uint4* __restrict__ scale, uint4* __restrict__ y, int rows) {
  constexpr int S = kD8 / 32;
  const int lane = threadIdx.x & 31;
  const size_t row = static_cast<size_t>(blockIdx.x) * W + (threadIdx.x >> 5);
  if (row >= static_cast<size_t>(rows)) return;
  uint4 v[S];
#pragma unroll
  for (int s = 0; s < S; ++s) v[s] = x[row * kD8 + s * 32 + lane];
  ln_warp_row(v, shift, scale, y + row * kD8, lane);
}

// Warps take rows in turns; the next row's vectors are loaded before this row is reduced and stored.
template <int W>
__global__ void __launch_bounds__(32 * W) ln_warp_loop(const uint4* __restrict__ x, const uint4* __restrict__ shift,
                                                       const uint4* __restrict__ scale, uint4* __restrict__ y, int rows) {
  constexpr int S = kD8 / 32;
  const int lane = threadIdx.x & 31;
  const int stride = gridDim.x * W;
  int row = blockIdx.x * W + (threadIdx.x >> 5);
  if (row >= rows) return;
  uint4 v[S], next[S];
#pragma unroll
  for (int s = 0; s < S; ++s) v[s] = x[static_cast<size_t>(row) * kD8 + s * 32 + lane];
  for (; row < rows; row += stride) {
    const int after = row + stride;
    if (after < rows) {
#pragma unroll
      for (int s = 0; s < S; ++s) next[s] = x[static_cast<size_t>(after) * kD8 + s * 32 + lane];
    }
    ln_warp_row(v, shift, scale, y + static_cast<size_t>(row) * kD8, lane);
#pragma unroll
    for (int s = 0; s < S; ++s) v[s] = next[s];
  }
}


// q/k RMS norm + interleaved RoPE over heads' rows of 128 (q [heads, tokens, 128] bf16, cos/sin [tokens, 64] f32,
// the norm's weight [128] bf16): kTpr threads a row (each 128 / kTpr elements, in 16-byte vectors), 128 threads a
// block, and each thread group taking kRows consecutive rows with all their loads issued first.
constexpr int kHead = 128;
template <int kTpr, int kRows>
__global__ void __launch_bounds__(128) rms_rope(const uint4* __restrict__ x, const float4* __restrict__ cosv,
                                                const float4* __restrict__ sinv, const uint4* __restrict__ weight,
                                                uint4* __restrict__ y, int rows, int tokens) {
  constexpr int V = kHead / 8 / kTpr;  // vectors a thread a row
  const int lane = threadIdx.x % kTpr;
  const int group = (blockIdx.x * 128 + threadIdx.x) / kTpr;
  const int first = group * kRows;
  uint4 v[kRows][V];
  float4 c[kRows][V], sn[kRows][V];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = min(first + r, rows - 1);
    const int token = row % tokens;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      v[r][i] = x[static_cast<size_t>(row) * (kHead / 8) + i * kTpr + lane];
      c[r][i] = cosv[static_cast<size_t>(token) * (kHead / 8) + i * kTpr + lane];
      sn[r][i] = sinv[static_cast<size_t>(token) * (kHead / 8) + i * kTpr + lane];
    }
  }
  float w[V][8];
#pragma unroll
  for (int i = 0; i < V; ++i) unpack(weight[i * kTpr + lane], w[i]);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float f[V][8];
    float sq = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      unpack(v[r][i], f[i]);
      for (int j = 0; j < 8; ++j) sq += f[i][j] * f[i][j];
    }
    for (int o = kTpr / 2; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    const float rstd = rsqrtf(sq / kHead + kEps);
    if (first + r >= rows) continue;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float n[8], o[8];
      for (int j = 0; j < 8; ++j) n[j] = f[i][j] * rstd * w[i][j];
      const float cs[4] = {c[r][i].x, c[r][i].y, c[r][i].z, c[r][i].w};
      const float ss[4] = {sn[r][i].x, sn[r][i].y, sn[r][i].z, sn[r][i].w};
      for (int p = 0; p < 4; ++p) {
        o[2 * p] = n[2 * p] * cs[p] - n[2 * p + 1] * ss[p];
        o[2 * p + 1] = n[2 * p] * ss[p] + n[2 * p + 1] * cs[p];
      }
      y[static_cast<size_t>(first + r) * (kHead / 8) + i * kTpr + lane] = pack(o);
    }
  }
}

template <int kPer>
__global__ void __launch_bounds__(256) copy16(const uint4* __restrict__ in, uint4* __restrict__ out, size_t n) {
  const size_t base = (static_cast<size_t>(blockIdx.x) * 256 * kPer) + threadIdx.x;
  uint4 v[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const size_t at = base + static_cast<size_t>(i) * 256;
    if (at < n) v[i] = in[at];
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const size_t at = base + static_cast<size_t>(i) * 256;
    if (at < n) out[at] = v[i];
  }
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// A kernel (or copy) launched on buffer set `set`, moving `bytes` a launch.
struct Variant {
  std::string name;
  std::function<void(int set)> launch;
  double bytes = 0;
  bool is_copy = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Buffer sets rotated between launches: at least 4 and 200 MB in all, more than the L2 holds.
int buffer_sets(double bytes_a_set) { return std::max(4, static_cast<int>(200e6 / bytes_a_set) + 1); }

// Interleaved rounds of 20 launches each, the median a launch; bandwidth against the best copy's. With `sets` > 1 the
// launches rotate over buffer sets (each reads what the L2 no longer holds); with 1 they repeat on one set, as a plan
// step replayed alone is timed (profile/profile.h), where part of a 50 MB kernel's bytes may come from the L2.
// With `graph`, one set's 20 launches are captured once into a CUDA graph and each round replays it (a plan step
// replayed alone as profile/profile.h times it, with kKernelRepeats launches).
void time_variants(const std::vector<Variant>& variants, int sets, bool graph = false) {
  std::printf(" %s\n", graph ? "one buffer set, 20 launches a CUDA graph:" : sets > 1 ? "rotated buffer sets:" : "one buffer set, repeated:");
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  constexpr int kLaunches = 20, kRounds = 9;
  std::vector<std::vector<double>> us(variants.size());
  std::vector<cudaGraphExec_t> execs(variants.size(), nullptr);
  for (size_t v = 0; graph && v < variants.size(); ++v) {
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) variants[v].launch(0);
    CHECK_CUDA(cudaStreamEndCapture(g_stream, &g));
    CHECK_CUDA(cudaGraphInstantiate(&execs[v], g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  for (int i = 0; i < 200; ++i) variants[i % variants.size()].launch(i % sets);  // the clocks up first
  for (int r = 0; r < kRounds; ++r) {
    for (size_t v = 0; v < variants.size(); ++v) {
      CHECK_CUDA(cudaEventRecord(a, g_stream));
      if (graph) CHECK_CUDA(cudaGraphLaunch(execs[v], g_stream));
      for (int i = 0; !graph && i < kLaunches; ++i) variants[v].launch(i % sets);
      CHECK_CUDA(cudaEventRecord(b, g_stream));
      CHECK_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
      us[v].push_back(1e3 * ms / kLaunches);
    }
  }
  CHECK_CUDA(cudaGetLastError());
  double copy_rate = 0;
  for (size_t v = 0; v < variants.size(); ++v)
    if (variants[v].is_copy) copy_rate = std::max(copy_rate, variants[v].bytes / median(us[v]));
  for (size_t v = 0; v < variants.size(); ++v) {
    const double m = median(us[v]);
    const auto [lo, hi] = std::minmax_element(us[v].begin(), us[v].end());
    std::printf("  %-22s %8.2f us (%.2f-%.2f)  %.2f TB/s  %5.1f%% of the best copy's rate\n", variants[v].name.c_str(), m,
                *lo, *hi, variants[v].bytes / (m * 1e-6) / 1e12, 100.0 * variants[v].bytes / m / copy_rate);
  }
  for (cudaGraphExec_t exec : execs)
    if (exec) CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
}

// The copies of `elems` bf16 from xs[set] to ys[set].
void add_copies(std::vector<Variant>& variants, const std::vector<uint4*>& xs, const std::vector<uint4*>& ys, size_t elems) {
  const size_t n16 = elems / 8;
  const int grid1 = static_cast<int>((n16 + 255) / 256), grid4 = static_cast<int>((n16 + 1023) / 1024);
  variants.push_back({"copy16", [=](int s) { copy16<1><<<grid1, 256, 0, g_stream>>>(xs[s], ys[s], n16); }, 4.0 * elems, true});
  variants.push_back({"copy16x4", [=](int s) { copy16<4><<<grid4, 256, 0, g_stream>>>(xs[s], ys[s], n16); }, 4.0 * elems, true});
  variants.push_back({"driver copy", [=](int s) { CHECK_CUDA(cudaMemcpyAsync(ys[s], xs[s], elems * 2, cudaMemcpyDeviceToDevice, g_stream)); },
                      4.0 * elems, true});
}

// Runs each non-copy variant on set 0 and drops (naming) those whose output misses `expected` by more than 3
// bf16 roundings (2^-8 relative, with an absolute floor of 1e-3).
void check_variants(std::vector<Variant>& variants, uint4* out, const std::vector<float>& expected) {
  std::vector<uint16_t> got(expected.size());
  for (Variant& v : variants) {
    if (v.is_copy) continue;
    CHECK_CUDA(cudaMemset(out, 0xff, expected.size() * 2));
    CHECK_CUDA(cudaDeviceSynchronize());
    v.launch(0);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamSynchronize(g_stream));
    CHECK_CUDA(cudaMemcpy(got.data(), out, expected.size() * 2, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const double err = std::fabs(bf16_to_float(got[i]) - expected[i]);
      worst = std::max(worst, err / (std::fabs(expected[i]) * std::ldexp(1.0, -8) + 1e-3));
    }
    if (!(worst <= 3.0)) {
      std::printf("  %-22s WRONG: error %.2f roundings\n", v.name.c_str(), worst);
      v.name.clear();
    }
  }
  std::erase_if(variants, [](const Variant& v) { return v.name.empty(); });
}

std::vector<uint16_t> random_bf16(size_t n, float mean, float sd, uint32_t seed) {
  std::vector<uint16_t> out(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, sd);
  for (uint16_t& h : out) h = float_to_bf16(normal(rng));
  return out;
}

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, host.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// `count` copies of `host` (xs) and as many outputs (ys) of the same size, freed at the end of the scope.
struct BufferSets {
  std::vector<uint4*> xs, ys;
  BufferSets(const std::vector<uint16_t>& host, int count) {
    for (int i = 0; i < count; ++i) {
      xs.push_back(reinterpret_cast<uint4*>(to_device(host)));
      ys.push_back(nullptr);
      CHECK_CUDA(cudaMalloc(&ys.back(), host.size() * 2));
    }
  }
  ~BufferSets() {
    for (size_t i = 0; i < xs.size(); ++i) {
      CHECK_CUDA(cudaFree(xs[i]));
      CHECK_CUDA(cudaFree(ys[i]));
    }
  }
};

// The variants checked against `expected` on set 0, then timed in each protocol.
void check_and_time(std::vector<Variant>& variants, const BufferSets& sets, const std::vector<float>& expected) {
  check_variants(variants, sets.ys[0], expected);
  time_variants(variants, static_cast<int>(sets.xs.size()));
  time_variants(variants, 1);
  time_variants(variants, 1, true);
}

int resident_blocks(const void* fn, int threads, int sms) {
  int per_sm = 0;
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, 0));
  return per_sm * sms;
}

void probe_layernorm(int rows, int sms) {
  const size_t elems = static_cast<size_t>(rows) * kD;
  const int sets = buffer_sets(4.0 * elems);
  const std::vector<uint16_t> hx = random_bf16(elems, 0.5f, 2.0f, 7);
  const std::vector<uint16_t> hsh = random_bf16(kD, 0.0f, 0.3f, 8), hsc = random_bf16(kD, 0.0f, 0.3f, 9);
  const BufferSets buffers(hx, sets);
  const std::vector<uint4*>&xs = buffers.xs, &ys = buffers.ys;
  const uint4* shift = reinterpret_cast<const uint4*>(to_device(hsh));
  const uint4* scale = reinterpret_cast<const uint4*>(to_device(hsc));
  const double bytes = 4.0 * elems + 4.0 * kD;
  std::vector<Variant> v;
  v.push_back({"block128", [=](int s) { ln_block<128, false><<<rows, 128, 0, g_stream>>>(xs[s], shift, scale, ys[s]); }, bytes});
  v.push_back({"block128/1x", [=](int s) { ln_block<128, true><<<rows, 128, 0, g_stream>>>(xs[s], shift, scale, ys[s]); }, bytes});
  v.push_back({"block64", [=](int s) { ln_block<64, false><<<rows, 64, 0, g_stream>>>(xs[s], shift, scale, ys[s]); }, bytes});
  v.push_back({"block384", [=](int s) { ln_block<384, false><<<rows, 384, 0, g_stream>>>(xs[s], shift, scale, ys[s]); }, bytes});
  v.push_back({"block384/1x", [=](int s) { ln_block<384, true><<<rows, 384, 0, g_stream>>>(xs[s], shift, scale, ys[s]); }, bytes});
  v.push_back({"warp2", [=](int s) { ln_warp<2><<<(rows + 1) / 2, 64, 0, g_stream>>>(xs[s], shift, scale, ys[s], rows); }, bytes});
  v.push_back({"warp4", [=](int s) { ln_warp<4><<<(rows + 3) / 4, 128, 0, g_stream>>>(xs[s], shift, scale, ys[s], rows); }, bytes});
  v.push_back({"warp8", [=](int s) { ln_warp<8><<<(rows + 7) / 8, 256, 0, g_stream>>>(xs[s], shift, scale, ys[s], rows); }, bytes});
  const int g4 = std::min((rows + 3) / 4, resident_blocks(reinterpret_cast<const void*>(ln_warp_loop<4>), 128, sms));
  v.push_back({"warp4/loop(" + std::to_string(g4) + ")",
               [=](int s) { ln_warp_loop<4><<<g4, 128, 0, g_stream>>>(xs[s], shift, scale, ys[s], rows); }, bytes});
#ifdef KILN_LN_ENTRIES
  if (rows == KILN_LN_ROWS) {
#define KILN_LN_VARIANT(entry)                                                                                         \
  v.push_back({#entry, [=](int s) {                                                                                    \
                 entry<<<rows, KILN_LN_THREADS, 0, g_stream>>>(                                                        \
                     reinterpret_cast<const uint16_t*>(xs[s]), reinterpret_cast<const uint16_t*>(scale),               \
                     reinterpret_cast<const uint16_t*>(shift), reinterpret_cast<uint16_t*>(ys[s]));                     \
               }, bytes});
    KILN_LN_ENTRIES(KILN_LN_VARIANT)
#undef KILN_LN_VARIANT
  }
#endif
  add_copies(v, xs, ys, elems);

  std::vector<float> ref(elems);  // fp64, rounded once
  for (int r = 0; r < rows; ++r) {
    const uint16_t* row = hx.data() + static_cast<size_t>(r) * kD;
    double sum = 0, c = 0;
    for (int i = 0; i < kD; ++i) sum += bf16_to_float(row[i]);
    const double mean = sum / kD;
    for (int i = 0; i < kD; ++i) c += (bf16_to_float(row[i]) - mean) * (bf16_to_float(row[i]) - mean);
    const double rstd = 1.0 / std::sqrt(c / kD + kEps);
    for (int i = 0; i < kD; ++i) {
      ref[static_cast<size_t>(r) * kD + i] = static_cast<float>((bf16_to_float(row[i]) - mean) * rstd *
                                                                    (1.0 + bf16_to_float(hsc[i])) + bf16_to_float(hsh[i]));
    }
  }
  std::printf("layernorm + modulate, %d rows x %d bf16: %.1f MB a launch, %d buffer sets\n", rows, kD, bytes / 1e6, sets);
  check_and_time(v, buffers, ref);
  CHECK_CUDA(cudaFree(const_cast<uint4*>(shift)));
  CHECK_CUDA(cudaFree(const_cast<uint4*>(scale)));
}

void probe_rms_rope(int tokens, int heads) {
  const int rows = tokens * heads;
  const size_t elems = static_cast<size_t>(rows) * kHead;
  const int sets = buffer_sets(4.0 * elems);
  const std::vector<uint16_t> hx = random_bf16(elems, 0.0f, 1.0f, 11), hw = random_bf16(kHead, 1.0f, 0.2f, 12);
  std::vector<float> hcos(static_cast<size_t>(tokens) * 64), hsin(hcos.size());
  for (int t = 0; t < tokens; ++t) {
    for (int p = 0; p < 64; ++p) {
      const double angle = t * std::pow(10000.0, -p / 64.0);
      hcos[static_cast<size_t>(t) * 64 + p] = static_cast<float>(std::cos(angle));
      hsin[static_cast<size_t>(t) * 64 + p] = static_cast<float>(std::sin(angle));
    }
  }
  const BufferSets buffers(hx, sets);
  const std::vector<uint4*>&xs = buffers.xs, &ys = buffers.ys;
  const float4* cosv = reinterpret_cast<const float4*>(to_device(hcos));
  const float4* sinv = reinterpret_cast<const float4*>(to_device(hsin));
  const uint4* weight = reinterpret_cast<const uint4*>(to_device(hw));
  const double bytes = 4.0 * elems + 8.0 * hcos.size() + 2.0 * kHead;
  std::vector<Variant> v;
  auto add = [&](const std::string& name, int tpr, int rows_a_group, auto kernel) {
    const int groups = (rows + rows_a_group - 1) / rows_a_group;
    const int grid = (groups * tpr + 127) / 128;
    v.push_back({name, [=](int s) { kernel<<<grid, 128, 0, g_stream>>>(xs[s], cosv, sinv, weight, ys[s], rows, tokens); }, bytes});
  };
  add("tpr16", 16, 1, rms_rope<16, 1>);
  add("tpr16/rows2", 16, 2, rms_rope<16, 2>);
  add("tpr16/rows4", 16, 4, rms_rope<16, 4>);
  add("tpr8", 8, 1, rms_rope<8, 1>);
  add("tpr8/rows2", 8, 2, rms_rope<8, 2>);
  add("tpr4", 4, 1, rms_rope<4, 1>);
  add_copies(v, xs, ys, elems);

  std::vector<float> ref(elems);
  for (int r = 0; r < rows; ++r) {
    const uint16_t* row = hx.data() + static_cast<size_t>(r) * kHead;
    const int t = r % tokens;
    double sq = 0;
    for (int i = 0; i < kHead; ++i) sq += static_cast<double>(bf16_to_float(row[i])) * bf16_to_float(row[i]);
    const double rstd = 1.0 / std::sqrt(sq / kHead + kEps);
    for (int p = 0; p < kHead / 2; ++p) {
      const double a = bf16_to_float(row[2 * p]) * rstd * bf16_to_float(hw[2 * p]);
      const double b = bf16_to_float(row[2 * p + 1]) * rstd * bf16_to_float(hw[2 * p + 1]);
      const double c = hcos[static_cast<size_t>(t) * 64 + p], s = hsin[static_cast<size_t>(t) * 64 + p];
      ref[static_cast<size_t>(r) * kHead + 2 * p] = static_cast<float>(a * c - b * s);
      ref[static_cast<size_t>(r) * kHead + 2 * p + 1] = static_cast<float>(a * s + b * c);
    }
  }
  std::printf("q/k RMS norm + RoPE, %d heads x %d tokens x %d bf16: %.1f MB a launch, %d buffer sets\n", heads, tokens,
              kHead, bytes / 1e6, sets);
  check_and_time(v, buffers, ref);
  CHECK_CUDA(cudaFree(const_cast<float4*>(cosv)));
  CHECK_CUDA(cudaFree(const_cast<float4*>(sinv)));
  CHECK_CUDA(cudaFree(const_cast<uint4*>(weight)));
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  std::vector<int> rows;
  for (int i = 1; i < argc; ++i) rows.push_back(std::atoi(argv[i]));
  if (rows.empty()) rows = {4096, 4608};
  for (int r : rows) {
    if (r <= 0) {
      std::printf("rows must be positive, got %d\n", r);
      return 2;
    }
    probe_layernorm(r, prop.multiProcessorCount);
  }
  probe_rms_rope(4608, 24);
  return 0;
}
