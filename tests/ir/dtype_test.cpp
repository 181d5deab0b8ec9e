// Bit-exact checks of kiln's element types: every f16, bf16 and FP8 bit pattern round-trips, ties round to
// the even neighbour, overflow follows each format's rule, and f16/bf16 agree with independent conversions
// (the compiler's _Float16, the float-bits RNE formula used by frameworks). The fast bit-manipulation and
// table conversions agree bit for bit with the generic reference ones, and the bulk forms with the per-element
// ones. f32 stores out of range, integer and bool stores too.
#include "ir/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ir/tensor.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One small float format as the tests see it: its encoder/decoder and the facts they are checked against.
struct Format {
  const char* name;
  DType dtype;
  uint32_t (*encode)(double);
  double (*decode)(uint32_t);
  uint32_t (*encode_reference)(double);
  double (*decode_reference)(uint32_t);
  int total_bits;
  int mantissa_bits;
  uint32_t max_finite_bits;  // positive; every positive pattern below it is finite and ordered
  bool has_infinity;
  int nan_patterns;  // how many of the 2^total_bits patterns are NaN
};

const Format kFormats[] = {
    {"f16", DType::f16, [](double v) -> uint32_t { return f16_bits_from_double(v); },
     [](uint32_t b) { return f16_bits_to_double(static_cast<uint16_t>(b)); },
     [](double v) -> uint32_t { return f16_bits_from_double_reference(v); },
     [](uint32_t b) { return f16_bits_to_double_reference(static_cast<uint16_t>(b)); }, 16, 10, 0x7bff, true,
     2 * 1023},
    {"bf16", DType::bf16, [](double v) -> uint32_t { return bf16_bits_from_double(v); },
     [](uint32_t b) { return bf16_bits_to_double(static_cast<uint16_t>(b)); },
     [](double v) -> uint32_t { return bf16_bits_from_double_reference(v); },
     [](uint32_t b) { return bf16_bits_to_double_reference(static_cast<uint16_t>(b)); }, 16, 7, 0x7f7f, true,
     2 * 127},
    {"f8e4m3", DType::f8e4m3, [](double v) -> uint32_t { return f8e4m3_bits_from_double(v); },
     [](uint32_t b) { return f8e4m3_bits_to_double(static_cast<uint8_t>(b)); },
     [](double v) -> uint32_t { return f8e4m3_bits_from_double_reference(v); },
     [](uint32_t b) { return f8e4m3_bits_to_double_reference(static_cast<uint8_t>(b)); }, 8, 3, 0x7e, false, 2},
    {"f8e5m2", DType::f8e5m2, [](double v) -> uint32_t { return f8e5m2_bits_from_double(v); },
     [](uint32_t b) { return f8e5m2_bits_to_double(static_cast<uint8_t>(b)); },
     [](double v) -> uint32_t { return f8e5m2_bits_from_double_reference(v); },
     [](uint32_t b) { return f8e5m2_bits_to_double_reference(static_cast<uint8_t>(b)); }, 8, 2, 0x7b, true,
     2 * 3},
};

uint32_t sign_bit(const Format& f) { return 1u << (f.total_bits - 1); }

// Counts failures and reports only the first few, so that a broken encoder does not print 65536 lines.
class FailureLog {
 public:
  explicit FailureLog(const char* what) : what_(what) {}
  ~FailureLog() { EXPECT_EQ(count_, 0) << what_ << ": " << count_ << " failures"; }
  void fail(const std::string& detail) {
    if (count_++ < 5) ADD_FAILURE() << what_ << ": " << detail;
  }

 private:
  const char* what_;
  int count_ = 0;
};

std::string hex(uint32_t bits) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%x", bits);
  return buffer;
}

TEST(Dtype, NamesSizesAndKinds) {
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto d = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_FALSE(parse_dtype("f64").has_value());
  EXPECT_FALSE(parse_dtype("F32").has_value());
  EXPECT_EQ(dtype_name(DType::boolean), "bool");
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f8e5m2), 1u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_TRUE(dtype_is_float(DType::f8e4m3));
  EXPECT_FALSE(dtype_is_float(DType::i32));
  EXPECT_TRUE(dtype_is_integer(DType::i64));
  EXPECT_FALSE(dtype_is_integer(DType::boolean));
  EXPECT_FALSE(dtype_is_float(DType::boolean));
}

