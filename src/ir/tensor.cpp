#include "ir/tensor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "util/check.h"

namespace kiln {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<int64_t> shape_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) KILN_CHECK(d >= 0);
  numel_ = shape_numel(shape_);
  bytes_.assign(static_cast<size_t>(numel_) * dtype_size(dtype_), std::byte{0});
}

double Tensor::get(int64_t i) const {
  KILN_CHECK(i >= 0 && i < numel_);
  return load_element(dtype_, bytes_.data() + i * dtype_size(dtype_));
}

void Tensor::set(int64_t i, double value) {
  KILN_CHECK(i >= 0 && i < numel_);
  store_element(dtype_, value, bytes_.data() + i * dtype_size(dtype_));
}

namespace {

// int64 -> double rounded to odd: exact below 2^53; above, the truncated value with its last bit set when any
// dropped bit was. A value rounded to odd at 53 bits rounds to nearest even once more, to any format of at most
// 51 bits (all kiln float dtypes), exactly as the integer itself would: a plain conversion could land on a
// midpoint of the narrow format and round twice.
double int64_to_double_round_to_odd(int64_t value) {
  const bool negative = value < 0;
  uint64_t magnitude = negative ? uint64_t{0} - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  const int dropped = std::max(0, static_cast<int>(std::bit_width(magnitude)) - 53);
  if (dropped > 0) {
    const bool inexact = (magnitude & ((uint64_t{1} << dropped) - 1)) != 0;
    magnitude = (magnitude >> dropped) | (inexact ? 1u : 0u);
  }
  const double result = std::ldexp(static_cast<double>(magnitude), dropped);  // exact: magnitude < 2^53
  return negative ? -result : result;
}

}  // namespace

int64_t Tensor::get_int(int64_t i) const {
  KILN_CHECK(i >= 0 && i < numel_);
  const std::byte* p = bytes_.data() + i * dtype_size(dtype_);
  switch (dtype_) {
    case DType::i64: { int64_t x; std::memcpy(&x, p, 8); return x; }
    case DType::i32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::boolean: return static_cast<uint8_t>(*p) != 0;
    default: {  // a float: truncated and saturated as an i64 store would (a plain cast is UB out of range)
      int64_t x;
      store_element(DType::i64, get(i), &x);
      return x;
    }
  }
}

void Tensor::set_int(int64_t i, int64_t value) {
  KILN_CHECK(i >= 0 && i < numel_);
  std::byte* p = bytes_.data() + i * dtype_size(dtype_);
  switch (dtype_) {
    case DType::i64: std::memcpy(p, &value, 8); return;
    case DType::i32: {  // saturates, as every integer store does
      const auto x = static_cast<int32_t>(
          std::clamp<int64_t>(value, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
      std::memcpy(p, &x, 4);
      return;
    }
    case DType::boolean: *reinterpret_cast<uint8_t*>(p) = value != 0; return;
    default: set(i, int64_to_double_round_to_odd(value)); return;
  }
}

std::vector<double> Tensor::to_f64() const {
  std::vector<double> out(static_cast<size_t>(numel_));
  decode_elements(dtype_, bytes_.data(), out.data(), numel_);
  return out;
}

Tensor Tensor::from_f64(DType dtype, Shape shape, std::span<const double> values) {
  Tensor t(dtype, std::move(shape));
  KILN_CHECK(static_cast<int64_t>(values.size()) == t.numel());
  encode_elements(dtype, values.data(), t.bytes_.data(), t.numel());
  return t;
}

bool Tensor::bitwise_equal(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
}

Tensor Tensor::with_shape(Shape shape) const {
  KILN_CHECK(shape_numel(shape) == numel_, "%s has %lld elements, not %lld", shape_to_string(shape).c_str(),
             static_cast<long long>(shape_numel(shape)), static_cast<long long>(numel_));
  Tensor out = *this;
  out.shape_ = std::move(shape);
  return out;
}

}  // namespace kiln
