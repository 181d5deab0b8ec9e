#include "cuda/gemv.h"

#include <fmt/format.h>

#include <cstdint>

#include "cuda/driver.h"
#include "cuda/nvrtc.h"

namespace kiln::cuda {
namespace {

// Rows of w go to warps, ROWS a warp; a lane sums its share of a row in f32 (each 16-byte load is 8 products,
// fused multiply-adds in order), the warp adds its lanes' sums, and lane 0 adds the bias and rounds to bf16
// (nearest even, NaN kept). The 16-byte path keeps four loads of each row in flight a lane before it multiplies.
constexpr const char* kSource = R"(
typedef unsigned short u16;
__device__ __forceinline__ float bf16_lo(unsigned v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(unsigned v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ float bf16_value(u16 v) { return __uint_as_float((unsigned)v << 16); }
__device__ __forceinline__ float dot8(uint4 a, uint4 b, float s) {
  s = fmaf(bf16_lo(a.x), bf16_lo(b.x), s); s = fmaf(bf16_hi(a.x), bf16_hi(b.x), s);
  s = fmaf(bf16_lo(a.y), bf16_lo(b.y), s); s = fmaf(bf16_hi(a.y), bf16_hi(b.y), s);
  s = fmaf(bf16_lo(a.z), bf16_lo(b.z), s); s = fmaf(bf16_hi(a.z), bf16_hi(b.z), s);
  s = fmaf(bf16_lo(a.w), bf16_lo(b.w), s); s = fmaf(bf16_hi(a.w), bf16_hi(b.w), s);
  return s;
}
__device__ __forceinline__ u16 round_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  return (u16)(f != f ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <int ROWS>
__device__ __forceinline__ void finish(float (&acc)[ROWS], long first, int n, const u16* bias, u16* y) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float v = acc[r];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0 && first + r < n) y[first + r] = round_bf16(bias ? v + bf16_value(bias[first + r]) : v);
  }
}

// k8 = k / 8 16-byte words a row; w, x 16-byte aligned.
template <int ROWS>
__device__ __forceinline__ void gemv_words(const uint4* __restrict__ w, const uint4* __restrict__ x,
                                           const u16* __restrict__ bias, u16* __restrict__ y, long first, int n,
                                           int k8) {
  const uint4* rows[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) rows[r] = w + (first + r < n ? first + r : first) * (long)k8;  // a missing row reads the first
  float acc[ROWS] = {};
  int i = threadIdx.x & 31;
  for (; i + 96 < k8; i += 128) {
    uint4 wv[ROWS][4], xv[4];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int u = 0; u < 4; ++u) wv[r][u] = rows[r][i + 32 * u];
#pragma unroll
    for (int u = 0; u < 4; ++u) xv[u] = __ldg(x + i + 32 * u);
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[r] = dot8(wv[r][u], xv[u], acc[r]);
  }
  for (; i < k8; i += 32) {
    const uint4 xv = __ldg(x + i);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = dot8(rows[r][i], xv, acc[r]);
  }
  finish<ROWS>(acc, first, n, bias, y);
}

// Any k and alignment: one element at a time.
template <int ROWS>
__device__ __forceinline__ void gemv_elements(const u16* __restrict__ w, const u16* __restrict__ x,
                                              const u16* __restrict__ bias, u16* __restrict__ y, long first, int n,
                                              int k) {
  float acc[ROWS] = {};
  for (int i = threadIdx.x & 31; i < k; i += 32) {
    const float xv = bf16_value(x[i]);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = fmaf(bf16_value(w[(first + r < n ? first + r : first) * (long)k + i]), xv, acc[r]);
  }
  finish<ROWS>(acc, first, n, bias, y);
}

// The warp's first row; a warp past the last row has nothing to do (the whole warp, so its shuffles stay whole).
#define KILN_GEMV(NAME, ROWS)                                                                             \
  extern "C" __global__ void NAME(const void* w, const void* x, const void* bias, void* y, int n, int k, \
                                  int words) {                                                           \
    const long first = ((long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * ROWS;               \
    if (first >= n) return;                                                                              \
    if (words)                                                                                           \
      gemv_words<ROWS>((const uint4*)w, (const uint4*)x, (const u16*)bias, (u16*)y, first, n, k / 8);    \
    else                                                                                                 \
      gemv_elements<ROWS>((const u16*)w, (const u16*)x, (const u16*)bias, (u16*)y, first, n, k);         \
  }
KILN_GEMV(kiln_gemv_1row, 1)
KILN_GEMV(kiln_gemv_2rows, 2)
)";

struct Variant {
  int threads, rows;
};
constexpr Variant kVariantShapes[GemvKernels::kVariants] = {{256, 1}, {128, 1}, {256, 2}, {128, 2}};

}  // namespace

const char* gemv_source() { return kSource; }

struct GemvKernels::State {
  Module module;
  CUfunction one_row = nullptr, two_rows = nullptr;
};

GemvKernels::GemvKernels(std::unique_ptr<State> state) : state_(std::move(state)) {}
GemvKernels::GemvKernels(GemvKernels&&) noexcept = default;
GemvKernels& GemvKernels::operator=(GemvKernels&&) noexcept = default;
GemvKernels::~GemvKernels() = default;

bool GemvKernels::fits(const GemmDesc& d) {
  return d.m == 1 && d.n > 0 && d.k > 0 && d.n < (int64_t{1} << 31) && d.k < (int64_t{1} << 31) &&
         d.input == DType::bf16 && d.output == DType::bf16 && d.scaling == GemmScaling::none &&
         (d.epilogue == GemmEpilogue::none || d.epilogue == GemmEpilogue::bias) && !d.scale && !d.residual;
}

std::string GemvKernels::describe(int variant) {
  const Variant& v = kVariantShapes[variant];
  return fmt::format("kiln gemv: {} threads, {} row{} a warp", v.threads, v.rows, v.rows > 1 ? "s" : "");
}

Result<GemvKernels> GemvKernels::create() {
  KILN_ASSIGN_OR_RETURN(const std::string arch, current_device_arch());
  KILN_ASSIGN_OR_RETURN(NvrtcOutput compiled, nvrtc_compile(kSource, "kiln_gemv.cu", NvrtcOptions{arch, {}, true}));
  KILN_ASSIGN_OR_RETURN(Module module, Module::load(compiled.cubin));
  KILN_ASSIGN_OR_RETURN(CUfunction one, module.function("kiln_gemv_1row"));
  KILN_ASSIGN_OR_RETURN(CUfunction two, module.function("kiln_gemv_2rows"));
  return GemvKernels(std::unique_ptr<State>(new State{std::move(module), one, two}));
}

Status GemvKernels::run(const GemmDesc& desc, int variant, const GemmArgs& args, CUstream stream) const {
  if (!fits(desc))
    return make_error(ErrorCode::invalid_argument, fmt::format("kiln gemv cannot compute GEMM {}", desc.str()));
  if (variant < 0 || variant >= kVariants)
    return make_error(ErrorCode::invalid_argument, fmt::format("kiln gemv has no variant {}", variant));
  const Variant& v = kVariantShapes[variant];
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  int words = desc.k % 8 == 0 && aligned(args.w) && aligned(args.x) ? 1 : 0;
  int n = static_cast<int>(desc.n), k = static_cast<int>(desc.k);
  const void* w = args.w;
  const void* x = args.x;
  const void* bias = desc.epilogue == GemmEpilogue::bias ? args.bias : nullptr;
  void* y = args.y;
  const int64_t rows_per_block = int64_t{v.threads / 32} * v.rows;
  LaunchShape shape;
  shape.grid_x = static_cast<unsigned>((desc.n + rows_per_block - 1) / rows_per_block);
  shape.block_x = static_cast<unsigned>(v.threads);
  return launch(v.rows == 1 ? state_->one_row : state_->two_rows, shape, stream, {&w, &x, &bias, &y, &n, &k, &words});
}

}  // namespace kiln::cuda
