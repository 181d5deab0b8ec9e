#include "backend/cpu/cpu_library.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ir/ops/op_util.h"

namespace kiln::backend::cpu {
namespace {

const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t b = 0; b < 65536; ++b) t[b] = static_cast<float>(f16_bits_to_double(static_cast<uint16_t>(b)));
    return t;
  }();
  return table.data();
}

int64_t leading_rows(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) n *= s[i];
  return n;
}

float gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); }

// linear's optional epilogue operands (ops::linear_inputs): y = scale ⊙ y + residual, before the bias.
struct Epilogue {
  const DeviceTensor* scale = nullptr;
  const DeviceTensor* residual = nullptr;
};

// The weight of a GEMM, [n, k], as f32 rows: in place when it is f32 already, else decoded a panel of rows at a
// time into a buffer of about 1 MiB that stays in cache while sgemm reads it. A bf16 weight is then read once, at
// 2 bytes an element, and no f32 copy of it is written to memory or page-faulted in on every call.
struct WeightRows {
  const float* f32 = nullptr;        // the whole weight, or null
  const DeviceTensor* coded = nullptr;  // decoded by panels when f32 is null
  int64_t panel_rows(int64_t n, int64_t k) const {
    if (f32) return n;
    const int64_t fit = std::max<int64_t>(16, ((int64_t{1} << 20) / (4 * std::max<int64_t>(k, 1))) / 16 * 16);
    return std::min(n, fit);
  }
};

// y[rows, n] = x[rows, k] @ w[n, k]^T (epilogue) (+ bias) (then GELU), stored into out.
Status gemm_xwt(const std::vector<float>& x, const WeightRows& w, const DeviceTensor* bias, int64_t rows,
                int64_t n, int64_t k, bool gelu, const DeviceTensor& out, const Epilogue& epilogue = {}) {
  // The f32 product, in a buffer this thread keeps (grown, never shrunk): a fresh one per call is page-faulted
  // in each time, 8 bytes an output element of a bf16 GEMM.
  thread_local std::vector<float> product;
  if (product.size() < static_cast<size_t>(rows * n)) product.resize(static_cast<size_t>(rows * n));
  float* y = product.data();
  if (k == 0) std::fill(y, y + rows * n, 0.0f);  // an empty sum; sgemm (beta = 0) writes every element otherwise
  if (rows > 0 && n > 0 && k > 0) {
    if (std::max({rows, n, k}) > std::numeric_limits<blasint>::max()) {
      return make_error(ErrorCode::unsupported, "a GEMM size exceeds the BLAS integer range");
    }
    const int64_t panel = w.panel_rows(n, k);
    std::vector<float> decoded(w.f32 ? 0 : static_cast<size_t>(panel * k));
    for (int64_t j0 = 0; j0 < n; j0 += panel) {
      const int64_t p = std::min(panel, n - j0);
      const float* rows_f32 = w.f32 ? w.f32 + j0 * k : decoded.data();
      if (!w.f32) to_f32_into(*w.coded, j0 * k, p * k, decoded.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(p),
                  static_cast<blasint>(k), 1.0f, x.data(), static_cast<blasint>(k), rows_f32, static_cast<blasint>(k),
                  0.0f, y + j0, static_cast<blasint>(n));
    }
  }
  if (epilogue.scale) {
    const std::vector<float> sc = to_f32(*epilogue.scale);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) y[r * n + j] *= sc[j];
    }
  }
  if (epilogue.residual) {  // decoded a row at a time
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      to_f32_into(*epilogue.residual, r * n, n, row.data());
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += row[j];
    }
  }
  if (bias) {
    const std::vector<float> b = to_f32(*bias);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += b[j];
    }
  }
  if (gelu) {
    for (int64_t i = 0; i < rows * n; ++i) y[i] = gelu_tanh(y[i]);
  }
  store_f32(y, out);
  return ok_status();
}

