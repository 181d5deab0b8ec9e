#include "ir/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

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

uint32_t encode(const FloatFormat& f, double value) {
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

double decode(const FloatFormat& f, uint32_t bits) {
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

uint16_t f16_bits_from_double(double v) { return static_cast<uint16_t>(encode(kF16, v)); }
double f16_bits_to_double(uint16_t b) { return decode(kF16, b); }
uint16_t bf16_bits_from_double(double v) { return static_cast<uint16_t>(encode(kBF16, v)); }
double bf16_bits_to_double(uint16_t b) { return decode(kBF16, b); }
uint8_t f8e4m3_bits_from_double(double v) { return static_cast<uint8_t>(encode(kF8E4M3, v)); }
double f8e4m3_bits_to_double(uint8_t b) { return decode(kF8E4M3, b); }
uint8_t f8e5m2_bits_from_double(double v) { return static_cast<uint8_t>(encode(kF8E5M2, v)); }
double f8e5m2_bits_to_double(uint8_t b) { return decode(kF8E5M2, b); }

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
    case DType::f32: { const auto x = static_cast<float>(v); std::memcpy(dst, &x, 4); return; }
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

double round_to_dtype(double v, DType dtype) {
  unsigned char buffer[8];
  store_element(dtype, v, buffer);
  return load_element(dtype, buffer);
}

}  // namespace kiln
