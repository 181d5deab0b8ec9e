#include "kernel/emit.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "kernel/emit_cpu.h"

namespace kiln::kernel {
namespace {

// ---- dialects ----

struct KernelContext {
  const Kernel& k;
  const Schedule& s;
  std::string entry;
  std::vector<bool> buffered;   // per stage: has a row-local buffer
  std::vector<RowBuffer> place; // per stage: where (CUDA: cuda_row_buffers; CPU: shared stands for a local array)
  bool register_rows = false;   // some stage's row is a register array (CUDA)
  bool int32_indices = false;   // CUDA: every index the kernel computes fits in 32 bits (kiln_idx is int)
  int reduction_exchanges = 0;  // CUDA: slots of kiln_red (schedule.h)
  std::vector<bool> coarse_outputs_only;  // per stage (emit_cpu.h)
  std::vector<bool> rounded_narrow;       // per expression: rounded_to_bf16_or_fp8 (emit_cpu.h)
  std::vector<bool> row_invariant;        // CPU, per input: converted to f32 once per row range (emit_cpu.h)
  std::vector<int> tabulated;             // CPU with Schedule::tables, per expression (tabulated_exprs); else empty
  bool pairs = false;                     // CPU with Schedule::pairs: stages with a loop run over bf16 words
  std::vector<bool> pair_rows;            // with pairs, per input: kept in f32 as its evens, then its odds
  // CPU with Schedule::moments, per stage: the variance accumulated in this (mean) stage's pass, or -1.
  std::vector<int> moment_with;
  // Whether stage i is such a variance, written by its mean's pass.
  bool in_mean_pass(int i) const { return std::find(moment_with.begin(), moment_with.end(), i) != moment_with.end(); }
  // CPU, per input: read from an f32 copy made once per row range (kiln_h<i>).
  bool hoisted(size_t i) const { return row_invariant[i] || (pairs && pair_rows[i]); }
};

// What differs between targets. Everything else the emitter writes once.
class Dialect {
 public:
  virtual ~Dialect() = default;
  virtual Target target() const = 0;
  virtual std::string prelude() const = 0;
  // Up to where row `r` and row vars exist. `before_rows`: code placed once per thread before its first row
  // (CUDA with Schedule::row_loop: the first row's prefetch); empty elsewhere.
  virtual std::string kernel_begin(const KernelContext& c, const std::string& before_rows) const = 0;
  virtual std::string kernel_end(const KernelContext& c) const = 0;
  virtual std::string buffer(int stage, const std::string& offset) const = 0;
  // Opens a loop over `var`. `spread`: the innermost loop of a stage, which a target may split over threads.
  virtual std::string loop_open(const std::string& var, int64_t extent, bool spread, const Schedule& s,
                                const std::string& reduction_clause) const = 0;
  // After the per-thread accumulation of `acc` (and the NaN flag `nan`): combine across the row's threads,
  // through exchange slot `slot` (reduction_exchanges). `repeated`: the exchange runs inside a loop, so its
  // slot is written again by the next iteration.
  virtual std::string reduce_exchange(const std::string& acc, const std::string& nan, ReduceKind kind,
                                      const Schedule& s, int slot, bool repeated) const = 0;
  virtual std::string barrier() const = 0;
  virtual std::string single_writer_open() const = 0;  // around writes of a value every thread holds
  virtual std::string single_writer_close() const = 0;
  virtual std::string store_guard_open() const = 0;   // around global stores
  virtual std::string store_guard_close() const = 0;
  virtual bool spreads_rows() const = 0;  // threads share a row (CUDA): general reductions run on one thread
  // A transcendental unary op applied to `a` (exp, tanh, sigmoid, silu, gelu), or "" for the libm form.
  // `coarse`: the value only reaches bf16/fp8 outputs (coarse_outputs_only), so 2^-14 relative error will do.
  virtual std::string math_call(Op op, bool gelu_tanh, bool coarse, const std::string& a) const = 0;
  // Definitions of kiln_maxnan and kiln_minnan (max/min, NaN if either is NaN), kiln_bf16_bits and
  // kiln_round_bf16 (float -> bf16 bits / bf16-rounded float) and, where bf16_arithmetic(), kiln_bf16_add, _sub
  // and _mul (two bf16-valued floats -> their sum, difference or product rounded to bf16).
  virtual std::string arithmetic_helpers() const = 0;
  // Whether a bf16 rounding of the sum, difference or product of two bf16 values is one bf16 instruction.
  virtual bool bf16_arithmetic() const { return false; }
  // After the shared helpers: a dialect's own kiln_f8e4m3_bits (float -> e4m3 bits), or "" for the shared one.
  virtual std::string fp8_conversion() const { return ""; }
  // Code that starts loading a later row's inputs, in a kernel with several passes over a row. With `blocks` 0:
  // all of it, placed before the row's last pass. Otherwise the `blocks`-th part of it, placed in each step of
  // the row's first pass (a loop over `blocks` steps whose number is `step`).
  virtual std::string next_row_prefetch(const KernelContext& c, int64_t blocks = 0, const std::string& step = "") const = 0;
};

const char* storage_type(DType d) {
  switch (d) {
    case DType::f32: return "float";
    case DType::f16:
    case DType::bf16: return "uint16_t";
    case DType::f8e4m3:
    case DType::f8e5m2: return "uint8_t";
    default: return "void";
  }
}

// Helpers both dialects share (head, then the dialect's arithmetic_helpers, then tail).
const char* kCommonHelpersHead = R"(KILN_FN int64_t kiln_clamp(int64_t i, int64_t hi) { return i < 0 ? 0 : (i > hi ? hi : i); }
// Conversions are branch-free (selects, integer adds) so that loops over them vectorize; each gives the same
// bits as the scalar round-to-nearest-even definition, NaNs quieted.
KILN_FN float kiln_bf16_to_f32(uint16_t b) { return kiln_as_float((uint32_t)b << 16); }
// f32 bits rounded to bf16, in the high half: round to nearest even, NaNs quieted. The NaN test is one float
// compare and the mask is applied once (a paired layernorm row: 15.7 -> 17.2 GB/s at 2 threads against the
// integer mask-and-compare form, session 24).
KILN_FN uint32_t kiln_bf16_rne_high(uint32_t u) {
  const float f = kiln_as_float(u);
  return (f != f ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
)";

// The bf16 rounding helpers, between the two parts of the shared helpers; CUDA's (the CPU dialect has its own,
// Dialect::arithmetic_helpers). One hardware conversion (sm_80+, round to nearest even) instead of the seven integer
// operations of kiln_bf16_rne_high. On the H200, ncu read the FLUX LN kernels at 16% of DRAM bandwidth and 13
// cycles per issued instruction: they are bound by instruction issue, and a modulated LN rounds four times per
// element. A NaN becomes the canonical bf16 NaN rather than the quieted input; every other value gets the same
// bits.
const char* kBf16RoundingCuda = R"(KILN_FN uint16_t kiln_bf16_bits(float f) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
KILN_FN float kiln_round_bf16(float f) { return kiln_as_float((uint32_t)kiln_bf16_bits(f) << 16); }
)";

// NaN-propagating max/min: compares and a select, where the hardware has no such instruction (the CPU dialect).
const char* kMinMaxPortable = R"(KILN_FN float kiln_maxnan(float a, float b) { return (a != a || b != b) ? KILN_NAN : fmaxf(a, b); }
KILN_FN float kiln_minnan(float a, float b) { return (a != a || b != b) ? KILN_NAN : fminf(a, b); }
)";

// CUDA's NaN-propagating max/min (sm_80+ max.NaN / min.NaN: one instruction, |x| folded into its operand, in
// place of two compares, a max and a select; a NaN comes out as the canonical NaN) and bf16 arithmetic. The
// sum, difference or product of two bf16 values computed in f32 and rounded to bf16 has the bits of the exact
// result rounded once to bf16 (double rounding through 24 bits is innocuous for 8: 24 >= 2 * 8 + 2, subnormals
// included, since both formats share bf16's exponent range), and that is what fma.rn.bf16 (sm_80+) computes:
// a + b = fma(a, 1, b), a - b = fma(b, -1, a), a * b = fma(a, b, -0). One instruction in place of the f32
// operation, a conversion (F2F, a quarter-rate pipe) and a shift back; the operands' shifts from their bf16
// bits fold away, so a chain of them (a modulated layernorm's (1 + scale), product and shift) stays in bf16.
// GpuBackend.Bf16ArithmeticMatchesTheReferenceBitForBit checks the bits on the GPU (every bf16 against zeros,
// subnormals, infinities, NaN...; passed on an H100, session 32). The FP8 block's LN + modulate + amax kernel
// went 1632 -> 1048 SASS instructions and 23.7 -> 19.5 us (H100, 93% of a same-size copy; docs/performance.md).
const char* kArithmeticCuda = R"(KILN_FN float kiln_maxnan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
KILN_FN float kiln_minnan(float a, float b) {
  float d;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
KILN_FN uint16_t kiln_bf16_hi(float f) { return (uint16_t)(kiln_as_uint(f) >> 16); }
KILN_FN float kiln_bf16_fma(uint16_t a, uint16_t b, uint16_t c) {
  uint16_t d;
  asm("fma.rn.bf16 %0, %1, %2, %3;" : "=h"(d) : "h"(a), "h"(b), "h"(c));
  return kiln_as_float((uint32_t)d << 16);
}
KILN_FN float kiln_bf16_add(float a, float b) { return kiln_bf16_fma(kiln_bf16_hi(a), 0x3f80, kiln_bf16_hi(b)); }
KILN_FN float kiln_bf16_sub(float a, float b) { return kiln_bf16_fma(kiln_bf16_hi(b), 0xbf80, kiln_bf16_hi(a)); }
KILN_FN float kiln_bf16_mul(float a, float b) { return kiln_bf16_fma(kiln_bf16_hi(a), kiln_bf16_hi(b), 0x8000); }
)";

// CUDA's kiln_f8e4m3_bits: one hardware conversion (sm_89+, round to nearest even, saturating) instead of the
// shared helper's frexpf/ldexpf/rintf/division per element (H200, session 19: a tensor-scaled quantize's
// divide-and-cast kernel ran at 0.66 TB/s). e4m3fn has no infinity and kiln's cast overflows to NaN: RNE
// takes |x| up to 464 (the tie between 448 and 480 goes to even, 448) to a finite value, anything larger,
// infinities and NaN to NaN with x's sign (0x7f or 0xff, as the reference writes it), which satfinite would have
// clamped to 448. The same bits as the shared helper for every f32 (GpuBackend.Fp8CastMatchesTheReferenceBitForBit).
const char* kFp8ConversionCuda = R"(#undef kiln_f8e4m3_bits
KILN_FN uint8_t kiln_f8e4m3_bits(float x) {
  uint16_t h;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(x));
  const uint8_t nan = (uint8_t)(((kiln_as_uint(x) >> 24) & 0x80u) | 0x7fu);
  return fabsf(x) <= 464.0f ? (uint8_t)(h & 0xffu) : nan;
}
)";

// CUDA's coarse forms (Dialect::math_call), for values that only bf16/fp8 roundings see: m sigmoid(z) within
// 2^-14 relative where the result is normal, with two special-function instructions (ex2, rcp) in place of
// libm's tanhf or expf and an IEEE division. h = e^(-|z|/2) from the hardware's 2^x (2 ulps, plus the rounding
// of |z| log2(e) / 2: the error grows with |z|, as the CPU form's does; flushed to 0 past |z| = 174, where m
// e^-|z| is below every subnormal for the m these functions pass); m e^-|z| is formed as (m h) h so that it
// stays exact where e^-|z| alone would be subnormal; the reciprocal is of 1 + e^-|z|, in [1, 2] (1 ulp).
// Swept against double precision by GpuBackend.CoarseMathWithinItsBound.
const char* kCudaCoarseMath = R"(KILN_FN float kiln_sigmoid_times_c(float z, float m) {
  float h, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(h) : "f"(fabsf(z) * -0x1.715476p-1f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + h * h));
  return (z < 0.0f ? (m * h) * h : m) * r;
}
KILN_FN float kiln_sigmoid_c(float x) { return kiln_sigmoid_times_c(x, 1.0f); }
KILN_FN float kiln_silu_c(float x) { return kiln_sigmoid_times_c(x, x); }
KILN_FN float kiln_gelu_tanh_c(float x) { return kiln_sigmoid_times_c(x * (0x1.988454p+0f + 0x1.2444f2p-4f * (x * x)), x); }
)";

const char* kCommonHelpersTail = R"(KILN_FN float kiln_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const uint32_t sub = kiln_as_uint((float)(int32_t)m * 5.9604644775390625e-8f) | sign;
  const uint32_t special = sign | 0x7f800000u | (m << 13);
  const uint32_t normal = sign | ((e + 112u) << 23) | (m << 13);
  return kiln_as_float(e == 0 ? sub : (e == 31 ? special : normal));
}
KILN_FN uint16_t kiln_f16_bits(float f) {
  const uint32_t x = kiln_as_uint(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  const bool tiny = a < 0x38800000u;
  const uint32_t sub = (uint32_t)(int32_t)rintf(kiln_as_float(tiny ? a : 0u) * 16777216.0f);
  const uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
  const uint32_t bits = a > 0x7f800000u ? 0x7e00u : (a >= 0x477ff000u ? 0x7c00u : (tiny ? sub : normal));
  return (uint16_t)(sign | bits);
}
KILN_FN float kiln_round_f16(float f) { return kiln_f16_to_f32(kiln_f16_bits(f)); }
KILN_FN float kiln_round_f8(float x, int mant, int emin, float maxf, int finite_only) {
  if (x != x) return x;
  const float a = fabsf(x);
  if (a == KILN_INF) return finite_only ? copysignf(KILN_NAN, x) : x;  // the reference's NaN keeps x's sign
  if (a == 0.0f) return x;
  int e;
  frexpf(a, &e);
  int E = e - 1;
  if (E < emin) E = emin;
  const float q = ldexpf(1.0f, E - mant);
  const float r = rintf(a / q) * q;
  if (r > maxf) return copysignf(finite_only ? KILN_NAN : KILN_INF, x);
  return copysignf(r, x);
}
KILN_FN uint8_t kiln_f8_bits(float r, int mant, int emin, int bias) {
  const uint8_t sign = (uint8_t)((kiln_as_uint(r) >> 24) & 0x80u);
  if (r != r) return (uint8_t)(sign | 0x7fu);
  const float a = fabsf(r);
  if (a == KILN_INF) return (uint8_t)(sign | (0x7fu & ~((1u << mant) - 1u)));
  if (a == 0.0f) return sign;
  int e;
  frexpf(a, &e);
  const int E = e - 1;
  if (E < emin) return (uint8_t)(sign | (uint32_t)(a / ldexpf(1.0f, emin - mant)));
  const int m = (int)((ldexpf(a, -E) - 1.0f) * (float)(1 << mant));
  return (uint8_t)(sign | (uint32_t)(((E + bias) << mant) | m));
}
// Correct rounding of a double to bf16/f16 without double rounding: to f32 with round-to-odd, then RNE.
// Round-to-odd: when the f32 conversion is inexact and landed on an even pattern, step one ulp toward d
// (away from zero when |f| < |d|; from +-0 that is the smallest subnormal).
KILN_FN float kiln_f32_odd(double d) {
  const float f = (float)d;
  const uint32_t u = kiln_as_uint(f);
  const double back = (double)f;
  const bool adjust = back != d && d == d && (u & 1u) == 0u;
  const uint32_t step = fabs(back) < fabs(d) ? 1u : 0xffffffffu;
  return kiln_as_float(adjust ? u + step : u);
}
#define kiln_round_bf16_d(x) kiln_round_bf16(kiln_f32_odd(x))
#define kiln_round_f16_d(x) kiln_round_f16(kiln_f32_odd(x))
#define kiln_round_f8e4m3(x) kiln_round_f8((x), 3, -6, 448.0f, 1)
#define kiln_round_f8e5m2(x) kiln_round_f8((x), 2, -14, 57344.0f, 0)
#define kiln_f8e4m3_bits(x) kiln_f8_bits(kiln_round_f8e4m3(x), 3, -6, 7)
#define kiln_f8e5m2_bits(x) kiln_f8_bits(kiln_round_f8e5m2(x), 2, -14, 15)
)";

