// Contractions that map to one library GEMM: matmul (batched, numpy-broadcast batch dims), linear (PyTorch
// weight layout [N, K]) and scaled_linear (FP8 operands with per-tensor, per-row or 128-block scales, as
// cuBLASLt runs them). Reference semantics: operands decoded to double, products accumulated in double by BLAS,
// each output rounded once to its dtype.
#include <cmath>
#include <string>

#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::shape_error;

Shape shape_prefix(const Shape& shape, size_t drop) {
  return Shape(shape.begin(), shape.end() - static_cast<std::ptrdiff_t>(drop));
}

// Rows of a [..., K] operand read as a matrix: the product of its leading dims (not numel / K, which fails at K = 0).
int64_t leading_rows(const Shape& shape) { return shape_numel(shape_prefix(shape, 1)); }

void store_all(Tensor& out, const std::vector<double>& values) {
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, values[i]);
}

// Matmul-family flops: 2*M*N*K per output matrix; bytes: every operand read once, the output written once.
OpCost gemm_cost(const OpCall& call, std::span<const TensorType> outputs, int64_t k) {
  OpCost cost = ops::streaming_cost(call, outputs, 0.0);
  cost.flops = 2.0 * static_cast<double>(shape_numel(outputs[0].shape)) * static_cast<double>(k);
  return cost;
}

// ---- matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N] ----

Result<std::vector<TensorType>> infer_matmul(const OpCall& call) {
  const TensorType& a = call.inputs[0];
  const TensorType& b = call.inputs[1];
  if (a.shape.size() < 2 || b.shape.size() < 2) {
    return shape_error("matmul needs operands of rank >= 2, got a " + type_to_string(a) + " and b " +
                       type_to_string(b));
  }
  if (!dtype_is_float(a.dtype)) return shape_error("matmul needs floating operands, got a " + type_to_string(a));
  if (b.dtype != a.dtype) {
    return shape_error("matmul: b " + type_to_string(b) + " must have a's dtype " +
                       std::string(dtype_name(a.dtype)));
  }
  const int64_t k = a.shape.back();
  const int64_t kb = b.shape[b.shape.size() - 2];
  if (k != kb) {
    return shape_error("matmul: a " + shape_to_string(a.shape) + " and b " + shape_to_string(b.shape) +
                       " do not contract: a has K = " + std::to_string(k) + " (last dim), b has K = " +
                       std::to_string(kb) + " (second to last dim)");
  }
  auto batch = ops::broadcast_shapes(shape_prefix(a.shape, 2), shape_prefix(b.shape, 2));
  if (!batch.ok()) {
    return shape_error("matmul: batch dims of a " + shape_to_string(a.shape) + " and b " +
                       shape_to_string(b.shape) + " do not broadcast");
  }
  Shape out = *batch;
  out.push_back(a.shape[a.shape.size() - 2]);
  out.push_back(b.shape.back());
  return std::vector<TensorType>{{a.dtype, out}};
}

OpCost cost_matmul(const OpCall& call, std::span<const TensorType> outputs) {
  return gemm_cost(call, outputs, call.inputs[0].shape.back());
}

Status reference_matmul(const RefCall& call) {
  const Tensor& a = *call.inputs[0];
  const Tensor& b = *call.inputs[1];
  Tensor& out = call.outputs[0];
  const Shape& os = out.shape();
  const int64_t m = os[os.size() - 2], n = os.back(), k = a.shape().back();
  const Shape out_batch = shape_prefix(os, 2);
  // Matrix index in a and b of each output matrix (batch dims broadcast).
  const std::vector<int64_t> a_matrix = ops::broadcast_offsets(shape_prefix(a.shape(), 2), out_batch);
  const std::vector<int64_t> b_matrix = ops::broadcast_offsets(shape_prefix(b.shape(), 2), out_batch);
  const std::vector<double> va = a.to_f64(), vb = b.to_f64();
  std::vector<double> vc(static_cast<size_t>(out.numel()));
  for (size_t i = 0; i < a_matrix.size(); ++i) {
    KILN_TRY(ops::gemm_f64(false, m, n, k, 1.0, va.data() + a_matrix[i] * m * k, k, vb.data() + b_matrix[i] * k * n,
                           n, 0.0, vc.data() + static_cast<int64_t>(i) * m * n, n));
  }
  store_all(out, vc);
  return ok_status();
}

