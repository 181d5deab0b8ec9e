// Lowerings of ONNX's layer-sized ops: MatMul and Gemm (a constant weight becomes a kiln linear), Conv as a
// patch embedding (patchify + linear), Einsum forms that are one contraction, the normalizations, GELU, and
// the fused Attention / RotaryEmbedding of opset 23.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ir/ops/op_util.h"
#include "onnx/node_view.h"

namespace kiln::onnx {
namespace {

using Syms = std::vector<Sym>;

Result<Syms> one(Result<Sym> s) {
  if (!s.ok()) return s.error();
  return Syms{*s};
}

// linear(x, w [N, K], bias [N]) for x [..., K]; x of rank 1 goes through [1, K].
Result<Sym> linear(Importer& im, const Sym& x, const Sym& w, const Sym* bias) {
  KILN_ASSIGN_OR_RETURN(TensorType tx, im.type_of(x));
  KILN_ASSIGN_OR_RETURN(TensorType tw, im.type_of(w));
  std::vector<Sym> ins{x, w};
  if (bias) ins.push_back(*bias);
  if (tx.shape.size() == 1) {
    KILN_ASSIGN_OR_RETURN(Sym x2, reshape_to(im, x, {1, tx.shape[0]}));
    ins[0] = x2;
    KILN_ASSIGN_OR_RETURN(Sym y, im.emit1(Op::linear, ins));
    return reshape_to(im, y, {tw.shape[0]});
  }
  return im.emit1(Op::linear, ins);
}

// numpy matmul: rank-1 operands gain (then lose) an axis.
Result<Sym> matmul(Importer& im, const Sym& a, const Sym& b) {
  KILN_ASSIGN_OR_RETURN(TensorType ta, im.type_of(a));
  KILN_ASSIGN_OR_RETURN(TensorType tb, im.type_of(b));
  if (ta.shape.empty() || tb.shape.empty()) return make_error(ErrorCode::shape_error, "MatMul of a scalar");
  Sym a2 = a, b2 = b;
  if (ta.shape.size() == 1) {
    KILN_ASSIGN_OR_RETURN(a2, reshape_to(im, a, {1, ta.shape[0]}));
  }
  if (tb.shape.size() == 1) {
    KILN_ASSIGN_OR_RETURN(b2, reshape_to(im, b, {tb.shape[0], 1}));
  }
  KILN_ASSIGN_OR_RETURN(Sym y, im.emit1(Op::matmul, {a2, b2}));
  if (ta.shape.size() > 1 && tb.shape.size() > 1) return y;
  KILN_ASSIGN_OR_RETURN(TensorType ty, im.type_of(y));
  Shape out = ty.shape;
  if (tb.shape.size() == 1) out.pop_back();
  if (ta.shape.size() == 1) out.erase(out.end() - (tb.shape.size() == 1 ? 1 : 2));
  return reshape_to(im, y, out);
}

bool is_float_constant(const Sym& s) { return s.is_constant() && dtype_is_float(s.tensor->dtype()); }

Result<Syms> lower_matmul(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(Sym a, n.input(0));
  KILN_ASSIGN_OR_RETURN(Sym b, n.input(1));
  KILN_ASSIGN_OR_RETURN(TensorType tb, n.im.type_of(b));
  if (a.is_value() && is_float_constant(b) && tb.shape.size() == 2) {
    // x @ W with a constant W [K, N]: a linear with the weight stored [N, K], as nn.Linear holds it.
    KILN_ASSIGN_OR_RETURN(Sym w, transpose_to(n.im, b, {1, 0}));
    return one(linear(n.im, a, w, nullptr));
  }
  return one(matmul(n.im, a, b));
}

Result<Syms> lower_gemm(NodeView& n) {
  KILN_TRY(n.allow({"alpha", "beta", "transA", "transB"}));
  KILN_ASSIGN_OR_RETURN(Sym a, n.input(0));
  KILN_ASSIGN_OR_RETURN(Sym b, n.input(1));
  KILN_ASSIGN_OR_RETURN(double alpha, n.get_float("alpha", 1.0));
  KILN_ASSIGN_OR_RETURN(double beta, n.get_float("beta", 1.0));
  KILN_ASSIGN_OR_RETURN(int64_t trans_a, n.get_int("transA", 0));
  KILN_ASSIGN_OR_RETURN(int64_t trans_b, n.get_int("transB", 0));
  KILN_ASSIGN_OR_RETURN(TensorType ta, n.im.type_of(a));
  KILN_ASSIGN_OR_RETURN(TensorType tb, n.im.type_of(b));
  if (ta.shape.size() != 2 || tb.shape.size() != 2) return make_error(ErrorCode::shape_error, "Gemm needs 2-D A and B");
  if (trans_a) {
    KILN_ASSIGN_OR_RETURN(a, transpose_to(n.im, a, {1, 0}));
  }
  const int64_t out_features = trans_b ? tb.shape[0] : tb.shape[1];
  std::optional<Sym> bias;
  Sym c;
  if (n.has(2)) {
    KILN_ASSIGN_OR_RETURN(c, n.input(2));
    KILN_ASSIGN_OR_RETURN(TensorType tc, n.im.type_of(c));
    if (beta == 1.0 && is_float_constant(c) && shape_numel(tc.shape) == out_features &&
        (tc.shape == Shape{out_features} || tc.shape == Shape{1, out_features})) {
      KILN_ASSIGN_OR_RETURN(Sym flat, reshape_to(n.im, c, {out_features}));
      bias = flat;
    }
  }
  Sym y;
  if (is_float_constant(b) && a.is_value() && alpha == 1.0) {
    Sym w = b;
    if (!trans_b) {
      KILN_ASSIGN_OR_RETURN(w, transpose_to(n.im, b, {1, 0}));
    }
    KILN_ASSIGN_OR_RETURN(y, linear(n.im, a, w, bias ? &*bias : nullptr));
  } else {
    if (trans_b) {
      KILN_ASSIGN_OR_RETURN(b, transpose_to(n.im, b, {1, 0}));
    }
    KILN_ASSIGN_OR_RETURN(y, matmul(n.im, a, b));
    KILN_ASSIGN_OR_RETURN(TensorType ty, n.im.type_of(y));
    if (alpha != 1.0) {
      KILN_ASSIGN_OR_RETURN(y, binary_op(n.im, Op::mul, y, Importer::scalar(alpha, ty.dtype)));
    }
    bias.reset();
  }
  if (n.has(2) && !bias) {
    KILN_ASSIGN_OR_RETURN(TensorType ty, n.im.type_of(y));
    Sym scaled = c;
    if (beta != 1.0) {
      KILN_ASSIGN_OR_RETURN(scaled, binary_op(n.im, Op::mul, c, Importer::scalar(beta, ty.dtype)));
    }
    KILN_ASSIGN_OR_RETURN(y, binary_op(n.im, Op::add, y, scaled));
  }
  return Syms{y};
}

// Conv with stride == kernel, no padding, no dilation, one group: the patch embedding of ViTs and DiTs.
// x [B, C, H, W] -> patches [B, H/kh * W/kw, C*kh*kw] -> linear -> [B, H/kh*W/kw, O] -> [B, O, H/kh, W/kw].
Result<Syms> lower_conv(NodeView& n) {
  KILN_TRY(n.allow({"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(auto w, n.constant(1, "the convolution weight"));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  if (tx.shape.size() != 4 || w->rank() != 4) return unsupported("Conv other than 2-D (as a patch embedding)");
  const Shape& ws = w->shape();
  const int64_t out_ch = ws[0], in_ch = ws[1], kh = ws[2], kw = ws[3];
  KILN_ASSIGN_OR_RETURN(int64_t group, n.get_int("group", 1));
  KILN_ASSIGN_OR_RETURN(std::string auto_pad, n.get_string("auto_pad", "NOTSET"));
  KILN_ASSIGN_OR_RETURN(auto strides, n.get_ints("strides"));
  KILN_ASSIGN_OR_RETURN(auto pads, n.get_ints("pads"));
  KILN_ASSIGN_OR_RETURN(auto dilations, n.get_ints("dilations"));
  auto all = [](const std::optional<std::vector<int64_t>>& v, int64_t value) {
    if (!v) return true;
    for (int64_t x : *v) {
      if (x != value) return false;
    }
    return true;
  };
  const bool patch = group == 1 && (auto_pad == "NOTSET" || auto_pad == "VALID") && all(pads, 0) &&
                     all(dilations, 1) && strides && strides->size() == 2 && (*strides)[0] == kh && (*strides)[1] == kw;
  if (!patch) {
    return unsupported("Conv is supported as a patch embedding only (stride equal to the kernel, no padding, "
                       "dilation 1, one group)");
  }
  if (tx.shape[1] != in_ch || kh <= 0 || kw <= 0) return make_error(ErrorCode::shape_error, "Conv weight does not match x");
  const int64_t b = tx.shape[0], gh = tx.shape[2] / kh, gw = tx.shape[3] / kw;
  Sym xs = x;
  if (gh * kh != tx.shape[2]) {
    KILN_ASSIGN_OR_RETURN(xs, n.im.emit1(Op::slice, {xs}, {{"axis", int64_t{2}}, {"start", int64_t{0}}, {"end", gh * kh}}));
  }
  if (gw * kw != tx.shape[3]) {
    KILN_ASSIGN_OR_RETURN(xs, n.im.emit1(Op::slice, {xs}, {{"axis", int64_t{3}}, {"start", int64_t{0}}, {"end", gw * kw}}));
  }
  KILN_ASSIGN_OR_RETURN(xs, reshape_to(n.im, xs, {b, in_ch, gh, kh, gw, kw}));
  KILN_ASSIGN_OR_RETURN(xs, transpose_to(n.im, xs, {0, 2, 4, 1, 3, 5}));
  KILN_ASSIGN_OR_RETURN(xs, reshape_to(n.im, xs, {b, gh * gw, in_ch * kh * kw}));
  KILN_ASSIGN_OR_RETURN(Sym wflat, reshape_to(n.im, n.in[1], {out_ch, in_ch * kh * kw}));
  std::optional<Sym> bias;
  if (n.has(2)) {
    KILN_ASSIGN_OR_RETURN(Sym bsym, n.input(2));
    bias = bsym;
  }
  KILN_ASSIGN_OR_RETURN(Sym y, linear(n.im, xs, wflat, bias ? &*bias : nullptr));
  KILN_ASSIGN_OR_RETURN(y, reshape_to(n.im, y, {b, gh, gw, out_ch}));
  return one(transpose_to(n.im, y, {0, 3, 1, 2}));
}

// Einsum with one or two operands and no ellipsis, as one transpose + matmul + transpose.
Result<Syms> lower_einsum(NodeView& n) {
  KILN_TRY(n.allow({"equation"}));
  KILN_ASSIGN_OR_RETURN(std::string eq, n.get_string("equation", ""));
  std::string clean;
  for (char c : eq) {
    if (c != ' ') clean += c;
  }
  const size_t arrow = clean.find("->");
  if (arrow == std::string::npos || clean.find("...") != std::string::npos) {
    return unsupported("Einsum '" + eq + "' (only explicit '->' forms without '...')");
  }
  const std::string lhs = clean.substr(0, arrow), out = clean.substr(arrow + 2);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != n.in.size() || terms.size() > 2) return unsupported("Einsum '" + eq + "' with more than two operands");
  std::map<char, int64_t> size;
  std::vector<Sym> xs;
  for (size_t i = 0; i < terms.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Sym x, n.input(i));
    KILN_ASSIGN_OR_RETURN(TensorType t, n.im.type_of(x));
    if (t.shape.size() != terms[i].size()) return make_error(ErrorCode::shape_error, "Einsum term '" + terms[i] + "' does not match the rank");
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const char c = terms[i][d];
      if (!std::isalpha(static_cast<unsigned char>(c)) || terms[i].find(c) != d) {
        return unsupported("Einsum '" + eq + "' (repeated or invalid index)");
      }
      auto [it, fresh] = size.emplace(c, t.shape[d]);
      if (!fresh && it->second != t.shape[d]) return make_error(ErrorCode::shape_error, "Einsum sizes of '" + std::string(1, c) + "' differ");
    }
    xs.push_back(x);
  }
  for (char c : out) {
    if (!size.count(c) || out.find(c) != out.rfind(c)) return unsupported("Einsum '" + eq + "' output index");
  }
  auto position = [](const std::string& s, char c) { return static_cast<int64_t>(s.find(c)); };
  if (terms.size() == 1) {  // a permutation (no reductions)
    if (out.size() != terms[0].size()) return unsupported("Einsum '" + eq + "' that reduces");
    std::vector<int64_t> perm;
    for (char c : out) perm.push_back(position(terms[0], c));
    return one(transpose_to(n.im, xs[0], perm));
  }
  const std::string& ta = terms[0];
  const std::string& tb = terms[1];
  std::string batch, free_a, free_b, contract;
  for (char c : ta) {
    const bool in_b = tb.find(c) != std::string::npos, in_out = out.find(c) != std::string::npos;
    if (in_b && in_out) batch += c;
    else if (in_b) contract += c;
    else if (in_out) free_a += c;
    else return unsupported("Einsum '" + eq + "' that sums an index of one operand");
  }
  for (char c : tb) {
    if (ta.find(c) == std::string::npos) {
      if (out.find(c) == std::string::npos) return unsupported("Einsum '" + eq + "' that sums an index of one operand");
      free_b += c;
    }
  }
  auto prod = [&](const std::string& s) {
    int64_t p = 1;
    for (char c : s) p *= size[c];
    return p;
  };
  Shape batch_shape;
  for (char c : batch) batch_shape.push_back(size[c]);
  std::vector<int64_t> pa, pb;
  for (char c : batch + free_a + contract) pa.push_back(position(ta, c));
  for (char c : batch + contract + free_b) pb.push_back(position(tb, c));
  KILN_ASSIGN_OR_RETURN(Sym a, transpose_to(n.im, xs[0], pa));
  KILN_ASSIGN_OR_RETURN(Sym b, transpose_to(n.im, xs[1], pb));
  Shape sa = batch_shape, sb = batch_shape, sy = batch_shape;
  sa.insert(sa.end(), {prod(free_a), prod(contract)});
  sb.insert(sb.end(), {prod(contract), prod(free_b)});
  KILN_ASSIGN_OR_RETURN(a, reshape_to(n.im, a, sa));
  KILN_ASSIGN_OR_RETURN(b, reshape_to(n.im, b, sb));
  KILN_ASSIGN_OR_RETURN(Sym y, matmul(n.im, a, b));
  const std::string order = batch + free_a + free_b;
  for (char c : free_a + free_b) sy.push_back(size[c]);
  KILN_ASSIGN_OR_RETURN(y, reshape_to(n.im, y, sy));
  std::vector<int64_t> perm;
  for (char c : out) perm.push_back(position(order, c));
  return one(transpose_to(n.im, y, perm));
}

// A per-channel parameter [D] of a norm; nullopt when it is a constant equal to `neutral` everywhere.
Result<std::optional<Sym>> channel_param(NodeView& n, size_t i, int64_t d, double neutral) {
  if (!n.has(i)) return std::optional<Sym>{};
  KILN_ASSIGN_OR_RETURN(Sym p, n.input(i));
  KILN_ASSIGN_OR_RETURN(TensorType t, n.im.type_of(p));
  if (p.is_constant() && fold::all_equal_to(*p.tensor, neutral)) return std::optional<Sym>{};
  if (t.shape != Shape{d}) {
    if (shape_numel(t.shape) != d) return unsupported("a norm parameter " + type_to_string(t) + " that is not per channel");
    KILN_ASSIGN_OR_RETURN(p, reshape_to(n.im, p, {d}));
  }
  return std::optional<Sym>(p);
}

Result<Syms> lower_norm(NodeView& n) {
  KILN_TRY(n.allow({"axis", "epsilon", "stash_type"}));
  const bool rms = n.node.op_type() != "LayerNormalization";
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  const auto rank = static_cast<int64_t>(tx.shape.size());
  KILN_ASSIGN_OR_RETURN(int64_t axis, n.get_int("axis", -1));
  if (ops::normalize_axis(axis, rank) != rank - 1) {
    return unsupported("normalization over axis " + std::to_string(axis) + " (only the last axis)");
  }
  KILN_ASSIGN_OR_RETURN(double eps, n.get_float("epsilon", 1e-5));
  const int64_t d = tx.shape.back();
  KILN_ASSIGN_OR_RETURN(std::optional<Sym> scale, channel_param(n, 1, d, 1.0));
  std::optional<Sym> bias;
  if (!rms) {
    KILN_ASSIGN_OR_RETURN(bias, channel_param(n, 2, d, 0.0));
  }
  if (bias && !scale) scale = Sym::constant(Tensor::from_f64(tx.dtype, {d}, std::vector<double>(static_cast<size_t>(d), 1.0)));
  std::vector<Sym> ins{x};
  if (scale) ins.push_back(*scale);
  if (bias) ins.push_back(*bias);
  // Single-precision epsilon as exported (1e-6 as a float) reads back as the decimal it was written as.
  const double eps_clean = std::stod(fmt::format("{:.7g}", eps));
  KILN_ASSIGN_OR_RETURN(Sym y, n.im.emit1(rms ? Op::rmsnorm : Op::layernorm, ins, {{"eps", eps_clean}}));
  Syms out{y};
  for (int i = 1; i < n.outputs(); ++i) out.emplace_back();  // mean / inverse std: not supported if used
  return out;
}

Result<Syms> lower_gelu(NodeView& n) {
  KILN_TRY(n.allow({"approximate"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(std::string approximate, n.get_string("approximate", "none"));
  if (approximate != "none" && approximate != "tanh") return unsupported("Gelu approximate '" + approximate + "'");
  return one(n.im.emit1(Op::gelu, {x}, {{"approximate", approximate}}));
}

// [B, S, H*D] -> [B, H, S, D]
Result<Sym> split_heads(Importer& im, const Sym& x, int64_t heads) {
  KILN_ASSIGN_OR_RETURN(TensorType t, im.type_of(x));
  if (t.shape.size() != 3 || heads <= 0 || t.shape[2] % heads != 0) {
    return make_error(ErrorCode::shape_error, "cannot split " + type_to_string(t) + " into " + std::to_string(heads) + " heads");
  }
  KILN_ASSIGN_OR_RETURN(Sym r, reshape_to(im, x, {t.shape[0], t.shape[1], heads, t.shape[2] / heads}));
  return transpose_to(im, r, {0, 2, 1, 3});
}

Result<Syms> lower_attention(NodeView& n) {
  KILN_TRY(n.allow({"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
                    "softmax_precision"}));
  if (n.has(4) || n.has(5)) return unsupported("Attention with past key/value (a KV cache)");
  KILN_ASSIGN_OR_RETURN(double softcap, n.get_float("softcap", 0.0));
  if (softcap != 0.0) return unsupported("Attention with softcap");
  KILN_ASSIGN_OR_RETURN(int64_t mode, n.get_int("qk_matmul_output_mode", 0));
  if (mode != 0) return unsupported("Attention qk_matmul_output_mode " + std::to_string(mode));
  KILN_ASSIGN_OR_RETURN(Sym q, n.input(0));
  KILN_ASSIGN_OR_RETURN(Sym k, n.input(1));
  KILN_ASSIGN_OR_RETURN(Sym v, n.input(2));
  KILN_ASSIGN_OR_RETURN(TensorType tq, n.im.type_of(q));
  const bool three_d = tq.shape.size() == 3;
  if (three_d) {
    KILN_ASSIGN_OR_RETURN(int64_t hq, n.get_int("q_num_heads", 0));
    KILN_ASSIGN_OR_RETURN(int64_t hkv, n.get_int("kv_num_heads", 0));
    KILN_ASSIGN_OR_RETURN(q, split_heads(n.im, q, hq));
    KILN_ASSIGN_OR_RETURN(k, split_heads(n.im, k, hkv));
    KILN_ASSIGN_OR_RETURN(v, split_heads(n.im, v, hkv));
  }
  KILN_ASSIGN_OR_RETURN(TensorType tq4, n.im.type_of(q));
  KILN_ASSIGN_OR_RETURN(TensorType tk4, n.im.type_of(k));
  if (tq4.shape.size() != 4 || tk4.shape.size() != 4) return unsupported("Attention inputs of rank other than 3 or 4");
  Attrs attrs;
  KILN_ASSIGN_OR_RETURN(int64_t causal, n.get_int("is_causal", 0));
  if (causal) {
    if (tq4.shape[2] != tk4.shape[2]) return unsupported("causal Attention with different query and key lengths");
    attrs.set("causal", int64_t{1});
  }
  if (n.attr("scale")) {
    KILN_ASSIGN_OR_RETURN(double scale, n.get_float("scale", 1.0));
    attrs.set("scale", scale);
  }
  std::vector<Sym> ins{q, k, v};
  if (n.has(3)) {
    KILN_ASSIGN_OR_RETURN(Sym mask, n.input(3));
    ins.push_back(mask);
  }
  KILN_ASSIGN_OR_RETURN(Sym y, n.im.emit1(Op::attention, ins, attrs));
  if (three_d) {
    KILN_ASSIGN_OR_RETURN(TensorType ty, n.im.type_of(y));
    KILN_ASSIGN_OR_RETURN(y, transpose_to(n.im, y, {0, 2, 1, 3}));
    KILN_ASSIGN_OR_RETURN(y, reshape_to(n.im, y, {ty.shape[0], ty.shape[2], ty.shape[1] * ty.shape[3]}));
  }
  Syms out{y};
  for (int i = 1; i < n.outputs(); ++i) out.emplace_back();
  return out;
}

Result<Syms> lower_rotary(NodeView& n) {
  KILN_TRY(n.allow({"interleaved", "num_heads", "rotary_embedding_dim"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(Sym cos, n.input(1));
  KILN_ASSIGN_OR_RETURN(Sym sin, n.input(2));
  KILN_ASSIGN_OR_RETURN(int64_t interleaved, n.get_int("interleaved", 0));
  KILN_ASSIGN_OR_RETURN(int64_t rotary_dim, n.get_int("rotary_embedding_dim", 0));
  KILN_ASSIGN_OR_RETURN(int64_t heads, n.get_int("num_heads", 0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  const bool three_d = tx.shape.size() == 3;
  if (three_d) {
    KILN_ASSIGN_OR_RETURN(x, split_heads(n.im, x, heads));
  }
  KILN_ASSIGN_OR_RETURN(TensorType t4, n.im.type_of(x));
  if (t4.shape.size() != 4) return unsupported("RotaryEmbedding of rank other than 3 or 4");
  if (rotary_dim != 0 && rotary_dim != t4.shape[3]) return unsupported("RotaryEmbedding over part of the head");
  if (n.has(3)) {  // caches [max_pos, D/2] gathered at position_ids [B, S]
    KILN_ASSIGN_OR_RETURN(Sym pos, n.input(3));
    KILN_ASSIGN_OR_RETURN(cos, n.im.emit1(Op::gather, {cos, pos}, {{"axis", int64_t{0}}}));
    KILN_ASSIGN_OR_RETURN(sin, n.im.emit1(Op::gather, {sin, pos}, {{"axis", int64_t{0}}}));
  }
  KILN_ASSIGN_OR_RETURN(TensorType tc, n.im.type_of(cos));
  if (tc.shape.size() == 3) {  // [B, S, D/2] -> [B, 1, S, D/2], broadcasting over heads
    KILN_ASSIGN_OR_RETURN(cos, reshape_to(n.im, cos, {tc.shape[0], 1, tc.shape[1], tc.shape[2]}));
    KILN_ASSIGN_OR_RETURN(sin, reshape_to(n.im, sin, {tc.shape[0], 1, tc.shape[1], tc.shape[2]}));
  }
  const std::string style = interleaved ? "interleaved" : "half";
  KILN_ASSIGN_OR_RETURN(Sym y, n.im.emit1(Op::rope, {x, cos, sin}, {{"style", style}}));
  if (three_d) {
    KILN_ASSIGN_OR_RETURN(y, transpose_to(n.im, y, {0, 2, 1, 3}));
    KILN_ASSIGN_OR_RETURN(y, reshape_to(n.im, y, tx.shape));
  }
  return Syms{y};
}

}  // namespace

LowerFn find_layer_lowering(const std::string& op_type) {
  static const std::map<std::string, LowerFn> kLayers = {
      {"MatMul", lower_matmul},
      {"Gemm", lower_gemm},
      {"Conv", lower_conv},
      {"Einsum", lower_einsum},
      {"LayerNormalization", lower_norm},
      {"SimplifiedLayerNormalization", lower_norm},
      {"RMSNormalization", lower_norm},
      {"Gelu", lower_gelu},
      {"Attention", lower_attention},
      {"RotaryEmbedding", lower_rotary},
  };
  auto it = kLayers.find(op_type);
  return it == kLayers.end() ? nullptr : it->second;
}

}  // namespace kiln::onnx
