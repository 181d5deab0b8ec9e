// The CPU dialect's f32 transcendentals (kernel/emit_cpu.h) against double-precision libm. The helpers
// are taken from a generated module's source (prelude included), compiled into a small library with a loop
// per function, once with the CPU backend's flags (vectorized, FMA contraction) and once with plain -O2 (no
// -march, so no FMA), and swept over f32 bit patterns: a stride over all 2^32, a finer one over the binades
// where results are neither 0, 1 nor inf, and the edges (overflow, underflow, flush, the tanh switch). Each
// function has an error bound in f32 ulps of the exact value; NaN, +-inf and +-0 must match exactly. A
// perturbed polynomial coefficient must break the bound (the sweep can fail).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "exact_math.h"
#include "harness/compile.h"
#include "harness/verify.h"
#include "kernel/emit.h"
#include "kernel/kernel_ir.h"

namespace kiln::kernel {
namespace {

struct MathFunction {
  const char* name;  // the helper, kiln_<name>
  double (*exact)(double);
  double max_ulps;
};

using testing::exact_exp, testing::exact_tanh, testing::exact_sigmoid, testing::exact_silu, testing::exact_gelu_tanh,
    testing::exact_gelu_erf;

const MathFunction kFunctions[] = {
    // Bounds: the largest errors over every third f32 (exp 0.98, tanh 1.50, sigmoid 2.40, silu 3.39, gelu
    // 3.46 and 3.49), rounded up.
    {"exp", exact_exp, 1.5},          {"tanh", exact_tanh, 2.0},           {"sigmoid", exact_sigmoid, 3.0},
    {"silu", exact_silu, 4.0},        {"gelu_tanh", exact_gelu_tanh, 4.0}, {"gelu_erf", exact_gelu_erf, 4.0},
    // The coarse forms (values only bf16/fp8 outputs see): relative error under 2^-14, i.e. 1024 ulps where
    // the result is normal. Measured: sigmoid_c 62, silu_c 117, gelu_tanh_c 217 (the f32 exponent's rounding,
    // which grows with |z|).
    {"sigmoid_c", exact_sigmoid, 1024}, {"silu_c", exact_silu, 1024}, {"gelu_tanh_c", exact_gelu_tanh, 1024},
};

// The helpers as a generated module holds them, plus kiln_sweep(function, x, y, n) looping over one of them.
std::string sweep_source() {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::f32, {1, 16}}, Binding::per_call);
  const ValueId y = (*g.add_node(Op::exp, {x}, {}, {"y"}))[0];
  KILN_CHECK(g.add_output("y", y).ok());
  auto k = lower_nodes(g, {0}, "k");
  KILN_CHECK(k.ok());
  auto module = emit_module({{&*k, default_schedule(*k, Target::cpu, 1), "kiln_k"}}, Target::cpu);
  KILN_CHECK(module.ok());
  std::string s = module->source + "extern \"C\" void kiln_sweep(int f, const float* __restrict x, float* __restrict y, int64_t n) {\n";
  for (size_t f = 0; f < std::size(kFunctions); ++f) {
    s += fmt::format("  if (f == {}) {{\n#pragma omp simd\n    for (int64_t i = 0; i < n; ++i) y[i] = kiln_{}(x[i]);\n  }}\n", f,
                     kFunctions[f].name);
  }
  s += "}\n";
  // The CPU dialect's bf16 rounding, to compare with the shared definition.
  return s + "extern \"C\" void kiln_bf16_sweep(const float* __restrict x, uint32_t* __restrict bits, uint32_t* __restrict rounded, uint32_t* __restrict pair, int64_t n) {\n"
             "#pragma omp simd\n"
             "  for (int64_t i = 0; i < n; ++i) {\n"
             "    bits[i] = kiln_bf16_bits(x[i]);\n"
             "    rounded[i] = kiln_as_uint(kiln_round_bf16(x[i]));\n"
             "    pair[i] = kiln_bf16_pair(x[i], x[n - 1 - i]);\n"  // Schedule::pairs' store (kiln_bf16_rne_high)
             "  }\n}\n"
             // The row store (AVX-512 BF16 where the machine has it), as kernels call it on a row of up to 8192.
             "extern \"C\" void kiln_bf16_row_sweep(const float* x, uint16_t* bits, int64_t n) {\n"
             "  for (int64_t i = 0; i < n; i += 8192 - 7) kiln_store_bf16_row(bits + i, x + i, n - i < 8192 - 7 ? n - i : 8192 - 7);\n}\n"
             // A reduction's lane tree (kiln_lanes_sum / kiln_lanes_max) over sets of 64 lanes.
             "extern \"C\" void kiln_lanes_sweep(int max, const float* x, float* y, int64_t sets) {\n"
             "  for (int64_t i = 0; i < sets; ++i) {\n"
             "    float p[64];\n"
             "    memcpy(p, x + 64 * i, sizeof p);\n"
             "    y[i] = max ? kiln_lanes_max(p) : kiln_lanes_sum(p);\n"
             "  }\n}\n";
}