// Dequantizes an FP8 operand [rows, k] with its scale: per tensor (`[]`), per row (`per_row`, or for a weight
// the packed vector [rows]) or per block in the layouts of ir/ops/op_util.h (128x128 weight blocks, a grid of
// N/128 rows, dense or padded; 1x128 activation blocks k-block-major [K/128, rows]). Inference has already
// accepted the shapes.
std::vector<float> dequantize_operand(const DeviceTensor& q, const DeviceTensor& scale, const Shape& per_row,
                                      int64_t rows, int64_t k, bool is_weight) {
  std::vector<float> v = to_f32(q);
  const std::vector<float> s = to_f32(scale);
  const Shape& shape = scale.type.shape;
  const bool per_tensor = shape.empty();
  const bool row = !per_tensor && (shape == per_row || (is_weight && shape == Shape{rows}));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int64_t g = per_tensor ? 0
                        : row      ? r
                        : is_weight ? ops::weight_block_scale_index(r, c, shape[1])
                                    : ops::activation_block_scale_index(r, c, rows);
      v[r * k + c] *= s[g];
    }
  }
  return v;
}

}  // namespace

void to_f32_into(const DeviceTensor& t, int64_t first, int64_t count, float* out) {
  if (count <= 0) return;  // an empty tensor may have no storage at all
  switch (t.type.dtype) {
    case DType::f32: std::memcpy(out, static_cast<const float*>(t.data) + first, static_cast<size_t>(count) * 4); break;
    case DType::bf16: {
      const auto* p = static_cast<const uint16_t*>(t.data) + first;
      for (int64_t i = 0; i < count; ++i) {
        const uint32_t u = static_cast<uint32_t>(p[i]) << 16;
        std::memcpy(&out[i], &u, 4);
      }
      break;
    }
    case DType::f16: {
      const auto* p = static_cast<const uint16_t*>(t.data) + first;
      const float* table = f16_table();
      for (int64_t i = 0; i < count; ++i) out[i] = table[p[i]];
      break;
    }
    default: {
      const size_t es = dtype_size(t.type.dtype);
      const auto* p = static_cast<const std::byte*>(t.data) + static_cast<size_t>(first) * es;
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(load_element(t.type.dtype, p + i * es));
    }
  }
}

std::vector<float> to_f32(const DeviceTensor& t) {
  const int64_t n = shape_numel(t.type.shape);
  std::vector<float> out(static_cast<size_t>(n));
  to_f32_into(t, 0, n, out.data());
  return out;
}

void store_f32(const float* values, const DeviceTensor& t) {
  const int64_t n = shape_numel(t.type.shape);
  if (n <= 0) return;
  switch (t.type.dtype) {
    case DType::f32: std::memcpy(t.data, values, static_cast<size_t>(n) * 4); break;
    case DType::bf16: {
      auto* p = static_cast<uint16_t*>(t.data);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, &values[i], 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
          p[i] = static_cast<uint16_t>((u >> 16) | 0x40u);
        } else {
          p[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
      }
      break;
    }
    default: {
      const size_t es = dtype_size(t.type.dtype);
      for (int64_t i = 0; i < n; ++i) store_element(t.type.dtype, values[i], static_cast<std::byte*>(t.data) + i * es);
    }
  }
}

Status run_linear(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out) {
  const Shape& w = in[1].type.shape;
  const ops::LinearInputs at = ops::linear_inputs(in.size(), attrs);
  auto input = [&](int i) { return i >= 0 ? &in[static_cast<size_t>(i)] : nullptr; };
  const WeightRows weight{in[1].type.dtype == DType::f32 ? static_cast<const float*>(in[1].data) : nullptr, &in[1]};
  return gemm_xwt(to_f32(in[0]), weight, input(at.bias), leading_rows(in[0].type.shape), w[0], w[1],
                  attrs.get_string("activation", "none") == "gelu_tanh", out, {input(at.scale), input(at.residual)});
}

