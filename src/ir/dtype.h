// Element types of kiln tensors and their bit-exact conversions.
//
// Every conversion from a wider value rounds to nearest, ties to even, as hardware and frameworks do when
// they store a result. f8e4m3 is the "fn" variant used by FP8 GEMMs (no infinities, max 448, overflow -> NaN);
// f32, f16, bf16 and f8e5m2 follow IEEE rules (overflow -> inf). Integer stores truncate toward zero and
// saturate; NaN -> 0. Decoding any NaN pattern gives the canonical quiet NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { f32, f16, bf16, f8e4m3, f8e5m2, i32, i64, boolean };
inline constexpr int kDTypeCount = 8;

std::string_view dtype_name(DType dtype);                    // "f32", ..., "bool"
std::optional<DType> parse_dtype(std::string_view name);     // inverse of dtype_name
size_t dtype_size(DType dtype);                              // bytes per element
bool dtype_is_float(DType dtype);
bool dtype_is_integer(DType dtype);                          // i32, i64 (bool is neither)

// Largest finite value of a floating dtype (448 for f8e4m3, 57344 for f8e5m2, 65504 for f16, ...).
double dtype_max_finite(DType dtype);

// Storage-faithful rounding: the value `value` has once stored in `dtype` (RNE for floats, truncation and
// saturation for integers, != 0 for bool).
double round_to_dtype(double value, DType dtype);

// Raw element access: decode the element at `src` / encode `value` (rounded as above) into `dst`.
double load_element(DType dtype, const void* src);
void store_element(DType dtype, double value, void* dst);

// Bulk forms of the two above, for `n` consecutive elements: the same values and bits, a few ns per element.
void decode_elements(DType dtype, const void* src, double* dst, int64_t n);
void encode_elements(DType dtype, const double* src, void* dst, int64_t n);

// Bit-level encoders and decoders for the small float formats, exposed for tests and codegen.
uint16_t f16_bits_from_double(double value);
double f16_bits_to_double(uint16_t bits);
uint16_t bf16_bits_from_double(double value);
double bf16_bits_to_double(uint16_t bits);
uint8_t f8e4m3_bits_from_double(double value);
double f8e4m3_bits_to_double(uint8_t bits);
uint8_t f8e5m2_bits_from_double(double value);
double f8e5m2_bits_to_double(uint8_t bits);

// The same conversions done the generic way (frexp/ldexp/nearbyint on a description of the format): slow, and
// kept as the specification the fast functions above are tested against bit for bit.
uint16_t f16_bits_from_double_reference(double value);
double f16_bits_to_double_reference(uint16_t bits);
uint16_t bf16_bits_from_double_reference(double value);
double bf16_bits_to_double_reference(uint16_t bits);
uint8_t f8e4m3_bits_from_double_reference(double value);
double f8e4m3_bits_to_double_reference(uint8_t bits);
uint8_t f8e5m2_bits_from_double_reference(double value);
double f8e5m2_bits_to_double_reference(uint8_t bits);

}  // namespace kiln