using SweepFn = void (*)(int, const float*, float*, int64_t);
using Bf16SweepFn = void (*)(const float*, uint32_t*, uint32_t*, uint32_t*, int64_t);
using Bf16RowSweepFn = void (*)(const float*, uint16_t*, int64_t);
using LanesSweepFn = void (*)(int, const float*, float*, int64_t);

struct SweepLibrary {
  void* handle = nullptr;
  SweepFn sweep = nullptr;
  Bf16SweepFn bf16 = nullptr;
  Bf16RowSweepFn bf16_row = nullptr;
  LanesSweepFn lanes = nullptr;
  std::string error;
  ~SweepLibrary() {
    if (handle) dlclose(handle);
  }
};

void build(const std::string& source, const std::vector<std::string>& flags, SweepLibrary& lib) {
  harness::CompileOptions co;
  co.flags = flags;
  const std::string dir = harness::make_scratch_dir("", "cpu-math");
  const harness::CompiledCandidate built = harness::compile_candidate(source, dir, co);
  if (built.outcome.cls != harness::OutcomeClass::compiled) {
    lib.error = built.outcome.evidence.summary + "\n" + built.outcome.evidence.compiler_log;
  } else {
    lib.handle = dlopen(built.library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle) lib.error = dlerror();
    if (lib.handle) lib.sweep = reinterpret_cast<SweepFn>(dlsym(lib.handle, "kiln_sweep"));
    if (lib.handle) lib.bf16 = reinterpret_cast<Bf16SweepFn>(dlsym(lib.handle, "kiln_bf16_sweep"));
    if (lib.handle) lib.bf16_row = reinterpret_cast<Bf16RowSweepFn>(dlsym(lib.handle, "kiln_bf16_row_sweep"));
    if (lib.handle) lib.lanes = reinterpret_cast<LanesSweepFn>(dlsym(lib.handle, "kiln_lanes_sweep"));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> sweep_inputs() {
  std::vector<float> x;
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) x.push_back(from_bits(static_cast<uint32_t>(b)));
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t b = 0x3b800000u; b < 0x43400000u; b += 257) x.push_back(from_bits(sign | b));  // 2^-8 .. 192
  }
  // Edges: exp overflow (88.72) and underflow into subnormals (-87.3 .. -103.97), the flush at -160, tanh's
  // switch at 0.625 and saturation near 9.
  for (float centre : {88.72283f, -87.33654f, -103.9721f, -160.0f, 0.625f, 9.0f, 9.5f, -13.0f * 1.4142135f}) {
    for (int i = -2000; i <= 2000; ++i) x.push_back(std::nextafter(centre, 0.0f) + i * std::fabs(centre) * 0x1p-21f);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), 1e-30f, -1e-30f}) {
    x.push_back(v);
  }
  return x;
}

double f32_ulp(double v) {
  const double a = std::fabs(v);
  if (a < 0x1p-126) return 0x1p-149;
  int e = 0;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - 24);
}

struct SweepResult {
  double max_ulps = 0;
  float worst_x = 0;
  int64_t special_mismatches = 0;  // NaN / inf / zero sign where the exact value differs
  std::string first_special;
};