Status run_scaled_linear(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out) {
  const Shape& xq = in[0].type.shape;
  const Shape& wq = in[2].type.shape;
  const int64_t rows = leading_rows(xq), n = wq[0], k = wq[1];
  Shape x_row(xq.begin(), xq.end() - 1);
  x_row.push_back(1);
  const std::vector<float> x = dequantize_operand(in[0], in[1], x_row, rows, k, false);
  const std::vector<float> w = dequantize_operand(in[2], in[3], Shape{n, 1}, n, k, true);
  return gemm_xwt(x, WeightRows{w.data(), nullptr}, in.size() > 4 ? &in[4] : nullptr, rows, n, k,
                  attrs.get_string("activation", "none") == "gelu_tanh", out);
}

Status run_matmul(std::span<const DeviceTensor> in, const DeviceTensor& out) {
  const Shape& as = in[0].type.shape;
  const Shape& bs = in[1].type.shape;
  const Shape& os = out.type.shape;
  const int64_t m = os[os.size() - 2], n = os.back(), k = as.back();
  const Shape batch(os.begin(), os.end() - 2);
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const std::vector<float> a = to_f32(in[0]), b = to_f32(in[1]);
  std::vector<float> c(static_cast<size_t>(shape_numel(os)), 0.0f);
  const int64_t count = shape_numel(batch);
  auto matrix_of = [&](const Shape& from, int64_t i) {  // broadcast batch index (trailing-aligned)
    int64_t offset = 0, stride = 1, rest = i;
    std::vector<int64_t> idx(batch.size());
    for (size_t d = batch.size(); d-- > 0;) {
      idx[d] = rest % batch[d];
      rest /= batch[d];
    }
    const size_t lead = batch.size() - from.size();
    for (size_t d = from.size(); d-- > 0;) {
      if (from[d] != 1) offset += idx[lead + d] * stride;
      stride *= from[d];
    }
    return offset;
  };
  for (int64_t i = 0; i < count && m > 0 && n > 0 && k > 0; ++i) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0f, a.data() + matrix_of(a_batch, i) * m * k, static_cast<blasint>(k),
                b.data() + matrix_of(b_batch, i) * k * n, static_cast<blasint>(n), 0.0f, c.data() + i * m * n,
                static_cast<blasint>(n));
  }
  store_f32(c.data(), out);
  return ok_status();
}

// Blocked attention with online softmax: per (batch, head) and block of query rows, key blocks are scored with
// one sgemm, masked, folded into running max / sum, and P V accumulated with another sgemm.
namespace {

// Swaps axes 1 and 2 of a 4-d row-major array of shape `s`: [b, s, h, d] <-> [b, h, s, d].
std::vector<float> swap_axes_1_2(const std::vector<float>& v, const Shape& s) {
  std::vector<float> out(v.size());
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t j = 0; j < s[2]; ++j)
        std::copy_n(v.data() + ((b * s[1] + i) * s[2] + j) * s[3], s[3], out.data() + ((b * s[2] + j) * s[1] + i) * s[3]);
  return out;
}

}  // namespace