TEST(Dtype, KnownTableValues) {
  EXPECT_EQ(dtype_max_finite(DType::f16), 65504.0);
  EXPECT_EQ(dtype_max_finite(DType::bf16), 3.3895313892515355e38);
  EXPECT_EQ(dtype_max_finite(DType::f8e4m3), 448.0);
  EXPECT_EQ(dtype_max_finite(DType::f8e5m2), 57344.0);
  EXPECT_EQ(dtype_max_finite(DType::f32), static_cast<double>(std::numeric_limits<float>::max()));

  EXPECT_EQ(f16_bits_to_double(0x7bff), 65504.0);
  EXPECT_EQ(f16_bits_to_double(0x0001), std::ldexp(1.0, -24));  // min subnormal
  EXPECT_EQ(f16_bits_to_double(0x0400), std::ldexp(1.0, -14));  // min normal
  EXPECT_EQ(f16_bits_from_double(1.0), 0x3c00);
  EXPECT_EQ(f16_bits_from_double(-2.0), 0xc000);
  EXPECT_EQ(bf16_bits_to_double(0x7f7f), 3.3895313892515355e38);
  EXPECT_EQ(bf16_bits_to_double(0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(bf16_bits_from_double(1.0), 0x3f80);

  EXPECT_EQ(f8e4m3_bits_to_double(0x7e), 448.0);
  EXPECT_EQ(f8e4m3_bits_to_double(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(f8e4m3_bits_to_double(0x08), std::ldexp(1.0, -6));
  EXPECT_EQ(f8e4m3_bits_from_double(1.0), 0x38);
  EXPECT_EQ(f8e4m3_bits_from_double(464.0), 0x7e);  // the midpoint to 480 ties down to 448
  EXPECT_TRUE(std::isnan(f8e4m3_bits_to_double(f8e4m3_bits_from_double(480.0))));  // no 480: overflow is NaN
  EXPECT_TRUE(std::isnan(f8e4m3_bits_to_double(f8e4m3_bits_from_double(464.5))));
  EXPECT_EQ(f8e4m3_bits_from_double(kInf), 0x7f);  // no infinities: inf becomes NaN
  EXPECT_EQ(f8e4m3_bits_from_double(-kInf), 0xff);
  EXPECT_EQ(f8e4m3_bits_from_double(-448.0), 0xfe);

  EXPECT_EQ(f8e5m2_bits_to_double(0x7b), 57344.0);
  EXPECT_EQ(f8e5m2_bits_to_double(0x01), std::ldexp(1.0, -16));
  EXPECT_EQ(f8e5m2_bits_to_double(0x7c), kInf);
  EXPECT_EQ(f8e5m2_bits_from_double(1.0), 0x3c);
  EXPECT_EQ(f8e5m2_bits_from_double(61440.0), 0x7c);  // midpoint above max ties to inf
  EXPECT_EQ(f8e5m2_bits_from_double(61439.0), 0x7b);
  EXPECT_EQ(f8e5m2_bits_from_double(1e6), 0x7c);
  EXPECT_EQ(f8e5m2_bits_from_double(-1e6), 0xfc);

  // f16 overflow: 65520 is the midpoint between 65504 and the next would-be value 65536.
  EXPECT_EQ(f16_bits_from_double(65520.0), 0x7c00);
  EXPECT_EQ(f16_bits_from_double(std::nextafter(65520.0, 0.0)), 0x7bff);
  const double bf16_max = 3.3895313892515355e38, bf16_half_ulp = std::ldexp(1.0, 119);
  EXPECT_EQ(bf16_bits_from_double(bf16_max + bf16_half_ulp), 0x7f80);
  EXPECT_EQ(bf16_bits_from_double(std::nextafter(bf16_max + bf16_half_ulp, 0.0)), 0x7f7f);

  // Underflow keeps the sign.
  EXPECT_EQ(f16_bits_from_double(-1e-30), 0x8000);
  EXPECT_EQ(f8e4m3_bits_from_double(-1e-30), 0x80);
}

// Every bit pattern decodes to a value that encodes back to the same pattern; NaN patterns stay NaN and are
// exactly the ones the format defines.
TEST(Dtype, EveryBitPatternRoundTrips) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    FailureLog log("round trip");
    int nans = 0, infinities = 0;
    for (uint32_t bits = 0; bits < (1u << f.total_bits); ++bits) {
      const double v = f.decode(bits);
      if (std::isnan(v)) {
        ++nans;
        if (!std::isnan(f.decode(f.encode(v)))) log.fail(hex(bits) + ": NaN does not stay NaN");
        continue;
      }
      if (std::isinf(v)) ++infinities;
      if (f.encode(v) != bits) log.fail(hex(bits) + " -> " + std::to_string(v) + " -> " + hex(f.encode(v)));
      if (round_to_dtype(v, f.dtype) != v || std::signbit(round_to_dtype(v, f.dtype)) != std::signbit(v)) {
        log.fail(hex(bits) + ": round_to_dtype changes " + std::to_string(v));
      }
    }
    EXPECT_EQ(nans, f.nan_patterns);
    EXPECT_EQ(infinities, f.has_infinity ? 2 : 0);
  }
}

// Positive finite patterns are ordered like their values, and the pattern after the largest finite one is
// inf (IEEE formats) or NaN (e4m3).
TEST(Dtype, PositivePatternsAreOrdered) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    FailureLog log("order");
    for (uint32_t bits = 0; bits < f.max_finite_bits; ++bits) {
      if (!(f.decode(bits) < f.decode(bits + 1))) log.fail(hex(bits) + " is not below the next pattern");
    }
    EXPECT_EQ(f.decode(f.max_finite_bits), dtype_max_finite(f.dtype));
    const double after = f.decode(f.max_finite_bits + 1);
    EXPECT_TRUE(f.has_infinity ? after == kInf : std::isnan(after));
  }
}