SweepResult measure(SweepFn sweep, int f, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  sweep(f, x.data(), y.data(), static_cast<int64_t>(x.size()));
  SweepResult r;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = kFunctions[f].exact(x[i]);
    const float rounded = static_cast<float>(exact);
    const float got = y[i];
    const bool special = std::isnan(rounded) || std::isinf(rounded) || std::isnan(got) || std::isinf(got) ||
                         (exact == 0 && got == 0);
    if (special) {
      const bool same = (std::isnan(rounded) && std::isnan(got)) || (rounded == got && std::signbit(rounded) == std::signbit(got));
      if (!same && r.special_mismatches++ == 0) r.first_special = fmt::format("x = {:a}: exact {}, got {}", x[i], exact, got);
      continue;
    }
    const double ulps = std::fabs(static_cast<double>(got) - exact) / f32_ulp(exact);
    if (ulps > r.max_ulps) {
      r.max_ulps = ulps;
      r.worst_x = x[i];
    }
  }
  return r;
}

const std::vector<std::string> kPlainFlags = {"-O2", "-std=c++17", "-fopenmp-simd", "-shared", "-fPIC", "-Wl,-z,defs"};

TEST(CpuMath, SweepAgainstDoubleLibm) {
  const std::string source = sweep_source();
  const std::vector<float> x = sweep_inputs();
  for (const auto& flags : {backend::CpuBackendOptions{}.flags, kPlainFlags}) {
    SweepLibrary lib;
    build(source, flags, lib);
    ASSERT_TRUE(lib.sweep) << lib.error;
    for (size_t f = 0; f < std::size(kFunctions); ++f) {
      const SweepResult r = measure(lib.sweep, static_cast<int>(f), x);
      EXPECT_LE(r.max_ulps, kFunctions[f].max_ulps)
          << kFunctions[f].name << " at x = " << fmt::format("{:a}", r.worst_x) << (flags == kPlainFlags ? " (plain -O2)" : "");
      EXPECT_EQ(r.special_mismatches, 0) << kFunctions[f].name << ": " << r.first_special;
      RecordProperty(std::string(kFunctions[f].name) + (flags == kPlainFlags ? "_plain" : "_backend"), fmt::format("{:.2f}", r.max_ulps));
    }
  }
}

// The largest error of function `f` once `coefficient` in the helpers' source reads `perturbed`.
void expect_perturbation_breaks_the_bound(const std::string& coefficient, const std::string& perturbed, int f) {
  std::string source = sweep_source();
  const size_t at = source.find(coefficient);
  ASSERT_NE(at, std::string::npos);
  source.replace(at, coefficient.size(), perturbed);
  SweepLibrary lib;
  build(source, backend::CpuBackendOptions{}.flags, lib);
  ASSERT_TRUE(lib.sweep) << lib.error;
  EXPECT_GT(measure(lib.sweep, f, sweep_inputs()).max_ulps, kFunctions[f].max_ulps) << kFunctions[f].name;
}

// The sweep is sharp enough to see one coefficient of the exp polynomial off by 2^-16 of itself
// (~1/6, the r^3 term of e^r - 1).
TEST(CpuMath, SweepCatchesAPerturbedCoefficient) { expect_perturbation_breaks_the_bound("0x1.555556p-3f", "0x1.555656p-3f", 0); }

// The same for the coarse forms: their 2^f polynomial's r^3 term (ln(2)^3 / 6) off by 2^-5.8 of itself breaks the
// 2^-14 bound.
TEST(CpuMath, SweepCatchesAPerturbedCoarseCoefficient) {
  const int silu_c = 7;
  ASSERT_STREQ(kFunctions[silu_c].name, "silu_c");
  expect_perturbation_breaks_the_bound("0x1.c6b08ep-5f", "0x1.ceb08ep-5f", silu_c);
}