std::string float_literal(double value) {
  if (std::isnan(value)) return "KILN_NAN";
  if (std::isinf(value)) return value > 0 ? "KILN_INF" : "(-KILN_INF)";
  const float f = static_cast<float>(value);
  return fmt::format("{:a}f", static_cast<double>(f));
}

// The table holds f32 bit patterns, not float literals: a __device__ table needs a constant initializer, and
// infinities and NaNs have no literal form that every front end folds (NVRTC rejects __uint_as_float there).
std::string decode_table(DType d) {
  std::string out = fmt::format("KILN_TABLE uint32_t kiln_{}_table[256] = {{", dtype_name(d));
  for (int b = 0; b < 256; ++b) {
    const double v = d == DType::f8e4m3 ? f8e4m3_bits_to_double(static_cast<uint8_t>(b))
                                        : f8e5m2_bits_to_double(static_cast<uint8_t>(b));
    const float f = static_cast<float>(v);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    out += fmt::format("{}0x{:08x}u,", b % 8 == 0 ? "\n  " : " ", bits);
  }
  return out + "\n};\n";
}

// A value table of the CPU dialect (KernelWriter::table_read): `fill` sets kiln_v[kiln_b], of `type` (float: the
// value; uint16_t: its bf16 bits, what a bf16 output stores), for the element whose bits are kiln_b.
struct ValueTable {
  std::string type, fill;
  bool operator==(const ValueTable&) const = default;
};

// Table `t`'s definition: filled on first use; C++ makes the static's initialization thread-safe.
std::string value_table(int t, const ValueTable& table) {
  return fmt::format("static {2} kiln_tv{0}[65536 + 1];  // + 1: kiln_gather_u16 reads 32 bits at the last index\n"
                     "static const {2}* kiln_tab{0}(void) {{\n"
                     "  static const int kiln_ready = [] {{\n"
                     "    {2}* kiln_v = kiln_tv{0};\n"
                     "    for (uint32_t kiln_b = 0; kiln_b < 65536; ++kiln_b) {{\n{1}    }}\n"
                     "    return 1;\n"
                     "  }}();\n"
                     "  (void)kiln_ready;\n"
                     "  return kiln_tv{0};\n"
                     "}}\n", t, table.fill, table.type);
}

std::string row_vars_code(const Kernel& k, const std::string& row) {
  std::string out;
  int64_t stride = 1;
  for (size_t a = k.row_shape.size(); a-- > 0;) {
    if (k.row_vars[a] >= 0) {
      out += fmt::format("    const kiln_idx v{} = ({} / {}) % {};\n", k.row_vars[a], row, stride, k.row_shape[a]);
    }
    stride *= k.row_shape[a];
  }
  return out;
}

// The pragmas before a CPU loop the schedule vectorizes. 16 and wider: the compiler picks the lanes (AVX-512: 16
// f32, measured faster than forcing simdlen(16), which GCC splits over 256-bit halves); 2..8: exactly that many.
std::string cpu_loop_pragmas(const Schedule& s, const std::string& reduction_clause) {
  std::string out;
  if (s.vector_width >= 16) out += fmt::format("#pragma omp simd{}\n", reduction_clause);
  if (s.vector_width > 1 && s.vector_width < 16) {
    out += fmt::format("#pragma omp simd simdlen({}){}\n", s.vector_width, reduction_clause);
  }
  if (s.unroll > 1) out += fmt::format("#pragma GCC unroll {}\n", s.unroll);
  return out;
}

class CpuDialect final : public Dialect {
 public:
  Target target() const override { return Target::cpu; }
  std::string prelude() const override {
    return "#include \"kernel_abi.h\"\n#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
           "#if defined(__AVX512BF16__) || defined(__AVX2__)\n#include <immintrin.h>\n#endif\n"
           "#define KILN_FN static inline\n#define KILN_TABLE static const\n#define KILN_INF INFINITY\n"
           "#define KILN_NAN NAN\n"
           "KILN_FN float kiln_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }\n"
           "KILN_FN uint32_t kiln_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }\n"
           "typedef int64_t kiln_idx;\n"
           "KILN_FN double kiln_as_double(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }\n"
           "KILN_FN uint64_t kiln_as_u64(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }\n" +
           lane_trees() + table_gathers() + std::string(cpu_math_source());
  }
  // Schedule::gathers: dst[i] = table[idx[i]] for n 16-bit indices, 16 a vector by AVX-512's gather (GCC does not
  // vectorize the lookup with one: under `omp simd` it inserts scalar loads); elsewhere one load an element. The
  // 16-bit form gathers the 32 bits at each index and keeps the low half, so its table has one element of padding
  // (value_table). The vector loop stops at a bound computed once (with `i + 16 <= n` GCC warned of overflow in
  // the tail where n is a constant).
  static std::string table_gathers() {
    std::string out;
    const struct { const char* name; const char* type; const char* vector; } forms[] = {
        {"f32", "float", "_mm512_storeu_ps(dst + i, _mm512_i32gather_ps(at, table, 4))"},
        {"u16", "uint16_t",
         "_mm256_storeu_si256((__m256i*)(dst + i), _mm512_cvtepi32_epi16(_mm512_i32gather_epi32(at, (const void*)table, 2)))"},
    };
    for (const auto& f : forms) {
      out += fmt::format(
          "KILN_FN void kiln_gather_{0}({1}* __restrict dst, const {1}* __restrict table, const uint16_t* __restrict idx, "
          "int64_t n) {{\n"
          "  int64_t i = 0;\n"
          "#if defined(__AVX512F__)\n"
          "  const int64_t whole = n / 16 * 16;\n"
          "  for (; i < whole; i += 16) {{\n"
          "    const __m512i at = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(idx + i)));\n"
          "    {2};\n"
          "  }}\n"
          "#endif\n"
          "  for (; i < n; ++i) dst[i] = table[idx[i]];\n"
          "}}\n",
          f.name, f.type, f.vector);
    }
    return out;
  }
  // A reduction's 64 lanes (write_lane_reduction) combined as a tree, lane j with lane j + w for w = 32, 16,
  // ..., 1. GCC vectorizes the levels w >= 8 of the plain loops and scalarizes the last three with extracts
  // and moves (75 of a q/k-norm row's 450 instructions); the AVX2 forms take the same pairs in the same order,
  // so the same bits. max keeps the loops' `b > a ? b : a` (maxps returns its second operand unless the first
  // is greater).
  static std::string lane_trees() {
    std::string out;
    const struct { const char* name; const char* scalar; const char* v256; const char* v128; } trees[] = {
        {"sum", "p[j] += p[j + w]", "_mm256_add_ps(a, b)", "_mm_add_ps(a, b)"},
        {"max", "p[j] = p[j + w] > p[j] ? p[j + w] : p[j]", "_mm256_max_ps(b, a)", "_mm_max_ps(b, a)"},
    };
    for (const auto& t : trees) {
      out += fmt::format(
          "KILN_FN float kiln_lanes_{0}(float* p) {{  // p[64], overwritten\n"
          "#if defined(__AVX2__)\n"
          "  __m256 v[8];\n"
          "  for (int j = 0; j < 8; ++j) v[j] = _mm256_loadu_ps(p + 8 * j);\n"
          "  for (int w = 4; w >= 1; w /= 2) for (int j = 0; j < w; ++j) {{ const __m256 a = v[j], b = v[j + w]; v[j] = {2}; }}\n"
          "  __m128 a = _mm256_castps256_ps128(v[0]), b = _mm256_extractf128_ps(v[0], 1);\n"
          "  a = {3}; b = _mm_movehl_ps(a, a); a = {3}; b = _mm_movehdup_ps(a);\n"
          "  return _mm_cvtss_f32({3});\n"
          "#else\n"
          "  for (int w = 32; w >= 1; w /= 2) for (int j = 0; j < w; ++j) {1};\n"
          "  return p[0];\n"
          "#endif\n"
          "}}\n",
          t.name, t.scalar, t.v256, t.v128);
    }
    return out;
  }
  std::string kernel_begin(const KernelContext& c, const std::string& before_rows) const override {
    KILN_CHECK(before_rows.empty());
    std::string out = fmt::format("static void {}_body(const kiln_tensor* kiln_in, kiln_tensor* kiln_out, int64_t kiln_r0, int64_t kiln_r1) {{\n", c.entry);
    for (size_t i = 0; i < c.k.inputs.size(); ++i) {
      const char* t = storage_type(c.k.inputs[i].type.dtype);
      out += fmt::format("  const {0}* __restrict in{1} = (const {0}*)kiln_in[{1}].data;\n", t, i);
    }
    for (size_t i = 0; i < c.k.outputs.size(); ++i) {
      const char* t = storage_type(c.k.outputs[i].type.dtype);
      out += fmt::format("  {0}* __restrict out{1} = ({0}*)kiln_out[{1}].data;\n", t, i);
    }
    for (size_t i = 0; i < c.k.stages.size(); ++i) {
      if (!c.buffered[i]) continue;
      const int64_t n = std::max<int64_t>(1, c.k.stages[i].local_size);
      if (n <= 8192) {
        out += fmt::format("  float s{}[{}];\n", i, n);
      } else {
        out += fmt::format("  float* __restrict s{0} = (float*)malloc(sizeof(float) * {1});\n  if (!s{0}) return;\n", i, n);
      }
    }
    for (size_t i = 0; i < c.k.inputs.size(); ++i) {
      if (!c.hoisted(i)) continue;
      const int64_t n = shape_numel(c.k.inputs[i].type.shape);
      const DType dtype = c.k.inputs[i].type.dtype;
      out += fmt::format("  float kiln_h{0}[{1}];  // every row reads in{0} alike: converted once\n", i, n);
      if (!(c.pairs && c.pair_rows[i])) {
        out += fmt::format("  for (int64_t kiln_j = 0; kiln_j < {1}; ++kiln_j) kiln_h{0}[kiln_j] = kiln_{2}_to_f32(in{0}[kiln_j]);\n",
                           i, n, dtype_name(dtype));
      } else if (dtype == DType::bf16) {  // read by paired loops: its even elements, then its odd ones
        out += fmt::format("  for (int64_t kiln_j = 0; kiln_j < {1}; ++kiln_j) {{\n"
                           "    const uint32_t kiln_w = kiln_word(in{0} + 2 * kiln_j);\n"
                           "    kiln_h{0}[kiln_j] = kiln_as_float(kiln_w << 16);\n"
                           "    kiln_h{0}[{1} + kiln_j] = kiln_as_float(kiln_w & 0xffff0000u);\n"
                           "  }}\n",
                           i, n / 2);
      } else {
        const std::string load = dtype == DType::f32 ? "" : fmt::format("kiln_{}_to_f32", dtype_name(dtype));
        out += fmt::format("  for (int64_t kiln_j = 0; kiln_j < {1}; ++kiln_j) {{\n"
                           "    kiln_h{0}[kiln_j] = {2}(in{0}[2 * kiln_j]);\n"
                           "    kiln_h{0}[{1} + kiln_j] = {2}(in{0}[2 * kiln_j + 1]);\n"
                           "  }}\n",
                           i, n / 2, load);
      }
    }
    out += "  for (int64_t r = kiln_r0; r < kiln_r1; ++r) {\n" + row_vars_code(c.k, "r");
    return out;
  }
  std::string kernel_end(const KernelContext& c) const override {
    std::string out = "  }\n";
    // Streamed stores are weakly ordered: fenced once per row range, not per row (a fence waits for the writes).
    if (c.s.stream_stores) out += "#if defined(__AVX512BF16__) || defined(__AVX2__)\n  _mm_sfence();\n#endif\n";
    for (size_t i = 0; i < c.k.stages.size(); ++i) {
      if (c.buffered[i] && std::max<int64_t>(1, c.k.stages[i].local_size) > 8192) out += fmt::format("  free(s{});\n", i);
    }
    out += "}\n";
    // Entry points: a row range (the backend's thread pool) and the whole kernel (the harness ABI).
    out += fmt::format("extern \"C\" int {}_rows(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out, int64_t r0, int64_t r1) {{\n", c.entry);
    out += fmt::format("  if (n_in != {} || n_out != {}) return 1;\n", c.k.inputs.size(), c.k.outputs.size());
    auto check = [&](const KernelParam& p, const std::string& t) {
      std::string s = fmt::format("  if ({0}.rank != {1} || {0}.dtype != {2}", t, p.type.shape.size(), static_cast<int>(p.type.dtype));
      for (size_t a = 0; a < p.type.shape.size(); ++a) s += fmt::format(" || {}.shape[{}] != {}", t, a, p.type.shape[a]);
      return s + ") return 2;\n";
    };
    for (size_t i = 0; i < c.k.inputs.size(); ++i) out += check(c.k.inputs[i], fmt::format("in[{}]", i));
    for (size_t i = 0; i < c.k.outputs.size(); ++i) out += check(c.k.outputs[i], fmt::format("out[{}]", i));
    out += fmt::format("  if (r0 < 0 || r1 > {} || r0 > r1) return 3;\n  {}_body(in, out, r0, r1);\n  return 0;\n}}\n", c.k.rows, c.entry);
    out += fmt::format("extern \"C\" int {0}(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {{\n"
                       "  return {0}_rows(in, n_in, out, n_out, 0, {1});\n}}\n", c.entry, c.k.rows);
    return out;
  }
  std::string buffer(int stage, const std::string& offset) const override {
    return fmt::format("s{}[{}]", stage, offset);
  }
  std::string loop_open(const std::string& var, int64_t extent, bool spread, const Schedule& s,
                        const std::string& reduction_clause) const override {
    return (spread ? cpu_loop_pragmas(s, reduction_clause) : "") +
           fmt::format("for (int64_t {0} = 0; {0} < {1}; ++{0}) {{\n", var, extent);
  }
  std::string reduce_exchange(const std::string&, const std::string&, ReduceKind, const Schedule&, int, bool) const override {
    return "";
  }
  std::string barrier() const override { return ""; }
  std::string single_writer_open() const override { return ""; }
  std::string single_writer_close() const override { return ""; }
  std::string store_guard_open() const override { return ""; }
  std::string store_guard_close() const override { return ""; }
  bool spreads_rows() const override { return false; }
  // Vectorizable helpers (emit_cpu.h); libm's expf, tanhf and erff keep an `omp simd` loop scalar.
  std::string math_call(Op op, bool gelu_tanh, bool coarse, const std::string& a) const override {
    const std::string c = coarse ? "_c(" : "(";
    switch (op) {
      case Op::exp: return "kiln_exp(" + a + ")";
      case Op::tanh: return "kiln_tanh(" + a + ")";
      case Op::sigmoid: return "kiln_sigmoid" + c + a + ")";
      case Op::silu: return "kiln_silu" + c + a + ")";
      case Op::gelu: return (gelu_tanh ? "kiln_gelu_tanh" + c : std::string("kiln_gelu_erf(")) + a + ")";
      default: return "";
    }
  }
  // The passes after the first over row r work from cache and ask nothing of memory, so the kernel prefetches
  // the inputs of row r + d (d rows >= 2 KiB ahead) meanwhile: 10-20% on bf16 norms on this 2-core VM, where
  // the hardware prefetcher idles. Spread over the first pass (a part per step), the requests overlap the
  // row's own misses instead of queueing together: a bf16 rmsnorm [4096, 3072] at 2 threads went from 11.0 to
  // 13.2 GB/s, a modulated layernorm from 10.9 to 12.2 (session 23), against prefetching the row at once before
  // the last pass.
  std::string next_row_prefetch(const KernelContext& c, int64_t blocks, const std::string& step) const override {
    std::string out;
    const std::vector<int64_t> row_bytes = row_block_bytes(c.k);
    for (size_t p = 0; p < row_bytes.size(); ++p) {
      if (row_bytes[p] < 64) continue;
      const int64_t ahead = (2048 + row_bytes[p] - 1) / row_bytes[p];
      const std::string base = fmt::format("(const char*)in{} + (r + {}) * {}LL", p, ahead, row_bytes[p]);
      if (blocks == 0) {
        out += fmt::format("    if (r + {0} < {1}) {{  // prefetch row r + {0} of in{2}\n"
                           "      const char* kiln_pf = {3};\n"
                           "      for (int64_t kiln_b = 0; kiln_b < {4}; kiln_b += 64) __builtin_prefetch(kiln_pf + kiln_b, 0, 3);\n"
                           "    }}\n",
                           ahead, c.k.rows, p, base, row_bytes[p]);
        continue;
      }
      // Each step's part in whole lines; the last steps' parts may reach past the row, where a prefetch is
      // harmless (it never faults).
      const int64_t part = (row_bytes[p] + blocks - 1) / blocks;
      const int64_t lines = (part + 63) / 64;
      out += fmt::format("if (r + {0} < {1}) {{  // prefetch row r + {0} of in{2}, part by part\n"
                         "  const char* kiln_pf = {3} + ({4}) * {5}LL;\n"
                         "  for (int64_t kiln_b = 0; kiln_b < {5}; kiln_b += 64) __builtin_prefetch(kiln_pf + kiln_b, 0, 3);\n"
                         "}}\n",
                         ahead, c.k.rows, p, base, step, lines * 64);
    }
    return out;
  }
  // The same bits as kiln_bf16_rne_high (checked over all 2^32 inputs), with the NaN test as one float
  // compare instead of an integer mask and compare: ~15% of a bf16 rmsnorm row on AVX-512.
  //
  // kiln_store_bf16_row stores a row of f32 values as bf16 with the same bits. AVX-512 BF16 converts 32 values
  // an instruction (round to nearest even, NaNs quieted as here); it flushes f32 subnormals to zero, so a step
  // holding one takes the scalar path. A modulated bf16 layernorm row: 13 -> 17.5 GB/s from cache on this VM.
  // AVX2 has no conversion: the integer rounding above on 8 lanes, the halves packed (every value fits 16 bits,
  // so the saturating pack is exact) and put back in order; GCC's own vectorization of the scalar loop took 40% of
  // a bf16 rmsnorm row from cache on an AVX2 EPYC (session 21).
  std::string arithmetic_helpers() const override {
    return std::string(kMinMaxPortable) +
           "KILN_FN uint16_t kiln_bf16_bits(float f) {\n"
           "  const uint32_t u = kiln_as_uint(f);\n"
           "  return (uint16_t)(f != f ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
           "}\n"
           "// stream: non-temporal stores from the first aligned vector on (the lines are not read into the cache first);\n"
           "// the kernel body fences them once at its end, before its rows are handed back.\n"
           "KILN_FN void kiln_bf16_row(uint16_t* __restrict dst, const float* __restrict src, int64_t n, int stream) {\n"
           "  int64_t i = 0;\n"
           "#if defined(__AVX512BF16__)\n"
           "  if (stream) for (; i < n && ((uintptr_t)(dst + i) & 63); ++i) dst[i] = kiln_bf16_bits(src[i]);\n"
           "  const int64_t tail = i + (n - i) / 32 * 32;\n"
           "  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1), top = _mm512_set1_epi32(0x007fffff);\n"
           "  for (; i < tail; i += 32) {\n"
           "    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);\n"
           "    const __m512i mlo = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(lo), magnitude), one);\n"
           "    const __m512i mhi = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(hi), magnitude), one);\n"
           "    if (_mm512_cmplt_epu32_mask(mlo, top) | _mm512_cmplt_epu32_mask(mhi, top)) {  // a subnormal\n"
           "      for (int64_t j = i; j < i + 32; ++j) dst[j] = kiln_bf16_bits(src[j]);\n"
           "      continue;\n"
           "    }\n"
           "    const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);\n"
           "    if (stream) _mm512_stream_si512((__m512i*)(dst + i), packed); else _mm512_storeu_si512((void*)(dst + i), packed);\n"
           "  }\n"
           "#elif defined(__AVX2__)\n"
           "  if (stream) for (; i < n && ((uintptr_t)(dst + i) & 31); ++i) dst[i] = kiln_bf16_bits(src[i]);\n"
           "  const int64_t tail = i + (n - i) / 16 * 16;\n"
           "  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);\n"
           "  for (; i < tail; i += 16) {\n"
           "    __m256i half[2];\n"
           "    for (int h = 0; h < 2; ++h) {\n"
           "      const __m256 f = _mm256_loadu_ps(src + i + 8 * h);\n"
           "      const __m256i u = _mm256_castps_si256(f), high = _mm256_srli_epi32(u, 16);\n"
           "      const __m256i rne = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(high, one)), 16);\n"
           "      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));\n"
           "      half[h] = _mm256_blendv_epi8(rne, _mm256_or_si256(high, quiet), nan);\n"
           "    }\n"
           "    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(half[0], half[1]), 0xd8);\n"
           "    if (stream) _mm256_stream_si256((__m256i*)(dst + i), packed); else _mm256_storeu_si256((__m256i*)(dst + i), packed);\n"
           "  }\n"
           "#endif\n"
           "  for (; i < n; ++i) dst[i] = kiln_bf16_bits(src[i]);\n"
           "}\n"
           "KILN_FN void kiln_store_bf16_row(uint16_t* __restrict dst, const float* __restrict src, int64_t n) { kiln_bf16_row(dst, src, n, 0); }\n"
           "KILN_FN void kiln_stream_bf16_row(uint16_t* __restrict dst, const float* __restrict src, int64_t n) { kiln_bf16_row(dst, src, n, 1); }\n"
           "KILN_FN float kiln_round_bf16(float f) {\n"
           "  const uint32_t u = kiln_as_uint(f);\n"
           "  return kiln_as_float(f != f ? (u | 0x00400000u) & 0xffff0000u : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);\n"
           "}\n"
           "// Schedule::pairs: elements 2s and 2s + 1 as one word (the even one in the low half), read and written through\n"
           "// memcpy (any 2-byte alignment). The pair is rounded with kiln_bf16_rne_high: no pack, no permute.\n"
           "KILN_FN uint32_t kiln_word(const uint16_t* p) { uint32_t w; memcpy(&w, p, 4); return w; }\n"
           "KILN_FN void kiln_put_word(uint16_t* p, uint32_t w) { memcpy(p, &w, 4); }\n"
           "KILN_FN uint32_t kiln_bf16_pair(float even, float odd) {\n"
           "  return kiln_bf16_rne_high(kiln_as_uint(odd)) | (kiln_bf16_rne_high(kiln_as_uint(even)) >> 16);\n"
           "}\n"
           "// n words of a row buffer stored with non-temporal stores from the first 32-byte boundary (when dst is\n"
           "// word-aligned); the kernel body fences them at its end.\n"
           "KILN_FN void kiln_stream_words(uint16_t* __restrict dst, const uint32_t* __restrict src, int64_t n) {\n"
           "  int64_t i = 0;\n"
           "#if defined(__AVX2__)\n"
           "  if (((uintptr_t)dst & 3) == 0) {\n"
           "    for (; i < n && ((uintptr_t)(dst + 2 * i) & 31); ++i) kiln_put_word(dst + 2 * i, src[i]);\n"
           "    for (; i + 8 <= n; i += 8) _mm256_stream_si256((__m256i*)(dst + 2 * i), _mm256_loadu_si256((const __m256i*)(src + i)));\n"
           "  }\n"
           "#endif\n"
           "  for (; i < n; ++i) kiln_put_word(dst + 2 * i, src[i]);\n"
           "}\n";
  }
};