// Between each pair of neighbours (including 0 and the smallest subnormal): the exact midpoint rounds to the
// neighbour with an even last bit; one double step below or above it rounds to the nearer neighbour. Checked
// for both signs.
TEST(Dtype, MidpointsRoundToEven) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    FailureLog log("midpoint");
    for (uint32_t lo = 0; lo < f.max_finite_bits; ++lo) {
      const uint32_t hi = lo + 1;
      const double mid = (f.decode(lo) + f.decode(hi)) / 2;  // exact: the formats are far narrower than double
      const uint32_t even = lo % 2 == 0 ? lo : hi;
      if (f.encode(mid) != even) log.fail("midpoint above " + hex(lo) + " gave " + hex(f.encode(mid)));
      if (f.encode(std::nextafter(mid, 0.0)) != lo) log.fail("just below the midpoint above " + hex(lo));
      if (f.encode(std::nextafter(mid, kInf)) != hi) log.fail("just above the midpoint above " + hex(lo));
      if (f.encode(-mid) != (even | sign_bit(f))) log.fail("negative midpoint above " + hex(lo));
      if (f.encode(-std::nextafter(mid, kInf)) != (hi | sign_bit(f))) log.fail("negative, above " + hex(lo));
    }
  }
}

// Above the largest finite value: values below the next midpoint round to max; from it on, IEEE formats give
// inf and e4m3 gives NaN. (e4m3's midpoint 464 itself ties to the even 448.)
TEST(Dtype, OverflowFollowsTheFormat) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    const double max = f.decode(f.max_finite_bits);
    const double below_max = f.decode(f.max_finite_bits - 1);
    const double half_ulp = (max - below_max) / 2;  // the top binade's ulp, which the next value would use
    EXPECT_EQ(f.encode(max + half_ulp / 2), f.max_finite_bits);
    const double beyond = f.decode(f.encode(max + half_ulp * 1.5));
    const double far = f.decode(f.encode(1e300));
    if (f.has_infinity) {
      EXPECT_EQ(beyond, kInf);
      EXPECT_EQ(far, kInf);
      EXPECT_EQ(f.decode(f.encode(-1e300)), -kInf);
    } else {
      EXPECT_TRUE(std::isnan(beyond));
      EXPECT_TRUE(std::isnan(far));
    }
  }
}

// _Float16 is a compiler extension: GCC 12 has it on x86-64, clang 14 (the sanitizer build) does not, so the
// comparison runs in the release suite.
#ifdef __FLT16_MANT_DIG__
uint16_t compiler_f16_bits(float x) {
  const auto h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

uint16_t compiler_f16_bits_from_double(double x) {
  const auto h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

void check_f16_against_compiler(float x, FailureLog& log) {
  const uint16_t ours = f16_bits_from_double(x);
  if (std::isnan(x)) {
    if (!std::isnan(f16_bits_to_double(ours))) log.fail("NaN input");
    return;
  }
  if (ours != compiler_f16_bits(x)) {
    log.fail(std::to_string(x) + ": kiln " + hex(ours) + ", _Float16 " + hex(compiler_f16_bits(x)));
  }
}

// The compiler's float -> _Float16 conversion (IEEE, RNE) over a stride through all floats and over every
// f16 midpoint and its float neighbours.
TEST(Dtype, F16MatchesCompilerFloat16) {
  FailureLog log("f16 vs _Float16");
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) check_f16_against_compiler(std::bit_cast<float>(uint32_t(u)), log);
  for (uint32_t lo = 0; lo < 0x7c00; ++lo) {
    const auto mid = static_cast<float>((f16_bits_to_double(lo) + f16_bits_to_double(lo + 1)) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      check_f16_against_compiler(x, log);
      check_f16_against_compiler(-x, log);
    }
  }
  // Doubles too: one rounding straight from double, never through float (which could land on a midpoint).
  uint64_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double x =
        std::ldexp(1.0 + static_cast<double>(state >> 12) / 4503599627370496.0, static_cast<int>(state % 50) - 30) *
        ((state >> 11) & 1 ? -1 : 1);
    if (f16_bits_from_double(x) != compiler_f16_bits_from_double(x)) log.fail("double " + std::to_string(x));
  }
}
#endif  // __FLT16_MANT_DIG__

