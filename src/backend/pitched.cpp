// Pitched tensors (backend.h): strides, and the host-side gather/scatter the CPU backend runs library ops
// through.
#include "backend/pitched.h"

#include <cstring>
#include <optional>

namespace kiln::backend {

std::vector<int64_t> pitched_strides(const Shape& shape, int64_t row, int64_t pitch) {
  if (row <= 0 || pitch < row) return {};
  std::vector<int64_t> strides(shape.size(), 1);
  std::optional<size_t> cut;  // axes [cut, rank) make up one row
  if (row == 1) cut = shape.size();
  int64_t span = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = span;
    span *= shape[i];
    if (span == row && !cut) cut = i;
  }
  if (!cut) return {};
  for (size_t i = 0; i < *cut; ++i) strides[i] = strides[i] / row * pitch;
  return strides;
}

void gather_pitched(const DeviceTensor& from, void* dense) {
  const size_t es = dtype_size(from.type.dtype);
  const int64_t rows = shape_numel(from.type.shape) / from.row;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<std::byte*>(dense) + r * from.row * es,
                static_cast<const std::byte*>(from.data) + r * from.pitch * es, static_cast<size_t>(from.row) * es);
  }
}

void scatter_pitched(const void* dense, const DeviceTensor& to) {
  const size_t es = dtype_size(to.type.dtype);
  const int64_t rows = shape_numel(to.type.shape) / to.row;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<std::byte*>(to.data) + r * to.pitch * es,
                static_cast<const std::byte*>(dense) + r * to.row * es, static_cast<size_t>(to.row) * es);
  }
}

}  // namespace kiln::backend