Status run_attention(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out) {
  bool tm[4];
  for (int i = 0; i < 4; ++i) tm[i] = ops::attention_token_major(attrs, i);
  const Shape qs = ops::attention_head_major_shape(in[0].type.shape, tm[0]);
  const Shape ks = ops::attention_head_major_shape(in[1].type.shape, tm[1]);
  const Shape vs = ops::attention_head_major_shape(in[2].type.shape, tm[2]);
  const int64_t batch = qs[0], hq = qs[1], sq = qs[2], d = qs[3], hkv = ks[1], sk = ks[2], dv = vs[3];
  const float scale = static_cast<float>(attrs.get_float("scale", 1.0 / std::sqrt(static_cast<double>(d))));
  const bool causal = attrs.get_int("causal", 0) != 0;
  auto operand = [&](int i) {
    std::vector<float> values = to_f32(in[static_cast<size_t>(i)]);
    return tm[i] ? swap_axes_1_2(values, in[static_cast<size_t>(i)].type.shape) : values;
  };
  const std::vector<float> q = operand(0), k = operand(1), v = operand(2);
  // The mask broadcast to [B, Hq, Sq, Sk] through strides.
  const DeviceTensor* mask = in.size() > 3 ? &in[3] : nullptr;
  std::vector<float> mask_values;
  int64_t mstride[4] = {0, 0, 0, 0};
  const bool mask_bool = mask && mask->type.dtype == DType::boolean;
  if (mask) {
    if (!mask_bool) mask_values = to_f32(*mask);
    const Shape& ms = mask->type.shape;
    const std::vector<int64_t> st = shape_strides(ms);
    const size_t lead = 4 - ms.size();
    for (size_t i = 0; i < ms.size(); ++i) mstride[lead + i] = ms[i] == 1 ? 0 : st[i];
  }
  const auto* mask_bytes = mask_bool ? static_cast<const uint8_t*>(mask->data) : nullptr;
  constexpr int64_t kBq = 64, kBk = 128;
  std::vector<float> o(static_cast<size_t>(shape_numel(out.type.shape)), 0.0f);
  std::vector<float> s(kBq * kBk), acc(kBq * dv), m(kBq), l(kBq);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t hk = hkv == 0 ? 0 : h / (hq / hkv);
      const float* qh = q.data() + (b * hq + h) * sq * d;
      const float* kh = k.data() + (b * hkv + hk) * sk * d;
      const float* vh = v.data() + (b * hkv + hk) * sk * dv;
      for (int64_t i0 = 0; i0 < sq; i0 += kBq) {
        const int64_t rows = std::min(kBq, sq - i0);
        std::fill(m.begin(), m.end(), neg_inf);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j0 = 0; j0 < sk; j0 += kBk) {
          const int64_t keys = std::min(kBk, sk - j0);
          if (d > 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(keys),
                        static_cast<blasint>(d), scale, qh + i0 * d, static_cast<blasint>(d), kh + j0 * d,
                        static_cast<blasint>(d), 0.0f, s.data(), static_cast<blasint>(keys));
          } else {
            std::fill(s.begin(), s.end(), 0.0f);
          }
          for (int64_t i = 0; i < rows; ++i) {
            float* row = s.data() + i * keys;
            const int64_t qi = i0 + i;
            const int64_t limit = causal ? std::clamp<int64_t>(qi + sk - sq + 1, 0, sk) : sk;
            const int64_t moff = b * mstride[0] + h * mstride[1] + qi * mstride[2];
            float block_max = neg_inf;
            for (int64_t j = 0; j < keys; ++j) {
              const int64_t kj = j0 + j;
              float x = row[j];
              if (kj >= limit) x = neg_inf;
              if (mask_bytes && mask_bytes[moff + kj * mstride[3]] == 0) x = neg_inf;
              if (mask && !mask_bool) x += mask_values[moff + kj * mstride[3]];
              row[j] = x;
              block_max = std::max(block_max, x);
            }
            const float m_new = std::max(m[i], block_max);
            if (m_new == neg_inf) {
              std::fill(row, row + keys, 0.0f);
              continue;
            }
            const float correction = std::exp(m[i] - m_new);
            float sum = 0;
            for (int64_t j = 0; j < keys; ++j) {
              row[j] = std::exp(row[j] - m_new);
              sum += row[j];
            }
            l[i] = l[i] * correction + sum;
            for (int64_t c = 0; c < dv; ++c) acc[i * dv + c] *= correction;
            m[i] = m_new;
          }
          if (dv > 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(dv),
                        static_cast<blasint>(keys), 1.0f, s.data(), static_cast<blasint>(keys), vh + j0 * dv,
                        static_cast<blasint>(dv), 1.0f, acc.data(), static_cast<blasint>(dv));
          }
        }
        float* oh = o.data() + ((b * hq + h) * sq + i0) * dv;
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t c = 0; c < dv; ++c) oh[i * dv + c] = l[i] > 0 ? acc[i * dv + c] / l[i] : 0.0f;
        }
      }
    }
  }
  store_f32(tm[3] ? swap_axes_1_2(o, {batch, hq, sq, dv}).data() : o.data(), out);
  return ok_status();
}

}  // namespace kiln::backend::cpu
