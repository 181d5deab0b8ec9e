#include "ir/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "util/check.h"

namespace kiln {
namespace {

// A binary floating format with an implicit leading bit.
struct FloatFormat {
  int exponent_bits;
  int mantissa_bits;
  bool has_infinity;   // false: the all-ones exponent holds normal values, except the NaN pattern
  uint32_t nan_bits;   // canonical quiet NaN, positive
  double max_finite;
};

constexpr FloatFormat kF16{5, 10, true, 0x7e00, 65504.0};
constexpr FloatFormat kBF16{8, 7, true, 0x7fc0, 3.38953138925153547590e38};
constexpr FloatFormat kF8E4M3{4, 3, false, 0x7f, 448.0};
constexpr FloatFormat kF8E5M2{5, 2, true, 0x7e, 57344.0};

int bias_of(const FloatFormat& f) { return (1 << (f.exponent_bits - 1)) - 1; }

// The generic conversions: frexp/ldexp/nearbyint on the format description. Slow (tens of ns per element) but
// plainly right; the fast paths below are tested against them bit for bit.
uint32_t encode_reference(const FloatFormat& f, double value) {
  const uint32_t sign_bit = 1u << (f.exponent_bits + f.mantissa_bits);
  const uint32_t sign = std::signbit(value) ? sign_bit : 0u;
  if (std::isnan(value)) return f.nan_bits | sign;
  const uint32_t inf_bits = ((1u << f.exponent_bits) - 1) << f.mantissa_bits;
  const uint32_t overflow_bits = f.has_infinity ? inf_bits : f.nan_bits;
  double a = std::fabs(value);
  if (std::isinf(a)) return overflow_bits | sign;
  if (a == 0.0) return sign;

  const int bias = bias_of(f);
  const int min_exponent = 1 - bias;  // exponent of the smallest normal
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  int exponent = e2 - 1;  // a = 1.x * 2^exponent
  if (exponent < min_exponent) exponent = min_exponent;  // subnormal: fixed quantum
  // Scale so that one unit in the last place is 1, round to nearest even, scale back (all exact in double).
  const double quantum_scale = std::ldexp(1.0, f.mantissa_bits - exponent);
  const double rounded = std::nearbyint(a * quantum_scale) / quantum_scale;
  if (rounded > f.max_finite) return overflow_bits | sign;
  if (rounded == 0.0) return sign;

  std::frexp(rounded, &e2);
  exponent = e2 - 1;
  if (exponent < min_exponent) {  // subnormal
    const auto mantissa = static_cast<uint32_t>(std::ldexp(rounded, f.mantissa_bits - min_exponent));
    return sign | mantissa;
  }
  const auto exponent_field = static_cast<uint32_t>(exponent + bias);
  const double fraction = std::ldexp(rounded, -exponent) - 1.0;  // in [0, 1)
  const auto mantissa = static_cast<uint32_t>(std::ldexp(fraction, f.mantissa_bits));
  return sign | (exponent_field << f.mantissa_bits) | mantissa;
}

double decode_reference(const FloatFormat& f, uint32_t bits) {
  const uint32_t sign_bit = 1u << (f.exponent_bits + f.mantissa_bits);
  const double sign = (bits & sign_bit) ? -1.0 : 1.0;
  const uint32_t exponent_field = (bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const uint32_t max_field = (1u << f.exponent_bits) - 1;
  const int bias = bias_of(f);
  if (f.has_infinity && exponent_field == max_field) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (!f.has_infinity && exponent_field == max_field && mantissa == (1u << f.mantissa_bits) - 1) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent_field == 0) return sign * std::ldexp(static_cast<double>(mantissa), 1 - bias - f.mantissa_bits);
  const double significand = 1.0 + std::ldexp(static_cast<double>(mantissa), -f.mantissa_bits);
  return sign * std::ldexp(significand, static_cast<int>(exponent_field) - bias);
}

// Fast encode: integer arithmetic on the IEEE double's bits, rounding the dropped mantissa bits to nearest
// even. Writing the normal case as the target's biased exponent above the double's 52 mantissa bits lets a
// mantissa that rounds up carry into the exponent, and a carry past the largest finite pattern show as
// overflow, without special cases.
template <const FloatFormat& F>
uint32_t encode_fast(double value) {
  constexpr int kBias = (1 << (F.exponent_bits - 1)) - 1;
  constexpr int kDroppedBits = 52 - F.mantissa_bits;
  constexpr uint32_t kSignBit = 1u << (F.exponent_bits + F.mantissa_bits);
  constexpr uint32_t kInfBits = ((1u << F.exponent_bits) - 1) << F.mantissa_bits;
  constexpr uint32_t kOverflowBits = F.has_infinity ? kInfBits : F.nan_bits;
  constexpr uint32_t kMaxFiniteBits = F.has_infinity ? kInfBits - 1 : F.nan_bits - 1;
  constexpr uint64_t kDoubleMantissaMask = (uint64_t{1} << 52) - 1;
  constexpr uint64_t kDoubleInfBits = uint64_t{0x7ff} << 52;

  const uint64_t bits = std::bit_cast<uint64_t>(value);
  const uint32_t sign = (bits >> 63) != 0 ? kSignBit : 0u;
  const uint64_t magnitude = bits & ~(uint64_t{1} << 63);
  if (magnitude >= kDoubleInfBits) return (magnitude == kDoubleInfBits ? kOverflowBits : F.nan_bits) | sign;

  // `scaled` holds the value as an integer with `shift` bits below the target's last mantissa bit.
  const auto round_to_nearest_even = [sign](uint64_t scaled, int shift) {
    const uint64_t half_minus_one = (uint64_t{1} << (shift - 1)) - 1;
    const uint64_t rounded = (scaled + half_minus_one + ((scaled >> shift) & 1)) >> shift;
    return rounded > kMaxFiniteBits ? kOverflowBits | sign : static_cast<uint32_t>(rounded) | sign;
  };
  // The exponent the value would have as a normal number of the target format, biased.
  const int exponent = static_cast<int>(magnitude >> 52) - 1023 + kBias;
  constexpr uint64_t kRebias = static_cast<uint64_t>(1023 - kBias) << 52;  // double exponent field -> target's
  if (exponent >= 1) return round_to_nearest_even(magnitude - kRebias, kDroppedBits);
  // Subnormal result (or zero / a double subnormal, far below half the smallest target subnormal): the quantum
  // is fixed, so the significand, its leading bit now explicit, shifts further right.
  const int shift = kDroppedBits + 1 - exponent;
  if (shift >= 54) return sign;  // the significand < 2^53 <= half a quantum: rounds to zero
  return round_to_nearest_even((magnitude & kDoubleMantissaMask) | (uint64_t{1} << 52), shift);
}

// Fast decode: one table per format, every pattern decoded once by the reference. 512 KiB for a 16-bit format,
// built on first use (thread-safe static); the slice real data touches is a few binades and stays in cache.
template <const FloatFormat& F>
const double* decode_table() {
  static const std::vector<double> table = [] {
    std::vector<double> t(size_t{1} << (1 + F.exponent_bits + F.mantissa_bits));
    for (size_t bits = 0; bits < t.size(); ++bits) t[bits] = decode_reference(F, static_cast<uint32_t>(bits));
    return t;
  }();
  return table.data();
}

// Out-of-range doubles make static_cast<float> undefined, so they are rounded here: magnitudes from FLT_MAX
// plus half its ulp (the tie goes to the even neighbour, 2^128) become inf, smaller ones FLT_MAX. In range,
// the hardware conversion rounds to nearest even, subnormals included.
float f32_from_double(double value) {
  constexpr double kMax = std::numeric_limits<float>::max();
  constexpr double kOverflowThreshold = kMax + 0x1p103;  // 2^128 - 2^103, exact in double
  const double magnitude = std::fabs(value);
  if (magnitude > kMax) {  // false for NaN, which the cast keeps
    const double rounded = magnitude >= kOverflowThreshold ? std::numeric_limits<double>::infinity() : kMax;
    return static_cast<float>(std::copysign(rounded, value));
  }
  return static_cast<float>(value);
}

template <class Int>
Int saturating_truncate(double value) {
  if (std::isnan(value)) return 0;
  const double t = std::trunc(value);
  if (t <= static_cast<double>(std::numeric_limits<Int>::min())) return std::numeric_limits<Int>::min();
  if (t >= static_cast<double>(std::numeric_limits<Int>::max())) return std::numeric_limits<Int>::max();
  return static_cast<Int>(t);
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  KILN_CHECK(false);
  return "";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto dtype = static_cast<DType>(i);
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f8e4m3: return 1;
    case DType::f8e5m2: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  KILN_CHECK(false);
  return 0;
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f8e4m3 ||
         dtype == DType::f8e5m2;
}

bool dtype_is_integer(DType dtype) { return dtype == DType::i32 || dtype == DType::i64; }

double dtype_max_finite(DType dtype) {
  switch (dtype) {
    case DType::f32: return std::numeric_limits<float>::max();
    case DType::f16: return kF16.max_finite;
    case DType::bf16: return kBF16.max_finite;
    case DType::f8e4m3: return kF8E4M3.max_finite;
    case DType::f8e5m2: return kF8E5M2.max_finite;
    case DType::i32: return std::numeric_limits<int32_t>::max();
    case DType::i64: return static_cast<double>(std::numeric_limits<int64_t>::max());
    case DType::boolean: return 1.0;
  }
  KILN_CHECK(false);
  return 0;
}

uint16_t f16_bits_from_double(double v) { return static_cast<uint16_t>(encode_fast<kF16>(v)); }
double f16_bits_to_double(uint16_t b) { return decode_table<kF16>()[b]; }
uint16_t bf16_bits_from_double(double v) { return static_cast<uint16_t>(encode_fast<kBF16>(v)); }
double bf16_bits_to_double(uint16_t b) { return decode_table<kBF16>()[b]; }
uint8_t f8e4m3_bits_from_double(double v) { return static_cast<uint8_t>(encode_fast<kF8E4M3>(v)); }
double f8e4m3_bits_to_double(uint8_t b) { return decode_table<kF8E4M3>()[b]; }
uint8_t f8e5m2_bits_from_double(double v) { return static_cast<uint8_t>(encode_fast<kF8E5M2>(v)); }
double f8e5m2_bits_to_double(uint8_t b) { return decode_table<kF8E5M2>()[b]; }

uint16_t f16_bits_from_double_reference(double v) { return static_cast<uint16_t>(encode_reference(kF16, v)); }
double f16_bits_to_double_reference(uint16_t b) { return decode_reference(kF16, b); }
uint16_t bf16_bits_from_double_reference(double v) { return static_cast<uint16_t>(encode_reference(kBF16, v)); }
double bf16_bits_to_double_reference(uint16_t b) { return decode_reference(kBF16, b); }
uint8_t f8e4m3_bits_from_double_reference(double v) { return static_cast<uint8_t>(encode_reference(kF8E4M3, v)); }
double f8e4m3_bits_to_double_reference(uint8_t b) { return decode_reference(kF8E4M3, b); }
uint8_t f8e5m2_bits_from_double_reference(double v) { return static_cast<uint8_t>(encode_reference(kF8E5M2, v)); }
double f8e5m2_bits_to_double_reference(uint8_t b) { return decode_reference(kF8E5M2, b); }

double load_element(DType dtype, const void* src) {
  switch (dtype) {
    case DType::f32: { float x; std::memcpy(&x, src, 4); return x; }
    case DType::f16: { uint16_t b; std::memcpy(&b, src, 2); return f16_bits_to_double(b); }
    case DType::bf16: { uint16_t b; std::memcpy(&b, src, 2); return bf16_bits_to_double(b); }
    case DType::f8e4m3: return f8e4m3_bits_to_double(*static_cast<const uint8_t*>(src));
    case DType::f8e5m2: return f8e5m2_bits_to_double(*static_cast<const uint8_t*>(src));
    case DType::i32: { int32_t x; std::memcpy(&x, src, 4); return x; }
    case DType::i64: { int64_t x; std::memcpy(&x, src, 8); return static_cast<double>(x); }
    case DType::boolean: return *static_cast<const uint8_t*>(src) != 0 ? 1.0 : 0.0;
  }
  KILN_CHECK(false);
  return 0;
}

void store_element(DType dtype, double v, void* dst) {
  switch (dtype) {
    case DType::f32: { const float x = f32_from_double(v); std::memcpy(dst, &x, 4); return; }
    case DType::f16: { const uint16_t b = f16_bits_from_double(v); std::memcpy(dst, &b, 2); return; }
    case DType::bf16: { const uint16_t b = bf16_bits_from_double(v); std::memcpy(dst, &b, 2); return; }
    case DType::f8e4m3: *static_cast<uint8_t*>(dst) = f8e4m3_bits_from_double(v); return;
    case DType::f8e5m2: *static_cast<uint8_t*>(dst) = f8e5m2_bits_from_double(v); return;
    case DType::i32: { const auto x = saturating_truncate<int32_t>(v); std::memcpy(dst, &x, 4); return; }
    case DType::i64: { const auto x = saturating_truncate<int64_t>(v); std::memcpy(dst, &x, 8); return; }
    case DType::boolean: *static_cast<uint8_t*>(dst) = (v != 0.0) ? 1 : 0; return;
  }
  KILN_CHECK(false);
}

namespace {

// The bulk loops: the dtype switch is hoisted out and each loop body is a plain inline conversion.
template <class Bits, const FloatFormat& F>
void decode_small_float(const void* src, double* dst, int64_t n) {
  const double* table = decode_table<F>();
  const auto* bytes = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, bytes + i * sizeof(Bits), sizeof(Bits));
    dst[i] = table[bits];
  }
}

template <class Bits, const FloatFormat& F>
void encode_small_float(const double* src, void* dst, int64_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const auto bits = static_cast<Bits>(encode_fast<F>(src[i]));
    std::memcpy(bytes + i * sizeof(Bits), &bits, sizeof(Bits));
  }
}

