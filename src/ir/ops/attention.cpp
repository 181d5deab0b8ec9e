// Scaled dot-product attention, softmax(q k^T * scale + mask) v, with grouped-query heads, an optional
// bool or additive mask and bottom-right-aligned causal masking (the convention of FlashAttention and of
// torch SDPA with a KV cache: the last query sees every key).
// Reference: per (batch, head), q k^T and p v go through BLAS in double over blocks of query rows (to bound
// memory at long sequences); the softmax between them is in double. A row with no attended key gives 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::shape_error;

// Query rows per block: keeps the score block at kQueryBlock * Sk doubles.
constexpr int64_t kQueryBlock = 256;

// Keys query i may see under causal masking: j < i + Sk - Sq + 1 (bottom-right aligned), clamped to [0, Sk].
int64_t causal_key_limit(int64_t i, int64_t sq, int64_t sk) {
  return std::clamp<int64_t>(i + sk - sq + 1, 0, sk);
}

// The layout attributes of q, k, v and the output: "bhsd" (head-major, the default) or "bshd" (token-major, as
// a projection GEMM writes its heads). Shapes and memory follow the layout; the computation is the same.
constexpr const char* kLayoutAttrs[4] = {"q_layout", "k_layout", "v_layout", "out_layout"};

Result<bool> token_major(const Attrs& attrs, int operand) {
  const std::string layout = attrs.get_string(kLayoutAttrs[operand], "bhsd");
  if (layout != "bhsd" && layout != "bshd") {
    return ops::attr_error(std::string("attribute '") + kLayoutAttrs[operand] +
                           "' of attention must be \"bhsd\" or \"bshd\", got \"" + layout + "\"");
  }
  return layout == "bshd";
}


Result<std::vector<TensorType>> infer_attention(const OpCall& call) {
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    if (call.inputs[i].shape.size() != 4) {
      return shape_error(std::string("attention: ") + names[i] + " must be [batch, heads, seq, head_dim] (or " +
                         "[batch, seq, heads, head_dim] with " + kLayoutAttrs[i] + "=\"bshd\"), got " +
                         type_to_string(call.inputs[i]));
    }
  }
  // Judged in the head-major order [b, h, s, d] whatever the layouts.
  TensorType logical[3];
  for (int i = 0; i < 3; ++i) {
    KILN_ASSIGN_OR_RETURN(const bool tm, token_major(call.attrs, i));
    logical[i] = call.inputs[i];
    logical[i].shape = ops::attention_head_major_shape(logical[i].shape, tm);
  }
  KILN_ASSIGN_OR_RETURN(const bool out_token_major, token_major(call.attrs, 3));
  const TensorType& q = logical[0];
  const TensorType& k = logical[1];
  const TensorType& v = logical[2];
  if (!dtype_is_float(q.dtype)) return shape_error("attention needs a floating q, got " + type_to_string(q));
  for (int i = 1; i < 3; ++i) {
    if (call.inputs[i].dtype != q.dtype) {
      return shape_error(std::string("attention: ") + names[i] + " " + type_to_string(call.inputs[i]) +
                         " must have q's dtype " + std::string(dtype_name(q.dtype)));
    }
  }
  const int64_t batch = q.shape[0], hq = q.shape[1], sq = q.shape[2], d = q.shape[3];
  const int64_t hkv = k.shape[1], sk = k.shape[2];
  const std::string qkv = " (q " + shape_to_string(q.shape) + ", k " + shape_to_string(k.shape) + ", v " +
                          shape_to_string(v.shape) + ")";
  if (k.shape[0] != batch || v.shape[0] != batch) return shape_error("attention: batch sizes differ" + qkv);
  if (v.shape[1] != hkv || v.shape[2] != sk) {
    return shape_error("attention: k and v must agree in heads and sequence length" + qkv);
  }
  if (k.shape[3] != d) return shape_error("attention: q and k must have the same head_dim" + qkv);
  if (hkv == 0 ? hq != 0 : hq % hkv != 0) {
    return shape_error("attention: q heads (" + std::to_string(hq) + ") must be a multiple of kv heads (" +
                       std::to_string(hkv) + ")" + qkv);
  }
  const Shape scores{batch, hq, sq, sk};
  if (call.inputs.size() == 4) {
    const TensorType& mask = call.inputs[3];
    if (mask.dtype != DType::boolean && !dtype_is_float(mask.dtype)) {
      return shape_error("attention: mask must be bool (true = attend) or floating (added to scores), got " +
                         type_to_string(mask));
    }
    auto joint = ops::broadcast_shapes(mask.shape, scores);
    if (mask.shape.size() > 4 || !joint.ok() || *joint != scores) {
      return shape_error("attention: mask " + type_to_string(mask) + " does not broadcast to the scores " +
                         shape_to_string(scores) + " [batch, q heads, q seq, k seq]");
    }
  }
  const int64_t causal = call.attrs.get_int("causal", 0);
  if (causal != 0 && causal != 1) {
    return ops::attr_error("attribute 'causal' of attention must be 0 or 1, got " + std::to_string(causal));
  }
  const Shape out{batch, hq, sq, v.shape[3]};
  // The swap is its own inverse: the same helper turns the head-major output into its token-major shape.
  return std::vector<TensorType>{{q.dtype, ops::attention_head_major_shape(out, out_token_major)}};
}