// CUDA: the blocks' tasks (rows_per_task rows each). With Schedule::row_loop other than 1 a block takes task
// blockIdx.x, then every gridDim.x-th after it (kiln_task); the grid is smaller than the tasks.
int64_t cuda_tasks(const Kernel& k, const Schedule& s) { return (k.rows + s.rows_per_task - 1) / s.rows_per_task; }

class CudaDialect final : public Dialect {
 public:
  Target target() const override { return Target::cuda; }
  std::string prelude() const override {
    return "#ifdef __CUDACC_RTC__\ntypedef unsigned char uint8_t;\ntypedef unsigned short uint16_t;\n"
           "typedef unsigned int uint32_t;\ntypedef int int32_t;\ntypedef long long int64_t;\n#else\n#include <stdint.h>\n#endif\n"
           "#define KILN_FN static __device__ __forceinline__\n#define KILN_TABLE static __device__ const\n"
           "#define KILN_INF __uint_as_float(0x7f800000u)\n#define KILN_NAN __uint_as_float(0x7fc00000u)\n"
           "KILN_FN float kiln_as_float(uint32_t u) { return __uint_as_float(u); }\n"
           "KILN_FN uint32_t kiln_as_uint(float f) { return __float_as_uint(f); }\n"
           "KILN_FN int kiln_clamp(int i, int hi) { return i < 0 ? 0 : (i > hi ? hi : i); }\n" +
           std::string(kCudaCoarseMath);
  }
  std::string kernel_begin(const KernelContext& c, const std::string& before_rows) const override {
    const int bx = c.s.threads_per_row;
    const int64_t by = c.s.rows_per_task;
    std::string params;
    for (size_t i = 0; i < c.k.inputs.size(); ++i) {
      params += fmt::format("{}const {}* __restrict__ in{}", params.empty() ? "" : ", ", storage_type(c.k.inputs[i].type.dtype), i);
    }
    for (size_t i = 0; i < c.k.outputs.size(); ++i) {
      params += fmt::format("{}{}* __restrict__ out{}", params.empty() ? "" : ", ", storage_type(c.k.outputs[i].type.dtype), i);
    }
    const std::string bounds = c.s.min_blocks > 0 ? fmt::format("{}, {}", bx * by, c.s.min_blocks) : std::to_string(bx * by);
    std::string out = fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n", bounds, c.entry, params);
    // Index arithmetic in 32 bits where every index fits: 64-bit adds, multiplies, divisions and compares
    // are two to several instructions each, per element.
    out += fmt::format("  typedef {} kiln_idx;\n", c.int32_indices ? "int" : "long long");
    out += "  const int kiln_lane = threadIdx.x;\n";
    bool any_buffer = false;
    for (size_t i = 0; i < c.k.stages.size(); ++i) {
      const Stage& st = c.k.stages[i];
      if (c.place[i] == RowBuffer::registers) {
        // A thread's elements of the row: [vector step][element in the step], or the row's one reduced value.
        const int source = row_copy_of(c.k, static_cast<int>(i));
        if (source >= 0 && c.place[static_cast<size_t>(source)] == RowBuffer::registers) {
          out += fmt::format("  auto& s{}_r = s{}_r;  // a copy of that row\n", i, source);
        } else {
          out += st.reduce ? fmt::format("  float s{}_r = 0.0f;\n", i)
                           : fmt::format("  float s{}_r[{}][{}];\n", i, st.local_size / (int64_t{bx} * c.s.vector_width),
                                         c.s.vector_width);
        }
      }
      if (c.place[i] != RowBuffer::shared) continue;
      any_buffer = true;
      out += fmt::format("  __shared__ float s{}[{}][{}];\n", i, by, cuda_row_buffer_floats(st.local_size, c.s));
    }
    if (any_buffer) out += buffer_permutation(c.s);
    if (c.reduction_exchanges > 0 && bx > 32) {
      out += fmt::format("  __shared__ float kiln_red[{}][{}][{}];\n", by, c.reduction_exchanges, bx / 32);
    }
    if (c.s.vector_width > 1) {
      // Vector loads and stores need 16-byte aligned tensors; a view at an odd offset takes the scalar path.
      std::string any = "0ull";
      for (size_t i = 0; i < c.k.inputs.size(); ++i) any += fmt::format(" | (unsigned long long)in{}", i);
      for (size_t i = 0; i < c.k.outputs.size(); ++i) any += fmt::format(" | (unsigned long long)out{}", i);
      out += fmt::format("  const bool kiln_vec_ok = (({}) & 15ull) == 0ull;\n", any);
    }
    out += before_rows;
    const bool turns = c.s.row_loop != 1;
    if (turns) {
      out += fmt::format("  for (kiln_idx kiln_task = blockIdx.x; kiln_task < {}; kiln_task += gridDim.x) {{\n", cuda_tasks(c.k, c.s));
    }
    out += fmt::format("  const kiln_idx kiln_row = {} * {} + threadIdx.y;\n  const bool kiln_active = kiln_row < {};\n"
                       "  const kiln_idx r = kiln_active ? kiln_row : {};\n",
                       turns ? "kiln_task" : "(kiln_idx)blockIdx.x", by, c.k.rows, std::max<int64_t>(0, c.k.rows - 1));
    out += "  {\n" + row_vars_code(c.k, "r");
    return out;
  }
  std::string kernel_end(const KernelContext& c) const override {
    if (c.s.row_loop == 1) return "  }\n}\n";
    // A block's next task writes the shared memory this one's threads may still be reading, unless a barrier of
    // the next task comes first for every word: the exchange slots of two or more reductions each wait for the
    // exchange after them (schedule.h, reduction_exchanges), a row buffer or a lone exchange does not.
    const bool shared_rows = std::find(c.place.begin(), c.place.end(), RowBuffer::shared) != c.place.end();
    const bool lone_exchange = c.s.threads_per_row > 32 && c.reduction_exchanges == 1;
    return std::string("  }\n") + (shared_rows || lone_exchange ? "  __syncthreads();\n" : "") + "  }\n}\n";
  }
  std::string buffer(int stage, const std::string& offset) const override {
    return fmt::format("s{}[threadIdx.y][kiln_at({})]", stage, offset);
  }
  // kiln_at: where element `o` of a row buffer lives (cuda_row_buffer_floats in schedule.h): within each block
  // of threads_per_row * vec elements, lane * vec + j is stored at j * threads_per_row + lane.
  static std::string buffer_permutation(const Schedule& s) {
    const int64_t vec = s.vector_width, tpr = s.threads_per_row;
    if (vec == 1) return "  auto kiln_at = [](kiln_idx o) { return o; };\n";
    const auto log2 = [](int64_t v) { return std::countr_zero(static_cast<uint64_t>(v)); };
    return fmt::format("  auto kiln_at = [](kiln_idx o) {{ return (o & ~{0}) | ((o & {1}) << {2}) | ((o & {0}) >> {3}); }};\n",
                       vec * tpr - 1, vec - 1, log2(tpr), log2(vec));
  }
  std::string loop_open(const std::string& var, int64_t extent, bool spread, const Schedule& s,
                        const std::string&) const override {
    if (!spread) return fmt::format("for (kiln_idx {0} = 0; {0} < {1}; ++{0}) {{\n", var, extent);
    return fmt::format("for (kiln_idx {0} = kiln_lane; {0} < {1}; {0} += {2}) {{\n", var, extent, s.threads_per_row);
  }
  // A row spanning several warps: each warp's lane 0 writes its partial result to the reduction's own slot, one
  // barrier, every thread combines the slot's words. A slot written once per kernel needs no barrier after the
  // reads (session 31: the FP8 block's layernorm + amax kernel had six barriers a row, now three); one written
  // again inside a loop does, so the next iteration's write waits for this one's readers.
  std::string reduce_exchange(const std::string& acc, const std::string&, ReduceKind kind, const Schedule& s, int slot,
                              bool repeated) const override {
    const std::string combine = kind == ReduceKind::sum || kind == ReduceKind::mean ? "{0} + {1}" : "kiln_maxnan({0}, {1})";
    // Lanes a row's threads span within their warp: all 32, or threads_per_row when rows share a warp (an
    // xor below threads_per_row stays inside the row's lanes).
    const int span = std::min(32, s.threads_per_row);
    std::string out = fmt::format("for (int kiln_o = {}; kiln_o > 0; kiln_o >>= 1) ", span / 2) + acc + " = " +
                      fmt::format(fmt::runtime(combine), acc, "__shfl_xor_sync(0xffffffffu, " + acc + ", kiln_o)") + ";\n";
    if (s.threads_per_row > 32) {
      const std::string red = fmt::format("kiln_red[threadIdx.y][{}]", slot);
      out += fmt::format("if ((kiln_lane & 31) == 0) {}[kiln_lane >> 5] = {};\n__syncthreads();\n", red, acc);
      out += fmt::format("{} = {}[0];\nfor (int kiln_w = 1; kiln_w < {}; ++kiln_w) {} = {};\n", acc, red,
                         s.threads_per_row / 32, acc, fmt::format(fmt::runtime(combine), acc, red + "[kiln_w]"));
      if (repeated) out += "__syncthreads();\n";
    }
    return out;
  }
  std::string barrier() const override { return "__syncthreads();\n"; }
  std::string single_writer_open() const override { return "if (kiln_lane == 0) {\n"; }
  std::string single_writer_close() const override { return "}\n"; }
  std::string store_guard_open() const override { return "if (kiln_active) {\n"; }
  std::string store_guard_close() const override { return "}\n"; }
  bool spreads_rows() const override { return true; }
  // CUDA's libm (tanhf, expf) and an IEEE division, or the coarse forms (kCudaCoarseMath).
  std::string math_call(Op op, bool gelu_tanh, bool coarse, const std::string& a) const override {
    if (!coarse) return "";
    switch (op) {
      case Op::sigmoid: return "kiln_sigmoid_c(" + a + ")";
      case Op::silu: return "kiln_silu_c(" + a + ")";
      case Op::gelu: return gelu_tanh ? "kiln_gelu_tanh_c(" + a + ")" : "";
      default: return "";
    }
  }
  std::string arithmetic_helpers() const override { return std::string(kBf16RoundingCuda) + kArithmeticCuda; }
  bool bf16_arithmetic() const override { return true; }
  std::string fp8_conversion() const override { return kFp8ConversionCuda; }
  std::string next_row_prefetch(const KernelContext&, int64_t, const std::string&) const override { return ""; }
};