// The float-bits formula frameworks use for float -> bf16: add 0x7fff plus the lowest kept bit, truncate.
uint16_t bf16_bits_by_formula(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void check_bf16_against_formula(float x, FailureLog& log) {
  const uint16_t ours = bf16_bits_from_double(x);
  if (std::isnan(x)) {
    if (!std::isnan(bf16_bits_to_double(ours))) log.fail("NaN input");
    return;
  }
  if (ours != bf16_bits_by_formula(x)) {
    log.fail(std::to_string(x) + ": kiln " + hex(ours) + ", formula " + hex(bf16_bits_by_formula(x)));
  }
}

TEST(Dtype, Bf16MatchesFloatBitsFormula) {
  FailureLog log("bf16 vs formula");
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) check_bf16_against_formula(std::bit_cast<float>(uint32_t(u)), log);
  // Every bf16 midpoint is a float (low half 0x8000); check it and its float neighbours, both signs.
  for (uint32_t hi = 0; hi < 0x7f80; ++hi) {
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u}) {
      const uint32_t u = (hi << 16) | low;
      check_bf16_against_formula(std::bit_cast<float>(u), log);
      check_bf16_against_formula(std::bit_cast<float>(u | 0x80000000u), log);
    }
  }
}

TEST(Dtype, F32StoreRoundsToNearestEven) {
  const double ulp = std::ldexp(1.0, -23);  // at 1.0
  EXPECT_EQ(round_to_dtype(1.0 + ulp / 2, DType::f32), 1.0);
  EXPECT_EQ(round_to_dtype(1.0 + 3 * ulp / 2, DType::f32), 1.0 + 2 * ulp);
  EXPECT_EQ(round_to_dtype(std::nextafter(1.0 + ulp / 2, 2.0), DType::f32), 1.0 + ulp);
  EXPECT_EQ(round_to_dtype(0.1, DType::f32), static_cast<double>(0.1f));
}