// ---- linear: x [..., K] @ w[N, K]^T (+ b [N]) -> [..., N] ----

// The GEMM epilogue a library applies before its one rounding: "none" or "gelu_tanh" (cuBLASLt's GELU).
Result<bool> epilogue_is_gelu(const Attrs& attrs, const char* op) {
  const std::string a = attrs.get_string("activation", "none");
  if (a != "none" && a != "gelu_tanh") {
    return shape_error(std::string(op) + ": activation must be \"none\" or \"gelu_tanh\", got \"" + a + "\"");
  }
  return a == "gelu_tanh";
}

double gelu_tanh(double x) {
  const double k = 0.7978845608028654;  // sqrt(2 / pi)
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace

ops::LinearInputs ops::linear_inputs(size_t count, const Attrs& attrs) {
  LinearInputs at;
  const bool scale = attrs.get_int("scale", 0) != 0, residual = attrs.get_int("residual", 0) != 0;
  const int extras = (scale ? 1 : 0) + (residual ? 1 : 0);
  const int optional = static_cast<int>(count) - 2 - extras;
  if (optional < 0 || optional > 1) {
    at.bias = -2;
    return at;
  }
  int next = 2;
  if (optional == 1) at.bias = next++;
  if (scale) at.scale = next++;
  if (residual) at.residual = next;
  return at;
}

namespace {

Result<std::vector<TensorType>> infer_linear(const OpCall& call) {
  KILN_ASSIGN_OR_RETURN(bool gelu, epilogue_is_gelu(call.attrs, "linear"));
  const ops::LinearInputs at = ops::linear_inputs(call.inputs.size(), call.attrs);
  if (at.bias == -2) {
    return shape_error("linear takes x, w, an optional bias, then a scale if attribute scale = 1 and a residual if "
                       "residual = 1: got " + std::to_string(call.inputs.size()) + " inputs");
  }
  if (gelu && (at.scale >= 0 || at.residual >= 0)) {
    return shape_error("linear: activation gelu_tanh cannot follow a scale or residual epilogue");
  }
  const TensorType& x = call.inputs[0];
  const TensorType& w = call.inputs[1];
  if (x.shape.empty()) return shape_error("linear: x must have rank >= 1, got " + type_to_string(x));
  if (w.shape.size() != 2) {
    return shape_error("linear: weight must be [out features, in features], got " + type_to_string(w));
  }
  if (!dtype_is_float(x.dtype)) return shape_error("linear needs a floating x, got " + type_to_string(x));
  const int64_t n = w.shape[0], k = w.shape[1];
  if (x.shape.back() != k) {
    return shape_error("linear: x " + shape_to_string(x.shape) + " does not match weight " +
                       shape_to_string(w.shape) + " (in features " + std::to_string(k) + ")");
  }
  if (w.dtype != x.dtype) {
    return shape_error("linear: weight " + type_to_string(w) + " must have x's dtype " +
                       std::string(dtype_name(x.dtype)));
  }
  if (at.bias >= 0) {
    const TensorType& bias = call.inputs[static_cast<size_t>(at.bias)];
    if (bias.shape != Shape{n}) {
      return shape_error("linear: bias must be [" + std::to_string(n) + "] (out features), got " +
                         type_to_string(bias));
    }
    if (bias.dtype != x.dtype) {
      return shape_error("linear: bias " + type_to_string(bias) + " must have x's dtype " +
                         std::string(dtype_name(x.dtype)));
    }
  }
  Shape out = x.shape;
  out.back() = n;
  if (at.scale >= 0) {
    const TensorType& scale = call.inputs[static_cast<size_t>(at.scale)];
    if (scale.dtype != DType::f32 || scale.shape != Shape{n}) {
      return shape_error("linear: scale must be f32[" + std::to_string(n) + "] (one per out feature), got " +
                         type_to_string(scale));
    }
  }
  if (at.residual >= 0) {
    const TensorType& residual = call.inputs[static_cast<size_t>(at.residual)];
    if (residual.dtype != x.dtype || residual.shape != out) {
      return shape_error("linear: residual must be " + type_to_string({x.dtype, out}) + " (the output's type), got " +
                         type_to_string(residual));
    }
  }
  return std::vector<TensorType>{{x.dtype, out}};
}

OpCost cost_linear(const OpCall& call, std::span<const TensorType> outputs) {
  return gemm_cost(call, outputs, call.inputs[1].shape[1]);
}

// The optional epilogue operands of linear (ops::LinearInputs): y = scale ⊙ y + residual, before the bias.
struct LinearEpilogue {
  const Tensor* scale = nullptr;
  const Tensor* residual = nullptr;
};

// y[rows, n] = x[rows, k] @ w[n, k]^T (scaled, plus residual) + bias, then rounded once into `out`.
Status linear_f64(const std::vector<double>& x, const std::vector<double>& w, const Tensor* bias, int64_t rows,
                  int64_t n, int64_t k, Tensor& out, bool gelu = false, const LinearEpilogue& epilogue = {}) {
  std::vector<double> y(static_cast<size_t>(rows * n));
  KILN_TRY(ops::gemm_f64(true, rows, n, k, 1.0, x.data(), k, w.data(), k, 0.0, y.data(), n));
  if (epilogue.scale) {
    const std::vector<double> s = epilogue.scale->to_f64();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) y[r * n + j] *= s[j];
    }
  }
  if (epilogue.residual) {
    const std::vector<double> res = epilogue.residual->to_f64();
    for (size_t i = 0; i < y.size(); ++i) y[i] += res[i];
  }
  if (bias) {
    const std::vector<double> vb = bias->to_f64();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += vb[j];
    }
  }
  if (gelu) {
    for (double& v : y) v = gelu_tanh(v);
  }
  store_all(out, y);
  return ok_status();
}