// ---- the shared part ----

std::string var_name(int v) { return "v" + std::to_string(v); }

// `e` is `var` plus terms in other variables whose every coefficient (and the constant) is a multiple of
// `width`: `width` consecutive values of var from a multiple of `width` touch one aligned run of elements.
bool contiguous_in(const IndexExpr& e, int var, int width) {
  if (e.constant % width != 0) return false;
  bool found = false;
  for (const IndexTerm& t : e.terms) {
    if (t.atom.kind == IndexAtom::Kind::var && t.atom.var == var) {
      if (t.coefficient != 1) return false;
      found = true;
      continue;
    }
    if (t.atom.inner && index_mentions(*t.atom.inner, var)) return false;
    if (t.coefficient % width != 0) return false;
  }
  return found;
}

class KernelWriter {
 public:
  KernelWriter(const KernelContext& c, const Dialect& d, std::set<DType>& tables, std::vector<ValueTable>& value_tables)
      : c_(c), k_(c.k), d_(d), tables_(tables), value_tables_(value_tables) {}

  std::string write() {
    std::string out;
    std::vector<size_t> written;
    for (size_t i = 0; i < k_.stages.size(); ++i) {
      if (!(k_.stages[i].optional && !c_.s.cache_row) && !c_.in_mean_pass(static_cast<int>(i))) written.push_back(i);
    }
    const bool several_passes = written.size() > 1 && k_.has_reduction();
    if (several_passes) prefetch_stage_ = static_cast<int>(written.front());
    if (several_passes && d_.target() == Target::cuda && c_.s.row_loop != 1) row_turn_stage_ = prefetch_stage_;
    if (several_passes && d_.target() == Target::cuda && c_.s.early_loads) {
      for (size_t i : written) {
        if (k_.stages[i].reduce) {
          early_after_ = static_cast<int>(i);
          break;
        }
      }
    }
    size_t early_at = 0;  // where the early loads go: before the first reduction's stage
    for (size_t i : written) {
      const Stage& s = k_.stages[i];
      if (static_cast<int>(i) == early_after_) early_at = out.size();
      if (several_passes && i == written.back() && !prefetch_spread_) out += d_.next_row_prefetch(c_);
      out += fmt::format("    {{ // stage {}: %{} {}\n", i, s.name, type_to_string(s.type));
      out += write_branches(static_cast<int>(i), 0);
      // Only a shared buffer is read by other threads than its writer (a reduction's exchange has its own).
      if (c_.place[i] == RowBuffer::shared) out += d_.barrier();
      out += "    }\n";
      if (static_cast<int>(i) == row_turn_stage_ && !turn_loads_.empty()) out += turn_loads_code("kiln_task + gridDim.x");
    }
    if (!early_loads_.empty()) out.insert(early_at, early_loads_code());
    std::string tables;  // inside the row loop: a load and a predicted branch per row
    for (int t : used_tables_) {
      tables += fmt::format("    const {1}* __restrict kiln_t{0} = kiln_tab{0}();\n", t, value_tables_[static_cast<size_t>(t)].type);
    }
    std::string before_rows;
    if (!turn_loads_.empty()) {
      for (size_t j = 0; j < turn_loads_.size(); ++j) before_rows += "  " + register_array(turn_loads_[j], "kiln_pf", j) + ";\n";
      before_rows += turn_loads_code("(kiln_idx)blockIdx.x");
    }
    return d_.kernel_begin(c_, before_rows) + tables + out + d_.kernel_end(c_);
  }

 private:
  std::string idx(const IndexExpr& e) const {
    if (pair_.var >= 0 && index_mentions(e, pair_.var)) return index_to_c(pair_index(e, pair_.half), [&](int v) { return pair_var_name(v); });
    if (!vector_mode_ || vec_.var < 0 || !index_mentions(e, vec_.var)) return index_to_c(e, var_name);
    return index_to_c(split_vector_var(k_, e, vec_.var, c_.s.vector_width), [&](int v) {
      return v == vector_step_var(k_) ? std::string("kiln_vs") : v == vector_lane_var(k_) ? std::string("kiln_vj") : var_name(v);
    });
  }
  // Inside a vector step, the vector variable is width * kiln_vs + kiln_vj (split_vector_var): written so, an index simplifies
  // per element once kiln_vj is a constant (the RoPE partner's 2 * (v / 2) + 1 is 2 * (kiln_vj / 2) + 1
  // past the step's base, its `v % 2` a constant, so the pair's select is decided at compile time).
  // Whether every value `e` can take lies in [0, size): no clamp needed.
  bool provably_within(const IndexExpr& e, int64_t size) const {
    const bool split = vector_mode_ && vec_.var >= 0 && index_mentions(e, vec_.var);
    const int width = c_.s.vector_width;
    const IndexRange r = split ? index_range(split_vector_var(k_, e, vec_.var, width), vector_split_extents(k_, vec_.var, width))
                               : index_range(e, [&](int v) { return k_.extent(v); });
    return r.lo >= 0 && r.hi < size;
  }
  // Inside a paired loop (Schedule::pairs): `e` at element 2 * kiln_p + half.
  IndexExpr pair_index(const IndexExpr& e, int half) const {
    const IndexExpr split = split_vector_var(k_, e, pair_.var, 2);
    return index_substitute(split, vector_lane_var(k_), IndexExpr::of_constant(half), vector_split_extents(k_, pair_.var, 2));
  }
  std::string pair_var_name(int v) const { return v == vector_step_var(k_) ? std::string("kiln_p") : var_name(v); }
  // The stage's one loop axis when it runs paired, else -1.
  int pair_axis(const Stage& s) const {
    if (!c_.pairs) return -1;
    int axis = -1;
    for (size_t a = 0; a < s.space.size(); ++a) {
      if (s.space_vars[a] < 0) continue;
      if (axis >= 0) return -1;
      axis = static_cast<int>(a);
    }
    return axis;
  }

  // The expression at the first element of the current vector step (the vector variable at kiln_vb).
  std::string idx_at_vector_base(const IndexExpr& e) const {
    return index_to_c(e, [&](int v) { return v == vec_.var ? std::string("kiln_vb") : var_name(v); });
  }

  // A select whose condition depends on row variables alone (which concat piece a row is in: the text or the
  // image tokens of a joint sequence) is one branch per row around the whole stage instead of a choice per
  // element: each branch reads only its piece, through unclamped (so vectorizable) loads. Elementwise stages
  // only: a reduction's exchange may hold a barrier, which rows of one block taking different branches could
  // not all reach. At most three levels (a concat of four pieces).
  std::string write_branches(int i, int depth) {
    const Stage& s = k_.stages[i];
    const int select = depth < 3 && !s.reduce ? row_uniform_select(s.expr) : -1;
    if (select < 0) {
      if (!vectorizable(s)) return write_stage(i, false, false);
      // A row in registers is indexed by the vector step: the unaligned path keeps the steps, loading and
      // storing element by element.
      turn_loads_open_ = depth == 0 && i == row_turn_stage_;
      early_loads_open_ = depth == 0 && early_after_ >= 0 && i > early_after_;
      const std::string wide = write_stage(i, true, true);
      turn_loads_open_ = early_loads_open_ = false;
      return "      if (kiln_vec_ok) {\n" + wide + "      } else {\n" + write_stage(i, c_.register_rows, false) + "      }\n";
    }
    const Expr& e = k_.exprs[select];
    std::string out = fmt::format("      if (({}) < {}) {{\n", idx(e.condition), e.bound);
    forced_[select_key(e)] = true;  // every select on the same condition takes the same side
    out += write_branches(i, depth + 1) + "      } else {\n";
    forced_[select_key(e)] = false;
    out += write_branches(i, depth + 1) + "      }\n";
    forced_.erase(select_key(e));
    return out;
  }
  // The first select reachable from `id` (through the branches forced so far) whose condition mentions only
  // row variables, or -1.
  int row_uniform_select(int id) const {
    std::set<int> seen;
    std::vector<int> todo = {id};
    while (!todo.empty()) {
      const int at = todo.back();
      todo.pop_back();
      if (at < 0 || !seen.insert(at).second) continue;
      const Expr& e = k_.exprs[at];
      if (e.kind == ExprKind::select) {
        auto f = forced_.find(select_key(e));
        if (f != forced_.end()) {
          todo.push_back(e.operands[f->second ? 0 : 1]);
          continue;
        }
        if (only_row_vars(e.condition)) return at;
      }
      if (e.kind == ExprKind::read_stage && k_.stages[e.stage].optional && !c_.s.cache_row) todo.push_back(e.inline_fallback);
      for (int o : e.operands) todo.push_back(o);
    }
    return -1;
  }
  bool is_row_var(int v) const { return std::find(k_.row_vars.begin(), k_.row_vars.end(), v) != k_.row_vars.end(); }
  bool only_row_vars(const IndexExpr& e) const {
    for (int v : index_vars(e)) {
      if (!is_row_var(v)) return false;
    }
    return true;
  }
  // Whether `e` mentions only row variables and the current vector loop's: a place a row's registers can hold
  // ahead of the loop (turn and early loads).
  bool only_row_and_step_vars(const IndexExpr& e) const {
    for (int v : index_vars(e)) {
      if (!is_row_var(v) && v != vec_.var) return false;
    }
    return true;
  }


  // `vector`: the vector step loops (CUDA); `wide`: with 16-byte loads and stores where contiguous.
  std::string write_stage(int i, bool vector, bool wide) {
    code_.clear();
    memo_.clear();
    elided_.clear();
    coarse_ = c_.coarse_outputs_only[static_cast<size_t>(i)];
    vector_mode_ = vector;
    wide_ = wide;
    vec_ = VectorLoop{};
    if (k_.stages[i].reduce) {
      write_reduce(i);
    } else {
      write_elementwise(i);
    }
    vector_mode_ = false;
    return code_;
  }

  // CUDA with vector_width V > 1: the innermost spread loop steps V contiguous elements per thread (16-byte
  // loads and stores where the access is contiguous and V-aligned), when its extent is a multiple of V.
  bool vectorizable(const Stage& s) const {
    const int width = c_.s.vector_width;
    if (d_.target() != Target::cuda || width <= 1 || general_reduction(s)) return false;
    size_t from = 0;
    if (s.reduce) {
      while (from < s.space.size() && !s.reduced_axes[from]) ++from;
    }
    const int inner = innermost(s, from, s.space.size());
    return inner >= 0 && s.space[inner] % width == 0;
  }

  // A local array of `elements` values (the vector width unless given) read or written as whole 16-byte (or
  // smaller) words.
  std::string vector_copy(const std::string& to, const std::string& from, DType dtype, int64_t elements = 0) const {
    const auto [word, words] = vector_words(dtype, elements == 0 ? c_.s.vector_width : elements);
    return fmt::format("for (int kiln_q = 0; kiln_q < {0}; ++kiln_q) (({1}*)({2}))[kiln_q] = ((const {1}*)({3}))[kiln_q];\n",
                       words, word, to, from);
  }
  // The words `elements` values of `dtype` are read or written as: 16-byte ones, or one smaller word.
  static std::pair<const char*, int64_t> vector_words(DType dtype, int64_t elements) {
    const int64_t bytes = elements * static_cast<int64_t>(dtype_size(dtype));
    const char* word = bytes >= 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "uint32_t" : bytes == 2 ? "uint16_t" : "uint8_t";
    return {word, bytes >= 16 ? bytes / 16 : 1};
  }

  // Schedule::row_loop (CUDA): a wide load of the row's first pass whose place depends only on the row and the
  // vector loop is read from the registers kiln_pf<j>, which the previous turn filled (turn_loads_code); the
  // expression to copy the step's words from, or "" for a load from memory.
  std::string turn_load_source(const Expr& e) {
    if (!turn_loads_open_ || vec_.steps == 0 || !only_row_and_step_vars(e.offset)) return "";
    const auto vars = index_vars(e.offset);
    const bool per_row = std::any_of(vars.begin(), vars.end(), [&](int v) { return is_row_var(v); });
    if (!per_row) return "";  // the same words for every row: in the cache already
    const RegisterLoad load{e.param, idx_at_vector_base(e.offset), k_.inputs[e.param].type.dtype, c_.s.vector_width,
                            vec_.steps, vec_.step};
    auto it = std::find(turn_loads_.begin(), turn_loads_.end(), load);
    if (it == turn_loads_.end()) it = turn_loads_.insert(turn_loads_.end(), load);
    return fmt::format("kiln_pf{}[kiln_it]", it - turn_loads_.begin());
  }
  // The loads turn_load_source reads, for the thread's row of block task `task` (its row clamped to the last, as
  // the row itself is), where the tensors are aligned and the task exists.
  std::string turn_loads_code(const std::string& task) const {
    std::string out = fmt::format("    if (kiln_vec_ok && {} < {}) {{\n", task, cuda_tasks(k_, c_.s));
    out += fmt::format("    const kiln_idx kiln_row = ({0}) * {1} + threadIdx.y;\n    const kiln_idx r = kiln_row < {2} ? kiln_row : {3};\n",
                       task, c_.s.rows_per_task, k_.rows, std::max<int64_t>(0, k_.rows - 1));
    out += row_vars_code(k_, "r");
    for (size_t j = 0; j < turn_loads_.size(); ++j) out += register_fill(turn_loads_[j], "kiln_pf", j);
    return out + "    }\n";
  }
  // A row's words read into registers ahead of their use (turn and early loads): the array `name<j>` of a word
  // count per vector step, and the unrolled loop over the steps that fills it.
  struct RegisterLoad {
    int param;
    std::string base;  // the step's first element, in row variables and kiln_vb
    DType dtype;
    int64_t elements, steps, step;  // elements a step reads; the unrolled loop's steps and elements a step covers
    bool operator==(const RegisterLoad&) const = default;
  };
  static std::string register_array(const RegisterLoad& t, const char* name, size_t j) {
    const auto [word, words] = vector_words(t.dtype, t.elements);
    return fmt::format("{} {}{}[{}][{}]", word, name, j, t.steps, words);
  }
  std::string register_fill(const RegisterLoad& t, const char* name, size_t j) const {
    return fmt::format("    #pragma unroll\n    for (kiln_idx kiln_it = 0, kiln_vb = (kiln_idx)kiln_lane * {}; kiln_it < {}; "
                       "++kiln_it, kiln_vb += {}) {{\n      {}    }}\n",
                       c_.s.vector_width, t.steps, t.step,
                       vector_copy(fmt::format("{}{}[kiln_it]", name, j), fmt::format("in{} + {}", t.param, t.base), t.dtype,
                                   t.elements));
  }