TEST(Dtype, IntegerStoresTruncateAndSaturate) {
  Tensor i32(DType::i32, {1});
  Tensor i64(DType::i64, {1});
  const auto as_i32 = [&](double v) {
    i32.set(0, v);
    return i32.get_int(0);
  };
  const auto as_i64 = [&](double v) {
    i64.set(0, v);
    return i64.get_int(0);
  };
  EXPECT_EQ(as_i32(2.9), 2);
  EXPECT_EQ(as_i32(-2.9), -2);
  EXPECT_EQ(as_i32(-0.5), 0);
  EXPECT_EQ(as_i32(3e9), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(as_i32(-3e9), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(as_i32(kInf), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(as_i32(-kInf), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(as_i32(NAN), 0);
  EXPECT_EQ(as_i32(2147483647.0), 2147483647);
  EXPECT_EQ(as_i64(1e19), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(as_i64(-1e19), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(as_i64(std::ldexp(1.0, 53)), int64_t{1} << 53);
  EXPECT_EQ(as_i64(-7.99), -7);
  EXPECT_EQ(as_i64(NAN), 0);
  EXPECT_EQ(round_to_dtype(-7.99, DType::i64), -7.0);
  // Exact integer access bypasses double: 2^53 + 1 survives.
  i64.set_int(0, (int64_t{1} << 53) + 1);
  EXPECT_EQ(i64.get_int(0), (int64_t{1} << 53) + 1);
}

TEST(Dtype, BoolStoresNonzeroAsTrue) {
  EXPECT_EQ(round_to_dtype(0.0, DType::boolean), 0.0);
  EXPECT_EQ(round_to_dtype(-0.0, DType::boolean), 0.0);
  EXPECT_EQ(round_to_dtype(0.25, DType::boolean), 1.0);
  EXPECT_EQ(round_to_dtype(-3.0, DType::boolean), 1.0);
  EXPECT_EQ(round_to_dtype(NAN, DType::boolean), 1.0);  // NaN != 0, as bool(float('nan')) in Python
  Tensor b(DType::boolean, {2});
  b.set(0, 5.0);
  EXPECT_EQ(std::to_integer<int>(b.data()[0]), 1);  // stored as the byte 1, not 5
  EXPECT_EQ(b.get_int(1), 0);
}

// Tensors hold storage bytes: a bf16 tensor stores 2 bytes per element, rounded on set.
TEST(Dtype, TensorStoresRoundedBits) {
  Tensor t(DType::bf16, {3});
  EXPECT_EQ(t.byte_size(), 6u);
  t.set(0, 1.0 + std::ldexp(1.0, -8));      // tie between 1 and 1 + 2^-7: even is 1
  t.set(1, 1.0 + 3 * std::ldexp(1.0, -8));  // tie between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6
  t.set(2, -1.0);
  EXPECT_EQ(t.get(0), 1.0);
  EXPECT_EQ(t.get(1), 1.0 + std::ldexp(1.0, -6));
  uint16_t bits;
  std::memcpy(&bits, t.data() + 4, 2);
  EXPECT_EQ(bits, 0xbf80);
  const double values[] = {0.1, 70000.0};
  const Tensor h = Tensor::from_f64(DType::f16, {2}, values);
  EXPECT_EQ(h.get(0), f16_bits_to_double(f16_bits_from_double(0.1)));
  EXPECT_EQ(h.get(1), kInf);
}

// ---- fast conversions against the reference ----

uint64_t double_bits(double x) { return std::bit_cast<uint64_t>(x); }

std::string describe(double x) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a (bits 0x%016llx)", x, static_cast<unsigned long long>(double_bits(x)));
  return buffer;
}

// Checks one double through the fast encoder against the reference; returns false on a mismatch.
bool encode_agrees(const Format& f, double x, FailureLog& log) {
  const uint32_t fast = f.encode(x), reference = f.encode_reference(x);
  if (fast == reference) return true;
  log.fail(describe(x) + ": fast " + hex(fast) + ", reference " + hex(reference));
  return false;
}

// x, -x and their neighbouring doubles on both sides.
void check_encode_around(const Format& f, double x, FailureLog& log) {
  for (double y : {x, std::nextafter(x, -kInf), std::nextafter(x, kInf)}) {
    encode_agrees(f, y, log);
    encode_agrees(f, -y, log);
  }
}

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// Decoding: every pattern gives exactly the reference's double, NaN bits included.
TEST(Dtype, FastDecodeMatchesReferenceOnEveryPattern) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    FailureLog log("decode vs reference");
    for (uint32_t bits = 0; bits < (1u << f.total_bits); ++bits) {
      const double fast = f.decode(bits), reference = f.decode_reference(bits);
      if (double_bits(fast) != double_bits(reference)) {
        log.fail(hex(bits) + ": fast " + describe(fast) + ", reference " + describe(reference));
      }
    }
  }
}

// Encoding every representable value, every midpoint between neighbours (0 and the smallest subnormal, the
// largest subnormal and the smallest normal, the largest finite value and the would-be next one included),
// each one double step either side, both signs.
TEST(Dtype, FastEncodeMatchesReferenceOnValuesAndMidpoints) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    FailureLog log("encode vs reference");
    for (uint32_t lo = 0; lo <= f.max_finite_bits; ++lo) {
      const double value = f.decode(lo);
      check_encode_around(f, value, log);
      const double next = lo < f.max_finite_bits ? f.decode(lo + 1) : 2 * value - f.decode(lo - 1);
      check_encode_around(f, (value + next) / 2, log);  // exact: the formats are far narrower than double
    }
  }
}

// Random doubles: uniform over the whole bit space (every exponent, NaN payloads, double subnormals), and
// uniform in exponent over the format's range and a margin beyond it either side, with random mantissas and
// with mantissas whose dropped bits are a tie, or a tie plus or minus one.
TEST(Dtype, FastEncodeMatchesReferenceOnRandomDoubles) {
  constexpr int kPerKind = 1 << 20;
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    FailureLog log("encode vs reference");
    SplitMix64 random{static_cast<uint64_t>(f.total_bits * 31 + f.mantissa_bits)};
    const int max_exponent = std::ilogb(dtype_max_finite(f.dtype));
    const int min_exponent = std::ilogb(f.decode(1));  // the smallest subnormal's
    const int span = max_exponent - min_exponent + 1 + 2 * 8;
    const int dropped = 52 - f.mantissa_bits;
    const uint64_t tie = uint64_t{1} << (dropped - 1);
    for (int i = 0; i < kPerKind; ++i) encode_agrees(f, std::bit_cast<double>(random.next()), log);
    for (int i = 0; i < 3 * kPerKind; ++i) {
      const uint64_t r = random.next();
      const int exponent = min_exponent - 8 + static_cast<int>((r >> 53) % span);
      uint64_t mantissa = random.next() & ((uint64_t{1} << 52) - 1);
      switch (i % 3) {
        case 0: break;
        case 1: mantissa = (mantissa & ~((tie << 1) - 1)) | tie; break;  // the dropped bits are exactly a tie
        case 2: mantissa = (mantissa & ~((tie << 1) - 1)) | (tie + ((r & 1) ? 1 : -1)); break;
      }
      const uint64_t sign = (r & 2) ? uint64_t{1} << 63 : 0;
      const double x = std::bit_cast<double>(sign | (static_cast<uint64_t>(exponent + 1023) << 52) | mantissa);
      encode_agrees(f, x, log);
    }
  }
}