Status reference_linear(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  const Tensor& w = *call.inputs[1];
  const ops::LinearInputs at = ops::linear_inputs(call.inputs.size(), call.attrs);
  auto input = [&](int i) { return i >= 0 ? call.inputs[static_cast<size_t>(i)] : nullptr; };
  return linear_f64(x.to_f64(), w.to_f64(), input(at.bias), leading_rows(x.shape()), w.shape()[0], w.shape()[1],
                    call.outputs[0], call.attrs.get_string("activation", "none") == "gelu_tanh",
                    {input(at.scale), input(at.residual)});
}

// ---- scaled_linear: (xq * xs) @ (wq * ws)^T (+ b), FP8 operands, f32 scales ----

bool is_fp8(DType d) { return d == DType::f8e4m3 || d == DType::f8e5m2; }

// How a scale tensor maps onto its operand [rows, K]: one value, one per row, or one per 1x128 (activation)
// or 128x128 (weight) block, in the layouts of ops::activation_block_scale_shape / weight_block_scale_shape
// (cuBLASLt's). A scale with one group along K is the same under either reading.
enum class ScaleLayout { per_tensor, per_row, blocks };

struct ScaleShapes {
  Shape per_row, blocks;
  const char* row_name;    // "per-token" / "per-channel"
  const char* block_name;  // "1x128 blocks, k-block-major" / "128x128 blocks"
};

Result<ScaleLayout> scale_layout(const TensorType& scale, const char* name, const ScaleShapes& accepted) {
  if (scale.dtype != DType::f32) {
    return shape_error(std::string("scaled_linear: scale ") + name + " must be f32, got " + type_to_string(scale));
  }
  if (scale.shape.empty()) return ScaleLayout::per_tensor;
  if (scale.shape == accepted.per_row) return ScaleLayout::per_row;
  if (scale.shape == accepted.blocks) return ScaleLayout::blocks;
  return shape_error(std::string("scaled_linear: scale ") + name + " has shape " + shape_to_string(scale.shape) +
                     "; accepted: [] (per-tensor), " + shape_to_string(accepted.per_row) + " (" +
                     accepted.row_name + ") or " + shape_to_string(accepted.blocks) + " (" + accepted.block_name +
                     ")");
}

ScaleShapes x_scale_shapes(const Shape& xq) {
  ScaleShapes s{shape_prefix(xq, 1), ops::activation_block_scale_shape(xq), "per-token",
                "1x128 blocks, k-block-major as quantize scale_layout=\"k_major\" writes them"};
  s.per_row.push_back(1);
  return s;
}