  // Schedule::early_loads (CUDA): a wide load of a pass after the row's first reduction, whose place depends only
  // on the row and the vector loop (a scale or shift vector, another row of the same index), is read from the
  // registers kiln_el<j>, filled before that reduction's stage (early_loads_code): its latency overlaps the
  // exchanges instead of following them. At most kEarlyWords 16-byte words a thread; past that, from memory.
  static constexpr int64_t kEarlyWords = 8;
  // `base`: the first element read, in row variables and kiln_vb; `elements`: how many (a vector step, or a span).
  std::string early_load_source(const Expr& e, const std::string& base, int64_t elements) {
    if (!early_loads_open_ || vec_.steps == 0 || !only_row_and_step_vars(e.offset)) return "";
    const RegisterLoad load{e.param, base, k_.inputs[e.param].type.dtype, elements, vec_.steps, vec_.step};
    auto it = std::find(early_loads_.begin(), early_loads_.end(), load);
    if (it == early_loads_.end()) {
      int64_t words = 0;
      for (const RegisterLoad& t : early_loads_) words += t.steps * vector_words(t.dtype, t.elements).second;
      if (words + load.steps * vector_words(load.dtype, load.elements).second > kEarlyWords) return "";
      it = early_loads_.insert(early_loads_.end(), load);
    }
    return fmt::format("kiln_el{}[kiln_it]", it - early_loads_.begin());
  }
  // The registers early_load_source reads and the loads that fill them, for this thread's row, where the tensors
  // are aligned (the unaligned path loads where it reads).
  std::string early_loads_code() const {
    std::string decl, fill;
    for (size_t j = 0; j < early_loads_.size(); ++j) {
      decl += "    " + register_array(early_loads_[j], "kiln_el", j) + ";  // Schedule::early_loads\n";
      fill += register_fill(early_loads_[j], "kiln_el", j);
    }
    return decl + "    if (kiln_vec_ok) {\n" + fill + "    }\n";
  }

  // A load whose elements of one vector step all lie in one aligned span (offset_in_vector_span): the span is
  // read once per step as whole words into a local array, shared by every load of that span, and each
  // element indexes it at a place fixed once the loops are unrolled. The smallest span that holds the step: one
  // element where the step reads one (a per-tensor scale), and only spans that divide the input's elements, so
  // that an aligned span holding an element lies inside the input (an 8-byte read of a 4-byte scale did not).
  std::optional<std::string> span_load(const Expr& e) {
    const KernelParam& p = k_.inputs[e.param];
    const int lane = vector_lane_var(k_);
    for (int64_t span = 1; span <= c_.s.vector_width; span *= 2) {
      if (shape_numel(p.type.shape) % span != 0) break;
      const std::optional<VectorSpan> at = offset_in_vector_span(k_, e.offset, vec_.var, c_.s.vector_width, span);
      if (!at) continue;
      const std::string base = index_to_c(at->base, [&](int v) {
        // Before the element loop only the step's first element, kiln_vb, is defined.
        return v == vector_step_var(k_) ? fmt::format("(kiln_vb / {})", c_.s.vector_width) : var_name(v);
      });
      const std::string key = fmt::format("{}:{}:{}", e.param, span, base);
      auto [it, fresh] = vec_.spans.try_emplace(key, "kiln_vin" + std::to_string(vec_.arrays));
      if (fresh) {
        ++vec_.arrays;
        vec_.pre += fmt::format("alignas(16) {} {}[{}];\n", storage_type(p.type.dtype), it->second, span);
        const std::string early = early_load_source(e, base, span);
        vec_.pre += vector_copy(it->second, early.empty() ? fmt::format("in{} + {}", e.param, base) : early, p.type.dtype, span);
      }
      return fmt::format("{}[{}]", it->second,
                         index_to_c(at->within, [&](int v) { return v == lane ? std::string("kiln_vj") : var_name(v); }));
    }
    return std::nullopt;
  }

  std::string emit(int id) {
    auto it = memo_.find(id);
    if (it != memo_.end()) return it->second;
    const Expr& e = k_.exprs[id];
    std::string v;
    if (!c_.tabulated.empty() && c_.tabulated[static_cast<size_t>(id)] >= 0 && !in_table_) return named(id, table_read(id));
    auto operand = [&](size_t i) { return emit(e.operands[i]); };
    switch (e.kind) {
      case ExprKind::load: {
        const KernelParam& p = k_.inputs[e.param];
        if (pair_.var >= 0 && index_mentions(e.offset, pair_.var)) {
          v = pair_load(id, e);
          break;
        }
        bool clamp = false;
        const std::string off = offset_of(e, shape_numel(p.type.shape), &clamp);
        if (d_.target() == Target::cpu && c_.hoisted(static_cast<size_t>(e.param))) {
          const bool split = c_.pairs && c_.pair_rows[static_cast<size_t>(e.param)];  // kept evens, then odds
          v = split ? fmt::format("kiln_h{0}[(({1}) & 1) * {2} + (({1}) >> 1)]", e.param, off, shape_numel(p.type.shape) / 2)
                    : fmt::format("kiln_h{}[{}]", e.param, off);
          break;
        }
        std::string ref = fmt::format("in{}[{}]", e.param, off);
        if (wide_ && vec_.var >= 0 && !clamp && contiguous_in(e.offset, vec_.var, c_.s.vector_width)) {
          const std::string arr = "kiln_vin" + std::to_string(vec_.arrays++);
          vec_.pre += fmt::format("alignas(16) {} {}[{}];\n", storage_type(p.type.dtype), arr, c_.s.vector_width);
          std::string from = turn_load_source(e);
          if (from.empty()) from = early_load_source(e, idx_at_vector_base(e.offset), c_.s.vector_width);
          vec_.pre += vector_copy(arr, from.empty() ? fmt::format("in{} + {}", e.param, idx_at_vector_base(e.offset)) : from,
                                  p.type.dtype);
          ref = arr + "[kiln_vj]";
        } else if (wide_ && vec_.var >= 0 && !clamp) {
          if (auto spanned = span_load(e)) ref = *spanned;
        }
        switch (p.type.dtype) {
          case DType::f32: v = ref; break;
          case DType::bf16: v = "kiln_bf16_to_f32(" + ref + ")"; break;
          case DType::f16: v = "kiln_f16_to_f32(" + ref + ")"; break;
          default:
            tables_.insert(p.type.dtype);
            v = fmt::format("kiln_as_float(kiln_{}_table[{}])", dtype_name(p.type.dtype), ref);
        }
        break;
      }
      case ExprKind::read_stage: {
        const Stage& s = k_.stages[e.stage];
        if (s.optional && (!c_.s.cache_row || in_table_)) {  // a table's fill recomputes what a row cache holds
          const std::string name = emit(e.inline_fallback);
          memo_[id] = name;
          return name;
        }
        if (c_.place[e.stage] == RowBuffer::registers) {
          v = register_read(e);
          break;
        }
        v = d_.buffer(e.stage, offset_of(e, s.local_size));
        break;
      }
      case ExprKind::constant: v = float_literal(e.value); break;
      case ExprKind::unary: {
        const std::string a = operand(0);
        v = d_.math_call(e.op, e.gelu_tanh, coarse_ || (!in_table_ && c_.rounded_narrow[static_cast<size_t>(id)]), a);
        if (!v.empty()) break;
        switch (e.op) {
          case Op::neg: v = "-" + a; break;
          case Op::abs: v = "fabsf(" + a + ")"; break;
          case Op::exp: v = "expf(" + a + ")"; break;
          case Op::log: v = "logf(" + a + ")"; break;
          case Op::sqrt: v = "sqrtf(" + a + ")"; break;
          case Op::rsqrt: v = "1.0f / sqrtf(" + a + ")"; break;
          case Op::reciprocal: v = "1.0f / " + a; break;
          case Op::tanh: v = "tanhf(" + a + ")"; break;
          case Op::sigmoid: v = "1.0f / (1.0f + expf(-" + a + "))"; break;
          case Op::silu: v = a + " / (1.0f + expf(-" + a + "))"; break;
          case Op::cos: v = "cosf(" + a + ")"; break;
          case Op::sin: v = "sinf(" + a + ")"; break;
          case Op::gelu:
            v = e.gelu_tanh ? fmt::format("0.5f * {0} * (1.0f + tanhf(0.7978845608028654f * ({0} + 0.044715f * {0} * {0} * {0})))", a)
                            : fmt::format("0.5f * {0} * (1.0f + erff({0} * 0.7071067811865476f))", a);
            break;
          default: v = "KILN_NAN /* unsupported unary */";
        }
        break;
      }
      case ExprKind::binary: {
        const std::string a = operand(0), b = operand(1);
        switch (e.op) {
          case Op::add: v = a + " + " + b; break;
          case Op::sub: v = a + " - " + b; break;
          case Op::mul: v = a + " * " + b; break;
          case Op::div: v = a + " / " + b; break;
          case Op::max: v = "kiln_maxnan(" + a + ", " + b + ")"; break;
          case Op::min: v = "kiln_minnan(" + a + ", " + b + ")"; break;
          case Op::pow: v = "powf(" + a + ", " + b + ")"; break;
          default: v = "KILN_NAN /* unsupported binary */";
        }
        break;
      }
      case ExprKind::round: {
        const Expr& inner = k_.exprs[e.operands[0]];
        if (elides(id)) {
          const std::string name = emit(e.operands[0]);
          memo_[id] = name;
          elided_.insert(id);
          return name;
        }
        if (rounds_in_double(e)) {
          const std::string a = emit(inner.operands[0]), b = emit(inner.operands[1]);
          const char* sym = inner.op == Op::add ? "+" : inner.op == Op::sub ? "-" : "/";
          v = fmt::format("kiln_round_{}_d((double){} {} (double){})", dtype_name(e.dtype), a, sym, b);
          break;
        }
        if (bf16_instruction(e)) {
          const std::string a = emit(inner.operands[0]), b = emit(inner.operands[1]);
          v = fmt::format("kiln_bf16_{}({}, {})", inner.op == Op::add ? "add" : inner.op == Op::sub ? "sub" : "mul", a, b);
          break;
        }
        v = fmt::format("kiln_round_{}({})", dtype_name(e.dtype), operand(0));
        break;
      }
      case ExprKind::select: {
        auto f = forced_.find(select_key(e));
        if (f != forced_.end()) {  // decided for the whole row (write_branches)
          const std::string chosen = operand(f->second ? 0 : 1);
          memo_[id] = chosen;
          return chosen;
        }
        ++open_selects_;
        const std::string a = operand(0), b = operand(1);
        --open_selects_;
        v = fmt::format("({}) < {} ? {} : {}", idx(e.condition), e.bound, a, b);
        break;
      }
    }
    return named(id, v);
  }

  // A load along a paired loop (pair_plan guarantees one of these): a row converted once, kept evens then odds,
  // read at half the even element's offset; or the bf16 word of elements 2 * kiln_p and 2 * kiln_p + 1, read
  // once for both halves, the even element its low half.
  std::string pair_load(int id, const Expr& e) {
    const int half = pair_.half;
    const IndexExpr even = pair_index(e.offset, 0);
    const auto c_name = [&](int v) { return pair_var_name(v); };
    if (c_.hoisted(static_cast<size_t>(e.param))) {
      const int64_t n = shape_numel(k_.inputs[static_cast<size_t>(e.param)].type.shape);
      const std::optional<IndexExpr> at = halved(even);
      KILN_CHECK(at.has_value());
      return fmt::format("kiln_h{}[{}{}]", e.param, half == 0 ? "" : std::to_string(n / 2) + " + ", index_to_c(*at, c_name));
    }
    auto [it, fresh] = pair_.words.try_emplace(id, "kiln_w" + std::to_string(id));
    if (fresh) code_ += indent_ + fmt::format("const uint32_t {} = kiln_word(in{} + {});\n", it->second, e.param, index_to_c(even, c_name));
    return half == 0 ? fmt::format("kiln_as_float({} << 16)", it->second) : fmt::format("kiln_as_float({} & 0xffff0000u)", it->second);
  }

  std::string named(int id, const std::string& v) {
    const std::string name = "t" + std::to_string(id) + (pair_.var < 0 ? "" : pair_.half == 0 ? "e" : "o");
    code_ += indent_ + "const float " + name + " = " + v + ";\n";
    memo_[id] = name;
    return name;
  }

  // CPU, Schedule::tables: expression `id`, a function of one bf16/f16 element (tabulated_exprs), read from a
  // table of its 65536 values indexed by the element's bits. The table is a module-level function that fills
  // it once per process from this same expression written with its load as `kiln_x` and the exact-form
  // transcendentals, with every rounding the reference does (no coarse forms, no skipped products). Equal
  // tables of several kernels are one. `bits`: the table holds the value's bf16 bits (a bf16 store's).
  std::string table_read(int id, bool bits = false) {
    if (auto g = gathered_.find(id); g != gathered_.end()) return g->second;
    const Expr& load = k_.exprs[static_cast<size_t>(c_.tabulated[static_cast<size_t>(id)])];
    const KernelParam& p = k_.inputs[static_cast<size_t>(load.param)];
    return fmt::format("kiln_t{}[in{}[{}]]", value_table(id, bits), load.param, offset_of(load, shape_numel(p.type.shape)));
  }

  // The module's table of expression `id` over its one loaded 16-bit value (added on first use): its index.
  int value_table(int id, bool bits) {
    const Expr& load = k_.exprs[static_cast<size_t>(c_.tabulated[static_cast<size_t>(id)])];
    const KernelParam& p = k_.inputs[static_cast<size_t>(load.param)];
    KernelWriter fill(c_, d_, tables_, value_tables_);
    fill.in_table_ = true;
    fill.indent_ = "      ";
    fill.memo_[c_.tabulated[static_cast<size_t>(id)]] = "kiln_x";
    const std::string value = fill.emit(id);
    const ValueTable table{bits ? "uint16_t" : "float",
                           fmt::format("      const float kiln_x = kiln_{}_to_f32((uint16_t)kiln_b);\n{}      kiln_v[kiln_b] = {};\n",
                                       dtype_name(p.type.dtype), fill.code_, bits ? "kiln_bf16_bits(" + value + ")" : value)};
    auto at = std::find(value_tables_.begin(), value_tables_.end(), table);
    const int t = static_cast<int>(at - value_tables_.begin());
    if (at == value_tables_.end()) value_tables_.push_back(table);
    used_tables_.insert(t);
    return t;
  }

  // The offset a load or row-buffer read of `e` indexes, clamped into [0, size) where a select may send it
  // outside (`clamp` says whether it was).
  std::string offset_of(const Expr& e, int64_t size, bool* clamp = nullptr) const {
    const bool clamps = clamped(e) && !provably_within(e.offset, size);
    if (clamp) *clamp = clamps;
    const std::string off = idx(e.offset);
    return clamps ? fmt::format("kiln_clamp({}, (kiln_idx){})", off, std::max<int64_t>(0, size - 1)) : off;
  }

  // A read of a row held in registers (cuda_row_buffers): the reduced value, or the element of the reader's
  // own vector step that the offset names, its index in the step fixed once the loops are unrolled.
  std::string register_read(const Expr& e) const {
    if (k_.stages[e.stage].reduce) return fmt::format("s{}_r", e.stage);
    KILN_CHECK(vector_mode_ && vec_.var >= 0);
    const std::optional<IndexExpr> within = offset_within_vector_step(k_, e.offset, vec_.var, c_.s.vector_width);
    KILN_CHECK(within.has_value());
    const int lane = vector_lane_var(k_);
    return fmt::format("s{}_r[kiln_it][{}]", e.stage,
                       index_to_c(*within, [&](int v) { return v == lane ? std::string("kiln_vj") : var_name(v); }));
  }

  // A sum, difference or quotient rounded to bf16/f16 is computed in double and rounded once, as the
  // reference does: in f32 it could round twice. (Products of bf16/f16 values are exact in f32.) When both
  // operands already hold values of that dtype, the f32 result is never a tie of the dtype that the exact
  // result is not, so rounding it once is exact too, and vectorizes without doubles (checked offline for + and
  // / over all 2^32 pairs of bf16 values; see half_valued).
  bool rounds_in_double(const Expr& e) const {
    const Expr& inner = k_.exprs[e.operands[0]];
    const bool half = e.dtype == DType::bf16 || e.dtype == DType::f16;
    return half && inner.kind == ExprKind::binary && (inner.op == Op::add || inner.op == Op::sub || inner.op == Op::div) &&
           !(e.dtype == DType::bf16 && half_valued(inner.operands[0], e.dtype) && half_valued(inner.operands[1], e.dtype));
  }

