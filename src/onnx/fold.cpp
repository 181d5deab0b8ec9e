// Host-side folding for what kiln's ops do not express: comparisons, logic, Where, integer arithmetic,
// Trilu, GatherElements. Only constants reach these (masks and shape arithmetic with static shapes).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ir/ops/op_util.h"
#include "onnx/importer.h"

namespace kiln::onnx::fold {

Result<Shape> broadcast(const Shape& a, const Shape& b) { return ops::broadcast_shapes(a, b); }

namespace {

// Flat offsets into a tensor of shape `from` for every element of the broadcast shape `to`.
std::vector<int64_t> offsets(const Shape& from, const Shape& to) { return ops::broadcast_offsets(from, to); }


bool is_integer(DType d) { return d == DType::i32 || d == DType::i64 || d == DType::boolean; }

}  // namespace

Result<Tensor> binary(Importer& im, const Tensor& a, const Tensor& b, DType dtype, double (*fn)(double, double)) {
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast(a.shape(), b.shape()));
  KILN_TRY(im.charge_fold(shape));
  const std::vector<int64_t> ia = offsets(a.shape(), shape), ib = offsets(b.shape(), shape);
  Tensor out(dtype, shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double x = is_integer(a.dtype()) ? static_cast<double>(a.get_int(ia[i])) : a.get(ia[i]);
    const double y = is_integer(b.dtype()) ? static_cast<double>(b.get_int(ib[i])) : b.get(ib[i]);
    const double r = fn(x, y);
    if (is_integer(dtype)) {
      out.set_int(i, std::isfinite(r) ? static_cast<int64_t>(std::clamp(r, -9.2e18, 9.2e18)) : 0);
    } else {
      out.set(i, r);
    }
  }
  return out;
}

Result<Tensor> where(Importer& im, const Tensor& cond, const Tensor& x, const Tensor& y) {
  KILN_ASSIGN_OR_RETURN(Shape s1, broadcast(cond.shape(), x.shape()));
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast(s1, y.shape()));
  KILN_TRY(im.charge_fold(shape));
  if (x.dtype() != y.dtype()) return make_error(ErrorCode::shape_error, "Where needs x and y of one dtype");
  const std::vector<int64_t> ic = offsets(cond.shape(), shape), ix = offsets(x.shape(), shape),
                             iy = offsets(y.shape(), shape);
  Tensor out(x.dtype(), shape);
  const size_t es = dtype_size(x.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const bool c = cond.get_int(ic[i]) != 0;
    const Tensor& src = c ? x : y;
    const int64_t at = c ? ix[i] : iy[i];
    std::memcpy(out.data() + i * static_cast<int64_t>(es), src.data() + at * static_cast<int64_t>(es), es);
  }
  return out;
}

Result<Tensor> integer_binary(Importer& im, const Tensor& a, const Tensor& b, char op) {
  KILN_ASSIGN_OR_RETURN(Shape shape, broadcast(a.shape(), b.shape()));
  KILN_TRY(im.charge_fold(shape));
  const DType dtype = a.dtype() == DType::i64 || b.dtype() == DType::i64 ? DType::i64 : DType::i32;
  const std::vector<int64_t> ia = offsets(a.shape(), shape), ib = offsets(b.shape(), shape);
  Tensor out(dtype, shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t x = a.get_int(ia[i]), y = b.get_int(ib[i]);
    int64_t r = 0;
    // Wrapping arithmetic through unsigned: overflow in a malformed model must not be undefined behaviour.
    const auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
    switch (op) {
      case '+': r = static_cast<int64_t>(ux + uy); break;
      case '-': r = static_cast<int64_t>(ux - uy); break;
      case '*': r = static_cast<int64_t>(ux * uy); break;
      case '/':
      case '%':
        if (y == 0) return make_error(ErrorCode::invalid_argument, "integer division by zero in a constant");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          r = op == '/' ? x : 0;
        } else {
          r = op == '/' ? x / y : x % y;
        }
        break;
      default: KILN_CHECK(false);
    }
    out.set_int(i, r);
  }
  return out;
}

Tensor trilu(const Tensor& x, int64_t k, bool upper) {
  Tensor out = x;
  const int64_t rank = x.rank();
  if (rank < 2) return out;
  const int64_t rows = x.shape()[rank - 2], cols = x.shape()[rank - 1];
  const int64_t plane = rows * cols;
  const size_t es = dtype_size(x.dtype());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t r = (i % plane) / cols, c = i % cols;
    const bool keep = upper ? c - r >= k : c - r <= k;
    if (!keep) std::memset(out.data() + i * static_cast<int64_t>(es), 0, es);
  }
  return out;
}

Result<Tensor> gather_elements(const Tensor& data, const Tensor& indices, int64_t axis) {
  if (data.rank() != indices.rank() || data.rank() == 0) {
    return make_error(ErrorCode::shape_error, "GatherElements needs data and indices of one rank >= 1");
  }
  auto a = ops::normalize_axis(axis, data.rank());
  if (!a) return make_error(ErrorCode::invalid_argument, "GatherElements axis out of range");
  Tensor out(data.dtype(), indices.shape());
  const std::vector<int64_t> ds = shape_strides(data.shape()), is = shape_strides(indices.shape());
  const size_t es = dtype_size(data.dtype());
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t offset = 0;
    for (int64_t d = 0; d < indices.rank(); ++d) {
      int64_t coord = (i / is[d]) % indices.shape()[d];
      if (d == *a) {
        coord = indices.get_int(i);
        if (coord < 0) coord += data.shape()[d];
        if (coord < 0 || coord >= data.shape()[d]) {
          return make_error(ErrorCode::invalid_argument, "GatherElements index out of range");
        }
      } else if (coord >= data.shape()[d]) {
        return make_error(ErrorCode::shape_error, "GatherElements indices larger than data");
      }
      offset += coord * ds[d];
    }
    std::memcpy(out.data() + i * static_cast<int64_t>(es), data.data() + offset * static_cast<int64_t>(es), es);
  }
  return out;
}

bool all_equal_to(const Tensor& t, double value) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.get(i) != value) return false;
  }
  return true;
}

std::vector<int64_t> to_ints(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.get_int(i);
  return out;
}

Tensor from_ints(const std::vector<int64_t>& values, DType dtype, std::optional<Shape> shape) {
  Tensor t(dtype, shape ? *shape : Shape{static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.set_int(static_cast<int64_t>(i), values[i]);
  return t;
}

}  // namespace kiln::onnx::fold
