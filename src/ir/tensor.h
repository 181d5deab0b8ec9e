// Tensor: a dense, row-major host tensor holding its elements in their storage dtype (bf16 as 2 bytes, ...).
// The reference executor, the safetensors reader/writer and the tests all exchange data in this form, so what
// a value "is" is always the bytes its dtype stores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace kiln {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);  // "[1,4096,3072]"
// Row-major strides in elements: strides[i] = product of shape[i+1..].
std::vector<int64_t> shape_strides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-filled

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t byte_size() const { return bytes_.size(); }
  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }

  // Element i (flat, row-major) as a double; set() rounds to the dtype (storage-faithful).
  double get(int64_t i) const;
  void set(int64_t i, double value);
  // Exact integer access for i32/i64/bool tensors (set_int saturates to i32, as every integer store does).
  // On float tensors: set_int rounds the integer itself once to the dtype; get_int truncates and saturates.
  int64_t get_int(int64_t i) const;
  void set_int(int64_t i, int64_t value);

  std::vector<double> to_f64() const;
  // Rounds each value to `dtype`.
  static Tensor from_f64(DType dtype, Shape shape, std::span<const double> values);

  // Same dtype, shape and bytes.
  bool bitwise_equal(const Tensor& other) const;
  // The same dtype and bytes under `shape`, which must hold as many elements (an empty tensor included).
  Tensor with_shape(Shape shape) const;

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  int64_t numel_ = 0;
  std::vector<std::byte> bytes_;
};

}  // namespace kiln