  // Whether the rounding `id` is skipped (keep_products_): a bf16 product's inside the value being written.
  bool elides(int id) const {
    const Expr& e = k_.exprs[static_cast<size_t>(id)];
    if (!keep_products_ || id == root_ || e.kind != ExprKind::round || e.dtype != DType::bf16) return false;
    const Expr& inner = k_.exprs[e.operands[0]];
    return inner.kind == ExprKind::binary && inner.op == Op::mul;
  }

  // Whether rounding `e` is one bf16 instruction (Dialect::bf16_arithmetic): the sum, difference or product of
  // two bf16 values rounded to bf16.
  bool bf16_instruction(const Expr& e) const {
    if (!d_.bf16_arithmetic() || e.kind != ExprKind::round || e.dtype != DType::bf16) return false;
    const Expr& inner = k_.exprs[e.operands[0]];
    return inner.kind == ExprKind::binary && (inner.op == Op::add || inner.op == Op::sub || inner.op == Op::mul) &&
           half_valued(inner.operands[0], DType::bf16, true) && half_valued(inner.operands[1], DType::bf16, true);
  }

  // Whether expression `id` always holds a value representable in `dtype` (a load of such an input, a
  // rounding to it, a constant of it, a stage of it, or a choice between such values). `as_emitted`: as the
  // code written so far computes it, where a skipped product rounding (keep_products_) is not one.
  bool half_valued(int id, DType dtype, bool as_emitted = false) const {
    const Expr& e = k_.exprs[id];
    switch (e.kind) {
      case ExprKind::load: return k_.inputs[e.param].type.dtype == dtype;
      case ExprKind::round: return e.dtype == dtype && !(as_emitted && (elided_.count(id) || elides(id)));
      case ExprKind::constant: return dtype == DType::bf16 && round_to_dtype(e.value, dtype) == e.value;
      case ExprKind::read_stage: {
        const Stage& st = k_.stages[e.stage];
        return st.reduce ? st.type.dtype == dtype : half_valued(st.expr, dtype, as_emitted);
      }
      case ExprKind::select:
        return half_valued(e.operands[0], dtype, as_emitted) && half_valued(e.operands[1], dtype, as_emitted);
      default: return false;
    }
  }

  std::string store(const Stage& s, const std::string& target, const std::string& value) const {
    return convert_to_storage(s.type.dtype, fmt::format("out{}[r * {} + {}]", s.output, s.local_size, target), value);
  }
  static std::string convert_to_storage(DType dtype, const std::string& at, const std::string& value) {
    switch (dtype) {
      case DType::f32: return at + " = " + value + ";\n";
      case DType::bf16: return at + " = kiln_bf16_bits(" + value + ");\n";
      case DType::f16: return at + " = kiln_f16_bits(" + value + ");\n";
      default: return fmt::format("{} = kiln_{}_bits({});\n", at, dtype_name(dtype), value);
    }
  }

  void open(const Stage& s, size_t axis, bool spread, const std::string& clause = "") {
    const int var = s.space_vars[axis];
    if (var < 0) return;
    if (spread && vector_mode_) {
      const int width = c_.s.vector_width;
      const int64_t step = static_cast<int64_t>(width) * c_.s.threads_per_row, extent = s.space[axis];
      if (extent % step == 0 && extent / step <= 8) {
        // Every thread takes the same few steps: a loop of constant trip count, unrolled, so a thread's
        // vector loads are all in flight together rather than one round trip to memory per step.
        code_ += indent_ + fmt::format("#pragma unroll\n{}for (kiln_idx kiln_it = 0, kiln_vb = (kiln_idx)kiln_lane * {}; "
                                       "kiln_it < {}; ++kiln_it, kiln_vb += {}) {{\n", indent_, width, extent / step, step);
        vec_.steps = extent / step;
        vec_.step = step;
      } else {
        code_ += indent_ + fmt::format("for (kiln_idx kiln_vb = (kiln_idx)kiln_lane * {0}; kiln_vb < {1}; kiln_vb += {2}) {{\n",
                                       width, extent, step);
      }
      indent_ += "  ";
      ++open_loops_;
      code_ += kVectorPrologue;
      code_ += indent_ + "#pragma unroll\n" + indent_ + fmt::format("for (int kiln_vj = 0; kiln_vj < {}; ++kiln_vj) {{\n", width);
      indent_ += "  ";
      ++open_loops_;
      // The step's index (kiln_vs) and the element in it (kiln_vj, fixed once unrolled): index expressions of
      // the vector variable are written in these two (vector_index).
      code_ += indent_ + fmt::format("const kiln_idx kiln_vs = kiln_vb / {};\n", width);
      code_ += indent_ + fmt::format("const kiln_idx {} = kiln_vb + kiln_vj;\n", var_name(var));
      vec_.var = var;
      vec_.level = open_loops_;
      return;
    }
    code_ += indent_ + d_.loop_open(var_name(var), s.space[axis], spread, c_.s, clause);
    indent_ += "  ";
    ++open_loops_;
  }
  void close_all(int down_to) {
    while (open_loops_ > down_to) {
      const bool vector_step = vector_mode_ && vec_.var >= 0 && open_loops_ == vec_.level;
      indent_.resize(indent_.size() - 2);
      code_ += indent_ + "}\n";
      --open_loops_;
      if (vector_step) {  // the per-element loop closed: whole-vector stores, and the loads before it
        code_ += vec_.post;
        const size_t at = code_.find(kVectorPrologue);
        KILN_CHECK(at != std::string::npos);
        code_.replace(at, std::strlen(kVectorPrologue), vec_.pre);
        vec_.var = -1;
      }
    }
  }

  // The innermost axis with a loop, among axes [from, to): the one a target may spread.
  int innermost(const Stage& s, size_t from, size_t to) const {
    for (size_t a = to; a-- > from;) {
      if (s.space_vars[a] >= 0) return static_cast<int>(a);
    }
    return -1;
  }

  // The stage's one loop (every other axis has extent 1), or -1.
  int only_loop(const Stage& s) const {
    const int inner = innermost(s, 0, s.space.size());
    return inner >= 0 && innermost(s, 0, static_cast<size_t>(inner)) < 0 ? inner : -1;
  }

  // `e` at the first step of the loop over `var`: the base of a row it walks.
  IndexExpr at_loop_start(const IndexExpr& e, int var) const {
    return index_substitute(e, var, IndexExpr::of_constant(0), [&](int v) { return k_.extent(v); });
  }

  void write_elementwise(int i) {
    const Stage& s = k_.stages[i];
    indent_ = "      ";
    open_loops_ = 0;
    const int inner = innermost(s, 0, s.space.size());
    const bool spread_threads = d_.spreads_rows();
    if (inner < 0 && spread_threads) code_ += indent_ + d_.single_writer_open();
    if (write_stored_bits_table(i)) return;
    if (pair_axis(s) >= 0) {
      write_paired_elementwise(i, pair_axis(s));
      return;
    }
    // CPU: a bf16 output along the stage's only loop goes into an f32 row buffer, stored by kiln_store_bf16_row.
    const std::string row_store = cpu_row_store(i, inner);
    if (!row_store.empty()) {
      code_ += indent_ + fmt::format("alignas(64) float kiln_ob{}[{}];\n", i, s.space[static_cast<size_t>(inner)]);
    }
    const bool store_unrounded = set_stored_root(i);
    if (!open_gathered_blocks(s, inner)) {
      for (size_t a = 0; a < s.space.size(); ++a) open(s, a, static_cast<int>(a) == inner);
    }
    // A stored bf16 value that is already bf16 is its high half: one rounding per element instead of two (on
    // CUDA, where the rounding is a bf16 instruction's; an F2F rounding is stored by another F2F).
    const std::string value = emit(root_);
    gathered_.clear();
    keep_products_ = false;
    const bool bf16_bits_exact = !store_unrounded && s.type.dtype == DType::bf16 &&
                                 half_valued(s.expr, DType::bf16, true) &&
                                 (d_.target() == Target::cpu || bf16_instruction(k_.exprs[s.expr]));
    const std::string high_half = "(uint16_t)(kiln_as_uint(" + value + ") >> 16)";
    const std::string target = idx(s.target);
    if (c_.place[i] == RowBuffer::registers) {
      code_ += indent_ + fmt::format("s{}_r[kiln_it][kiln_vj] = {};\n", i, value);
    } else if (c_.buffered[i]) {
      code_ += indent_ + d_.buffer(i, target) + " = " + value + ";\n";
    }
    if (s.output >= 0 && wide_ && vec_.var >= 0 && s.local_size % c_.s.vector_width == 0 &&
        contiguous_in(s.target, vec_.var, c_.s.vector_width)) {
      const std::string arr = "kiln_vout" + std::to_string(vec_.arrays++);
      vec_.pre += fmt::format("alignas(16) {} {}[{}];\n", storage_type(s.type.dtype), arr, c_.s.vector_width);
      code_ += indent_ + (bf16_bits_exact ? arr + "[kiln_vj] = " + high_half + ";\n"
                                          : convert_to_storage(s.type.dtype, arr + "[kiln_vj]", value));
      vec_.post += d_.store_guard_open() +
                   vector_copy(fmt::format("out{} + r * {} + {}", s.output, s.local_size, idx_at_vector_base(s.target)), arr,
                               s.type.dtype) +
                   d_.store_guard_close();
    } else if (!row_store.empty()) {
      code_ += indent_ + fmt::format("kiln_ob{}[{}] = {};\n", i, var_name(s.space_vars[static_cast<size_t>(inner)]), value);
    } else if (s.output >= 0 && bf16_bits_exact) {
      code_ += indent_ + d_.store_guard_open() + indent_ +
               fmt::format("out{}[r * {} + {}] = {};\n", s.output, s.local_size, target, high_half) + indent_ +
               d_.store_guard_close();
    } else if (s.output >= 0) {
      code_ += indent_ + d_.store_guard_open() + indent_ + store(s, target, value) + indent_ + d_.store_guard_close();
    }
    close_all(0);
    if (!row_store.empty()) code_ += indent_ + row_store;
    if (inner < 0 && spread_threads) code_ += indent_ + d_.single_writer_close();
  }

  // CPU, Schedule::gathers: a stage whose one loop reads tabulated values (root_'s, table_read) at elements
  // contiguous along it runs over blocks of kGatherBlock elements; before each block's loop, kiln_gather_f32
  // fills a buffer per tabulated value (in L1: 4 KiB) and the loop reads the buffer (gathered_). A SiLU-by-table
  // of a SwiGLU [1024, 12288] ran 0.414 -> 0.244 ns an element from cache on an AVX-512 Xeon (one buffer for the
  // whole row of 6144: 0.300). Returns false, opening nothing, where that does not apply.
  bool open_gathered_blocks(const Stage& s, int inner) {
    if (d_.target() != Target::cpu || !c_.s.gathers || c_.tabulated.empty() || inner < 0 || only_loop(s) != inner) {
      return false;
    }
    const int var = s.space_vars[static_cast<size_t>(inner)];
    std::vector<int> reads;  // the tabulated values emit(root_) reads, each once
    std::set<int> seen;
    std::vector<int> todo = {root_};
    while (!todo.empty()) {
      const int id = todo.back();
      todo.pop_back();
      if (!seen.insert(id).second) continue;
      const Expr& e = k_.exprs[static_cast<size_t>(id)];
      if (c_.tabulated[static_cast<size_t>(id)] >= 0) {
        const Expr& load = k_.exprs[static_cast<size_t>(c_.tabulated[static_cast<size_t>(id)])];
        if (contiguous_in(load.offset, var, 1) && !clamped(load)) reads.push_back(id);
        continue;
      }
      todo.insert(todo.end(), e.operands.begin(), e.operands.end());
      if (e.kind == ExprKind::read_stage && e.inline_fallback >= 0) todo.push_back(e.inline_fallback);
    }
    if (reads.empty()) return false;
    const int64_t n = s.space[static_cast<size_t>(inner)], block = std::min(n, kGatherBlock);
    const std::string v = var_name(var);
    for (int id : reads) code_ += indent_ + fmt::format("alignas(64) float kiln_g{}[{}];\n", id, block);
    code_ += indent_ + fmt::format("for (int64_t kiln_c = 0; kiln_c < {}; kiln_c += {}) {{\n", n, block);
    indent_ += "  ";
    ++open_loops_;
    code_ += indent_ + (n % block == 0 ? fmt::format("const int64_t kiln_ce = kiln_c + {};\n", block)
                                       : fmt::format("const int64_t kiln_ce = kiln_c + {0} < {1} ? kiln_c + {0} : {1};\n", block, n));
    for (int id : reads) {
      const Expr& load = k_.exprs[static_cast<size_t>(c_.tabulated[static_cast<size_t>(id)])];
      code_ += indent_ + fmt::format("kiln_gather_f32(kiln_g{}, kiln_t{}, in{} + {} + kiln_c, kiln_ce - kiln_c);\n", id,
                                     value_table(id, false), load.param, idx(at_loop_start(load.offset, var)));
      gathered_[id] = fmt::format("kiln_g{}[{} - kiln_c]", id, v);
    }
    code_ += indent_ + cpu_loop_pragmas(c_.s, "") + indent_ + fmt::format("for (int64_t {0} = kiln_c; {0} < kiln_ce; ++{0}) {{\n", v);
    indent_ += "  ";
    ++open_loops_;
    return true;
  }

  // What an elementwise stage's value is written from (root_), and whether that skips the value's own rounding:
  // a value rounded to bf16/f16/fp8 only to be stored is stored from the unrounded operand (the store's
  // conversion rounds it the same way: rounding is idempotent). For fp8 the explicit rounding is kiln_round_f8's
  // frexpf/ldexpf/rintf in software, while CUDA's e4m3 store is one cvt.rn.satfinite (the same bits, 464 and
  // beyond NaN as the reference): an FP8 quantize cast of a FLUX MLP ran at 22.5% of a copy with both, 49.1%
  // with the store's alone (H100, sessions 26 and 28). bf16 products inside the expression stay f32 until the
  // value is stored or kept (keep_products_, until the caller resets it): a modulated LN rounds once per element
  // instead of four times (on CUDA its kernels are issue-bound).
  bool set_stored_root(int i) {
    const Stage& s = k_.stages[static_cast<size_t>(i)];
    const Expr& root = k_.exprs[s.expr];
    keep_products_ = c_.coarse_outputs_only[i];
    root_ = s.expr;  // for elides(), under bf16_instruction(root)
    const bool store_unrounded = s.output >= 0 && !c_.buffered[i] && root.kind == ExprKind::round &&
                                 root.dtype == s.type.dtype && dtype_is_float(root.dtype) &&
                                 root.dtype != DType::f32 && !rounds_in_double(root) && !bf16_instruction(root);
    root_ = store_unrounded ? root.operands[0] : s.expr;
    return store_unrounded;
  }

  // Schedule::pairs: the stage's one loop runs over words of two elements (pair_plan); its value is written
  // for the even and then the odd element, and a bf16 output takes both as one word (through a row of words,
  // streamed, under stream_stores).
  void write_paired_elementwise(int i, int axis) {
    const Stage& s = k_.stages[static_cast<size_t>(i)];
    const int var = s.space_vars[static_cast<size_t>(axis)];
    const int64_t words = s.space[static_cast<size_t>(axis)] / 2;
    const bool stored = s.output >= 0;
    const bool streamed = stored && c_.s.stream_stores && contiguous_in(s.target, var, 1);
    if (streamed) code_ += indent_ + fmt::format("alignas(64) uint32_t kiln_ow{}[{}];\n", i, words);
    code_ += indent_ + d_.loop_open("kiln_p", words, true, c_.s, "");
    indent_ += "  ";
    ++open_loops_;
    pair_.var = var;
    pair_.words.clear();
    set_stored_root(i);  // the pair's rounding is the store's
    std::string value[2];
    for (int half = 0; half < 2; ++half) {
      pair_.half = half;
      memo_.clear();
      value[half] = emit(root_);
      if (c_.buffered[i]) code_ += indent_ + d_.buffer(i, idx(s.target)) + " = " + value[half] + ";\n";
    }
    keep_products_ = false;
    pair_.half = 0;
    if (stored) {
      const std::string word = fmt::format("kiln_bf16_pair({}, {})", value[0], value[1]);
      if (streamed) {
        code_ += indent_ + fmt::format("kiln_ow{}[kiln_p] = {};\n", i, word);
      } else {
        code_ += indent_ + fmt::format("kiln_put_word(out{} + r * {} + {}, {});\n", s.output, s.local_size, idx(s.target), word);
      }
    }
    pair_.var = -1;
    close_all(0);
    if (streamed) {
      const IndexExpr base = at_loop_start(s.target, var);
      code_ += indent_ + fmt::format("kiln_stream_words(out{} + r * {} + {}, kiln_ow{}, {});\n", s.output, s.local_size,
                                     idx(base), i, words);
    }
  }