// The CPU dialect writes its own bf16 rounding (a float NaN test) and row store (kiln_store_bf16_row: the
// hardware conversion, which flushes subnormals, with a scalar step around them), and Schedule::pairs stores a word of
// two (kiln_bf16_pair); all must give the shared definition's bits
// (round to nearest even, NaNs quieted), vectorized as kernels run it: every sign, exponent and high mantissa
// (all 2^16 high halves) with the low halves that decide rounding (0, 1, below/at/above the tie, all ones).
TEST(CpuMath, Bf16RoundingMatchesTheSharedDefinition) {
  SweepLibrary lib;
  build(sweep_source(), backend::CpuBackendOptions{}.flags, lib);
  ASSERT_TRUE(lib.bf16) << lib.error;
  auto shared = [](uint32_t u) {  // the definition (kiln_bf16_rne_high's before session 24)
    const uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t quiet = (u | 0x00400000u) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? quiet : rne;
  };
  std::vector<uint32_t> patterns;
  for (uint32_t high = 0; high < 0x10000u; ++high) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x3fffu, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu}) patterns.push_back(high << 16 | low);
  }
  std::vector<float> x;
  for (uint32_t u : patterns) x.push_back(from_bits(u));
  std::vector<uint32_t> bits(x.size()), rounded(x.size()), pair(x.size());
  std::vector<uint16_t> row(x.size());
  lib.bf16(x.data(), bits.data(), rounded.data(), pair.data(), static_cast<int64_t>(x.size()));
  ASSERT_TRUE(lib.bf16_row);
  lib.bf16_row(x.data(), row.data(), static_cast<int64_t>(x.size()));
  int64_t mismatches = 0;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const uint32_t want = shared(patterns[i]);
    const uint32_t want_pair = shared(patterns[patterns.size() - 1 - i]) | want >> 16;
    if (bits[i] != want >> 16 || rounded[i] != want || row[i] != want >> 16 || pair[i] != want_pair) {
      ADD_FAILURE_AT(__FILE__, __LINE__) << fmt::format("f32 bits {:#010x}: got {:#06x} / {:#010x} / row {:#06x} / pair {:#010x}, want {:#010x} / pair {:#010x}",
                                                         patterns[i], bits[i], rounded[i], row[i], pair[i], want, want_pair);
      if (++mismatches > 5) break;
    }
  }
}

// A row reduction's 64 lanes are combined as a tree (lane j with lane j + w, w = 32 ... 1), vectorized on AVX2
// and as plain loops elsewhere: both builds must give the tree's bits exactly, float addition being what it is
// (cancelling magnitudes, so any other pairing differs), and max must keep `b > a ? b : a` through NaN, -0 and inf.
TEST(CpuMath, LaneTreesGiveTheScalarTreesBits) {
  std::vector<float> x;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 32);
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int set = 0; set < 4000; ++set) {
    for (int j = 0; j < 64; ++j) {
      const uint32_t r = next();
      const float magnitude = std::ldexp(static_cast<float>(r & 0xffffffu), static_cast<int>((r >> 24) % 60) - 30);
      float v = (r & 0x80000000u) ? -magnitude : magnitude;
      if (set % 7 == 0 && j == static_cast<int>(r % 64)) v = (r & 1) ? nan : ((r & 2) ? -inf : inf);
      if (set % 11 == 0 && j % 3 == 0) v = (r & 1) ? -0.0f : 0.0f;
      x.push_back(v);
    }
  }
  const int64_t sets = static_cast<int64_t>(x.size() / 64);
  auto tree = [&](int64_t set, bool max) {
    float p[64];
    std::memcpy(p, x.data() + 64 * set, sizeof p);
    for (int w = 32; w >= 1; w /= 2) {
      for (int j = 0; j < w; ++j) p[j] = max ? (p[j + w] > p[j] ? p[j + w] : p[j]) : p[j] + p[j + w];
    }
    return p[0];
  };
  for (const auto& flags : {backend::CpuBackendOptions{}.flags, kPlainFlags}) {
    SweepLibrary lib;
    build(sweep_source(), flags, lib);
    ASSERT_TRUE(lib.lanes) << lib.error;
    for (int max = 0; max < 2; ++max) {
      std::vector<float> y(static_cast<size_t>(sets));
      lib.lanes(max, x.data(), y.data(), sets);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < sets; ++i) {
        const float want = tree(i, max != 0);
        const bool same = std::isnan(want) ? std::isnan(y[i]) : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(y[i]);
        if (!same && ++mismatches <= 3) {
          ADD_FAILURE() << fmt::format("{} of set {}: got {:a}, want {:a}{}", max ? "max" : "sum", i, y[i], want,
                                       flags == kPlainFlags ? " (plain -O2)" : "");
        }
      }
    }
  }
}


}  // namespace
}  // namespace kiln::kernel