ScaleShapes w_scale_shapes(const Shape& wq) {
  return ScaleShapes{{wq[0], 1}, ops::weight_block_scale_shape(wq[0], wq[1]), "per-channel", "128x128 blocks"};
}

// Weight scales as the GEMM library reads them (pack_scales output): [] per tensor, [N] per channel, the
// block grid with its rows padded to the GEMM's alignment (the checkpoint's grid where that is already so).
ScaleShapes packed_w_scale_shapes(const Shape& wq) {
  return ScaleShapes{{wq[0]}, ops::gemm_weight_block_scale_shape(wq[0], wq[1]), "per-channel vector",
                     "128x128 blocks, rows padded to 4 scales"};
}

Result<bool> ws_is_packed(const Attrs& attrs) {
  const std::string layout = attrs.get_string("ws_layout", "row_major");
  if (layout != "row_major" && layout != "packed") {
    return ops::attr_error("attribute 'ws_layout' of scaled_linear must be \"row_major\" or \"packed\", got \"" +
                           layout + "\"");
  }
  return layout == "packed";
}

Result<ScaleLayout> w_scale_layout(const TensorType& ws, const Shape& wq, const Attrs& attrs) {
  KILN_ASSIGN_OR_RETURN(const bool packed, ws_is_packed(attrs));
  if (!packed) return scale_layout(ws, "ws", w_scale_shapes(wq));
  return scale_layout(ws, "ws (ws_layout \"packed\")", packed_w_scale_shapes(wq));
}

Result<std::vector<TensorType>> infer_scaled_linear(const OpCall& call) {
  KILN_TRY(epilogue_is_gelu(call.attrs, "scaled_linear"));
  const TensorType& xq = call.inputs[0];
  const TensorType& xs = call.inputs[1];
  const TensorType& wq = call.inputs[2];
  const TensorType& ws = call.inputs[3];
  if (xq.shape.empty()) return shape_error("scaled_linear: xq must have rank >= 1, got " + type_to_string(xq));
  if (wq.shape.size() != 2) {
    return shape_error("scaled_linear: wq must be [out features, in features], got " + type_to_string(wq));
  }
  if (!is_fp8(xq.dtype)) return shape_error("scaled_linear: xq must be f8e4m3 or f8e5m2, got " + type_to_string(xq));
  if (!is_fp8(wq.dtype)) return shape_error("scaled_linear: wq must be f8e4m3 or f8e5m2, got " + type_to_string(wq));
  const int64_t n = wq.shape[0], k = wq.shape[1];
  if (xq.shape.back() != k) {
    return shape_error("scaled_linear: xq " + shape_to_string(xq.shape) + " does not match wq " +
                       shape_to_string(wq.shape) + " (in features " + std::to_string(k) + ")");
  }
  KILN_TRY(scale_layout(xs, "xs", x_scale_shapes(xq.shape)));
  KILN_TRY(w_scale_layout(ws, wq.shape, call.attrs));
  if (const std::string a = call.attrs.get_string("accumulation", "exact"); a != "exact" && a != "fast") {
    return ops::attr_error("attribute 'accumulation' of scaled_linear must be \"exact\" or \"fast\", got \"" + a + "\"");
  }
  if (call.inputs.size() == 5) {
    const TensorType& bias = call.inputs[4];
    if (bias.shape != Shape{n} || !dtype_is_float(bias.dtype)) {
      return shape_error("scaled_linear: bias must be a floating [" + std::to_string(n) +
                         "] (out features), got " + type_to_string(bias));
    }
  }
  KILN_ASSIGN_OR_RETURN(DType out_dtype, ops::dtype_attr(call.attrs, "out_dtype", DType::bf16));
  if (!dtype_is_float(out_dtype)) {
    return ops::attr_error("attribute 'out_dtype' of scaled_linear must be a floating dtype, got " +
                           std::string(dtype_name(out_dtype)));
  }
  Shape out = xq.shape;
  out.back() = n;
  return std::vector<TensorType>{{out_dtype, out}};
}

OpCost cost_scaled_linear(const OpCall& call, std::span<const TensorType> outputs) {
  return gemm_cost(call, outputs, call.inputs[2].shape[1]);
}