  // CPU, Schedule::tables: a bf16 output stage whose whole value is tabulated stores its bits straight from a table
  // of them: no f32 row, no conversion pass, and scalar lookups (under `omp simd` GCC emulates the 16-bit
  // gather: GELU-tanh from cache 0.46 ns an element that way, 0.38 scalar; an AVX2 gather 0.64). Its stores are
  // not streamed. Along a row the input is read and the output written four elements a 64-bit word: the plain
  // loop's two loads and a store an element are the load ports' limit (GELU-tanh from cache 0.61 ns an element on
  // an AVX2 EPYC, 0.40 by words, session 26).
  bool write_stored_bits_table(int i) {
    const Stage& s = k_.stages[static_cast<size_t>(i)];
    if (d_.target() != Target::cpu || c_.tabulated.empty() || s.output < 0 || s.type.dtype != DType::bf16 ||
        c_.buffered[static_cast<size_t>(i)] || c_.tabulated[static_cast<size_t>(s.expr)] < 0) {
      return false;
    }
    if (write_table_words(i)) return true;
    for (size_t a = 0; a < s.space.size(); ++a) open(s, a, false);
    const std::string bits = table_read(s.expr, true);
    code_ += indent_ + fmt::format("out{}[r * {} + {}] = {};\n", s.output, s.local_size, idx(s.target), bits);
    close_all(0);
    return true;
  }

  // write_stored_bits_table's word form: the stage has one loop (every other axis has extent 1), along which its
  // input is read and its output written contiguously, and the read needs no clamp.
  bool write_table_words(int i) {
    const Stage& s = k_.stages[static_cast<size_t>(i)];
    const Expr& load = k_.exprs[static_cast<size_t>(c_.tabulated[static_cast<size_t>(s.expr)])];
    const int inner = only_loop(s);
    if (inner < 0 || clamped(load)) return false;
    const int var = s.space_vars[static_cast<size_t>(inner)];
    const int64_t n = s.space[static_cast<size_t>(inner)];
    if (n < 4 || !contiguous_in(s.target, var, 1) || !contiguous_in(load.offset, var, 1)) return false;
    const std::string t = "kiln_t" + std::to_string(value_table(s.expr, true));
    const std::string x = fmt::format("in{} + {}", load.param, idx(at_loop_start(load.offset, var)));
    const std::string y = fmt::format("out{} + r * {} + {}", s.output, s.local_size, idx(at_loop_start(s.target, var)));
    if (c_.s.gathers) {
      code_ += indent_ + fmt::format("kiln_gather_u16({}, {}, {}, {});\n", y, t, x, n);
      return true;
    }
    std::string lookups;
    for (int e = 0; e < 4; ++e) {
      lookups += fmt::format("{}(uint64_t){}[(kiln_w >> {}) & 0xffffu] << {}", e ? " | " : "", t, 16 * e, 16 * e);
    }
    code_ += indent_ + "{  // four elements a 64-bit word\n";
    code_ += indent_ + fmt::format("  const uint16_t* __restrict kiln_x = {};\n", x);
    code_ += indent_ + fmt::format("  uint16_t* __restrict kiln_y = {};\n", y);
    code_ += indent_ + "  int64_t kiln_e = 0;\n";
    code_ += indent_ + fmt::format("  for (; kiln_e + 4 <= {}; kiln_e += 4) {{\n", n);
    code_ += indent_ + "    uint64_t kiln_w;\n";
    code_ += indent_ + "    memcpy(&kiln_w, kiln_x + kiln_e, 8);\n";
    code_ += indent_ + fmt::format("    const uint64_t kiln_o = {};\n", lookups);
    code_ += indent_ + "    memcpy(kiln_y + kiln_e, &kiln_o, 8);\n";
    code_ += indent_ + "  }\n";
    if (n % 4) code_ += indent_ + fmt::format("  for (; kiln_e < {}; ++kiln_e) kiln_y[kiln_e] = {}[kiln_x[kiln_e]];\n", n, t);
    code_ += indent_ + "}\n";
    return true;
  }

  // The store of a CPU bf16 output stage through a row buffer (write_elementwise), or "" where it does not apply:
  // the stage's one loop (every other axis has extent 1) runs along the output row, at most 16384 elements.
  std::string cpu_row_store(int i, int inner) const {
    const Stage& s = k_.stages[static_cast<size_t>(i)];
    if (d_.target() != Target::cpu || s.output < 0 || s.type.dtype != DType::bf16 || inner < 0 || only_loop(s) != inner) return "";
    const int var = s.space_vars[static_cast<size_t>(inner)];
    const int64_t extent = s.space[static_cast<size_t>(inner)];
    if (extent < 32 || extent > 16384 || !contiguous_in(s.target, var, 1)) return "";
    const IndexExpr base = at_loop_start(s.target, var);
    return fmt::format("kiln_{}_bf16_row(out{} + r * {} + {}, kiln_ob{}, {});\n", c_.s.stream_stores ? "stream" : "store",
                       s.output, s.local_size, idx(base), i, extent);
  }

  std::string finalize(const Stage& s, const std::string& acc, const std::string& nan) const {
    std::string v;
    switch (s.reduce_kind) {
      case ReduceKind::sum: v = acc; break;
      case ReduceKind::mean: v = fmt::format("{} / {}", acc, float_literal(static_cast<double>(s.reduce_count))); break;
      case ReduceKind::max:
      case ReduceKind::amax: v = nan.empty() ? acc : fmt::format("({} ? KILN_NAN : {})", nan, acc); break;
    }
    if (s.reduce_kind == ReduceKind::mean && s.reduce_count == 0) v = "KILN_NAN";
    if (s.type.dtype != DType::f32) v = fmt::format("kiln_round_{}({})", dtype_name(s.type.dtype), v);
    return v;
  }

  std::string init_value(ReduceKind kind) const { return kind == ReduceKind::max ? "(-KILN_INF)" : "0.0f"; }

  // CPU: the innermost reduced loop accumulates into kLanes partial results (lane j takes elements j, j +
  // kLanes, ...), as blocks of kLanes consecutive elements under `omp simd` and a last shorter block, then
  // sums the lanes as a tree into acc<i> (and ORs the NaN flags). `omp simd reduction` instead keeps one or
  // two vector accumulators (a latency-bound chain) and adds its lanes one after another at the end: on a
  // row of 128 (q/k heads) that epilogue costs as much as the row.
  //
  // With a variance to take in the same pass (Schedule::moments, c_.moment_with), each lane sums its elements'
  // deviations d from its first element (its shift; 0 when that is not finite) and their squares. A lane's own
  // squared deviation sum Q - S^2/n then cancels at most a factor of its element count (its shift is one of its
  // elements), and the lanes' means and deviation sums combine pairwise as Chan, Golub and LeVeque's update.
  // The mean stage takes the plain sum (S + n * shift per lane), so infinities add as they would in a plain sum;
  // any infinity or NaN makes the variance NaN, as (x - mean)^2 does.
  template <typename Update>
  void write_lane_reduction(int i, size_t first_reduced, int inner, bool flag, const Update& update) {
    const Stage& s = k_.stages[i];
    constexpr int64_t kLanes = 64;
    const std::string parts = "kiln_part" + std::to_string(i), flags = "kiln_nanp" + std::to_string(i);
    const std::string acc = "acc" + std::to_string(i), nan = "nan" + std::to_string(i);
    const int moment = c_.moment_with[static_cast<size_t>(i)];
    const std::string shift = "kiln_shift" + std::to_string(i), squares = "kiln_sq" + std::to_string(i),
                      count = "kiln_count" + std::to_string(i);
    code_ += indent_ + fmt::format("float {}[{}];\n", parts, kLanes);
    if (flag) code_ += indent_ + fmt::format("int {}[{}];\n", flags, kLanes);
    code_ += indent_ + fmt::format("for (int kiln_j = 0; kiln_j < {}; ++kiln_j) {}[kiln_j] = {};\n", kLanes, parts,
                                   init_value(s.reduce_kind));
    if (flag) code_ += indent_ + fmt::format("for (int kiln_j = 0; kiln_j < {}; ++kiln_j) {}[kiln_j] = 0;\n", kLanes, flags);
    const int outer_loops = open_loops_;
    for (size_t a = first_reduced; a < static_cast<size_t>(inner); ++a) open(s, a, false);
    // Paired (Schedule::pairs): the lanes take words of two elements, each accumulating both.
    const int pair = pair_axis(s) == inner ? s.space_vars[static_cast<size_t>(inner)] : -1;
    const int64_t extent = s.space[static_cast<size_t>(inner)] / (pair >= 0 ? 2 : 1);
    const int64_t last = extent % kLanes, full = extent - last;
    // Lanes from element `base` on, each taking the element (pair: both elements) at base + kiln_vj.
    auto block = [&](const std::string& base, int64_t lanes, const auto& element) {
      code_ += indent_ + d_.loop_open("kiln_vj", lanes, true, c_.s, "");
      indent_ += "  ";
      if (pair >= 0) {
        code_ += indent_ + fmt::format("const int64_t kiln_p = {} + kiln_vj;\n", base);
        pair_.var = pair;
        pair_.words.clear();
        for (int half = 0; half < 2; ++half) {
          pair_.half = half;
          memo_.clear();
          const std::string x = emit(s.expr);
          code_ += element(x, half);
        }
        pair_ = PairLoop{};
      } else {
        code_ += indent_ + fmt::format("const int64_t {} = {} + kiln_vj;\n", var_name(s.space_vars[static_cast<size_t>(inner)]), base);
        memo_.clear();  // every name emitted so far lives in the other block's body
        const std::string x = emit(s.expr);
        code_ += element(x, 0);
      }
      indent_.resize(indent_.size() - 2);
      code_ += indent_ + "}\n";
    };
    auto accumulate = [&](const std::string& x, int) {
      if (moment < 0) return indent_ + update(x, parts + "[kiln_vj]", flag, flags + "[kiln_vj]");
      return indent_ + fmt::format("{{ const float kiln_d = {} - {}[kiln_vj]; {}[kiln_vj] += kiln_d; {}[kiln_vj] += kiln_d * kiln_d; }}\n",
                                   x, shift, parts, squares);
    };
    if (moment >= 0) {
      const int64_t per = pair >= 0 ? 2 : 1;
      code_ += indent_ + fmt::format("// with stage {} (the variance about this mean), in one pass\n", moment);
      code_ += indent_ + fmt::format("float {}[{}], {}[{}], {}[{}];\n", shift, kLanes, squares, kLanes, count, kLanes);
      code_ += indent_ + fmt::format("for (int kiln_j = 0; kiln_j < {0}; ++kiln_j) {{ {1}[kiln_j] = 0.0f; {2}[kiln_j] = 0.0f; "
                                     "{3}[kiln_j] = (float)({4} + (kiln_j < {5} ? {6} : 0)); }}\n",
                                     kLanes, shift, squares, count, full / kLanes * per, last, per);
      block("0", std::min(extent, kLanes), [&](const std::string& x, int half) {
        return half > 0 ? std::string() : indent_ + fmt::format("{0}[kiln_vj] = fabsf({1}) <= 0x1.fffffep+127f ? {1} : 0.0f;\n", shift, x);
      });
    }
    if (full > 0) {
      code_ += indent_ + fmt::format("for (int64_t kiln_vb = 0; kiln_vb < {}; kiln_vb += {}) {{\n", full, kLanes);
      indent_ += "  ";
      // The row's first pass, one loop over the whole row: it carries the next rows' prefetch, a part a step.
      if (i == prefetch_stage_ && open_loops_ == 0) {
        const std::string prefetch = d_.next_row_prefetch(c_, full / kLanes, fmt::format("kiln_vb / {}", kLanes));
        for (size_t at = 0; at < prefetch.size();) {
          const size_t end = prefetch.find('\n', at);
          code_ += indent_ + prefetch.substr(at, end - at + 1);
          at = end + 1;
        }
        prefetch_spread_ = !prefetch.empty();
      }
      block("kiln_vb", kLanes, accumulate);
      indent_.resize(indent_.size() - 2);
      code_ += indent_ + "}\n";
    }
    if (last > 0) block(std::to_string(full), last, accumulate);
    close_all(outer_loops);
    if (moment >= 0) {
      // Each lane's mean (relative to lane 0's shift: lane means of a row far from 0 would otherwise differ by
      // less than their rounding), its squared deviations about it, and its plain sum; then the lanes pairwise.
      code_ += indent_ + fmt::format("const float kiln_base{} = {}[0];\n", i, shift);
      code_ += indent_ + fmt::format("for (int kiln_j = 0; kiln_j < {}; ++kiln_j) {{\n", kLanes);
      // An empty lane (rows of fewer than 64 steps) has count 0 and sums 0: the 2^-100 added to a count makes its
      // mean and weight 0 instead of 0/0, and leaves a count of 1 or more as it is. A select there instead cost
      // the modulated layernorm 15% from cache (its divisions were no longer vectorized).
      code_ += indent_ + fmt::format("  const float kiln_m = {}[kiln_j] / ({}[kiln_j] + 0x1p-100f);\n", parts, count);
      code_ += indent_ + fmt::format("  const float kiln_q = {}[kiln_j] - {}[kiln_j] * kiln_m;\n", squares, parts);
      code_ += indent_ + fmt::format("  {}[kiln_j] = kiln_q < 0.0f ? 0.0f : kiln_q;  // rounding; a NaN stays\n", squares);
      code_ += indent_ + fmt::format("  {}[kiln_j] += {}[kiln_j] * {}[kiln_j];\n", parts, count, shift);
      code_ += indent_ + fmt::format("  {0}[kiln_j] = ({0}[kiln_j] - kiln_base{1}) + kiln_m;\n", shift, i);
      code_ += indent_ + "}\n";
      for (int64_t w = kLanes / 2; w >= 1; w /= 2) {
        code_ += indent_ + fmt::format("for (int kiln_j = 0; kiln_j < {}; ++kiln_j) {{\n", w);
        code_ += indent_ + fmt::format("  const float kiln_na = {0}[kiln_j], kiln_nb = {0}[kiln_j + {1}], kiln_n = kiln_na + kiln_nb;\n", count, w);
        code_ += indent_ + "  const float kiln_f = kiln_nb / (kiln_n + 0x1p-100f);\n";
        code_ += indent_ + fmt::format("  const float kiln_delta = {0}[kiln_j + {1}] - {0}[kiln_j];\n", shift, w);
        code_ += indent_ + fmt::format("  {}[kiln_j] += kiln_delta * kiln_f;\n", shift);
        code_ += indent_ + fmt::format("  {0}[kiln_j] += {0}[kiln_j + {1}] + kiln_delta * kiln_delta * kiln_na * kiln_f;\n", squares, w);
        code_ += indent_ + fmt::format("  {}[kiln_j] = kiln_n;\n", count);
        code_ += indent_ + fmt::format("  {0}[kiln_j] += {0}[kiln_j + {1}];\n", parts, w);
        code_ += indent_ + "}\n";
      }
      code_ += indent_ + fmt::format("{} = {}[0];\n", acc, parts);
      code_ += indent_ + fmt::format("const float acc{} = {}[0];\n", moment, squares);
      return;
    }
    const bool sum = s.reduce_kind == ReduceKind::sum || s.reduce_kind == ReduceKind::mean;
    static_assert(kLanes == 64, "the prelude's kiln_lanes_sum / kiln_lanes_max combine 64 lanes");
    code_ += indent_ + fmt::format("{} = kiln_lanes_{}({});\n", acc, sum ? "sum" : "max", parts);
    if (flag) {
      code_ += indent_ + fmt::format("{} = 0;\n", nan);
      code_ += indent_ + fmt::format("for (int kiln_j = 0; kiln_j < {}; ++kiln_j) {} |= {}[kiln_j];\n", kLanes, nan, flags);
    }
  }