// GEMM flops of the attended (query, key) pairs: 2*D for q k^T and 2*Dv for p v per pair. A mask is data, so
// only causal masking reduces the count; the softmax is not counted.
OpCost cost_attention(const OpCall& call, std::span<const TensorType> outputs) {
  const Shape q = ops::attention_head_major_shape(call.inputs[0].shape, *token_major(call.attrs, 0));
  const Shape v = ops::attention_head_major_shape(call.inputs[2].shape, *token_major(call.attrs, 2));
  const int64_t sq = q[2], sk = v[2];
  double pairs_per_head = static_cast<double>(sq) * static_cast<double>(sk);
  if (call.attrs.get_int("causal", 0) != 0) {
    pairs_per_head = 0;
    for (int64_t i = 0; i < sq; ++i) pairs_per_head += static_cast<double>(causal_key_limit(i, sq, sk));
  }
  OpCost cost = ops::streaming_cost(call, outputs, 0.0);
  cost.flops = pairs_per_head * static_cast<double>(q[0] * q[1]) * 2.0 * static_cast<double>(q[3] + v[3]);
  return cost;
}

// Reads the mask broadcast to [B, Hq, Sq, Sk] without materializing it (a full mask can be huge).
class MaskReader {
 public:
  explicit MaskReader(const Tensor* mask) : mask_(mask) {
    if (!mask) return;
    const Shape& shape = mask->shape();
    const std::vector<int64_t> strides = shape_strides(shape);
    const size_t lead = 4 - shape.size();
    for (size_t i = 0; i < shape.size(); ++i) stride_[lead + i] = shape[i] == 1 ? 0 : strides[i];
    is_bool_ = mask->dtype() == DType::boolean;
    element_size_ = dtype_size(mask->dtype());
  }
  bool present() const { return mask_ != nullptr; }
  // Flat mask index of scores[b, h, i, 0]; key j adds j * key_stride().
  int64_t row_offset(int64_t b, int64_t h, int64_t i) const {
    return b * stride_[0] + h * stride_[1] + i * stride_[2];
  }
  int64_t key_stride() const { return stride_[3]; }
  // Applies mask element `index` to a score: a bool false excludes the key (-inf), a float is added.
  double apply(int64_t index, double score) const {
    const std::byte* p = mask_->data() + index * static_cast<int64_t>(element_size_);
    if (is_bool_) return static_cast<uint8_t>(*p) != 0 ? score : -std::numeric_limits<double>::infinity();
    return score + load_element(mask_->dtype(), p);
  }

 private:
  const Tensor* mask_;
  int64_t stride_[4] = {0, 0, 0, 0};
  bool is_bool_ = false;
  size_t element_size_ = 0;
};

// Softmax of one score row in place over its first `limit` entries; entries up to `width` (the causally
// excluded keys the block's GEMM still reads) are set to 0. Masked keys hold -inf; a row whose every key is
// excluded becomes all zeros rather than NaN.
void softmax_row(double* row, int64_t limit, int64_t width) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  double row_max = kNegInf;
  for (int64_t j = 0; j < limit; ++j) {
    if (row[j] > row_max || std::isnan(row[j])) row_max = row[j];  // NaN sticks, so it reaches the output
    if (std::isnan(row_max)) break;
  }
  if (row_max == kNegInf) {
    for (int64_t j = 0; j < width; ++j) row[j] = 0.0;
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < limit; ++j) {
    row[j] = std::exp(row[j] - row_max);
    sum += row[j];
  }
  const double inverse = 1.0 / sum;
  for (int64_t j = 0; j < limit; ++j) row[j] *= inverse;
  for (int64_t j = limit; j < width; ++j) row[j] = 0.0;
}

// The values of a 4-d tensor in head-major order [b, h, s, d]; a token-major tensor [b, s, h, d] is reordered.
std::vector<double> head_major_values(const Tensor& t, bool is_token_major) {
  std::vector<double> v = t.to_f64();
  if (!is_token_major) return v;
  const Shape& s = t.shape();  // [b, s, h, d]
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t d = 0; d < s[3]; ++d)
          out[((b * s[2] + h) * s[1] + i) * s[3] + d] = v[((b * s[1] + i) * s[2] + h) * s[3] + d];
  return out;
}