// The edges: zeros, infinities, NaNs of every kind, double subnormals and the double range's ends, every power
// of two a double has, and the underflow and overflow thresholds of the format.
TEST(Dtype, FastEncodeMatchesReferenceOnSpecialValues) {
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  const double specials[] = {
      0.0,
      kInf,
      kNaN,
      std::numeric_limits<double>::signaling_NaN(),
      std::bit_cast<double>(uint64_t{0x7ff0000000000001}),  // smallest payload
      std::bit_cast<double>(uint64_t{0x7fffffffffffffff}),  // largest payload
      std::bit_cast<double>(uint64_t{0x7ff8000000000123}),
      std::numeric_limits<double>::denorm_min(),
      std::numeric_limits<double>::min(),
      std::nextafter(std::numeric_limits<double>::min(), 0.0),  // largest double subnormal
      std::numeric_limits<double>::max(),
      1.0,
  };
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    FailureLog log("encode vs reference");
    for (double x : specials) check_encode_around(f, x, log);
    for (int e = -1074; e <= 1023; ++e) check_encode_around(f, std::ldexp(1.0, e), log);
    const double min_subnormal = f.decode(1), min_normal = f.decode(1u << f.mantissa_bits);
    const double max = dtype_max_finite(f.dtype), half_ulp_at_max = (max - f.decode(f.max_finite_bits - 1)) / 2;
    for (double x : {min_subnormal / 2, min_subnormal / 4, min_subnormal * 0.75, min_subnormal * 1.5,
                     min_normal - min_subnormal / 2, min_normal, max, max + half_ulp_at_max, max + 2 * half_ulp_at_max,
                     max + 3 * half_ulp_at_max, 2 * max, 1e300}) {
      check_encode_around(f, x, log);
    }
    // Exact outcomes, not just agreement: signed zero and NaN/inf bits.
    EXPECT_EQ(f.encode(0.0), 0u);
    EXPECT_EQ(f.encode(-0.0), sign_bit(f));
    EXPECT_EQ(f.encode(-std::numeric_limits<double>::denorm_min()), sign_bit(f));
    EXPECT_EQ(f.encode(min_subnormal / 2), 0u);  // the tie goes to the even 0
    EXPECT_EQ(f.encode(std::nextafter(min_subnormal / 2, 1.0)), 1u);
    EXPECT_TRUE(std::isnan(f.decode(f.encode(-kNaN))));
    EXPECT_EQ(f.encode(-kNaN) & sign_bit(f), sign_bit(f));
    EXPECT_EQ(f.encode(kInf), f.max_finite_bits + 1);  // inf, or e4m3's NaN, follows the largest finite pattern
  }
}

// ---- bulk conversions ----

std::vector<double> awkward_values() {
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> values = {0.0, -0.0, 1.0, -1.0, 0.1, -2.5, 3.75, 448.0, 464.0, 465.0, 57344.0, 61440.0,
                                65504.0, 65520.0, 1e6, -1e6, 3e9, -3e9, 1e19, -1e19, 1e39, 1e300, -1e300, kInf,
                                -kInf, kNaN, -kNaN, 1e-8, -1e-30, 5e-324, 2147483647.0, 2147483648.0, -7.99,
                                static_cast<double>(std::numeric_limits<float>::max()) + 0x1p103};
  SplitMix64 random{7};
  for (int i = 0; i < 1000; ++i) {
    const uint64_t r = random.next();
    values.push_back(std::ldexp(static_cast<double>(r >> 11) * 0x1p-53 - 0.5, static_cast<int>(r % 64) - 32));
  }
  return values;
}