  // A row's reduced value, where its readers and its output take it.
  void write_reduced_value(int i, const std::string& value) {
    const Stage& s = k_.stages[static_cast<size_t>(i)];
    const std::string target = idx(s.target);
    if (c_.place[i] == RowBuffer::registers) code_ += indent_ + fmt::format("s{}_r = {};\n", i, value);  // every thread
    if (c_.place[i] == RowBuffer::shared || s.output >= 0) {
      code_ += indent_ + d_.single_writer_open();
      if (c_.place[i] == RowBuffer::shared) code_ += indent_ + d_.buffer(i, target) + " = " + value + ";\n";
      if (s.output >= 0) code_ += indent_ + d_.store_guard_open() + indent_ + store(s, target, value) + indent_ + d_.store_guard_close();
      code_ += indent_ + d_.single_writer_close();
    }
  }

  void write_reduce(int i) {
    const Stage& s = k_.stages[i];
    indent_ = "      ";
    open_loops_ = 0;
    size_t first_reduced = s.space.size();
    for (size_t a = 0; a < s.space.size(); ++a) {
      if (s.reduced_axes[a]) {
        first_reduced = a;
        break;
      }
    }
    bool suffix = true;
    for (size_t a = first_reduced; a < s.space.size(); ++a) suffix = suffix && s.reduced_axes[a];
    const bool max_like = s.reduce_kind == ReduceKind::max || s.reduce_kind == ReduceKind::amax;
    const std::string acc = "acc" + std::to_string(i), nan = "nan" + std::to_string(i);
    const bool spread_threads = d_.spreads_rows();
    auto update = [&](const std::string& x, const std::string& into, bool flag, const std::string& nan_into) {
      if (s.reduce_kind == ReduceKind::sum || s.reduce_kind == ReduceKind::mean) return into + " += " + x + ";\n";
      const std::string term = s.reduce_kind == ReduceKind::amax ? "fabsf(" + x + ")" : x;
      if (!flag) return into + " = kiln_maxnan(" + into + ", " + term + ");\n";
      return fmt::format("{0} |= ({1} != {1});\n{2}{3} = {4} > {3} ? {4} : {3};\n", nan_into, x, indent_, into, term);
    };
    if (suffix) {
      for (size_t a = 0; a < first_reduced; ++a) open(s, a, false);
      const int kept_loops = open_loops_;
      const bool flag = max_like && !spread_threads;  // CPU: a NaN flag keeps the max loop vectorizable
      code_ += indent_ + "float " + acc + " = " + init_value(s.reduce_kind) + ";\n";
      if (flag) code_ += indent_ + "int " + nan + " = 0;\n";
      const std::string clause = !max_like ? fmt::format(" reduction(+:{})", acc)
                                 : flag    ? fmt::format(" reduction(max:{}) reduction(|:{})", acc, nan)
                                           : "";
      const int inner = innermost(s, first_reduced, s.space.size());
      if (inner < 0 && spread_threads) code_ += indent_ + "if (kiln_lane == 0) {\n";
      if (!spread_threads && c_.s.vector_width > 1 && inner >= 0 && s.space[inner] > 1) {
        write_lane_reduction(i, first_reduced, inner, flag, update);
      } else {
        KILN_CHECK(c_.moment_with[static_cast<size_t>(i)] < 0);  // central_moment_of takes lane reductions only
        for (size_t a = first_reduced; a < s.space.size(); ++a) open(s, a, static_cast<int>(a) == inner, clause);
        const std::string x = emit(s.expr);
        code_ += indent_ + update(x, acc, flag, nan);
      }
      close_all(kept_loops);
      if (inner < 0 && spread_threads) code_ += indent_ + "}\n";
      if (spread_threads) {
        const int slot = reduction_exchanges(k_, static_cast<size_t>(i));  // the exchanging reductions before it
        code_ += indent_ + d_.reduce_exchange(acc, nan, s.reduce_kind, c_.s, slot, kept_loops > 0);
      }
      write_reduced_value(i, finalize(s, acc, flag ? nan : ""));
      const int moment = c_.moment_with[static_cast<size_t>(i)];  // taken in this pass (write_lane_reduction)
      if (moment >= 0) write_reduced_value(moment, finalize(k_.stages[static_cast<size_t>(moment)], "acc" + std::to_string(moment), ""));
      close_all(0);
      return;
    }
    // General reduction (reduced axes not trailing): accumulate into the stage's buffer, in one thread.
    code_ += indent_ + d_.single_writer_open();
    code_ += indent_ + fmt::format("for (kiln_idx kiln_i = 0; kiln_i < {}; ++kiln_i) {} = {};\n", s.local_size,
                                   d_.buffer(i, "kiln_i"), init_value(s.reduce_kind));
    for (size_t a = 0; a < s.space.size(); ++a) open(s, a, false);
    const std::string x = emit(s.expr);
    code_ += indent_ + update(x, d_.buffer(i, idx(s.target)), false, nan);
    close_all(0);
    Stage finished = s;
    const std::string cell = d_.buffer(i, "kiln_i");
    code_ += indent_ + fmt::format("for (kiln_idx kiln_i = 0; kiln_i < {}; ++kiln_i) {{\n", s.local_size);
    code_ += indent_ + "  " + cell + " = " + finalize(s, cell, "") + ";\n";
    if (s.output >= 0) {
      code_ += indent_ + "  " + d_.store_guard_open() + store(s, "kiln_i", cell) + d_.store_guard_close();
    }
    code_ += indent_ + "}\n" + indent_ + d_.single_writer_close();
  }

  const KernelContext& c_;
  const Kernel& k_;
  const Dialect& d_;
  std::set<DType>& tables_;
  std::vector<ValueTable>& value_tables_;   // the module's value tables (table_read), by index
  std::set<int> used_tables_;               // the ones this kernel reads
  bool in_table_ = false;                   // writing a table's fill: nothing is tabulated inside it
  std::map<int, std::string> gathered_;     // tabulated values read from a gathered block (open_gathered_blocks)
  static constexpr int64_t kGatherBlock = 1024;
  std::map<int, std::string> memo_;
  // Selects decided per row (write_branches), and how many undecided selects enclose the expression being
  // emitted. A guarded load under decided selects only is in range: the lowering guards a concat piece's
  // loads exactly where the piece is not chosen.
  std::map<std::string, bool> forced_;  // by select_key
  static std::string select_key(const Expr& e) { return index_key(e.condition) + "<" + std::to_string(e.bound); }
  int open_selects_ = 0;
  bool clamped(const Expr& e) const { return e.guarded && (forced_.empty() || open_selects_ > 0); }
  // The vector step being written (CUDA, vector_width > 1): its variable, the loop depth of its per-element
  // loop, and the code before (vector loads, local arrays) and after it (vector stores).
  struct VectorLoop {
    int var = -1;
    int level = 0;
    int arrays = 0;
    int64_t steps = 0, step = 0;  // the unrolled form's steps and elements a step covers (0: a plain loop)
    std::string pre, post;
    std::map<std::string, std::string> spans;  // param:span:base -> the local array holding it (span_load)
  };
  static constexpr const char* kVectorPrologue = "@@kiln-vector-prologue@@\n";
  bool vector_mode_ = false;
  bool wide_ = false;
  VectorLoop vec_;
  // CPU elementwise stages: a bf16 rounding of a product nested in the expression (not `root_`, the value the
  // stage keeps or stores) is skipped, the product stays f32 (elided_: those roundings). The result differs
  // from the reference by the skipped rounding carried through, within the numerics policy; it saves two of
  // the three roundings per element of a modulated layernorm.
  bool keep_products_ = false;
  bool coarse_ = false;  // the stage being written only reaches bf16/fp8 outputs (coarse_outputs_only)
  int root_ = -1;
  std::set<int> elided_;
  std::string code_;
  std::string indent_;
  int open_loops_ = 0;
  struct PairLoop {
    int var = -1;   // the paired loop's variable, while its body is written
    int half = 0;   // 0: the even element, 1: the odd one
    std::map<int, std::string> words;  // load expression -> its word, in the current body
  } pair_;
  int prefetch_stage_ = -1;       // the stage whose pass over a row may carry the next rows' prefetch
  bool prefetch_spread_ = false;  // it did
  // Schedule::row_loop (CUDA): the stage (the row's first pass) whose wide per-row loads the previous turn
  // issues, whether its vector branch is being written, and those loads (each with its unrolled loop).
  int row_turn_stage_ = -1;
  bool turn_loads_open_ = false;
  std::vector<RegisterLoad> turn_loads_;
  // Schedule::early_loads (CUDA): the row's first reduction stage (the early loads are issued before it), whether
  // the vector branch of a stage after it is being written, and the loads read from registers.
  int early_after_ = -1;
  bool early_loads_open_ = false;
  std::vector<RegisterLoad> early_loads_;
};

// The largest magnitude any partial sum of `e` (or of an expression inside a division or modulo) can take,
// evaluated left to right as written: a bound on the intermediate values of its C form.
double index_magnitude(const IndexExpr& e, const VarExtents& extents) {
  double total = std::fabs(static_cast<double>(e.constant)), inner = 0;
  for (const IndexTerm& t : e.terms) {
    IndexExpr atom;
    atom.terms.push_back({1, t.atom});
    const IndexRange r = index_range(atom, extents);
    total += std::fabs(static_cast<double>(t.coefficient)) * std::max(std::fabs(double(r.lo)), std::fabs(double(r.hi)));
    if (t.atom.inner) inner = std::max(inner, index_magnitude(*t.atom.inner, extents));
  }
  return std::max(total, inner);
}

// CUDA: whether every index the kernel computes fits in an int with room to spare (tensor sizes, row
// offsets, every load, read, store and select condition, also as written per vector step).
bool indices_fit_int32(const Kernel& k, const Schedule& s) {
  constexpr double kLimit = 1LL << 30;
  const int64_t widest = int64_t{s.vector_width} * s.threads_per_row;
  // Two spare variables (a vector step and the element in it) span at most what the variables they split do.
  const VarExtents extents = [&](int v) -> int64_t { return v < static_cast<int>(k.vars.size()) ? k.extent(v) : 1 << 20; };
  double most = static_cast<double>(k.rows + s.rows_per_task) * static_cast<double>(std::max<int64_t>(1, k.max_row_elements()) + widest);
  for (const KernelParam& p : k.inputs) most = std::max(most, static_cast<double>(shape_numel(p.type.shape)));
  for (const KernelParam& p : k.outputs) most = std::max(most, static_cast<double>(shape_numel(p.type.shape)));
  for (const Expr& e : k.exprs) {
    if (e.kind == ExprKind::load || e.kind == ExprKind::read_stage) most = std::max(most, index_magnitude(e.offset, extents));
    if (e.kind == ExprKind::select) most = std::max(most, index_magnitude(e.condition, extents));
  }
  for (const Stage& st : k.stages) most = std::max(most, index_magnitude(st.target, extents));
  return most < kLimit;
}

std::unique_ptr<Dialect> make_dialect(Target target) {
  if (target == Target::cuda) return std::make_unique<CudaDialect>();
  return std::make_unique<CpuDialect>();
}

bool valid_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  }
  return true;
}

}  // namespace

Result<EmittedModule> emit_module(const std::vector<KernelToEmit>& kernels, Target target) {
  const std::unique_ptr<Dialect> dialect = make_dialect(target);
  EmittedModule module;
  module.target = target;
  std::set<DType> tables;
  std::vector<ValueTable> value_tables;
  std::string bodies;
  std::set<std::string> entries;
  for (const KernelToEmit& item : kernels) {
    const Kernel& k = *item.kernel;
    if (!valid_identifier(item.entry) || !entries.insert(item.entry).second) {
      return make_error(ErrorCode::invalid_argument, "kernel entry name '" + item.entry + "' is not a unique C identifier");
    }
    if (auto st = can_implement(k, item.schedule, target); !st.ok()) {
      return with_context(st.error(), "kernel " + k.name + " (" + item.entry + ")");
    }
    for (const KernelParam& p : k.inputs) {
      if (!dtype_is_float(p.type.dtype)) {
        return make_error(ErrorCode::unsupported, "kernel " + k.name + ": input %" + p.name + " is not floating");
      }
    }
    KernelContext c{k, item.schedule, item.entry, {}, cuda_row_buffers(k, item.schedule), false, false, false, coarse_outputs_only(k), rounded_to_bf16_or_fp8(k),
                    target == Target::cpu ? row_invariant_inputs(k) : std::vector<bool>(k.inputs.size(), false), {}, false, {},
                    std::vector<int>(k.stages.size(), -1)};
    for (size_t i = 0; i < k.stages.size(); ++i) {
      const Stage& s = k.stages[i];
      if (target == Target::cpu && c.place[i] == RowBuffer::registers) c.place[i] = RowBuffer::shared;
      c.buffered.push_back(c.place[i] != RowBuffer::none);
      c.register_rows = c.register_rows || (c.place[i] == RowBuffer::registers && !s.reduce);
    }
    c.reduction_exchanges = reduction_exchanges(k);
    c.int32_indices = target == Target::cuda && indices_fit_int32(k, item.schedule);
    if (target == Target::cpu && item.schedule.tables) c.tabulated = tabulated_exprs(k);
    if (target == Target::cpu && item.schedule.pairs) {
      const std::optional<PairPlan> plan = pair_plan(k);
      KILN_CHECK(plan.has_value());  // can_implement refuses pairs otherwise
      c.pairs = true;
      c.pair_rows = plan->split_rows;
    }
    if (target == Target::cpu && item.schedule.moments) {
      for (size_t i = 0; i < k.stages.size(); ++i) {
        const int mean = central_moment_of(k, static_cast<int>(i));
        if (mean < 0 || c.moment_with[static_cast<size_t>(mean)] >= 0) continue;
        c.moment_with[static_cast<size_t>(mean)] = static_cast<int>(i);
      }
    }
    KernelWriter writer(c, *dialect, tables, value_tables);
    bodies += fmt::format("\n// kernel {} ({} rows of {}), schedule {}\n", k.name, k.rows, shape_to_string(k.row_shape),
                          schedule_to_string(item.schedule));
    bodies += writer.write();
    EmittedKernel ek;
    ek.entry = item.entry;
    ek.rows = k.rows;
    ek.schedule = item.schedule;
    ek.n_inputs = static_cast<int>(k.inputs.size());
    ek.n_outputs = static_cast<int>(k.outputs.size());
    if (target == Target::cuda) {
      ek.block_x = item.schedule.threads_per_row;
      ek.block_y = static_cast<int>(item.schedule.rows_per_task);
      // row_loop 0: the backend lowers the grid to the blocks the device holds at once (LoadedModule).
      const int64_t tasks = cuda_tasks(k, item.schedule), turns = std::max(1, item.schedule.row_loop);
      ek.grid = (tasks + turns - 1) / turns;
    }
    module.kernels.push_back(ek);
  }
  module.source = "// Generated by kiln (kernel/emit.cpp), dialect " + std::string(target_name(target)) + ".\n" +
                  dialect->prelude() + kCommonHelpersHead + dialect->arithmetic_helpers() + kCommonHelpersTail +
                  dialect->fp8_conversion();
  for (DType d : tables) module.source += decode_table(d);
  for (size_t t = 0; t < value_tables.size(); ++t) module.source += value_table(static_cast<int>(t), value_tables[t]);
  module.source += bodies;
  return module;
}

Result<std::string> emit_harness_candidate(const Kernel& kernel, const Schedule& schedule) {
  Schedule single = schedule;
  single.threads = 1;
  KILN_ASSIGN_OR_RETURN(EmittedModule m, emit_module({{&kernel, single, "kiln_kernel"}}, Target::cpu));
  return m.source;
}

std::string cuda_parameter_doc() {
  return "one pointer per kernel input (const, storage type), then one per output, in kernel order; grid = "
         "ceil(rows / rows_per_task) blocks of (threads_per_row, rows_per_task) threads, or fewer that take those "
         "tasks in turns (Schedule::row_loop)";
}

}  // namespace kiln::kernel