// Decodes an FP8 operand [rows, k] and multiplies each element by its group's scale. The dequantized GEMM
// equals sum_k (xq * xs_group)(wq * ws_group), since every scale group lies inside one row and one K block.
// `is_weight` picks the block layout: 128x128 weight blocks or 1x128 activation blocks (op_util.h).
std::vector<double> dequantize_operand(const Tensor& q, const Tensor& scale, ScaleLayout layout, int64_t rows,
                                       int64_t k, bool is_weight) {
  std::vector<double> v = q.to_f64();
  const std::vector<double> s = scale.to_f64();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      int64_t group = 0;
      switch (layout) {
        case ScaleLayout::per_tensor: group = 0; break;
        case ScaleLayout::per_row: group = r; break;
        case ScaleLayout::blocks:
          group = is_weight ? ops::weight_block_scale_index(r, c, scale.shape()[1])
                            : ops::activation_block_scale_index(r, c, rows);
          break;
      }
      v[r * k + c] *= s[group];
    }
  }
  return v;
}

Status reference_scaled_linear(const RefCall& call) {
  const Tensor& xq = *call.inputs[0];
  const Tensor& xs = *call.inputs[1];
  const Tensor& wq = *call.inputs[2];
  const Tensor& ws = *call.inputs[3];
  const Tensor* bias = call.inputs.size() == 5 ? call.inputs[4] : nullptr;
  const int64_t rows = leading_rows(xq.shape()), n = wq.shape()[0], k = wq.shape()[1];
  // Inference already accepted both layouts, so these cannot fail.
  const ScaleLayout x_layout = *scale_layout({xs.dtype(), xs.shape()}, "xs", x_scale_shapes(xq.shape()));
  const ScaleLayout w_layout = *w_scale_layout({ws.dtype(), ws.shape()}, wq.shape(), call.attrs);
  return linear_f64(dequantize_operand(xq, xs, x_layout, rows, k, false),
                    dequantize_operand(wq, ws, w_layout, n, k, true), bias, rows, n, k, call.outputs[0],
                    call.attrs.get_string("activation", "none") == "gelu_tanh");
}

const AttrSpec kScaledLinearAttrs[] = {
    {"out_dtype", AttrKind::string, false, "output dtype, a floating dtype (default \"bf16\")"},
    {"activation", AttrKind::string, false, "epilogue after the bias: \"none\" (default) or \"gelu_tanh\""},
    {"ws_layout", AttrKind::string, false,
     "weight scales as stored: \"row_major\" (default; [], [N,1] or [N/128,K/128]) or \"packed\" (as "
     "pack_scales writes them: [], [N] or [N/128, round_up(K/128, 4)], the block grid's rows padded)"},
    {"accumulation", AttrKind::string, false,
     "\"exact\" (default) or \"fast\": the GEMM library may use its fast FP8 accumulation (Hopper: partial sums not "
     "promoted to f32 along K); the reference accumulates exactly either way"}};
const AttrSpec kLinearAttrs[] = {
    {"activation", AttrKind::string, false, "epilogue after the bias: \"none\" (default) or \"gelu_tanh\""},
    {"scale", AttrKind::int_, false, "1: an f32 [N] input after the bias scales each out feature of x @ w^T"},
    {"residual", AttrKind::int_, false, "1: the last input, of the output's type, is added (before rounding)"}};

}  // namespace

const OpDef op_def_matmul{Op::matmul, "matmul", kTraitMatmul, 2, 2, {}, infer_matmul, cost_matmul,
                          reference_matmul, "a [..., M, K] @ b [..., K, N], batch dims broadcast"};
const OpDef op_def_linear{Op::linear, "linear", kTraitMatmul, 2, 5, kLinearAttrs, infer_linear, cost_linear,
                          reference_linear,
                          "x [..., K] @ w[N, K]^T (+ b [N]), PyTorch weight layout; optionally scale [N] * (x @ w^T) "
                          "+ b + residual, one rounding"};
const OpDef op_def_scaled_linear{
    Op::scaled_linear, "scaled_linear", kTraitMatmul | kTraitQuantize, 4, 5, kScaledLinearAttrs,
    infer_scaled_linear, cost_scaled_linear, reference_scaled_linear,
    "FP8 GEMM (xq * xs) @ (wq * ws)^T (+ b): scales per tensor, per token/channel or per 128-block"};

}  // namespace kiln