// encode_elements / decode_elements give the bytes and values of store_element / load_element, for every dtype,
// counts around nothing and odd sizes, from and to unaligned addresses, touching nothing past the end.
TEST(Dtype, BulkConversionsMatchElementwise) {
  const std::vector<double> values = awkward_values();
  constexpr unsigned char kGuard = 0xa5;
  constexpr size_t kGuardBytes = 16;
  for (int d = 0; d < kDTypeCount; ++d) {
    const auto dtype = static_cast<DType>(d);
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const size_t size = dtype_size(dtype);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{17}, static_cast<int64_t>(values.size())}) {
      SCOPED_TRACE(n);
      std::vector<unsigned char> bulk(1 + n * size + kGuardBytes, kGuard), single(n * size);
      encode_elements(dtype, values.data(), bulk.data() + 1, n);  // +1: unaligned
      for (int64_t i = 0; i < n; ++i) store_element(dtype, values[i], single.data() + i * size);
      EXPECT_EQ(bulk[0], kGuard);
      EXPECT_TRUE(std::equal(single.begin(), single.end(), bulk.begin() + 1)) << "encoded bytes differ";
      for (size_t i = 1 + n * size; i < bulk.size(); ++i) ASSERT_EQ(bulk[i], kGuard) << "wrote past the end";

      std::vector<double> decoded(n + 2, -123.0);
      decode_elements(dtype, bulk.data() + 1, decoded.data(), n);
      FailureLog log("decode_elements vs load_element");
      for (int64_t i = 0; i < n; ++i) {
        const double one = load_element(dtype, single.data() + i * size);
        if (double_bits(decoded[i]) != double_bits(one)) log.fail(std::to_string(i) + ": " + describe(decoded[i]));
      }
      EXPECT_EQ(decoded[n], -123.0);
      EXPECT_EQ(decoded[n + 1], -123.0);
    }
  }
}

// Tensor::to_f64 and from_f64 (which use the bulk forms) agree with get and set element by element.
TEST(Dtype, TensorBulkAccessMatchesElementAccess) {
  const std::vector<double> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  for (int d = 0; d < kDTypeCount; ++d) {
    const auto dtype = static_cast<DType>(d);
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor bulk = Tensor::from_f64(dtype, {n}, values);
    Tensor single(dtype, {n});
    for (int64_t i = 0; i < n; ++i) single.set(i, values[i]);
    EXPECT_TRUE(bulk.bitwise_equal(single));
    const std::vector<double> out = bulk.to_f64();
    ASSERT_EQ(static_cast<int64_t>(out.size()), n);
    FailureLog log("to_f64 vs get");
    for (int64_t i = 0; i < n; ++i) {
      if (double_bits(out[i]) != double_bits(bulk.get(i))) log.fail(std::to_string(i));
    }
  }
}

// ---- f32 stores ----

// Doubles beyond float's range round like any other value (no undefined cast): below FLT_MAX plus half its
// ulp to FLT_MAX, from it (a tie, whose even neighbour is 2^128) on to inf. Subnormal results round to even.
TEST(Dtype, F32StoreIsDefinedBeyondTheRange) {
  const double max = std::numeric_limits<float>::max();
  const double threshold = max + std::ldexp(1.0, 103);
  const double min_subnormal = std::ldexp(1.0, -149);
  const auto f32 = [](double v) {
    const double one = round_to_dtype(v, DType::f32);
    double bulk_value;
    float stored;
    encode_elements(DType::f32, &v, &stored, 1);
    decode_elements(DType::f32, &stored, &bulk_value, 1);
    EXPECT_EQ(double_bits(one), double_bits(bulk_value)) << describe(v);
    return one;
  };
  for (double sign : {1.0, -1.0}) {
    EXPECT_EQ(f32(sign * max), sign * max);
    EXPECT_EQ(f32(sign * std::nextafter(max, kInf)), sign * max);
    EXPECT_EQ(f32(sign * std::nextafter(threshold, 0.0)), sign * max);
    EXPECT_EQ(f32(sign * threshold), sign * kInf);
    EXPECT_EQ(f32(sign * std::ldexp(1.0, 128)), sign * kInf);
    EXPECT_EQ(f32(sign * std::numeric_limits<double>::max()), sign * kInf);
    EXPECT_EQ(f32(sign * kInf), sign * kInf);
    EXPECT_EQ(f32(sign * min_subnormal), sign * min_subnormal);
    EXPECT_EQ(f32(sign * min_subnormal / 2), 0.0);                       // tie: to the even 0...
    EXPECT_EQ(std::signbit(f32(sign * min_subnormal / 2)), sign < 0);  // ...keeping the sign
    EXPECT_EQ(f32(sign * std::nextafter(min_subnormal / 2, 1.0)), sign * min_subnormal);
    EXPECT_EQ(f32(sign * 1.5 * min_subnormal), sign * 2 * min_subnormal);  // tie between 1 and 2 quanta
    EXPECT_EQ(f32(sign * 2.5 * min_subnormal), sign * 2 * min_subnormal);  // tie between 2 and 3 quanta
    const double min_normal = std::numeric_limits<float>::min();
    EXPECT_EQ(f32(sign * (min_normal - min_subnormal / 2)), sign * min_normal);  // tie: the even one is normal
    EXPECT_EQ(f32(sign * std::nextafter(min_normal - min_subnormal / 2, 0.0)), sign * (min_normal - min_subnormal));
  }
  EXPECT_TRUE(std::isnan(f32(std::numeric_limits<double>::quiet_NaN())));
}