void decode_f32(const void* src, double* dst, int64_t n) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, bytes + i * 4, 4);
    dst[i] = x;
  }
}

void encode_f32(const double* src, void* dst, int64_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const float x = f32_from_double(src[i]);
    std::memcpy(bytes + i * 4, &x, 4);
  }
}

}  // namespace

void decode_elements(DType dtype, const void* src, double* dst, int64_t n) {
  switch (dtype) {
    case DType::f32: return decode_f32(src, dst, n);
    case DType::f16: return decode_small_float<uint16_t, kF16>(src, dst, n);
    case DType::bf16: return decode_small_float<uint16_t, kBF16>(src, dst, n);
    case DType::f8e4m3: return decode_small_float<uint8_t, kF8E4M3>(src, dst, n);
    case DType::f8e5m2: return decode_small_float<uint8_t, kF8E5M2>(src, dst, n);
    default: break;
  }
  const auto* bytes = static_cast<const unsigned char*>(src);
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < n; ++i) dst[i] = load_element(dtype, bytes + i * size);
}

void encode_elements(DType dtype, const double* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::f32: return encode_f32(src, dst, n);
    case DType::f16: return encode_small_float<uint16_t, kF16>(src, dst, n);
    case DType::bf16: return encode_small_float<uint16_t, kBF16>(src, dst, n);
    case DType::f8e4m3: return encode_small_float<uint8_t, kF8E4M3>(src, dst, n);
    case DType::f8e5m2: return encode_small_float<uint8_t, kF8E5M2>(src, dst, n);
    default: break;
  }
  auto* bytes = static_cast<unsigned char*>(dst);
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < n; ++i) store_element(dtype, src[i], bytes + i * size);
}

double round_to_dtype(double v, DType dtype) {
  unsigned char buffer[8];
  store_element(dtype, v, buffer);
  return load_element(dtype, buffer);
}

}  // namespace kiln