Status reference_attention(const RefCall& call) {
  bool tm[4];
  for (int i = 0; i < 4; ++i) tm[i] = *token_major(call.attrs, i);  // inference accepted them
  const Tensor& q = *call.inputs[0];
  const Tensor& k = *call.inputs[1];
  const Tensor& v = *call.inputs[2];
  Tensor& out = call.outputs[0];
  const Shape qs = ops::attention_head_major_shape(q.shape(), tm[0]);
  const Shape ks = ops::attention_head_major_shape(k.shape(), tm[1]);
  const Shape vs = ops::attention_head_major_shape(v.shape(), tm[2]);
  const int64_t batch = qs[0], hq = qs[1], sq = qs[2], d = qs[3];
  const int64_t hkv = ks[1], sk = ks[2], dv = vs[3];
  const bool causal = call.attrs.get_int("causal", 0) != 0;
  const double scale = call.attrs.get_float("scale", 1.0 / std::sqrt(static_cast<double>(d)));
  const MaskReader mask(call.inputs.size() == 4 ? call.inputs[3] : nullptr);
  if (batch * hq * sq * dv == 0) return ok_status();
  const int64_t group = hq / hkv;  // q heads per kv head

  // q: [B, Hq, Sq, D], k: [B, Hkv, Sk, D], v: [B, Hkv, Sk, Dv], out: [B, Hq, Sq, Dv]
  const std::vector<double> vq = head_major_values(q, tm[0]), vk = head_major_values(k, tm[1]),
                            vv = head_major_values(v, tm[2]);
  std::vector<double> vo(static_cast<size_t>(out.numel()));
  const int64_t block = std::min(sq, kQueryBlock);
  std::vector<double> scores(static_cast<size_t>(block * sk));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kv_head = h / group;
      const double* qh = vq.data() + (b * hq + h) * sq * d;
      const double* kh = vk.data() + (b * hkv + kv_head) * sk * d;
      const double* vh = vv.data() + (b * hkv + kv_head) * sk * dv;
      double* oh = vo.data() + (b * hq + h) * sq * dv;
      for (int64_t i0 = 0; i0 < sq; i0 += block) {
        const int64_t rows = std::min(block, sq - i0);
        // Causal masking leaves keys past the block's last visible one unused: skip them in both GEMMs.
        const int64_t keys = causal ? causal_key_limit(i0 + rows - 1, sq, sk) : sk;
        KILN_TRY(ops::gemm_f64(true, rows, keys, d, scale, qh + i0 * d, d, kh, d, 0.0, scores.data(), sk));
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          double* row = scores.data() + r * sk;
          const int64_t limit = causal ? causal_key_limit(i, sq, sk) : sk;
          if (mask.present()) {
            const int64_t base = mask.row_offset(b, h, i);
            for (int64_t j = 0; j < limit; ++j) row[j] = mask.apply(base + j * mask.key_stride(), row[j]);
          }
          softmax_row(row, limit, keys);
        }
        KILN_TRY(ops::gemm_f64(false, rows, dv, keys, 1.0, scores.data(), sk, vh, dv, 0.0, oh + i0 * dv, dv));
      }
    }
  }
  if (!tm[3]) {
    for (int64_t i = 0; i < out.numel(); ++i) out.set(i, vo[i]);
    return ok_status();
  }
  for (int64_t b = 0; b < batch; ++b)  // out [b, s, h, dv] from vo [b, h, s, dv]
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t e = 0; e < dv; ++e) out.set(((b * sq + i) * hq + h) * dv + e, vo[((b * hq + h) * sq + i) * dv + e]);
  return ok_status();
}

constexpr std::string_view kLayoutDoc = "\"bhsd\" (default: [batch, heads, seq, dim]) or \"bshd\" ([batch, seq, heads, dim])";

const AttrSpec kAttentionAttrs[] = {
    {"q_layout", AttrKind::string, false, kLayoutDoc},
    {"k_layout", AttrKind::string, false, kLayoutDoc},
    {"v_layout", AttrKind::string, false, kLayoutDoc},
    {"out_layout", AttrKind::string, false, kLayoutDoc},
    {"causal", AttrKind::int_, false,
     "1: query i attends key j iff j <= i + Sk - Sq (bottom-right aligned); default 0"},
    {"scale", AttrKind::float_, false, "multiplies q k^T before the mask and softmax; default 1/sqrt(head_dim)"},
};

}  // namespace

bool ops::attention_token_major(const Attrs& attrs, int operand) {
  auto tm = token_major(attrs, operand);
  return tm.ok() && *tm;
}

const OpDef op_def_attention{
    Op::attention, "attention", kTraitAttention, 3, 4, kAttentionAttrs, infer_attention, cost_attention,
    reference_attention,
    "softmax(q k^T * scale + mask) v; q [B,Hq,Sq,D], k [B,Hkv,Sk,D], v [B,Hkv,Sk,Dv] (each, and the output, "
    "token-major [B,S,H,D] with its *_layout=\"bshd\"), GQA when Hkv < Hq"};

}  // namespace kiln