// ---- integer access ----

TEST(Dtype, SetIntSaturatesAndRoundsOnce) {
  constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max(), kI32Min = std::numeric_limits<int32_t>::min();
  constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max(), kI64Min = std::numeric_limits<int64_t>::min();
  Tensor i32(DType::i32, {1});
  const auto via_i32 = [&](int64_t v) {
    i32.set_int(0, v);
    return i32.get_int(0);
  };
  EXPECT_EQ(via_i32(kI32Max), kI32Max);
  EXPECT_EQ(via_i32(kI32Min), kI32Min);
  EXPECT_EQ(via_i32(kI32Max + 1), kI32Max);  // a plain cast would wrap to kI32Min
  EXPECT_EQ(via_i32(kI32Min - 1), kI32Min);
  EXPECT_EQ(via_i32(int64_t{1} << 32), kI32Max);  // would wrap to 0
  EXPECT_EQ(via_i32(kI64Max), kI32Max);
  EXPECT_EQ(via_i32(kI64Min), kI32Min);
  EXPECT_EQ(via_i32(-5), -5);

  Tensor i64(DType::i64, {1});
  i64.set_int(0, kI64Min);
  EXPECT_EQ(i64.get_int(0), kI64Min);
  Tensor b(DType::boolean, {1});
  b.set_int(0, kI64Min);
  EXPECT_EQ(b.get_int(0), 1);

  // Float tensors round the integer itself once. 2^62 + 2^54 + 1 lies just above the bf16 midpoint 2^62 + 2^54,
  // so it rounds up; converted to double first it would become that midpoint and tie down to 2^62.
  Tensor bf(DType::bf16, {1});
  bf.set_int(0, (int64_t{1} << 62) + (int64_t{1} << 54) + 1);
  EXPECT_EQ(bf.get(0), std::ldexp(1.0, 62) + std::ldexp(1.0, 55));
  bf.set_int(0, -((int64_t{1} << 62) + (int64_t{1} << 54) + 1));
  EXPECT_EQ(bf.get(0), -(std::ldexp(1.0, 62) + std::ldexp(1.0, 55)));
  bf.set_int(0, (int64_t{1} << 62) + (int64_t{1} << 54));  // an exact tie still goes to the even 2^62
  EXPECT_EQ(bf.get(0), std::ldexp(1.0, 62));
  Tensor f(DType::f32, {1});
  f.set_int(0, (int64_t{1} << 62) + (int64_t{1} << 38) + 1);  // the same for f32's midpoint 2^62 + 2^38
  EXPECT_EQ(f.get(0), std::ldexp(1.0, 62) + std::ldexp(1.0, 39));
  f.set_int(0, kI64Min);
  EXPECT_EQ(f.get(0), -std::ldexp(1.0, 63));
  f.set_int(0, kI64Max);
  EXPECT_EQ(f.get(0), std::ldexp(1.0, 63));
  f.set_int(0, 16777217);  // 2^24 + 1: a tie in f32, to the even 2^24
  EXPECT_EQ(f.get(0), 16777216.0);

  // get_int on a float tensor truncates and saturates like an i64 store (a plain cast is UB out of range).
  for (const auto& [value, expected] : std::initializer_list<std::pair<double, int64_t>>{
           {-3.7, -3}, {kInf, kI64Max}, {-kInf, kI64Min}, {1e30, kI64Max}, {-1e30, kI64Min},
           {std::numeric_limits<double>::quiet_NaN(), 0}}) {
    f.set(0, value);
    EXPECT_EQ(f.get_int(0), expected) << value;
  }
  Tensor h(DType::f16, {1});
  h.set(0, 70000.0);  // inf in f16
  EXPECT_EQ(h.get_int(0), kI64Max);
}

// with_shape keeps dtype and bytes under another shape of as many elements; an empty tensor (no bytes at all)
// reshapes too (the ONNX importer's reshape of an empty constant hit memcpy with a null source, fuzz_onnx).
TEST(Tensor, WithShapeKeepsTheBytes) {
  Tensor t(DType::bf16, {2, 3});
  for (int64_t i = 0; i < 6; ++i) t.set(i, static_cast<double>(i) - 2.5);
  const Tensor r = t.with_shape({3, 2});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.dtype(), DType::bf16);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(r.get(i), t.get(i));
  const Tensor empty(DType::f32, {0, 4});
  const Tensor flat = empty.with_shape({0});
  EXPECT_EQ(flat.numel(), 0);
  EXPECT_EQ(flat.shape(), (Shape{0}));
  EXPECT_DEATH(t.with_shape({4}), "has 4 elements, not 6");
}

}  // namespace
}  // namespace kiln
